//! `weir sql`: statements from stdin, SELECT results shown as tables (the
//! changelog of an updating query applied) or as changes.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::WEIR;

fn shell(input: &str) -> (bool, String, String) {
    let mut child = Command::new(WEIR)
        .arg("sql")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

const ORDERS: &str = "CREATE TABLE orders (id BIGINT, user_id INT) WITH (
  'connector' = 'datagen', 'number-of-rows' = '300', 'rows-per-second' = 'unlimited',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '300',
  'fields.user_id.min' = '1', 'fields.user_id.max' = '3');\n";

#[test]
fn a_select_shows_the_final_table_of_an_updating_query() {
    let (ok, out, err) = shell(&format!(
        "{ORDERS}SELECT user_id, COUNT(*) AS orders FROM orders\nGROUP BY user_id;\nSELECT SUM(id) AS total FROM orders;\n"
    ));
    assert!(ok, "{err}");
    assert!(out.contains("| user_id | orders |"), "{out}");
    assert!(out.contains("3 row(s), finished"), "{out}");
    // 1 + 2 + … + 300, one row however many updates came before.
    assert!(out.contains("| 45150 |"), "{out}");
    assert!(out.contains("1 row(s), finished"), "{out}");
}

#[test]
fn changelog_mode_prints_each_change_and_errors_fail_the_run() {
    let (ok, out, err) = shell(&format!(
        "{ORDERS}SET 'sql-client.execution.result-mode' = 'changelog';\nSELECT id FROM orders WHERE id <= 2;\nSELECT nope FROM orders;\n"
    ));
    assert!(!ok, "an error from a pipe is a failed run");
    assert!(out.contains("+I 1") && out.contains("+I 2"), "{out}");
    assert!(err.contains("No field named nope"), "{err}");
}

/// A `print` table shows each change with its row kind in front, as
/// Flink's print connector does (`-U[1, 4]`), never the kind as a value.
#[test]
fn print_shows_row_kinds_as_flink_does() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.sql");
    std::fs::write(
        &script,
        "SET 'parallelism.default' = '1';
CREATE TABLE orders (id BIGINT, user_id INT) WITH (
  'connector' = 'datagen', 'number-of-rows' = '5', 'rows-per-second' = '20',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '5',
  'fields.user_id.kind' = 'sequence', 'fields.user_id.start' = '1', 'fields.user_id.end' = '5');
CREATE TABLE out (k INT, n BIGINT) WITH ('connector' = 'print');
INSERT INTO out SELECT 1, COUNT(*) FROM orders;
",
    )
    .unwrap();
    let o = Command::new(WEIR)
        .args(["run", script.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("I[") || l.contains("U["))
        .collect();
    let got: Vec<&str> = lines
        .iter()
        .map(|l| l.rsplit_once("> ").map_or(*l, |(_, r)| r))
        .collect();
    // At 20 rows a second the count goes up a row or so at a time: an
    // insert, then for each change the old value retracted and the new one.
    let value = |l: &str, kind: &str| -> i64 {
        l.strip_prefix(kind)
            .and_then(|r| r.strip_prefix("[1, "))
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not {kind}[1, n]: {l}\n{out}"))
    };
    let mut count = value(got[0], "+I");
    for pair in got[1..].chunks(2) {
        assert_eq!(value(pair[0], "-U"), count, "{out}");
        let next = value(pair[1], "+U");
        assert!(next > count, "{out}");
        count = next;
    }
    assert_eq!(count, 5, "{out}");
    assert!(got.len() > 1, "no update printed: {out}");
}
