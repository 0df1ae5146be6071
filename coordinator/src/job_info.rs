//! What the coordinator keeps of each worker and job, and a job's own
//! state changes (status, failures, restarts).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use weir_core::cluster::TaskState;
use weir_core::graph::{JobGraph, TaskMetrics};

/// Status of a job, as Flink names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    /// Accepted; tasks being deployed.
    Created,
    /// Every task deployed; some running.
    Running,
    /// Every task finished.
    Finished,
    /// A task failed, a worker was lost, or it could not be scheduled.
    Failed,
    /// Cancellation requested; tasks stopping.
    Cancelling,
    /// A task failed or a worker was lost; the job restarts from its latest
    /// checkpoint after the restart delay.
    Restarting,
    /// Cancelled.
    Canceled,
}

impl JobStatus {
    /// Whether the status is final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Canceled
        )
    }
}

/// A registered worker.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerInfo {
    /// Worker id.
    pub id: String,
    /// Flight endpoint.
    pub address: String,
    /// The worker process this id was given to.
    pub instance: String,
    /// Slots offered.
    pub slots: usize,
    /// Slots held by running jobs.
    pub slots_used: usize,
    /// Declared lost (missed heartbeats).
    pub lost: bool,
    /// Ms since its last heartbeat.
    pub last_heartbeat_ms_ago: u64,
    #[serde(skip)]
    pub(crate) last_seen: Instant,
}

/// One subtask of a job.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskInfo {
    /// Subtask index.
    pub subtask: usize,
    /// State.
    pub state: TaskState,
    /// Worker id.
    pub worker: String,
    /// Worker's Flight endpoint.
    pub address: String,
    /// Why it failed.
    pub error: Option<String>,
    /// Total ms spent waiting on full output channels.
    pub back_pressured_ms: u64,
    /// Ms per second of wall clock spent back-pressured over the last
    /// heartbeat interval (0 – 1000), as Flink's
    /// `backPressuredTimeMsPerSecond`.
    pub back_pressured_time_ms_per_second: u64,
    /// Rows its source has read (source tasks).
    pub source_rows: u64,
    /// Source rows per second over the last heartbeat interval.
    pub source_rows_per_second: u64,
    /// Metrics once finished.
    pub metrics: Option<TaskMetrics>,
    #[serde(skip)]
    pub(crate) sample: Option<(Instant, u64, u64)>,
    /// Live metrics from heartbeats.
    #[serde(skip)]
    pub(crate) live: weir_core::metrics::SubtaskLive,
}

/// One vertex (chain) of a job.
#[derive(Debug, Clone, Serialize)]
pub struct VertexInfo {
    /// Vertex id.
    pub id: usize,
    /// Chain name.
    pub name: String,
    /// Parallelism.
    pub parallelism: usize,
    /// Subtasks.
    pub subtasks: Vec<SubtaskInfo>,
}

/// Where a job's Flight sink is served.
#[derive(Debug, Clone, Serialize)]
pub struct FlightSinkInfo {
    /// The sink's name (its Flight descriptor path).
    pub name: String,
    /// Flight endpoints of the workers holding its subtasks.
    pub endpoints: Vec<String>,
}

