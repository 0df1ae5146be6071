//! What the coordinator knows of a running job beyond its status: live
//! subtask metrics from the workers' heartbeats (with rates between two of
//! them), the checkpoint history, the exceptions, and the plan — named as
//! Flink's REST API and metric system name them.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use serde::Serialize;
use weir_core::graph::JobGraph;

/// Checkpoints kept in a job's history (Flink's
/// `web.checkpoints.history`, 10 by default).
pub const CHECKPOINT_HISTORY: usize = 10;

/// Exceptions kept per job (Flink's `web.exception-history-size`, 16).
pub const EXCEPTION_HISTORY: usize = 16;

/// One subtask's part of a checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskCheckpoint {
    /// Job vertex.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// Ms from the trigger to its acknowledgement.
    pub end_to_end_duration_ms: u64,
    /// Bytes of its state files.
    pub state_size: u64,
    /// Rows of its state.
    pub state_rows: u64,
    /// Ms its barrier alignment took (when the worker measured it).
    pub alignment_duration_ms: Option<u64>,
}

/// One checkpoint in a job's history.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointRecord {
    /// Id.
    pub id: u64,
    /// `IN_PROGRESS`, `COMPLETED` or `FAILED`.
    pub status: &'static str,
    /// Whether it is a savepoint.
    pub is_savepoint: bool,
    /// Trigger time, ms since the epoch.
    pub trigger_timestamp: i64,
    /// Ms from the trigger to the commit (or the failure).
    pub end_to_end_duration: u64,
    /// Bytes of every state file it refers to.
    pub state_size: u64,
    /// Bytes it wrote itself (an incremental checkpoint's own part).
    pub checkpointed_size: u64,
    /// Subtasks that acknowledged it.
    pub num_acknowledged_subtasks: usize,
    /// Why it failed.
    pub failure_message: Option<String>,
    /// Per subtask.
    pub subtasks: Vec<SubtaskCheckpoint>,
    /// Per operator (by uid): bytes of its state over all subtasks.
    pub operators: BTreeMap<String, u64>,
}

/// One failure of a job.
#[derive(Debug, Clone, Serialize)]
pub struct ExceptionEntry {
    /// When, ms since the epoch.
    pub timestamp: u64,
    /// What.
    pub exception: String,
    /// The subtask it came from, when one did (`vertex (i/p)`).
    pub task_name: Option<String>,
    /// The worker it ran on.
    pub location: Option<String>,
    /// The deployment attempt.
    pub attempt: u32,
}

/// The job graph as the plan endpoint shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanVertex {
    /// Vertex id.
    pub id: usize,
    /// Chain name.
    pub name: String,
    /// Parallelism.
    pub parallelism: usize,
    /// The chained operators, head first.
    pub operators: Vec<String>,
    /// Inputs: upstream vertex and how records are partitioned.
    pub inputs: Vec<PlanInput>,
}

/// One input edge of a plan vertex.
#[derive(Debug, Clone, Serialize)]
pub struct PlanInput {
    /// Upstream vertex id.
    pub id: usize,
    /// `FORWARD`, `HASH(k)`, `REBALANCE`, …
    pub ship_strategy: String,
    /// The side output it carries, if any.
    pub side_output: Option<String>,
}

/// A job's plan, kept after the job graph itself is dropped.
pub fn plan_of(job: &JobGraph) -> Vec<PlanVertex> {
    job.vertices
        .iter()
        .map(|v| PlanVertex {
            id: v.id,
            name: v.name.clone(),
            parallelism: v.parallelism,
            operators: v.nodes.iter().map(|&n| job.nodes[n].name.clone()).collect(),
            inputs: job
                .edges
                .iter()
                .filter(|e| e.target == v.id)
                .map(|e| PlanInput {
                    id: e.source,
                    ship_strategy: e.partitioner.to_string(),
                    side_output: e.tag.clone(),
                })
                .collect(),
        })
        .collect()
}

/// What the coordinator records of a job for its metrics endpoints.
#[derive(Debug, Clone, Default)]
pub struct JobObservations {
    /// When the job last started running.
    pub running_since: Option<Instant>,
    /// When it last restored from a checkpoint, ms since the epoch.
    pub last_restore_ms: Option<u64>,
    /// The newest checkpoints, oldest first.
    pub checkpoints: VecDeque<CheckpointRecord>,
    /// Checkpoints completed / failed since submission.
    pub completed: u64,
    /// Checkpoints failed since submission.
    pub failed: u64,
    /// Failures, oldest first.
    pub exceptions: VecDeque<ExceptionEntry>,
    /// The plan.
    pub plan: Vec<PlanVertex>,
    /// The job's configuration.
    pub config: serde_json::Value,
}

impl JobObservations {
    /// Add a finished (or failed) checkpoint to the history.
    pub fn checkpoint(&mut self, record: CheckpointRecord) {
        match record.status {
            "COMPLETED" => self.completed += 1,
            _ => self.failed += 1,
        }
        if self.checkpoints.len() >= CHECKPOINT_HISTORY {
            self.checkpoints.pop_front();
        }
        self.checkpoints.push_back(record);
    }

    /// Add a failure.
    pub fn exception(&mut self, entry: ExceptionEntry) {
        if self.exceptions.len() >= EXCEPTION_HISTORY {
            self.exceptions.pop_front();
        }
        self.exceptions.push_back(entry);
    }

    /// The newest completed checkpoint.
    pub fn last_completed(&self) -> Option<&CheckpointRecord> {
        self.checkpoints
            .iter()
            .rev()
            .find(|c| c.status == "COMPLETED")
    }
}
