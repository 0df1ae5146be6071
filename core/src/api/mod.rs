//! The DataStream API: a lazy description of a job, in Flink's words.
//!
//! ```no_run
//! use std::time::Duration;
//! use datafusion_expr::{col, lit};
//! use weir_core::api::StreamExecutionEnvironment;
//! use weir_core::spec::{AggregateSpec, ColumnGen, GeneratorSpec, SinkSpec, SourceSpec};
//! use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
//!
//! # fn main() -> weir_core::Result<()> {
//! let env = StreamExecutionEnvironment::new(Default::default());
//! let source = GeneratorSpec::new(Some(1_000_000))
//!     .column("user_id", ColumnGen::Key { cardinality: 100 })
//!     .column("amount", ColumnGen::UniformInt { min: 1, max: 500 })
//!     .column("ts", ColumnGen::EventTime { start_ms: 0, events_per_second: 1000, max_out_of_orderness_ms: 0 });
//! env.from_source(
//!     SourceSpec::from(source),
//!     WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_secs(1)),
//!     "orders",
//! )?
//! .filter(col("amount").gt(lit(10)))?
//! .key_by(&["user_id"])?
//! .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
//! .aggregate(vec![AggregateSpec::count_star().alias("orders")])?
//! .sink_to(weir_operators::connectors::print(), "print")?;
//! println!("{}", env.explain("example")?);
//! # Ok(()) }
//! ```

mod env;
pub mod expr;
mod stream;

pub use env::StreamExecutionEnvironment;
pub use expr::plan_expr;
pub use stream::{
    ConnectedStreams, DataStream, DataStreamSink, IntervalJoinBuilder, KeyedStream, WindowedStream,
};
