//! The SQL golden suite: `sql/tests/golden/NAME.sql` with its expected
//! rows in `NAME.out` (sorted CSV lines, no header). Each case writes to a
//! filesystem sink at `${OUT}` and runs through the `weir` binary three
//! ways — at parallelism 1, at parallelism 3, and on a cluster stopped with
//! a savepoint mid-way and resumed from it (batch-mode cases excepted: batch
//! jobs take no checkpoints) — and all three must give the expected rows. `error_NAME.sql` cases start with `-- error: TEXT`: the
//! run must fail before anything runs, print TEXT, and write nothing.
//!
//! `${GOLDEN}` names the golden folder (its `data/` holds side tables).
//!
//! `WEIR_BLESS=1` rewrites the `.out` files from the parallelism-1 run
//! (review the diff before committing it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Cluster, WEIR};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql/tests/golden")
}

fn cases(errors: bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with("error_") == errors
        })
        // `WEIR_GOLDEN_ONLY=a,b` runs only the cases named (when chasing one).
        .filter(|p| match std::env::var("WEIR_GOLDEN_ONLY") {
            Ok(only) => only
                .split(',')
                .any(|n| p.file_stem().is_some_and(|s| s == n)),
            Err(_) => true,
        })
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no golden cases found");
    v
}

fn name(case: &Path) -> String {
    case.file_stem().unwrap().to_string_lossy().to_string()
}

/// The case's script with its sink at `out` and `prelude` in front.
fn script(case: &Path, out: &Path, prelude: &str) -> String {
    let text = std::fs::read_to_string(case).unwrap();
    let text = text
        .replace("${OUT}", &out.display().to_string())
        .replace("${GOLDEN}", &golden_dir().display().to_string());
    if prelude.is_empty() {
        text
    } else {
        format!("{prelude}\n{text}")
    }
}

/// Every committed row under `out` (sorted; rows of a subfolder prefixed
/// with its name and `|`). A changelog (files whose last column is `op`)
/// is collapsed into the table it describes: `+I`/`+U` add a row, `-U`/`-D`
/// take one away; a row taken more often than added is reported.
fn read_rows(out: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, rows: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            let file = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                walk(&p, &format!("{prefix}{file}|"), rows);
            } else if file.ends_with(".csv") && !file.starts_with('.') {
                // Flink's csv: no header; a changelog (`'sink.changelog-mode'
                // = 'retract'`) ends each row with its kind.
                let text = std::fs::read_to_string(&p).unwrap();
                let split: Vec<(&str, String)> = text.lines().map(split_last_field).collect();
                let changelog = !split.is_empty()
                    && split
                        .iter()
                        .all(|(_, op)| ["+I", "-U", "+U", "-D"].contains(&op.as_str()));
                rows.extend(text.lines().zip(&split).map(|(l, (row, op))| {
                    if changelog {
                        format!("{op}{prefix}{row}")
                    } else {
                        format!("+I{prefix}{l}")
                    }
                }));
            }
        }
    }
    let mut changes = vec![];
    walk(out, "", &mut changes);
    let mut table: std::collections::BTreeMap<String, i64> = Default::default();
    for c in changes {
        let (op, row) = c.split_at(2);
        let n = table.entry(row.to_string()).or_default();
        match op {
            "+I" | "+U" => *n += 1,
            "-U" | "-D" => *n -= 1,
            other => panic!("unknown change kind {other} in {}", out.display()),
        }
    }
    let mut rows = vec![];
    for (row, n) in table {
        assert!(n >= 0, "{row} retracted more often than inserted ({n})");
        rows.extend(std::iter::repeat_n(row, n as usize));
    }
    rows
}

/// A CSV line without its last field, and that field unquoted.
fn split_last_field(line: &str) -> (&str, String) {
    let mut quoted = false;
    let mut cut = None;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => cut = Some(i),
            _ => {}
        }
    }
    match cut {
        Some(i) => (
            &line[..i],
            line[i + 1..].trim_matches('"').replace("\"\"", "\""),
        ),
        None => ("", line.to_string()),
    }
}

fn expected(case: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(case.with_extension("out")).ok()?;
    let mut rows: Vec<String> = text.lines().map(str::to_string).collect();
    rows.sort();
    Some(rows)
}

fn run(script_text: &str, dir: &Path) -> std::process::Output {
    let file = dir.join("job.sql");
    std::fs::write(&file, script_text).unwrap();
    Command::new(WEIR)
        .args(["run", file.to_str().unwrap()])
        .output()
        .expect("run weir")
}

fn compare(case: &str, how: &str, got: &[String], want: &[String]) -> Option<String> {
    if got == want {
        return None;
    }
    let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).take(5).collect();
    let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).take(5).collect();
    Some(format!(
        "{case} ({how}): {} rows, expected {}; missing e.g. {missing:?}; unexpected e.g. {extra:?}",
        got.len(),
        want.len()
    ))
}

