//! A connector written in Rust, registered with the session and used from
//! SQL like a built-in one (the guide in the README shows the same code).

use std::sync::Arc;

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::Int64Type;
use weir_core::Result;
use weir_core::spec::{CollectHandle, ColumnGen, GeneratorSpec, SinkSpec, SourceSpec};
use weir_sql::{ConnectorFactory, ConnectorOption, OptionKind, SqlSession, TableEntry};

/// `'connector' = 'countdown'`: the numbers `start` down to 1.
struct Countdown;

impl ConnectorFactory for Countdown {
    fn identifier(&self) -> &str {
        "countdown"
    }

    fn description(&self) -> &str {
        "the numbers from 'start' down to 1, in one column"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![ConnectorOption::required(
            "start",
            OptionKind::Integer,
            "the first number",
        )]
    }

    fn is_source(&self) -> bool {
        true
    }

    fn create_source(&self, table: &TableEntry) -> Option<Result<SourceSpec>> {
        // The registry has checked that 'start' is given and an integer.
        let start: u64 = table.option("start")?.parse().ok()?;
        let column = table.schema.field(0).name().clone();
        Some(Ok(SourceSpec::Generator(
            GeneratorSpec::new(Some(start)).column(column, ColumnGen::Sequence),
        )))
    }
}

fn session() -> SqlSession {
    let mut session = SqlSession::new();
    session.connectors_mut().register(Arc::new(Countdown));
    session
}

#[test]
fn a_connector_registered_from_rust_is_used_from_sql() {
    let mut s = session();
    s.execute_script(
        "CREATE TABLE c (n BIGINT) WITH ('connector' = 'countdown', 'start' = '5');\n\
         SELECT 5 - n AS left_to_go FROM c;",
    )
    .unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(1);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::Collect(sink.clone()))
        .unwrap();
    env.execute("countdown").unwrap();
    let mut got: Vec<i64> = rows
        .batches()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    got.sort_unstable();
    assert_eq!(got, Int64Array::from(vec![1, 2, 3, 4, 5]).values().to_vec());
    // It is listed with its options.
    let listing = s.connectors().describe();
    assert!(
        listing.contains("countdown (source)") && listing.contains("start"),
        "{listing}"
    );
}

#[test]
fn its_declared_options_are_checked_before_it_runs() {
    let cases = [
        (
            "CREATE TABLE c (n BIGINT) WITH ('connector' = 'countdown');",
            "connector 'countdown' needs the option 'start'",
        ),
        (
            "CREATE TABLE c (n BIGINT) WITH ('connector' = 'countdown', 'start' = 'five');",
            "option 'start' = 'five': expected integer",
        ),
        (
            "CREATE TABLE c (n BIGINT) WITH ('connector' = 'countdown', 'strt' = '5');",
            "unknown option 'strt' for connector 'countdown' (did you mean 'start'?)",
        ),
        (
            "CREATE TABLE c (n BIGINT) WITH ('connector' = 'countdwn', 'start' = '5');",
            "unknown connector 'countdwn' (did you mean 'countdown'?)",
        ),
    ];
    for (sql, expected) in cases {
        let err = session().execute_script(sql).unwrap_err().to_string();
        assert!(err.contains(expected), "{sql}\n{err}");
    }
}
