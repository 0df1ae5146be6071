//! What a WHERE computes for every row and its SELECT computes again is
//! computed once, in front of the filter (Nexmark q21's REGEXP_EXTRACT);
//! what the WHERE computes only for some rows (behind AND, OR, CASE) is
//! not, as computing it for every row could fail where the query does not.

use std::io::Write;

mod common;

/// The sorted rows and the stream graph of EXPLAIN.
fn run(script: &str) -> (Vec<String>, String) {
    let (mut rows, explain) = common::run(script, 1);
    rows.sort();
    let from = explain.find("== Stream graph ==").expect("stream graph");
    let to = explain[from..].find("== Job graph ==").expect("job graph") + from;
    (rows, explain[from..to].to_string())
}

fn table(dir: &std::path::Path) -> String {
    let mut f = std::fs::File::create(dir.join("t.csv")).unwrap();
    for i in 0..300 {
        let url = match i % 3 {
            0 => format!("https://x.com/item?query=1&channel_id={}", i * 7),
            1 => format!("https://x.com/item?channel_id={}&query=1", i * 7),
            _ => "https://x.com/item?query=1".to_string(),
        };
        let channel = ["Apple", "Google", "channel-1", "other"][i % 4];
        writeln!(f, "{i},{channel},{url},{}", i % 5).unwrap();
    }
    format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (a BIGINT, channel STRING, url STRING, b INT)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
        dir.display()
    )
}

#[test]
fn a_subexpression_of_where_and_select_is_computed_once() {
    let dir = tempfile::tempdir().unwrap();
    // As q21: `lower(channel)` repeats within the SELECT too, shared
    // there in a second projection whose columns must not be mistaken
    // for the filter's.
    let query = "SELECT a, CASE WHEN lower(channel) = 'apple' THEN '0' \
         WHEN lower(channel) = 'google' THEN '1' \
         ELSE REGEXP_EXTRACT(url, '(&|\\?)channel_id=([^&]*)', 2) END \
         FROM t WHERE REGEXP_EXTRACT(url, '(&|\\?)channel_id=([^&]*)', 2) IS NOT NULL \
         OR lower(channel) IN ('apple', 'google')";
    let script = format!("{}\nEXPLAIN {query};\n{query};", table(dir.path()));
    let (rows, plan) = run(&script);
    assert!(plan.contains("Calc(shared: regexp_extract("), "{plan}");
    assert!(plan.contains("Calc(shared: lower(t.channel))"), "{plan}");
    assert_eq!(plan.matches("regexp_extract(").count(), 1, "{plan}");
    let mut expected: Vec<String> = (0..300)
        .filter(|i| i % 3 != 2 || i % 4 < 2)
        .map(|i| {
            let id = if i % 4 == 0 {
                "0".to_string()
            } else if i % 4 == 1 {
                "1".to_string()
            } else if i % 3 == 2 {
                String::new()
            } else {
                (i * 7).to_string()
            };
            format!("{i}|{id}")
        })
        .collect();
    expected.sort();
    assert_eq!(rows, expected);
}

#[test]
fn what_the_where_computes_for_some_rows_only_is_not_shared() {
    let dir = tempfile::tempdir().unwrap();
    // `upper(channel)` behind AND's right side and inside a CASE branch:
    // the filter may skip it for some rows, so it is not moved in front.
    for query in [
        "SELECT a, upper(channel) FROM t WHERE b > 2 AND upper(channel) = 'APPLE'",
        "SELECT a, upper(channel) FROM t \
         WHERE CASE WHEN b > 2 THEN upper(channel) = 'APPLE' ELSE false END",
    ] {
        let script = format!("{}\nEXPLAIN {query};\n{query};", table(dir.path()));
        let (rows, plan) = run(&script);
        assert!(!plan.contains("Calc(shared"), "{plan}");
        let mut expected: Vec<String> = (0..300)
            .filter(|i| i % 5 > 2 && i % 4 == 0)
            .map(|i| format!("{i}|APPLE"))
            .collect();
        expected.sort();
        assert_eq!(rows, expected, "{query}");
    }
}

#[test]
fn a_select_computes_what_its_expressions_repeat_once_unless_a_branch_guards_it() {
    let dir = tempfile::tempdir().unwrap();
    // `lower(channel)` is in the first condition (every row) and three
    // more: computed once. `100 / b` only in later branches, which rows
    // with b = 0 never reach: computed there, else the job would fail.
    let query = "SELECT a, \
         CASE WHEN lower(channel) = 'apple' THEN 1 WHEN lower(channel) = 'google' THEN 2 \
              WHEN lower(channel) = 'other' THEN 3 ELSE length(lower(channel)) END, \
         CASE WHEN b = 0 THEN 0 WHEN 100 / b > 30 THEN 100 / b ELSE -1 END \
         FROM t";
    let script = format!("{}\nEXPLAIN {query};\n{query};", table(dir.path()));
    let (rows, plan) = run(&script);
    assert!(plan.contains("Calc(shared: lower(t.channel)"), "{plan}");
    let mut expected: Vec<String> = (0..300)
        .map(|i| {
            let c = [1, 2, 9, 3][i % 4];
            let b = (i % 5) as i64;
            let d = if b == 0 {
                0
            } else if 100 / b > 30 {
                100 / b
            } else {
                -1
            };
            format!("{i}|{c}|{d}")
        })
        .collect();
    expected.sort();
    assert_eq!(rows, expected);
}