#[test]
fn golden_cases_at_parallelism_1_and_3() {
    let bless = std::env::var("WEIR_BLESS").is_ok_and(|v| v == "1");
    let mut failures = vec![];
    for case in cases(false) {
        let n = name(&case);
        for p in [1, 3] {
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join("out");
            let prelude = format!("SET 'parallelism.default' = '{p}';");
            let o = run(&script(&case, &out, &prelude), tmp.path());
            if !o.status.success() {
                failures.push(format!(
                    "{n} (p={p}) failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
                continue;
            }
            let got = read_rows(&out);
            if p == 1 && bless {
                std::fs::write(case.with_extension("out"), got.join("\n") + "\n").unwrap();
            }
            let Some(want) = expected(&case) else {
                failures.push(format!(
                    "{n}: no {n}.out (run with WEIR_BLESS=1 and review)"
                ));
                continue;
            };
            assert!(!want.is_empty(), "{n}: the expected output is empty");
            failures.extend(compare(&n, &format!("p={p}"), &got, &want));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every file under `dir` with its line count, for a failure message (which
/// files a lost row was in, before and after the resume).
fn listing(dir: &Path) -> String {
    fn walk(dir: &Path, v: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, v);
            } else {
                let lines = std::fs::read_to_string(&p).map_or(0, |t| t.lines().count());
                v.push(format!("{} ({lines} lines)", p.display()));
            }
        }
    }
    let mut v = vec![];
    walk(dir, &mut v);
    v.sort();
    v.join("\n")
}

#[test]
fn golden_cases_stopped_with_a_savepoint_and_resumed_give_the_same_rows() {
    let cluster = Cluster::start(1, 4, None);
    let mut failures = vec![];
    for case in cases(false) {
        let n = name(&case);
        let Some(want) = expected(&case) else {
            continue;
        };
        // Batch jobs take no checkpoints (as in Flink): a failed batch job
        // runs again from the start.
        if std::fs::read_to_string(&case)
            .unwrap()
            .contains("'execution.runtime-mode' = 'batch'")
        {
            continue;
        }
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let prelude =
            "SET 'parallelism.default' = '2';\nSET 'execution.checkpointing.interval' = '100 ms';";
        let file = tmp.path().join("job.sql");
        std::fs::write(&file, script(&case, &out, prelude)).unwrap();
        let file = file.display().to_string();
        let submit = cluster.cli(&["submit", &file]);
        assert!(
            submit.status.success(),
            "{n}: {}",
            String::from_utf8_lossy(&submit.stderr)
        );
        let id = String::from_utf8_lossy(&submit.stdout).trim().to_string();
        // Stop once a checkpoint has completed.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, d) = cluster.rest("GET", &format!("/v1/jobs/{id}"), "");
            if d["checkpoints"].as_array().is_some_and(|c| !c.is_empty()) {
                break;
            }
            assert!(
                d["status"] == "RUNNING" || d["status"] == "CREATED" || d["status"] == "SCHEDULED",
                "{n}: the job ended before a checkpoint completed: {d:#}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "{n}: no checkpoint: {d:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let savepoints = tmp.path().join("savepoints").display().to_string();
        let stop = cluster.cli(&["stop", &id, "--savepoint", &savepoints]);
        assert!(
            stop.status.success(),
            "{n}: the stop failed (the job must run long enough to be stopped): {}",
            String::from_utf8_lossy(&stop.stderr)
        );
        let path = String::from_utf8_lossy(&stop.stdout).trim().to_string();
        cluster.wait_for_status(&id, &["FINISHED"], Duration::from_secs(30));
        let partial = read_rows(&out);
        let before = listing(&out);
        let resume = cluster.cli(&["submit", &file, "--from-savepoint", &path]);
        assert!(
            resume.status.success(),
            "{n}: {}",
            String::from_utf8_lossy(&resume.stderr)
        );
        let id = String::from_utf8_lossy(&resume.stdout).trim().to_string();
        let d = cluster.wait_for_status(&id, &["FINISHED", "FAILED"], Duration::from_secs(60));
        if d["status"] != "FINISHED" {
            failures.push(format!("{n}: the resumed job failed: {d:#}"));
            continue;
        }
        let got = read_rows(&out);
        assert!(
            partial != got,
            "{n}: the savepoint was taken after all output ({} rows) — nothing was resumed",
            partial.len()
        );
        if let Some(f) = compare(&n, "stopped and resumed", &got, &want) {
            let d = cluster.rest("GET", &format!("/v1/jobs/{id}"), "").1;
            failures.push(format!(
                "{f}\nfiles before the resume:\n{before}\nafter:\n{}\nthe resumed job: {d:#}",
                listing(&out)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn error_cases_fail_before_running_with_their_message() {
    let mut failures = vec![];
    for case in cases(true) {
        let n = name(&case);
        let text = std::fs::read_to_string(&case).unwrap();
        let want = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("-- error: "))
            .unwrap_or_else(|| panic!("{n}: the first line must be `-- error: TEXT`"))
            .trim()
            .to_string();
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let o = run(&script(&case, &out, ""), tmp.path());
        let stderr = String::from_utf8_lossy(&o.stderr);
        if o.status.success() {
            failures.push(format!("{n}: succeeded; expected the error `{want}`"));
        } else if !stderr.contains(&want) {
            failures.push(format!("{n}: expected `{want}`, got: {stderr}"));
        }
        if out.exists() {
            failures.push(format!("{n}: wrote {}", out.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
