//! A connector written in Rust — its own source, not a built-in one in
//! disguise — registered with the process and used from SQL, from the
//! DataStream API and inside a checkpointed job like a built-in one (the
//! guide in the README shows the same code).

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{AsArray, Int64Array, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, UInt64Type};
use weir_core::Result;
use weir_core::connector::{ConnectorSource, TableDescriptor};
use weir_core::spec::{CollectHandle, SinkSpec, SourceSpec};
use weir_core::time::WatermarkStrategy;
use weir_operators::{OperatorContext, Source, SourcePoll};
use weir_sql::{ConnectorFactory, ConnectorOption, OptionKind, SqlSession};

/// `'connector' = 'countdown'`: the numbers `start` down to 1, in one
/// column, split across the subtasks (number `n` to subtask `n mod p`).
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

    fn plan_source(&self, table: &TableDescriptor) -> Option<Result<SourceSpec>> {
        Some((|| {
            // The registry has checked that 'start' is given and an integer.
            let start: i64 = table.number("start")?.unwrap_or(0);
            let column = match &table.schema {
                Some(s) => s.field(0).name().clone(),
                None => "n".to_string(),
            };
            let schema = Arc::new(Schema::new(vec![Field::new(
                column,
                DataType::Int64,
                false,
            )]));
            Ok(ConnectorSource::new(
                "countdown",
                schema,
                true,
                serde_json::json!({ "start": start }),
            )
            .with_display(format!("countdown({start})"))
            .into())
        })())
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        let start = source.planned["start"].as_i64().unwrap_or(0);
        Some(Ok(Box::new(CountdownSource {
            schema: Arc::clone(&source.schema),
            next: start,
            subtask: ctx.subtask as i64,
            parallelism: ctx.parallelism as i64,
        })))
    }
}

/// One subtask's share of the countdown; its position is the next number,
/// so a restored job goes on where the checkpoint left it.
struct CountdownSource {
    schema: arrow::datatypes::SchemaRef,
    next: i64,
    subtask: i64,
    parallelism: i64,
}

impl Source for CountdownSource {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let mine: Vec<i64> = (1..=self.next.max(0))
            .rev()
            .filter(|n| n % self.parallelism == self.subtask)
            .take(3)
            .collect();
        let Some(&last) = mine.last() else {
            return Ok(SourcePoll::Finished);
        };
        self.next = last - 1;
        Ok(SourcePoll::Batch(RecordBatch::try_new(
            Arc::clone(&self.schema),
            vec![Arc::new(Int64Array::from(mine))],
        )?))
    }

    fn snapshot_position(&mut self, _checkpoint: u64) -> Result<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("subtask", DataType::UInt64, false),
            Field::new("next", DataType::UInt64, false),
        ]));
        Ok(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt64Array::from(vec![self.subtask as u64])),
                Arc::new(UInt64Array::from(vec![self.next.max(0) as u64])),
            ],
        )?)
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        // Every subtask's position comes back to every subtask; this one
        // goes on from its own (the job restores at the same parallelism).
        for b in &positions {
            let subtasks = b.column(0).as_primitive::<UInt64Type>();
            let next = b.column(1).as_primitive::<UInt64Type>();
            for r in 0..b.num_rows() {
                if subtasks.value(r) == self.subtask as u64 {
                    self.next = next.value(r) as i64;
                }
            }
        }
        Ok(())
    }
}

fn session() -> SqlSession {
    let session = SqlSession::new();
    session.connectors().register(Arc::new(Countdown));
    session
}

fn numbers(rows: &CollectHandle) -> Vec<i64> {
    let mut got: Vec<i64> = rows
        .batches()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    got.sort_unstable();
    got
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
    env.set_parallelism(2);
    let rows = CollectHandle::new();
    let sink = rows.clone();
    s.build_with(&env, &move || SinkSpec::from(sink.clone()))
        .unwrap();
    env.execute("countdown").unwrap();
    assert_eq!(numbers(&rows), vec![0, 1, 2, 3, 4]);
    // It is listed with its options.
    let listing = s.connectors().describe();
    assert!(
        listing.contains("countdown (source)") && listing.contains("start"),
        "{listing}"
    );
}

#[test]
fn the_same_connector_serves_the_datastream_api_with_checkpoints() {
    let _ = session();
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(3);
    let dir = tempfile::tempdir().unwrap();
    env.configure(|c| {
        c.checkpoint_interval = Some(Duration::from_millis(20));
        c.checkpoint_dir = Some(dir.path().display().to_string());
    });
    let rows = CollectHandle::new();
    env.from_connector(
        "countdown",
        [("start", "10000")],
        WatermarkStrategy::no_watermarks(),
        "numbers",
    )
    .unwrap()
    .sink_to(rows.clone(), "collect")
    .unwrap();
    env.execute("countdown").unwrap();
    assert_eq!(numbers(&rows), (1..=10_000).collect::<Vec<i64>>());
    // Its options are checked there too.
    let err = env
        .from_connector(
            "countdown",
            [("begin", "5")],
            WatermarkStrategy::no_watermarks(),
            "numbers",
        )
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("unknown option 'begin'"), "{err}");
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
