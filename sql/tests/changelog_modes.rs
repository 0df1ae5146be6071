//! Changelogs as types: the row kind is an Int8 column of a reserved name
//! with Flink's byte values, a user column called `_op` is just a column,
//! and an upsert sink gets an upserting stream (no `-U`) from an aggregate
//! keyed as it is.

use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type};
use arrow::util::display::array_value_to_string;
use weir_core::Result;
use weir_core::changelog::{ROW_KIND_COLUMN, RowKind, row_kind_at, row_kinds};
use weir_core::connector::TableDescriptor;
use weir_core::graph::StreamNode;
use weir_core::spec::{CollectHandle, SinkSpec};
use weir_operators::{Operator, OperatorContext};
use weir_sql::{ConnectorFactory, ConnectorOption, OptionKind, SqlSession};

/// `'connector' = 'upsert-collect'`: an upsert sink by the table's PRIMARY
/// KEY that keeps what it is given, per `'name'`.
struct UpsertCollect;

fn handles() -> &'static Mutex<Vec<(String, CollectHandle)>> {
    static H: OnceLock<Mutex<Vec<(String, CollectHandle)>>> = OnceLock::new();
    H.get_or_init(Default::default)
}

fn handle(name: &str) -> CollectHandle {
    let mut all = handles().lock().unwrap();
    if let Some((_, h)) = all.iter().find(|(n, _)| n == name) {
        return h.clone();
    }
    let h = CollectHandle::new();
    all.push((name.to_string(), h.clone()));
    h
}

impl ConnectorFactory for UpsertCollect {
    fn identifier(&self) -> &str {
        "upsert-collect"
    }

    fn description(&self) -> &str {
        "keeps the upserts it is given, per 'name'"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![
            ConnectorOption::required("name", OptionKind::Text, "where the rows are kept"),
            ConnectorOption::optional(
                "drops-update-before",
                OptionKind::Boolean,
                Some("false"),
                "declare that -U rows are of no use to it (as blackhole does)",
            ),
        ]
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn plan_sink(&self, t: &TableDescriptor) -> Option<Result<SinkSpec>> {
        Some(
            t.required("name")
                .map(|n| SinkSpec::new("upsert-collect", serde_json::json!({ "name": n }))),
        )
    }

    /// Keeps the rows with the built-in collect sink.
    fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        let name = sink.planned["name"].as_str().unwrap_or_default();
        let collect = SinkSpec::from(handle(name));
        Some(ctx.connectors.open_sink(&collect, node, ctx))
    }

    fn accepts_changelog(&self, _: &TableDescriptor) -> Result<bool> {
        Ok(true)
    }

    fn sink_upsert_key(&self, t: &TableDescriptor) -> Result<Option<Vec<String>>> {
        Ok(Some(t.primary_key.clone()).filter(|k| !k.is_empty()))
    }

    fn sink_uses_update_before(&self, t: &TableDescriptor) -> Result<bool> {
        Ok(t.options
            .get("drops-update-before")
            .is_none_or(|v| v != "true"))
    }
}

/// Rows as `kind[v1, v2, …]` (`+I` for an append-only result).
fn changes(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = vec![];
    for b in batches {
        let kinds =
            weir_core::spec::is_changelog_schema(&b.schema()).then(|| row_kinds(b).unwrap());
        let width = b.num_columns() - usize::from(kinds.is_some());
        for r in 0..b.num_rows() {
            let kind = kinds.map_or(RowKind::Insert, |k| row_kind_at(k, r).unwrap());
            let values: Vec<String> = (0..width)
                .map(|c| array_value_to_string(b.column(c), r).unwrap())
                .collect();
            out.push(format!("{kind}[{}]", values.join(", ")));
        }
    }
    out
}

fn run(script: &str, query_rows: Option<&CollectHandle>) {
    let mut s = SqlSession::new();
    s.connectors().register(Arc::new(UpsertCollect));
    s.execute_script(script).unwrap();
    let env = weir_worker::local_environment().unwrap();
    let rows = query_rows.cloned().unwrap_or_default();
    s.build_with(&env, &move || SinkSpec::from(rows.clone()))
        .unwrap();
    env.execute("changelog modes").unwrap();
}

/// Three sources (three batches), so key `a` is updated.
const WORDS: &str = "CREATE VIEW words AS SELECT * FROM (VALUES ('a', 1), ('b', 2)) AS t(_op, n) \
                     UNION ALL SELECT * FROM (VALUES ('a', 3)) AS u(_op, n) \
                     UNION ALL SELECT * FROM (VALUES ('a', 4)) AS v(_op, n);\n";

