//! The four stages of a job: Transformations → [`StreamGraph`] → [`JobGraph`]
//! → [`ExecutionGraph`], and the [`JobExecutor`] contract that runs a job graph.

mod execution_graph;
mod job_graph;
mod stream_graph;
mod transformation;
pub(crate) mod validate;

use std::fmt;
use std::time::Duration;

pub use execution_graph::{ExecutionEdge, ExecutionGraph, ExecutionVertex};
pub use job_graph::{JobEdge, JobGraph, JobVertex};
pub use stream_graph::{StreamEdge, StreamGraph, StreamNode, StreamNodeKind};
pub use transformation::{ChainingStrategy, Transformation, TransformationKind};

use crate::error::Result;

/// How records of an edge are distributed over the consumer subtasks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Partitioner {
    /// Subtask `i` sends to subtask `i` (equal parallelism).
    Forward,
    /// Round-robin over consumer subtasks, per producer subtask.
    Rebalance,
    /// Every record to every consumer subtask.
    Broadcast,
    /// By key group of the key columns.
    Hash {
        /// Key column names.
        keys: Vec<String>,
        /// Key column indices in the edge's schema.
        key_indices: Vec<usize>,
    },
}

impl Partitioner {
    /// Whether every producer subtask talks to every consumer subtask.
    pub fn is_all_to_all(&self) -> bool {
        !matches!(self, Partitioner::Forward)
    }
}

impl fmt::Display for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partitioner::Forward => write!(f, "FORWARD"),
            Partitioner::Rebalance => write!(f, "REBALANCE"),
            Partitioner::Broadcast => write!(f, "BROADCAST"),
            Partitioner::Hash { keys, .. } => write!(f, "HASH({})", keys.join(", ")),
        }
    }
}

/// Counters of one operator instance, reported when its task ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OperatorMetrics {
    /// Operator name.
    pub name: String,
    /// Rows received.
    pub records_in: u64,
    /// Rows emitted.
    pub records_out: u64,
    /// Operator-specific counters (`windows_fired`, `num_late_records_dropped`, …).
    pub counters: Vec<(String, u64)>,
}

/// Metrics of one subtask.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskMetrics {
    /// Subtask name, `vertex (i/p)`.
    pub task: String,
    /// Job vertex id.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// One entry per chained operator.
    pub operators: Vec<OperatorMetrics>,
}

/// The outcome of a finished job.
#[derive(Debug, Clone, Default)]
pub struct JobResult {
    /// The job's name.
    pub job_name: String,
    /// Wall-clock run time.
    pub duration: Duration,
    /// Metrics of every subtask (of the last attempt, after restarts).
    pub tasks: Vec<TaskMetrics>,
    /// Each restart: the failure that caused it and where it resumed.
    pub restarts: Vec<String>,
    /// Ids of the checkpoints completed, in order.
    pub checkpoints: Vec<u64>,
    /// Each completed checkpoint: id, trigger-to-commit time, bytes written.
    pub checkpoint_sizes: Vec<(u64, Duration, u64)>,
    /// Checkpoints abandoned, with the reason (the job went on).
    pub checkpoints_declined: Vec<(u64, String)>,
}

impl JobResult {
    /// Sum of a named counter over every operator of every subtask.
    pub fn counter(&self, name: &str) -> u64 {
        self.tasks
            .iter()
            .flat_map(|t| &t.operators)
            .flat_map(|o| &o.counters)
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }

    /// Rows emitted by all subtasks of the operators whose name starts with `prefix`.
    pub fn records_out(&self, prefix: &str) -> u64 {
        self.operators(prefix).map(|o| o.records_out).sum()
    }

    /// Rows received by all subtasks of the operators whose name starts with `prefix`.
    pub fn records_in(&self, prefix: &str) -> u64 {
        self.operators(prefix).map(|o| o.records_in).sum()
    }

    fn operators<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a OperatorMetrics> + 'a {
        self.tasks
            .iter()
            .flat_map(|t| &t.operators)
            .filter(move |o| o.name.starts_with(prefix))
    }
}

/// A running job.
pub trait JobClient: Send {
    /// Ask every task to stop; [`Self::wait`] then returns
    /// [`WeirError::Cancelled`](crate::WeirError::Cancelled).
    fn cancel(&self);
    /// Whether the job has ended (finished, failed or cancelled).
    fn is_finished(&self) -> bool;
    /// The current input watermark of every subtask (`Watermark::MIN`
    /// before the first): shows which source or channel holds event time back.
    fn watermarks(&self) -> Vec<(String, crate::message::Watermark)>;
    /// Block until the job ends.
    fn wait(self: Box<Self>) -> Result<JobResult>;
    /// Where Flight clients read this job's Flight sinks (while it runs).
    fn sink_endpoint(&self) -> Option<std::net::SocketAddr> {
        None
    }
}

/// Runs job graphs.
///
/// Contract: a submitted job runs until every task has finished (bounded
/// jobs), the job failed — the first task failure cancels the job and is
/// returned with the failing subtask's name — or it is cancelled. Unbounded
/// jobs run until cancelled.
pub trait JobExecutor: Send + Sync {
    /// Start `job` and return a handle to it.
    fn submit(&self, job: JobGraph) -> Result<Box<dyn JobClient>>;

    /// Run `job` to its end and return its metrics.
    fn execute(&self, job: JobGraph) -> Result<JobResult> {
        self.submit(job)?.wait()
    }
}
