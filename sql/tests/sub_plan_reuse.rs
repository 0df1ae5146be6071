//! Sub-plan reuse (`table.optimizer.reuse-sub-plan-enabled`, on by
//! default as in Flink): a subquery that appears twice in a job runs once.
//! Nexmark q5 computes the same HOP window count for both sides of its
//! join; with reuse the job has one window operator, and the rows are
//! those of the job that computes it twice.

use std::io::Write;

mod common;

fn q5_like(dir: &std::path::Path, reuse: bool) -> String {
    format!(
        "SET 'table.optimizer.reuse-sub-plan-enabled' = '{reuse}';
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
EXPLAIN SELECT A.auction, A.num, A.starttime FROM (
  SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end) AS A
JOIN (
  SELECT max(C.num) AS maxn, C.starttime, C.endtime FROM (
    SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end) AS C
  GROUP BY C.starttime, C.endtime) AS M
ON A.starttime = M.starttime AND A.endtime = M.endtime AND A.num >= M.maxn;",
        dir.display()
    )
}

fn stream_graph(explain: &str) -> &str {
    let from = explain.find("== Stream graph ==").expect("stream graph");
    let to = explain[from..].find("== Job graph ==").expect("job graph") + from;
    &explain[from..to]
}

#[test]
fn a_subquery_written_twice_runs_once_with_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("bids.csv")).unwrap();
    for i in 0..3000u64 {
        // 30 s of bids over 40 auctions, some hot.
        let auction = if i % 3 == 0 { i % 5 } else { (i * 7) % 40 };
        let secs = i / 100;
        let millis = (i % 100) * 10;
        writeln!(
            f,
            "{auction},{},2026-01-01 00:00:{secs:02}.{millis:03}",
            i % 97
        )
        .unwrap();
    }
    drop(f);
    let script = |reuse| {
        let s = q5_like(dir.path(), reuse);
        let query = s.split("EXPLAIN ").nth(1).unwrap().to_string();
        format!("{s}\n{query}")
    };
    let (mut with, explain_with) = common::run(&script(true), 2);
    let (mut without, explain_without) = common::run(&script(false), 2);
    let windows = |e: &str| {
        stream_graph(e)
            .matches("Window(SlidingEventTimeWindows")
            .count()
    };
    assert_eq!(windows(&explain_with), 1, "{explain_with}");
    assert_eq!(windows(&explain_without), 2, "{explain_without}");
    with.sort();
    without.sort();
    assert!(!with.is_empty());
    assert_eq!(with, without);
}

#[test]
fn a_query_with_a_nondeterministic_function_is_not_shared() {
    // Two subqueries calling random(): each draws its own numbers, as in a
    // job without reuse.
    let script = "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (v BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '50',
  'fields.v.kind' = 'sequence', 'fields.v.start' = '1', 'fields.v.end' = '50');
SELECT count(*) FROM (SELECT v, random() AS r FROM t) AS a
  JOIN (SELECT v, random() AS r FROM t) AS b ON a.v = b.v WHERE a.r <> b.r;";
    let (rows, _) = common::run(script, 1);
    assert_eq!(rows, ["50"]);
}

#[test]
fn the_option_takes_only_true_or_false() {
    let mut s = weir_sql::SqlSession::new();
    let e = s
        .execute_script("SET 'table.optimizer.reuse-sub-plan-enabled' = 'sometimes';")
        .unwrap_err();
    assert!(e.message.contains("'true' or 'false'"), "{e:?}");
}