#[test]
fn a_user_column_named_op_is_just_a_column() {
    let rows = CollectHandle::new();
    run(
        &format!("{WORDS}SELECT _op, COUNT(*) AS c FROM words GROUP BY _op;"),
        Some(&rows),
    );
    let batches = rows.batches();
    let schema = batches[0].schema();
    // The user's `_op` is a text column; the row kind follows it, Int8.
    assert_eq!(schema.field(0).name(), "_op");
    assert_eq!(schema.field(0).data_type(), &DataType::Utf8);
    let last = schema.fields().last().unwrap();
    assert_eq!(
        (last.name().as_str(), last.data_type()),
        (ROW_KIND_COLUMN, &DataType::Int8)
    );
    let mut got = changes(&batches);
    got.sort();
    // Whatever the batching, key `a` ends at 3 and `b` at 1; every update
    // is a -U/+U pair.
    let ups = got.iter().filter(|c| c.starts_with("+U")).count();
    let befores = got.iter().filter(|c| c.starts_with("-U")).count();
    assert_eq!(ups, befores, "{got:?}");
    assert!(got.contains(&"+I[b, 1]".to_string()), "{got:?}");
    assert!(
        got.iter().any(|c| c == "+U[a, 3]") || got.contains(&"+I[a, 3]".to_string()),
        "{got:?}"
    );
}

#[test]
fn the_row_kind_column_name_is_reserved() {
    let mut s = SqlSession::new();
    let e = s
        .execute_script(&format!(
            "CREATE TABLE t (`{ROW_KIND_COLUMN}` TINYINT) WITH ('connector' = 'blackhole');"
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("reserved for the row kind"), "{e}");
}

#[test]
fn an_upsert_sink_by_the_group_keys_gets_no_update_befores() {
    // Keyed as the aggregate: upserts, no -U.
    run(
        &format!(
            "{WORDS}CREATE TABLE counts (w STRING, c BIGINT, PRIMARY KEY (w) NOT ENFORCED) \
             WITH ('connector' = 'upsert-collect', 'name' = 'by-group-key');\n\
             INSERT INTO counts SELECT _op, COUNT(*) FROM words GROUP BY _op;"
        ),
        None,
    );
    let got = changes(&handle("by-group-key").batches());
    assert!(got.iter().all(|c| !c.starts_with("-U")), "{got:?}");
    assert!(got.iter().any(|c| c.starts_with("+U[a")), "{got:?}");
    // The latest row per key is the aggregate's final value.
    let mut latest = std::collections::BTreeMap::new();
    for b in handle("by-group-key").batches() {
        let w = b.column(0).as_string::<i32>();
        let c = b.column(1).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            latest.insert(w.value(r).to_string(), c.value(r));
        }
    }
    assert_eq!(
        latest.into_iter().collect::<Vec<_>>(),
        [("a".into(), 3), ("b".into(), 1)]
    );

    // Keyed otherwise: the stream stays retracting (the sink sees -U).
    run(
        &format!(
            "{WORDS}CREATE TABLE sums (s BIGINT, c BIGINT, PRIMARY KEY (c) NOT ENFORCED) \
             WITH ('connector' = 'upsert-collect', 'name' = 'by-other-key');\n\
             INSERT INTO sums SELECT SUM(n), COUNT(*) FROM words GROUP BY _op;"
        ),
        None,
    );
    let got = changes(&handle("by-other-key").batches());
    let ups = got.iter().filter(|c| c.starts_with("+U")).count();
    let befores = got.iter().filter(|c| c.starts_with("-U")).count();
    assert_eq!(ups, befores, "{got:?}");
    assert!(befores > 0, "{got:?}");
}

#[test]
fn a_sink_dropping_update_befores_gets_upserts_by_the_aggregates_key() {
    // No PRIMARY KEY: the aggregate upserts by its own key, which the
    // projection passes on (renamed); the rows end at the final values.
    run(
        &format!(
            "{WORDS}CREATE TABLE counts (word STRING, c BIGINT) \
             WITH ('connector' = 'upsert-collect', 'name' = 'drops-befores', \
                   'drops-update-before' = 'true');\n\
             INSERT INTO counts SELECT _op AS word, COUNT(*) FROM words GROUP BY _op;"
        ),
        None,
    );
    let got = changes(&handle("drops-befores").batches());
    assert!(got.iter().all(|c| !c.starts_with("-U")), "{got:?}");
    assert!(got.iter().any(|c| c.starts_with("+U[a")), "{got:?}");
    // Each key's last row holds its final count (keys interleave in any
    // order).
    let last = |word: &str| last_of(&got, word);
    assert_eq!(last("a").as_deref(), Some("+U[a, 3]"), "{got:?}");
    assert_eq!(last("b").as_deref(), Some("+I[b, 1]"), "{got:?}");

    // A projection dropping the key: no key to upsert by, so -U rows stay.
    run(
        &format!(
            "{WORDS}CREATE TABLE sums (c BIGINT) \
             WITH ('connector' = 'upsert-collect', 'name' = 'drops-befores-keyless', \
                   'drops-update-before' = 'true');\n\
             INSERT INTO sums SELECT COUNT(*) FROM words GROUP BY _op;"
        ),
        None,
    );
    let got = changes(&handle("drops-befores-keyless").batches());
    assert!(got.iter().any(|c| c.starts_with("-U")), "{got:?}");

    // Flink's blackhole declares the same, so Nexmark's updating queries
    // into it plan upserting aggregates.
    let mut s = SqlSession::new();
    let explain = s
        .execute_script(&format!(
            "{WORDS}CREATE TABLE hole (word STRING, c BIGINT) WITH ('connector' = 'blackhole');\n\
             EXPLAIN INSERT INTO hole SELECT _op, COUNT(*) FROM words GROUP BY _op;"
        ))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            weir_sql::StatementResult::Explain(t) => Some(t),
            _ => None,
        })
        .collect::<String>();
    assert!(explain.contains("[upsert]"), "{explain}");
}

