//! A filter over a wide table copies only the columns the query reads:
//! the scan's stream is narrowed to them (and to the filter's columns)
//! before the filter, so `SELECT a FROM t WHERE b > 3` does not copy `s`.
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
        let graph = stream_graph(&explain);
        let scan = graph.find("Scan(t)").unwrap_or(usize::MAX);
        let filter = graph.find("Where(").expect("a filter");
        assert!(
            scan < filter,
            "{query}: no narrowing before the filter\n{graph}"
        );
    }
}
