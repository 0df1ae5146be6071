//! # weir-core
//!
//! The data model and the job description of Weir, a columnar micro-batch
//! stream processor in the model of Apache Flink. This crate holds types,
//! messages, errors and the DataStream API; it performs no I/O and does not
//! depend on an async runtime.
//!
//! ## Architecture
//!
//! ```text
//!  user code (DataStream API)          this crate
//!  ─────────────────────────────────────────────────────────────────────────
//!  StreamExecutionEnvironment ──records──► Transformations (lazy)
//!        │ execute(name)
//!        ▼
//!  StreamGraph   one node per source / operator / sink; key_by, rebalance,
//!        │       broadcast and union are edge properties, not nodes
//!        ▼
//!  JobGraph      forward edges with equal parallelism and a single input are
//!        │       fused into chains (one vertex = one task per subtask)
//!        ▼
//!  ExecutionGraph  each vertex expanded to its parallelism; every edge becomes
//!                  channels between producer and consumer subtasks
//!  ─────────────────────────────────────────────────────────────────────────
//!  weir-operators: the Operator trait and built-in operators, sources, sinks
//!  weir-worker:    tasks, channels, input gates; the local executor
//! ```
//!
//! Records travel as Arrow [`RecordBatch`](arrow::record_batch::RecordBatch)es
//! wrapped in [`StreamMessage::Data`]; watermarks, checkpoint barriers, channel
//! idleness and end-of-stream travel in the same ordered stream as control
//! messages. Keyed streams are hashed into [key groups](keys) with a fixed-seed
//! vectorized hash, so the same key lands in the same key group on every worker
//! and across restarts.
#![warn(missing_docs)]

pub mod api;
pub mod changelog;
pub mod channel;
pub mod checkpoint;
pub mod cluster;
pub mod config;
pub mod connector;
pub mod error;
pub mod functions;
pub mod graph;
pub mod join_spec;
pub mod keys;
pub mod match_spec;
pub mod message;
pub mod metrics;
pub mod over_spec;
pub mod process;
pub mod prometheus;
pub mod spec;
pub mod state_config;
pub mod table_function;
pub mod time;
pub mod wire;

pub use api::{DataStream, KeyedStream, StreamExecutionEnvironment, WindowedStream};
pub use config::{
    ExchangeMode, RestartStrategy, RuntimeMode, Secret, SinkRetention, TlsFiles, WeirConfig,
};
pub use error::{Result, WeirError};
pub use message::{CheckpointBarrier, StreamMessage, Watermark};
