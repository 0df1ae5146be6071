//! Orders per minute: the job Weir's design starts from.
//!
//! ```text
//! orders (generator, or a Parquet / CSV file)
//!   -> ParseOrder (amount_cents -> amount)
//!   -> key_by(user_id)
//!   -> 1-minute tumbling event-time window: count, sum(amount)
//!   -> sink
//! ```
//!
//! It lowers to two vertices: `A = orders -> ParseOrder` and
//! `B = window -> sink`, joined by one hash edge on `user_id`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion_expr::{cast, col, lit};
use weir_core::Result;
use weir_core::api::StreamExecutionEnvironment;
use weir_core::spec::{AggregateSpec, SinkSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};
use weir_operators::sources::{CsvOptions, csv_source, parquet_source};

/// Schema of raw orders (generated, or read from files).
pub fn orders_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("user_id", DataType::Int64, false),
        Field::new("amount_cents", DataType::Int64, false),
        Field::new(
            "order_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// `events` generated orders over 10,000 users, 50,000 orders per second of
/// event time, up to 2 s out of order.
pub fn generated_orders(events: u64) -> SourceSpec {
    SourceSpec::from(
        GeneratorSpec::new(Some(events))
            .column("order_id", ColumnGen::Sequence)
            .column(
                "user_id",
                ColumnGen::Key {
                    cardinality: 10_000,
                },
            )
            .column(
                "amount_cents",
                ColumnGen::UniformInt {
                    min: 100,
                    max: 50_000,
                },
            )
            .column(
                "order_time",
                ColumnGen::EventTime {
                    start_ms: 1_767_225_600_000, // 2026-01-01T00:00:00Z
                    events_per_second: 50_000,
                    max_out_of_orderness_ms: 2_000,
                },
            ),
    )
}

/// Orders from a file or directory: `.csv` is read as CSV with the orders
/// schema, anything else as Parquet.
pub fn file_orders(path: &Path) -> Result<SourceSpec> {
    if path.extension().is_some_and(|e| e == "csv") {
        csv_source(
            &[path],
            CsvOptions {
                schema: Some(orders_schema()),
                has_header: true,
                ..Default::default()
            },
        )
    } else {
        parquet_source(&[path], None)
    }
}

/// Record the job on `env`.
pub fn build_job(
    env: &StreamExecutionEnvironment,
    source: SourceSpec,
    sink: SinkSpec,
) -> Result<()> {
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness("order_time", Duration::from_secs(5)),
        "orders",
    )?
    .project(vec![
        col("order_id"),
        col("user_id"),
        (cast(col("amount_cents"), DataType::Float64) / lit(100.0)).alias("amount"),
        col("order_time"),
    ])?
    .name("ParseOrder")?
    .key_by(&["user_id"])?
    .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
    .aggregate(vec![
        AggregateSpec::count_star().alias("orders"),
        AggregateSpec::sum("amount").alias("revenue"),
    ])?
    .sink_to(sink, "orders_per_minute")?;
    Ok(())
}
