//! A filter over a wide table copies only the columns the query reads:
//! the scan's stream is narrowed to them (and to the filter's columns)
//! before the filter (by the CSV source itself, which then decodes no
//! other column), so `SELECT a FROM t WHERE b > 3` does not copy `s`.
//! Rows must be those of the query without narrowing.

use std::io::Write;

mod common;

fn stream_graph(explain: &str) -> String {
    let from = explain.find("== Stream graph ==").expect("stream graph");
    let to = explain[from..].find("== Job graph ==").expect("job graph") + from;
    explain[from..to].to_string()
}

#[test]
fn the_filter_sees_only_the_columns_the_query_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("t.csv")).unwrap();
    for i in 0..200 {
        writeln!(
            f,
            "{i},{},long text {i} {},{}",
            i % 7,
            "x".repeat(i % 30),
            i * 3
        )
        .unwrap();
    }
    drop(f);
    let table = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (a BIGINT, b INT, s STRING, c BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
CREATE VIEW v AS SELECT a, c FROM t WHERE b = 2;",
        dir.path().display()
    );
    let cases: [(&str, Vec<String>); 3] = [
        (
            "SELECT a FROM t WHERE b > 5",
            (0..200)
                .filter(|i| i % 7 > 5)
                .map(|i| i.to_string())
                .collect(),
        ),
        (
            "SELECT x.c + x.a FROM t AS x WHERE x.b < 1 AND x.a > 100",
            (101..200)
                .filter(|i| i % 7 < 1)
                .map(|i| (i * 4).to_string())
                .collect(),
        ),
        (
            "SELECT c, a FROM v WHERE a < 50",
            (0..50)
                .filter(|i| i % 7 == 2)
                .map(|i| format!("{}|{i}", i * 3))
                .collect(),
        ),
    ];
    for (query, mut expected) in cases {
        let (mut rows, explain) = common::run(&format!("{table}\nEXPLAIN {query};\n{query};"), 2);
        rows.sort();
        expected.sort();
        assert_eq!(rows, expected, "{query}");
        // Narrowed by the CSV source itself, or else by a projection in
        // front of the filter.
        let graph = stream_graph(&explain);
        let scan = graph.find("Scan(t)").unwrap_or(usize::MAX);
        let filter = graph.find("Where(").expect("a filter");
        let source = graph.lines().find(|l| l.contains("Source: t")).unwrap();
        let narrowed = source
            .split("[columns ")
            .nth(1)
            .is_some_and(|cols| !cols.split([',', ' ', ']']).any(|c| c == "s"));
        assert!(
            narrowed || scan < filter,
            "{query}: no narrowing before the filter\n{graph}"
        );
    }
}

/// A CSV scan decodes only the columns the query reads, as Flink's CSV
/// format converts only the projected fields: the plan names them, the
/// rows are those of the whole table, and a value the query never reads
/// cannot fail it (the record's field count is still checked).
#[test]
fn a_csv_scan_decodes_only_the_columns_the_query_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("t.csv")).unwrap();
    for i in 0..100 {
        // `n` is no number on odd lines.
        let n = if i % 2 == 0 {
            i.to_string()
        } else {
            "n/a".into()
        };
        writeln!(f, "{i},\"note, {i}\",{n},2023-11-14 22:13:{:02}", i % 60).unwrap();
    }
    drop(f);
    let table = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (a BIGINT, note STRING, n BIGINT, ts TIMESTAMP(3))
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
        dir.path().display()
    );
    let query = "SELECT ts, a FROM t WHERE a >= 97";
    let (mut rows, explain) = common::run(&format!("{table}\nEXPLAIN {query};\n{query};"), 1);
    rows.sort();
    assert_eq!(
        rows,
        [
            "2023-11-14T22:13:37|97",
            "2023-11-14T22:13:38|98",
            "2023-11-14T22:13:39|99"
        ]
    );
    assert!(explain.contains("[columns a, ts]"), "{explain}");
    // Reading `n` reads its bad values.
    let err = common::run_err(&format!("{table}\nSELECT n FROM t;"));
    assert!(err.contains("'n/a'") && err.contains("line 2"), "{err}");
    // A short record fails whatever columns are read.
    std::fs::write(dir.path().join("u.csv"), "7,x\n").unwrap();
    let err = common::run_err(&format!("{table}\nSELECT a FROM t;"));
    assert!(err.contains("has 2 fields"), "{err}");
}

/// Under a window table function too: the function passes its input's
/// columns through by position, and a column the query never reads stays
/// in its place, NULL.
#[test]
fn a_scan_under_a_window_table_function_decodes_only_the_columns_the_query_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("t.csv")).unwrap();
    for i in 0..100 {
        writeln!(
            f,
            "{i},\"note, {i}\",{},2023-11-14 22:13:{:02},2023-11-14 22:14:{:02}",
            i % 3,
            i % 60,
            (i * 7) % 60
        )
        .unwrap();
    }
    drop(f);
    let table = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (a BIGINT, note STRING, k BIGINT, ts TIMESTAMP(3), other TIMESTAMP(3),
  WATERMARK FOR ts AS ts)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
        dir.path().display()
    );
    let query = "SELECT k, window_start, COUNT(*), SUM(a) FROM TABLE(TUMBLE(TABLE t, \
                 DESCRIPTOR(ts), INTERVAL '30' SECOND)) GROUP BY k, window_start, window_end";
    let (mut rows, explain) = common::run(&format!("{table}\nEXPLAIN {query};\n{query};"), 1);
    rows.sort();
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..100i64 {
        let start = if i % 60 < 30 { "00" } else { "30" };
        let e = expected.entry((i % 3, start)).or_insert((0, 0));
        e.0 += 1;
        e.1 += i;
    }
    let expected: Vec<String> = expected
        .iter()
        .map(|((k, start), (n, sum))| format!("{k}|2023-11-14T22:13:{start}|{n}|{sum}"))
        .collect();
    assert_eq!(rows, expected);
    assert!(explain.contains("[columns a, k, ts]"), "{explain}");
}

/// A JSON scan, likewise: fields the query does not read are skipped as
/// undeclared ones are, so neither their values nor their absence
/// (`json.fail-on-missing-field`) concern it.
#[test]
fn a_json_scan_decodes_only_the_columns_the_query_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("t.json")).unwrap();
    for i in 0..100 {
        // `n` is no number on odd lines and missing on every tenth.
        let n = match i {
            i if i % 10 == 0 => String::new(),
            i if i % 2 == 1 => ", \"n\": \"n/a\"".into(),
            i => format!(", \"n\": {i}"),
        };
        writeln!(f, "{{\"a\": {i}, \"note\": \"x\"{n}}}").unwrap();
    }
    drop(f);
    let table = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (a BIGINT, note STRING, n BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json',
        'json.fail-on-missing-field' = 'true');",
        dir.path().display()
    );
    let query = "SELECT a FROM t WHERE a >= 98";
    let (mut rows, explain) = common::run(&format!("{table}\nEXPLAIN {query};\n{query};"), 1);
    rows.sort();
    assert_eq!(rows, ["98", "99"]);
    assert!(explain.contains("[columns a]"), "{explain}");
    // Reading `n` reads its absence (line 1).
    let err = common::run_err(&format!("{table}\nSELECT n FROM t;"));
    assert!(
        err.contains("line 1") && err.contains("field 'n' is missing"),
        "{err}"
    );
}
