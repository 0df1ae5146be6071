//! The control protocol between the coordinator and its workers.
//!
//! Every call is a Flight action (`do_action`) whose body is one of these
//! messages as JSON; the reply body is JSON too. Workers call the
//! coordinator with [`REGISTER`], [`HEARTBEAT`] and [`TASK_UPDATE`]; the
//! coordinator calls workers with [`DEPLOY`] and [`CANCEL`].

use serde::{Deserialize, Serialize};

use crate::graph::{JobGraph, TaskMetrics};

/// Worker → coordinator: offer slots.
pub const REGISTER: &str = "register";
/// Worker → coordinator: still alive; the states of its tasks.
pub const HEARTBEAT: &str = "heartbeat";
/// Worker → coordinator: a task changed state.
pub const TASK_UPDATE: &str = "task_update";
/// Coordinator → worker: run these subtasks of a job.
pub const DEPLOY: &str = "deploy";
/// Coordinator → worker: stop a job's tasks.
pub const CANCEL: &str = "cancel";
/// Coordinator → worker: are you alive?
pub const PING: &str = "ping";
/// Coordinator → worker: inject a checkpoint barrier at the job's sources.
pub const TRIGGER_CHECKPOINT: &str = "trigger_checkpoint";
/// Coordinator → worker: a checkpoint completed (sinks publish).
pub const CHECKPOINT_COMPLETE: &str = "checkpoint_complete";
/// Worker → coordinator: a subtask's snapshot is written (or declined).
pub const CHECKPOINT_ACK: &str = "checkpoint_ack";

/// States of a subtask, as Flink names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// Known to the coordinator, not yet placed.
    Created,
    /// Sent to a worker.
    Deploying,
    /// Running on its worker.
    Running,
    /// Ended after its input ended.
    Finished,
    /// Ended with an error.
    Failed,
    /// Stopped by a cancellation.
    Canceled,
}

impl TaskState {
    /// Whether the state is final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Finished | TaskState::Failed | TaskState::Canceled
        )
    }
}

/// A worker's registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterWorker {
    /// Where the worker's Flight endpoint listens (`host:port`).
    pub address: String,
    /// Number of task slots it offers.
    pub slots: usize,
    /// The worker process's own id ([`new_instance_id`]): a coordinator
    /// that restarted hands out worker ids again, so a heartbeat must show
    /// it comes from the process the id was given to.
    #[serde(default)]
    pub instance: String,
}

/// An id for this process that no other process (here or on another
/// machine, before or after) has: the host name, the process id and the
/// time it was made, to the nanosecond.
pub fn new_instance_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    format!("{host}-{}-{nanos:x}", std::process::id())
}

/// The coordinator's answer to a registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registered {
    /// The id the worker reports under.
    pub worker_id: String,
    /// How often to send heartbeats, in ms.
    pub heartbeat_interval_ms: u64,
}

/// One subtask's state as a worker sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskReport {
    /// Job id.
    pub job_id: String,
    /// Job vertex.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// Current state.
    pub state: TaskState,
    /// Why it failed.
    pub error: Option<String>,
    /// Whether `error` only echoes a failure elsewhere (a channel whose
    /// other end went away); the coordinator reports the cause instead.
    #[serde(default)]
    pub symptom: bool,
    /// Total ms the task has waited for room in full output channels.
    pub back_pressured_ms: u64,
    /// Rows its source has read so far (source tasks).
    #[serde(default)]
    pub source_rows: u64,
    /// Live metrics (heartbeats of a running task; state-change pushes
    /// carry none).
    #[serde(default)]
    pub live: Option<crate::metrics::TaskSample>,
    /// The deployment attempt the task belongs to (0, then one per restart).
    #[serde(default)]
    pub attempt: u32,
    /// Metrics, once it ended.
    pub metrics: Option<TaskMetrics>,
}

/// A worker's heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The worker.
    pub worker_id: String,
    /// The worker process ([`RegisterWorker::instance`]).
    #[serde(default)]
    pub instance: String,
    /// Every task it holds.
    pub tasks: Vec<TaskReport>,
}

/// The coordinator's answer to a heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// False when the coordinator does not know (or has given up on) this
    /// worker: it must stop its tasks and register again.
    pub known: bool,
}

/// A task update pushed as it happens (heartbeats repeat it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskUpdate {
    /// The worker.
    pub worker_id: String,
    /// The worker process ([`RegisterWorker::instance`]).
    #[serde(default)]
    pub instance: String,
    /// The task.
    pub report: TaskReport,
}

/// Run the subtasks `placement` assigns to `address` of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deploy {
    /// Job id.
    pub job_id: String,
    /// The job.
    pub job: JobGraph,
    /// Worker address of every subtask: `placement[vertex][subtask]`.
    pub placement: Vec<Vec<String>>,
    /// The receiving worker's address as placed.
    pub address: String,
    /// Deployment attempt: 0, then one more per restart.
    #[serde(default)]
    pub attempt: u32,
    /// Checkpointing of the job, when it checkpoints.
    #[serde(default)]
    pub checkpoints: Option<DeployCheckpoints>,
}

/// Where a deployed job's checkpoints go and which one to restore.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeployCheckpoints {
    /// The job's checkpoint storage (a URL every worker can reach).
    pub dir: String,
    /// Restore from this completed checkpoint or savepoint.
    pub restore: Option<RestorePoint>,
    /// Ignore state of operators the job no longer has.
    #[serde(default)]
    pub allow_non_restored_state: bool,
}

/// A completed checkpoint: the storage holding it and its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestorePoint {
    /// Checkpoint storage (the folder holding `chk-{id}`).
    pub dir: String,
    /// Checkpoint id.
    pub id: u64,
}

/// Trigger checkpoint `checkpoint_id` of a job's attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriggerCheckpoint {
    /// Job id.
    pub job_id: String,
    /// Attempt.
    pub attempt: u32,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Trigger time, ms since the epoch.
    pub timestamp: i64,
    /// For a savepoint: the storage its files go to (else the job's own).
    #[serde(default)]
    pub savepoint_dir: Option<String>,
    /// An unaligned checkpoint (savepoints are always aligned).
    #[serde(default)]
    pub unaligned: bool,
    /// A savepoint that drains the job first (`stop --drain`).
    #[serde(default)]
    pub drain: bool,
    /// A savepoint the job stops with: sources read no more after it.
    #[serde(default)]
    pub stop: bool,
}

/// Checkpoint `checkpoint_id` of a job's attempt completed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointComplete {
    /// Job id.
    pub job_id: String,
    /// Attempt.
    pub attempt: u32,
    /// Checkpoint id.
    pub checkpoint_id: u64,
}

/// A subtask's checkpoint answer, its files already written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointAckMessage {
    /// The worker.
    pub worker_id: String,
    /// Job id.
    pub job_id: String,
    /// Attempt.
    pub attempt: u32,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// The subtask's state handles, or why it declined.
    pub result: std::result::Result<crate::checkpoint::SubtaskHandle, String>,
    /// How long the subtask's barrier took to align, in ms.
    #[serde(default)]
    pub alignment_ms: Option<u64>,
}

/// Stop a job's tasks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cancel {
    /// Job id.
    pub job_id: String,
}
