//! Batch GROUP BY in two phases: a local aggregation chained to the source
//! before the hash exchange, a global one merging its states after it. The
//! rows must be those of the one-phase plan (`table.optimizer.agg-phase-strategy
//! = 'ONE_PHASE'`) for every aggregate that splits, over nulls, strings,
//! keys that repeat little or much, and a global aggregate without keys.

use std::io::Write;

use weir_sql::SqlSession;

mod common;

/// The sorted result rows of the script's SELECT, and its EXPLAIN.
fn run(script: &str, parallelism: usize) -> (Vec<String>, String) {
    let (mut rows, explain) = common::run(script, parallelism);
    rows.sort();
    (rows, explain)
}

#[test]
fn two_phases_give_the_rows_of_one() {
    let dir = tempfile::tempdir().unwrap();
    // Three files (three source splits), 30 000 rows: `k` with 7 values,
    // `u` nearly unique (each subtask sends about one state per row), nulls in
    // `v` and `s`.
    for f in 0..3 {
        let mut file = std::fs::File::create(dir.path().join(format!("part-{f}.csv"))).unwrap();
        for i in (f * 10_000)..((f + 1) * 10_000) {
            let v = if i % 11 == 0 {
                String::new()
            } else {
                ((i * 37) % 2001 - 1000).to_string()
            };
            let s = if i % 13 == 0 {
                String::new()
            } else {
                format!("n{}", (i * 7919) % 997)
            };
            writeln!(file, "{},{},{v},{s}", i % 7, i % 29_000).unwrap();
        }
    }
    let table = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (k INT, u BIGINT, v BIGINT, s STRING)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
        dir.path().display()
    );
    let queries = [
        "SELECT k, COUNT(*), COUNT(v), SUM(v), MIN(v), MAX(v), AVG(v), MIN(s), MAX(s), SUM(CAST(u AS DOUBLE)) FROM t GROUP BY k",
        "SELECT u, COUNT(*), SUM(v), MAX(s) FROM t GROUP BY u",
        "SELECT COUNT(*), SUM(v), MIN(s), AVG(v) FROM t",
        "SELECT k, s IS NULL, COUNT(*), MAX(v) FROM t GROUP BY k, s IS NULL",
    ];
    for query in queries {
        let (one, plan_one) = run(
            &format!(
                "{table}\nSET 'table.optimizer.agg-phase-strategy' = 'ONE_PHASE';\nEXPLAIN {query};\n{query};"
            ),
            3,
        );
        assert!(!plan_one.contains("LocalGroupAggregate"), "{plan_one}");
        assert!(!one.is_empty(), "{query}");
        for parallelism in [1, 3] {
            let (two, plan) = run(&format!("{table}\nEXPLAIN {query};\n{query};"), parallelism);
            assert!(
                plan.contains("LocalGroupAggregate") && plan.contains("GlobalGroupAggregate"),
                "{query}: {plan}"
            );
            assert_eq!(two, one, "{query} at parallelism {parallelism}");
        }
    }
    // A few rows checked by hand: key 0 has every seventh row.
    let (rows, _) = run(
        &format!("{table}\nSELECT k, COUNT(*) FROM t GROUP BY k;"),
        2,
    );
    assert_eq!(rows[0], "0|4286");
}

#[test]
fn distinct_counts_stay_in_one_phase() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.csv"), "1,a\n1,b\n1,a\n2,c\n").unwrap();
    let script = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (k INT, s STRING)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
EXPLAIN SELECT k, COUNT(DISTINCT s) FROM t GROUP BY k;
SELECT k, COUNT(DISTINCT s) FROM t GROUP BY k;",
        dir.path().display()
    );
    let (rows, plan) = run(&script, 2);
    assert!(!plan.contains("LocalGroupAggregate"), "{plan}");
    assert_eq!(rows, ["1|2", "2|1"]);
}

#[test]
fn an_unknown_phase_strategy_is_refused() {
    let mut s = SqlSession::new();
    let e = s
        .execute_script("SET 'table.optimizer.agg-phase-strategy' = 'THREE_PHASE';")
        .unwrap_err();
    assert!(e.to_string().contains("ONE_PHASE"), "{e}");
}

#[test]
fn arguments_sharing_a_subexpression_compute_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::create(dir.path().join("t.csv")).unwrap();
    for i in 0..1000 {
        writeln!(file, "{},{},{}", i % 3, i, i % 7).unwrap();
    }
    let script = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (k INT, p BIGINT, d BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
EXPLAIN SELECT k, SUM(p * (10 - d)), SUM(p * (10 - d) * (1 + k)), MAX(1 + k) FROM t GROUP BY k;
SELECT k, SUM(p * (10 - d)), SUM(p * (10 - d) * (1 + k)), MAX(1 + k) FROM t GROUP BY k;",
        dir.path().display()
    );
    let (rows, plan) = run(&script, 2);
    assert!(plan.contains("Calc(shared: "), "{plan}");
    let mut want = vec![];
    for k in 0..3i64 {
        let (mut a, mut b) = (0i64, 0i64);
        for i in (0..1000i64).filter(|i| i % 3 == k) {
            a += i * (10 - i % 7);
            b += i * (10 - i % 7) * (1 + k);
        }
        want.push(format!("{k}|{a}|{b}|{}", 1 + k));
    }
    assert_eq!(rows, want);
}
