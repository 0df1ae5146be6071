//! The disk backend end to end: `weir run` of an unbounded GROUP BY whose
//! state is many times its managed-memory budget, with checkpoints every
//! 100 ms (snapshots taken while partitions are spilled), gives the rows of
//! the in-memory backend; the resident set of each run is sampled and
//! printed; a disk run killed (`SIGKILL`) mid-way and resumed from its
//! latest checkpoint gives them too.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::WEIR;

fn script(out: &Path, backend: &str) -> String {
    script_with(out, backend, "", 300_000)
}

/// The job's script: `extra` settings, `rate` rows a second.
fn script_with(out: &Path, backend: &str, extra: &str, rate: u64) -> String {
    let state = match backend {
        "disk" => {
            "SET 'state.backend.type' = 'disk';\nSET 'taskmanager.memory.managed.size' = '1mb';\n"
        }
        "hashmap-4mb" => "SET 'taskmanager.memory.managed.size' = '4mb';\n",
        _ => "",
    };
    format!(
        "SET 'parallelism.default' = '2';
SET 'execution.checkpointing.interval' = '100 ms';
{state}{extra}CREATE TABLE orders (id BIGINT, amount BIGINT, customer AS id * 7919 % 150000) WITH (
  'connector' = 'datagen', 'number-of-rows' = '600000', 'rows-per-second' = '{rate}',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '599999',
  'fields.amount.min' = '1', 'fields.amount.max' = '1000');
CREATE TABLE result (customer BIGINT, orders BIGINT, total BIGINT) WITH (
  'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result SELECT customer, COUNT(*), SUM(amount) FROM orders GROUP BY customer;
",
        out.display()
    )
}

/// Run `weir run` on `text`, sampling its resident set: (success, stderr,
/// peak RSS in MiB).
fn run_sampled(text: &str, dir: &Path) -> (bool, String, u64) {
    run_sampled_with(text, dir, &[], |_| false)
}

/// [`run_sampled`] with more arguments to `weir run`, killing the process
/// (`SIGKILL`) when `kill` says so (it is asked every 50 ms).
fn run_sampled_with(
    text: &str,
    dir: &Path,
    args: &[&str],
    mut kill: impl FnMut(&Path) -> bool,
) -> (bool, String, u64) {
    let file = dir.join("job.sql");
    std::fs::write(&file, text).unwrap();
    let mut child = Command::new(WEIR)
        .args(["run", "--quiet", file.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.success(), err, peak / 1024);
        }
        if let Ok(text) = std::fs::read_to_string(&status)
            && let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if kill(dir) {
            child.kill().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The table a retract-mode changelog folder describes: row → count.
fn table(out: &Path) -> BTreeMap<String, i64> {
    let mut t = BTreeMap::new();
    for e in std::fs::read_dir(out).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".csv") || name.starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            let (row, op) = line.rsplit_once(',').unwrap();
            let n = t.entry(row.to_string()).or_insert(0i64);
            match op.trim_matches('"') {
                "+I" | "+U" => *n += 1,
                "-U" | "-D" => *n -= 1,
                other => panic!("unknown kind {other} in {}", p.display()),
            }
        }
    }
    t.retain(|_, n| *n != 0);
    t
}

#[test]
fn a_group_by_four_times_its_budget_on_disk_equals_the_in_memory_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let mut tables = vec![];
    for backend in ["hashmap", "disk"] {
        let out = tmp.path().join(backend);
        let (ok, err, rss) = run_sampled(&script(&out, backend), tmp.path());
        assert!(ok, "{backend}: {err}");
        println!("{backend} backend: peak resident set {rss} MiB");
        tables.push(table(&out));
    }
    let (memory, disk) = (&tables[0], &tables[1]);
    assert_eq!(memory.len(), 150_000, "one row per customer");
    assert!(memory.values().all(|&n| n == 1));
    assert_eq!(
        disk, memory,
        "the disk backend's rows are the in-memory backend's"
    );
    // The state is over 4x the disk run's 1 MiB budget: in memory, it
    // does not fit in 4 MiB.
    let out = tmp.path().join("small");
    let (ok, err, _) = run_sampled(&script(&out, "hashmap-4mb"), tmp.path());
    assert!(
        !ok && err.contains("state exceeds 4194304 bytes of managed memory"),
        "{err}"
    );
}

/// The newest completed checkpoint under `dir` (which holds a folder per
/// job): its number and its job's folder.
fn latest_checkpoint(dir: &Path) -> Option<(u64, std::path::PathBuf)> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|job| job.ok().map(|j| j.path()))
        .filter_map(|job| {
            let n = std::fs::read_dir(&job)
                .ok()?
                .filter_map(|e| {
                    let e = e.ok()?;
                    let n = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
                    e.path().join("_metadata").exists().then_some(n)
                })
                .max()?;
            Some((n, job))
        })
        .max()
}

#[test]
fn a_disk_run_killed_mid_way_resumes_from_its_checkpoint_with_the_same_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let expected = {
        let out = tmp.path().join("hashmap");
        let (ok, err, _) = run_sampled(&script(&out, "hashmap"), tmp.path());
        assert!(ok, "{err}");
        table(&out)
    };
    let out = tmp.path().join("disk");
    let checkpoints = tmp.path().join("checkpoints");
    let extra = format!(
        "SET 'execution.checkpointing.dir' = '{}';\n",
        checkpoints.display()
    );
    // Killed once a few checkpoints of the spilled state completed: at
    // 50 000 rows a second the input lasts 12 s (a loaded machine takes
    // well over a second for a checkpoint of the spilled state).
    let text = script_with(&out, "disk", &extra, 50_000);
    let (ok, _, rss) = run_sampled_with(&text, tmp.path(), &[], |_| {
        latest_checkpoint(&checkpoints).is_some_and(|(n, _)| n >= 3)
    });
    assert!(!ok, "the run ended before it was killed");
    let (killed_at, job) = latest_checkpoint(&checkpoints).unwrap();
    let before = table(&out);
    assert!(
        before.len() < expected.len(),
        "the killed run had not written everything ({} rows)",
        before.len()
    );
    println!("disk run killed after checkpoint {killed_at}: peak resident set {rss} MiB");
    let from = job.display().to_string();
    let (ok, err, rss) =
        run_sampled_with(&text, tmp.path(), &["--from-savepoint", &from], |_| false);
    assert!(ok, "{err}");
    println!("resumed run: peak resident set {rss} MiB");
    assert_eq!(
        table(&out),
        expected,
        "killed and resumed on the disk backend, the rows are the in-memory backend's"
    );
}