/// The last change to the row whose first column is `key` (keys
/// interleave in any order).
fn last_of(got: &[String], key: &str) -> Option<String> {
    got.iter()
        .rev()
        .find(|c| c[3..].starts_with(&format!("{key},")))
        .cloned()
}

/// The EXPLAIN text of `statement` after the WORDS view.
fn explain(statement: &str) -> String {
    let mut s = SqlSession::new();
    s.execute_script(&format!("{WORDS}{statement}"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            weir_sql::StatementResult::Explain(t) => Some(t),
            _ => None,
        })
        .collect()
}

#[test]
fn a_top_n_upserts_by_its_keys_and_row_number_or_its_keys_when_it_keeps_one() {
    // Top-1 per word, numbered, into a sink keyed by word and number: the
    // rank upserts (no -U), and each key ends at its last kept row. (The
    // views' rows arrive in one batch or several: with one, `a` is sent
    // once, as +I.)
    let top1 = "SELECT _op, n, rn FROM (SELECT _op, n, ROW_NUMBER() OVER \
                (PARTITION BY _op ORDER BY n DESC) AS rn FROM words) WHERE rn <= 1";
    run(
        &format!(
            "{WORDS}CREATE TABLE top (w STRING, n INT, rn BIGINT, \
             PRIMARY KEY (w, rn) NOT ENFORCED) \
             WITH ('connector' = 'upsert-collect', 'name' = 'top-by-rank');\n\
             INSERT INTO top {top1};"
        ),
        None,
    );
    let got = changes(&handle("top-by-rank").batches());
    assert!(got.iter().all(|c| !c.starts_with("-U")), "{got:?}");
    let last = |word: &str| last_of(&got, word);
    assert!(
        last("a").is_some_and(|c| c.ends_with("[a, 4, 1]")),
        "{got:?}"
    );
    assert_eq!(last("b").as_deref(), Some("+I[b, 2, 1]"), "{got:?}");

    // A sink that drops -U rows: the same without the number (keys alone
    // identify a row when one is kept).
    run(
        &format!(
            "{WORDS}CREATE TABLE top (w STRING, n INT) \
             WITH ('connector' = 'upsert-collect', 'name' = 'top-drops-befores', \
                   'drops-update-before' = 'true');\n\
             INSERT INTO top SELECT _op, n FROM ({top1});"
        ),
        None,
    );
    let got = changes(&handle("top-drops-befores").batches());
    assert!(got.iter().all(|c| !c.starts_with("-U")), "{got:?}");
    let last = |word: &str| last_of(&got, word);
    assert!(last("a").is_some_and(|c| c.ends_with("[a, 4]")), "{got:?}");
    assert_eq!(last("b").as_deref(), Some("+I[b, 2]"), "{got:?}");

    // Into a blackhole: Top-1 upserts; Top-2 without its number has no key
    // that names one output row, so it stays retracting.
    let hole = "CREATE TABLE hole (w STRING, n INT) WITH ('connector' = 'blackhole');\n";
    let one = explain(&format!(
        "{hole}EXPLAIN INSERT INTO hole SELECT _op, n FROM ({top1});"
    ));
    assert!(one.contains("[upsert]"), "{one}");
    let two = explain(&format!(
        "{hole}EXPLAIN INSERT INTO hole SELECT _op, n FROM (SELECT _op, n, ROW_NUMBER() OVER \
         (PARTITION BY _op ORDER BY n DESC) AS rn FROM words) WHERE rn <= 2;"
    ));
    assert!(!two.contains("[upsert]"), "{two}");
}
