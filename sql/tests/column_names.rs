//! Result columns are named as Flink names them: a plain column by its
//! name, a field access by the field, any other unaliased expression
//! `EXPR$i` by its position (checked with PyFlink 2.3:
//! `SELECT SUM(v), SUM(CAST(v AS DOUBLE)), v + 1, s, UPPER(s) …` has the
//! columns `EXPR$0, EXPR$1, EXPR$2, s, EXPR$4`). Where Weir differs:
//! two aggregates whose arguments differ only by a CAST are refused (Flink
//! plans them), with the subquery that works named in the error.

use weir_core::spec::{CollectHandle, SinkSpec};
use weir_sql::SqlSession;

fn names_and_rows(script: &str) -> (Vec<String>, Vec<String>) {
    let mut s = SqlSession::new();
    s.execute_script(script).unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(1);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    env.execute("names").unwrap();
    let batches = rows.batches();
    let names = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut lines = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let values: Vec<String> = (0..b.num_columns())
                .map(|c| arrow::util::display::array_value_to_string(b.column(c), r).unwrap())
                .collect();
            lines.push(values.join("|"));
        }
    }
    lines.sort();
    (names, lines)
}

const TABLE: &str = "SET 'execution.runtime-mode' = 'batch';
CREATE TABLE t (v BIGINT, s STRING) WITH (
  'connector' = 'datagen', 'number-of-rows' = '4',
  'fields.v.kind' = 'sequence', 'fields.v.start' = '1', 'fields.v.end' = '4');";

#[test]
fn unaliased_expressions_are_named_by_position() {
    let (names, rows) = names_and_rows(&format!(
        "{TABLE}\nSELECT SUM(v), SUM(v * 2), MAX(v) + 1 AS m FROM t;"
    ));
    assert_eq!(names, ["EXPR$0", "EXPR$1", "m"]);
    assert_eq!(rows, ["10|20|5"]);
}

#[test]
fn aggregates_differing_by_a_cast_are_refused_with_the_way_around() {
    // DataFusion names an aggregate over a CAST after the CAST's operand,
    // so the two sums are one name inside the plan: refused, pointing at
    // the subquery that works.
    let mut s = SqlSession::new();
    let e = s
        .execute_script(&format!(
            "{TABLE}\nSELECT SUM(v), SUM(CAST(v AS DOUBLE)) FROM t;"
        ))
        .unwrap_err();
    assert!(e.message.contains("in a subquery"), "{e:?}");
    let (names, rows) = names_and_rows(&format!(
        "{TABLE}\nSELECT SUM(v), SUM(d) FROM (SELECT v, CAST(v AS DOUBLE) AS d FROM t);"
    ));
    assert_eq!(names, ["EXPR$0", "EXPR$1"]);
    assert_eq!(rows, ["10|10.0"]);
}

#[test]
fn columns_and_fields_keep_their_names() {
    let (names, rows) = names_and_rows(&format!(
        "{TABLE}\nSELECT v, t.s IS NULL, v * 2, t.s, UPPER(s) IS NULL AS u FROM t WHERE v < 3;"
    ));
    assert_eq!(names, ["v", "EXPR$1", "EXPR$2", "s", "u"]);
    let cut: Vec<String> = rows
        .iter()
        .map(|r| {
            let f: Vec<&str> = r.split('|').collect();
            format!("{}|{}|{}|{}", f[0], f[1], f[2], f[4])
        })
        .collect();
    assert_eq!(cut, ["1|false|2|false", "2|false|4|false"]);
}

#[test]
fn an_outer_query_reads_a_position_named_column() {
    let (names, rows) = names_and_rows(&format!(
        "{TABLE}\nSELECT `EXPR$1` + 1 AS w FROM (SELECT v, v * 10 FROM t) WHERE v = 2;"
    ));
    assert_eq!(names, ["w"]);
    assert_eq!(rows, ["21"]);
}
