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
