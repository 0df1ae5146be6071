//! Batch mode's ORDER BY, LIMIT and OFFSET: one subtask sorts the whole
//! result and the sink gets it in order, whatever the parallelism of the
//! rest of the job. NULL is the smallest value (first ascending, last
//! descending), as Flink orders it. On a stream, ORDER BY other than by time
//! and LIMIT are refused.

use std::cmp::Ordering;
use std::io::Write;

use weir_sql::SqlSession;

mod common;
use common::run;

/// k, v, s.
type Row = (i32, Option<i64>, Option<String>);

/// Three CSV files of 10 000 rows each: (k, v, s) with nulls in v and s.
fn table() -> (tempfile::TempDir, String, Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = vec![];
    for f in 0..3 {
        let mut file = std::fs::File::create(dir.path().join(format!("part-{f}.csv"))).unwrap();
        for i in (f * 10_000)..((f + 1) * 10_000) {
            let k = (i * 7) % 13;
            let v = (i % 17 != 0).then_some(((i as i64) * 7919) % 20_011 - 10_000);
            let s = (i % 23 != 0).then(|| format!("s{}", (i * 31) % 101));
            writeln!(
                file,
                "{k},{},{}",
                v.map(|v| v.to_string()).unwrap_or_default(),
                s.clone().unwrap_or_default()
            )
            .unwrap();
            rows.push((k, v, s));
        }
    }
    let ddl = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (k INT, v BIGINT, s STRING)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
        dir.path().display()
    );
    (dir, ddl, rows)
}

/// NULL smallest.
fn cmp_nullable<T: Ord>(a: &Option<T>, b: &Option<T>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => x.cmp(y),
    }
}

fn show(v: &Option<impl ToString>) -> String {
    v.as_ref().map(|v| v.to_string()).unwrap_or_default()
}

#[test]
fn order_by_sorts_the_whole_result_at_any_parallelism() {
    let (_dir, ddl, rows) = table();
    // s descending (NULLs last), then v ascending (NULLs first), then k.
    let mut want = rows.clone();
    want.sort_by(|a, b| {
        cmp_nullable(&b.2, &a.2)
            .then(cmp_nullable(&a.1, &b.1))
            .then(a.0.cmp(&b.0))
    });
    let want: Vec<String> = want
        .iter()
        .map(|(k, v, s)| format!("{}|{}|{k}", show(s), show(v)))
        .collect();
    for parallelism in [1, 3] {
        let (got, plan) = run(
            &format!(
                "{ddl}\nEXPLAIN SELECT s, v, k FROM t ORDER BY s DESC, v, k;\nSELECT s, v, k FROM t ORDER BY s DESC, v, k;"
            ),
            parallelism,
        );
        assert!(
            plan.contains("Sort(order [s DESC, v ASC NULLS FIRST, k ASC NULLS FIRST])"),
            "{plan}"
        );
        assert_eq!(got.len(), 30_000);
        assert!(got == want, "parallelism {parallelism}: rows out of order");
    }
}

#[test]
fn limit_and_offset_take_a_slice_of_the_order() {
    let (_dir, ddl, rows) = table();
    let mut by_v: Vec<_> = rows.iter().filter(|r| r.1.is_some()).collect();
    by_v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let want: Vec<String> = by_v[5..12]
        .iter()
        .map(|(k, v, _)| format!("{k}|{}", show(v)))
        .collect();
    let (got, _) = run(
        &format!(
            "{ddl}\nSELECT k, v FROM t WHERE v IS NOT NULL ORDER BY v DESC, k LIMIT 7 OFFSET 5;"
        ),
        3,
    );
    assert_eq!(got, want);
    // LIMIT on its own: that many rows of the input.
    let (got, _) = run(&format!("{ddl}\nSELECT k FROM t LIMIT 4;"), 3);
    assert_eq!(got.len(), 4);
    // An expression not selected, after an aggregation (TPC-H q1's shape).
    let (got, _) = run(
        &format!(
            "{ddl}\nSELECT k, COUNT(*) AS n FROM t GROUP BY k ORDER BY MOD(k, 5) DESC, k LIMIT 3;"
        ),
        2,
    );
    let count = |k: i32| rows.iter().filter(|r| r.0 == k).count();
    assert_eq!(
        got,
        [
            format!("4|{}", count(4)),
            format!("9|{}", count(9)),
            format!("3|{}", count(3))
        ]
    );
}

#[test]
fn a_stream_refuses_order_by_and_limit() {
    for query in ["SELECT k FROM t ORDER BY v", "SELECT k FROM t LIMIT 3"] {
        let mut s = SqlSession::new();
        s.execute_script(
            "CREATE TABLE t (k INT, v BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');",
        )
        .unwrap();
        let e = s.execute_script(&format!("{query};")).unwrap_err();
        assert!(e.to_string().contains("on a stream"), "{query}: {e}");
    }
}

#[test]
fn a_parquet_scan_reads_only_the_columns_the_query_mentions() {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("note", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
    ]));
    let batch = arrow::array::RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from(vec![3, 1, 2, 1])),
            Arc::new(StringArray::from(vec!["c", "a", "b", "a2"])),
            Arc::new(Int64Array::from(vec![30, 10, 20, 11])),
        ],
    )
    .unwrap();
    let path = dir.path().join("t.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let ddl = format!(
        "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (k BIGINT, note STRING, v BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');",
        path.display()
    );
    let query = "SELECT k, SUM(v) FROM t WHERE v > 10 GROUP BY k ORDER BY k";
    let (rows, plan) = run(&format!("{ddl}\nEXPLAIN {query};\n{query};"), 2);
    assert!(plan.contains("[columns k, v]"), "{plan}");
    assert_eq!(rows, ["1|11", "2|20", "3|30"]);
    // Every column when the query reads every one.
    let (rows, plan) = run(
        &format!("{ddl}\nEXPLAIN SELECT * FROM t;\nSELECT * FROM t LIMIT 1;"),
        1,
    );
    assert!(!plan.contains("[columns"), "{plan}");
    assert_eq!(rows, ["3|c|30"]);
}
