//! # weir-coordinator
//!
//! The JobManager roles: Dispatcher (job submission REST API),
//! ResourceManager (worker slots, heartbeats) and JobMaster (execution graph,
//! scheduling, checkpoint coordination, restarts). The distributed-runtime
//! issue fills this crate; the embedded default today is
//! `weir_worker::LocalExecutor`, which schedules every subtask in-process.
#![warn(missing_docs)]

pub use weir_core::graph::{ExecutionGraph, JobGraph};
