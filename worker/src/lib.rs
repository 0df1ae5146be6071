//! # weir-worker
//!
//! The task runtime (Flink's TaskManager side): a [`Task`](task::Task) runs
//! one subtask's [operator chain](chain::OperatorChain); its records arrive
//! through an [`InputGate`](gate::InputGate) that merges bounded
//! [channels](channel) and owns the watermark minimum, and leave through
//! [`RecordWriter`](task::RecordWriter)s that partition batches over the
//! consumer channels. The [`LocalExecutor`] runs a whole job in-process —
//! the embedded default.
#![warn(missing_docs)]

pub mod chain;
pub mod channel;
pub mod checkpoint;
pub mod connectors;
pub mod executor;
pub mod gate;
pub mod node;
mod node_metrics;
pub mod recovery;
mod split_watermarks;
pub mod task;

pub use connectors::{ProcessConnectors, connectors, register_connector};
pub use executor::{LocalExecutor, local_environment};
pub use node::{WorkerNode, WorkerOptions};