/// A job known to the coordinator.
#[derive(Debug, Clone, Serialize)]
pub struct JobInfo {
    /// Job id.
    pub id: String,
    /// Job name.
    pub name: String,
    /// Status.
    pub status: JobStatus,
    /// Why it failed.
    pub failure: Option<String>,
    /// Slots the job holds (its largest parallelism).
    pub slots: usize,
    /// Submission time, ms since the epoch.
    pub submitted_at_ms: u64,
    /// Time it reached a final status.
    pub ended_at_ms: Option<u64>,
    /// Vertices with their subtasks.
    pub vertices: Vec<VertexInfo>,
    /// Status changes with their causes, oldest first.
    pub history: Vec<String>,
    /// Flight sinks clients can read: name and the worker endpoints serving
    /// its subtasks (read each with `list_flights` / `do_get`).
    pub flight_sinks: Vec<FlightSinkInfo>,
    /// Deployment attempt (0, then one more per restart).
    pub attempt: u32,
    /// Restarts so far.
    pub restarts: u32,
    /// Where the job's checkpoints go (when it checkpoints).
    pub checkpoint_dir: Option<String>,
    /// Completed checkpoints, in order.
    pub checkpoints: Vec<u64>,
    /// Checkpoints abandoned (declined by a task or timed out).
    pub checkpoints_declined: u64,
    /// Completed savepoints (folders to resume from).
    pub savepoints: Vec<String>,
    #[serde(skip)]
    pub(crate) initial_restore: Option<weir_core::cluster::RestorePoint>,
    #[serde(skip)]
    pub(crate) allow_non_restored_state: bool,
    #[serde(skip)]
    pub(crate) savepoint_request: Option<crate::checkpoints::SavepointRequest>,
    #[serde(skip)]
    pub(crate) stopped_with: Option<String>,
    #[serde(skip)]
    pub(crate) failure_times: Vec<Instant>,
    #[serde(skip)]
    pub(crate) declined_in_a_row: u32,
    #[serde(skip)]
    pub(crate) last_checkpoint_end: Option<Instant>,
    #[serde(skip)]
    pub(crate) graph: Option<JobGraph>,
    #[serde(skip)]
    pub(crate) failed_at: Option<Instant>,
    /// The failure recorded is a symptom (a closed channel next to the
    /// failing task); the cause replaces it when its report arrives.
    #[serde(skip)]
    pub(crate) failure_is_symptom: bool,
    #[serde(skip)]
    pub(crate) slots_held: bool,
    /// The checkpoint under way: `{"id", "acknowledged", "started_ms_ago"}`.
    #[serde(rename = "checkpoint_in_progress", serialize_with = "in_progress")]
    pub(crate) pending: Option<crate::checkpoints::PendingCheckpoint>,
    #[serde(skip)]
    pub(crate) next_checkpoint: u64,
    #[serde(skip)]
    pub(crate) last_trigger: Option<Instant>,
    #[serde(skip)]
    pub(crate) restart_at: Option<Instant>,
    #[serde(skip)]
    pub(crate) storage: Option<weir_state::CheckpointStorage>,
    /// Checkpoint history, exceptions, plan, restore time.
    #[serde(skip)]
    pub(crate) observed: crate::metrics::JobObservations,
}

impl JobInfo {
    pub(crate) fn tasks(&self) -> impl Iterator<Item = &SubtaskInfo> {
        self.vertices.iter().flat_map(|v| &v.subtasks)
    }

    pub(crate) fn worker_addresses(&self) -> Vec<String> {
        let mut addrs: Vec<String> = self.tasks().map(|t| t.address.clone()).collect();
        addrs.sort();
        addrs.dedup();
        addrs
    }

    pub(crate) fn set_status(&mut self, status: JobStatus, why: &str) {
        self.status = status;
        if status == JobStatus::Running {
            self.observed.running_since = Some(Instant::now());
        }
        self.record(format!("{} {status:?}: {why}", now_ms()));
        if status.is_terminal() {
            self.ended_at_ms = Some(now_ms());
            let incremental = self
                .graph
                .as_ref()
                .is_some_and(|g| g.config.checkpoint_incremental);
            if let (true, Some(storage)) = (incremental, self.storage.clone())
                && let Ok(runtime) = tokio::runtime::Handle::try_current()
            {
                // Shared files of a checkpoint the end cut short.
                runtime.spawn(async move {
                    if let Err(e) = storage.clean_up_after_job().await {
                        tracing::warn!("checkpoint clean-up: {e}");
                    }
                });
            }
            self.graph = None;
        }
    }

    /// Add to the job's history, keeping its first entry (the submission)
    /// and the newest [`crate::jobs::HISTORY_ENTRIES`] after it; long texts are cut.
    pub(crate) fn record(&mut self, entry: String) {
        if self.history.len() > crate::jobs::HISTORY_ENTRIES {
            self.history.remove(1);
        }
        self.history.push(bounded_text(entry));
    }

    pub(crate) fn fail(&mut self, cause: String) {
        if self.status.is_terminal() {
            return;
        }
        let cause = bounded_text(cause);
        self.note_failure(&cause);
        self.failure = Some(cause.clone());
        self.failed_at = Some(Instant::now());
        self.pending = None;
        self.set_status(JobStatus::Failed, &cause);
    }

