//! The Flink-differential SQL suite: every case in `sql/tests/flink/NAME.sql`
//! runs on Weir (the `weir` binary, parallelism 2) and on real Flink 2.3
//! (`tests/python/flink_differential.py`, PyFlink on Java 17, all cases in
//! one JVM), and their rows must be equal — Flink itself is the expected
//! output. Cases read the CSV tables in `sql/tests/flink/data/` (`${DATA}`)
//! and write table `result` (`CREATE TABLE result (…) WITH (${SINK})`);
//! header lines say more:
//!
//! - `-- updating`: the result is a changelog (Weir writes it in retract
//!   mode; both sides are collapsed before comparing). Without it, the
//!   result must be append-only on both engines.
//! - `-- modes: streaming batch`: the runtime modes to run (default
//!   streaming).
//! - `-- compare: 0,2`: only these columns are compared (Top-N ties).
//!
//! Without `WEIR_TEST_PYFLINK` only Weir's side runs (every case must
//! still succeed).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::WEIR;

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql/tests/flink")
}

fn header<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("--")
            .map(str::trim)
            .and_then(|l| l.strip_prefix(key))
            .map(|rest| rest.trim_start_matches(':').trim())
    })
}

#[test]
fn weir_gives_flinks_rows_on_every_differential_case() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(suite())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .filter(|p| match std::env::var("WEIR_FLINK_ONLY") {
            Ok(only) => only
                .split(',')
                .any(|n| p.file_stem().is_some_and(|s| s == n)),
            Err(_) => true,
        })
        .collect();
    cases.sort();
    if std::env::var("WEIR_FLINK_ONLY").is_err() {
        assert!(cases.len() >= 40, "only {} differential cases", cases.len());
    }
    let data = suite().join("data").canonicalize().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = vec![];
    // Flink's side starts first and computes its rows while Weir runs the
    // cases; it compares once `.weir-done` is written.
    let flink = std::env::var_os("WEIR_TEST_PYFLINK").map(|python| {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/flink_differential.py");
        // Each case's verdict is echoed as it comes (the suite takes minutes).
        let mut child = Command::new(python)
            .arg(&script)
            .arg(&data)
            .arg(tmp.path())
            .args(&cases)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run the Flink side");
        let stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut { stderr }, &mut text).ok();
            text
        });
        (child, errors)
    });
    let mut runs = 0;
    for case in &cases {
        let name = case.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(case).unwrap();
        let updating = header(&text, "updating").is_some();
        for mode in header(&text, "modes")
            .unwrap_or("streaming")
            .split_whitespace()
        {
            runs += 1;
            let out = tmp.path().join(format!("{name}.{mode}"));
            let mut sink = format!(
                "'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'",
                out.display()
            );
            if updating && mode == "streaming" {
                sink.push_str(", 'sink.changelog-mode' = 'retract'");
            }
            let script = format!(
                "SET 'parallelism.default' = '2';\nSET 'execution.runtime-mode' = '{mode}';\n{}",
                text.replace("${DATA}", &data.display().to_string())
                    .replace("${SINK}", &sink)
            );
            let file = tmp.path().join(format!("{name}.{mode}.sql"));
            std::fs::write(&file, script).unwrap();
            let o = Command::new(WEIR)
                .args(["run", file.to_str().unwrap()])
                .output()
                .expect("run weir");
            if !o.status.success() {
                failures.push(format!(
                    "{name} {mode}: Weir failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
        }
    }
    std::fs::write(tmp.path().join(".weir-done"), "").unwrap();
    let Some((mut child, errors)) = flink else {
        eprintln!("WEIR_TEST_PYFLINK is not set: Flink's side is skipped");
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        return;
    };
    let mut stdout = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap())) {
        let line = line.unwrap();
        eprintln!("{line}");
        stdout.push_str(&line);
        stdout.push('\n');
    }
    child.wait().unwrap();
    let stderr = errors.join().unwrap();
    let ok = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    failures.extend(
        stdout
            .lines()
            .filter(|l| l.starts_with("FAIL "))
            .map(str::to_string),
    );
    if ok + failures.len() < runs {
        failures.push(format!(
            "the Flink side reported {ok} of {runs} runs: {}",
            stderr.lines().rev().take(30).collect::<Vec<_>>().join("\n")
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
