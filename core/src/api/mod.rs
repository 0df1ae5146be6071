//! The DataStream API: a lazy description of a job, in Flink's words.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
//! use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
//! use datafusion_expr::{col, lit};
//! use weir_core::api::StreamExecutionEnvironment;
//! use weir_core::spec::{AggregateSpec, CollectHandle, MemorySourceSpec};
//! use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
//!
//! # fn main() -> weir_core::Result<()> {
//! let schema = Arc::new(Schema::new(vec![
//!     Field::new("user_id", DataType::Int64, false),
//!     Field::new("amount", DataType::Int64, false),
//!     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
//! ]));
//! let orders = RecordBatch::try_new(Arc::clone(&schema), vec![
//!     Arc::new(Int64Array::from(vec![1, 2, 1])),
//!     Arc::new(Int64Array::from(vec![50, 5, 70])),
//!     Arc::new(TimestampMillisecondArray::from(vec![0, 1_000, 2_000])),
//! ])?;
//! // Sources and sinks are connectors: `env.from_connector("datagen", …)`
//! // with weir_worker's environment, or rows of the program as here.
//! let env = StreamExecutionEnvironment::new(Default::default());
//! let results = CollectHandle::new();
//! env.from_source(
//!     MemorySourceSpec::new(schema, vec![orders]),
//!     WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_secs(1)),
//!     "orders",
//! )?
//! .filter(col("amount").gt(lit(10)))?
//! .key_by(&["user_id"])?
//! .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
//! .aggregate(vec![AggregateSpec::count_star().alias("orders")])?
//! .sink_to(results.clone(), "results")?;
//! println!("{}", env.explain("example")?);
//! # Ok(()) }
//! ```

mod env;
pub mod expr;
mod stream;

pub use env::StreamExecutionEnvironment;
pub use expr::plan_expr;
pub use stream::{
    ConnectedStreams, DataStream, DataStreamSink, IntervalJoinBuilder, KeyedStream, MatchRecognize,
    WindowedStream,
};