    /// Record a failure in the exception history: of subtask `task` on
    /// `location` when one failed, else of the job.
    pub(crate) fn exception(&mut self, text: String, task: Option<String>, location: Option<&str>) {
        self.observed.exception(crate::metrics::ExceptionEntry {
            timestamp: now_ms(),
            exception: bounded_text(text),
            task_name: task,
            location: location.map(str::to_string),
            attempt: self.attempt,
        });
    }

    /// Record a failure that no task reported just now (a lost worker,
    /// failed checkpoints) in the exception history.
    fn note_failure(&mut self, cause: &str) {
        let now = now_ms();
        if self
            .observed
            .exceptions
            .back()
            .is_some_and(|e| now.saturating_sub(e.timestamp) < 100 && e.attempt == self.attempt)
        {
            return;
        }
        self.exception(cause.to_string(), None, None);
    }

    /// A failure: restart from the latest checkpoint when the job
    /// checkpoints and has restarts left, else fail.
    pub(crate) fn fail_or_restart(&mut self, cause: String) {
        if self.status.is_terminal() || self.status == JobStatus::Restarting {
            return;
        }
        self.failure_times.push(Instant::now());
        let delay = self.graph.as_ref().and_then(|g| {
            g.config.checkpoint_interval?;
            g.config.restart_delay_after(&self.failure_times)
        });
        let Some(delay) = delay else {
            return self.fail(cause);
        };
        let cause = bounded_text(cause);
        self.note_failure(&cause);
        self.failure = Some(cause.clone());
        self.failed_at = Some(Instant::now());
        self.pending = None;
        self.restarts += 1;
        self.restart_at = Some(Instant::now() + delay);
        let from = match self.checkpoints.last() {
            Some(id) => format!("checkpoint {id}"),
            None => "the beginning (no checkpoint completed)".into(),
        };
        self.set_status(
            JobStatus::Restarting,
            &format!("{cause}; restart {} from {from}", self.restarts),
        );
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Longest failure or history text kept, in bytes; a failure message that
/// quotes a huge input is cut, saying how much was left out.
const TEXT_LIMIT: usize = 8192;

pub(crate) fn bounded_text(mut text: String) -> String {
    if text.len() > TEXT_LIMIT {
        let mut end = TEXT_LIMIT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = text.len() - end;
        text.truncate(end);
        text.push_str(&format!("… ({cut} more bytes)"));
    }
    text
}

fn in_progress<S: serde::Serializer>(
    pending: &Option<crate::checkpoints::PendingCheckpoint>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    use serde::Serialize;
    pending
        .as_ref()
        .map(|p| {
            serde_json::json!({
                "id": p.id,
                "savepoint": p.savepoint.is_some(),
                "acknowledged": p.acks.len(),
                "started_ms_ago": p.started.elapsed().as_millis() as u64,
            })
        })
        .serialize(serializer)
}

impl JobInfo {
    /// A job just accepted (status CREATED), needing `slots` slots.
    pub(crate) fn new(id: String, name: String, slots: usize, attempt: u32) -> Self {
        JobInfo {
            id,
            name,
            status: JobStatus::Created,
            failure: None,
            slots,
            submitted_at_ms: now_ms(),
            ended_at_ms: None,
            vertices: vec![],
            history: vec![format!("{} CREATED: submitted", now_ms())],
            flight_sinks: vec![],
            attempt,
            restarts: 0,
            checkpoint_dir: None,
            checkpoints: vec![],
            checkpoints_declined: 0,
            savepoints: vec![],
            initial_restore: None,
            allow_non_restored_state: false,
            savepoint_request: None,
            stopped_with: None,
            failure_times: vec![],
            declined_in_a_row: 0,
            last_checkpoint_end: None,
            graph: None,
            failed_at: None,
            failure_is_symptom: false,
            slots_held: false,
            pending: None,
            next_checkpoint: 1,
            last_trigger: None,
            restart_at: None,
            storage: None,
            observed: Default::default(),
        }
    }
}
