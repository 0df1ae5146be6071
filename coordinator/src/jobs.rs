//! Cluster state: the ResourceManager's workers and the JobMasters' jobs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weir_core::WeirError;
use weir_core::cluster::{self, Deploy, RegisterWorker, Registered, TaskReport, TaskState};
use weir_core::graph::{JobGraph, StreamNodeKind};
use weir_flight::{Credentials, call_action};

pub use crate::job_info::{
    FlightSinkInfo, JobInfo, JobStatus, SubtaskInfo, VertexInfo, WorkerInfo,
};
use crate::job_info::{bounded_text, now_ms};
pub use crate::workers::{heartbeat, monitor_heartbeats, task_update};
use crate::workers::{probe_workers, send_cancels};

/// Workers and jobs.
pub struct ClusterState {
    pub(crate) credentials: Credentials,
    pub(crate) heartbeat_interval: Duration,
    heartbeat_timeout: Duration,
    pub(crate) workers: BTreeMap<String, WorkerInfo>,
    jobs: BTreeMap<String, JobInfo>,
    /// Finished jobs kept for `GET /v1/jobs` (Flink's
    /// `jobs.history.max-size`): the oldest are forgotten beyond it.
    pub(crate) history_max: usize,
    /// What submitted jobs' connectors are checked against.
    pub(crate) connectors: Option<Arc<dyn weir_core::connector::ConnectorPlanner>>,
    /// The SQL front end for `POST /v1/sql`.
    pub(crate) sql: Option<crate::web::SqlCompiler>,
    next_worker: u64,
    next_job: u64,
    /// With an HA folder: this coordinator's standing in the election.
    pub(crate) leadership: Option<Arc<crate::leader::Leadership>>,
    /// With an HA folder, once it leads: the jobs (id, name) its store
    /// listed as running, being run again.
    pub(crate) recovered: Option<Vec<(String, String)>>,
}

/// Lock the state, whatever a panicking holder left.
pub fn lock(state: &Mutex<ClusterState>) -> MutexGuard<'_, ClusterState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a submission was refused.
#[derive(Debug)]
pub enum SubmitError {
    /// The job graph is malformed or cannot run.
    Invalid(WeirError),
    /// Not enough free slots; the job is recorded as FAILED.
    InsufficientSlots {
        /// The failed job's id.
        job_id: String,
        /// The reason, with the numbers.
        message: String,
    },
}

impl ClusterState {
    /// Empty state.
    pub fn new(
        credentials: Credentials,
        heartbeat_interval: Duration,
        heartbeat_timeout: Duration,
    ) -> Self {
        Self {
            credentials,
            heartbeat_interval,
            heartbeat_timeout,
            workers: BTreeMap::new(),
            jobs: BTreeMap::new(),
            history_max: DEFAULT_JOBS_HISTORY_MAX,
            connectors: None,
            sql: None,
            next_worker: 1,
            next_job: 1,
            leadership: None,
            recovered: None,
        }
    }

    /// Add a worker; its id is returned.
    pub fn register_worker(&mut self, r: RegisterWorker) -> Registered {
        // A restarted worker on the same address, or the same process
        // registering again, replaces the old entry.
        let stale: Vec<String> = self
            .workers
            .values()
            .filter(|w| {
                w.address == r.address || (!r.instance.is_empty() && w.instance == r.instance)
            })
            .map(|w| w.id.clone())
            .collect();
        for id in stale {
            self.workers.remove(&id);
        }
        let id = format!("worker-{}", self.next_worker);
        self.next_worker += 1;
        tracing::info!("{id} registered from {} with {} slots", r.address, r.slots);
        self.workers.insert(
            id.clone(),
            WorkerInfo {
                id: id.clone(),
                address: r.address,
                instance: r.instance,
                slots: r.slots,
                slots_used: 0,
                lost: false,
                last_heartbeat_ms_ago: 0,
                last_seen: Instant::now(),
            },
        );
        Registered {
            worker_id: id,
            heartbeat_interval_ms: self.heartbeat_interval.as_millis() as u64,
        }
    }

    /// The cluster's credentials, for calls made without the lock.
    pub(crate) fn credentials(&self) -> Credentials {
        self.credentials.clone()
    }

    /// Every job id.
    pub(crate) fn job_ids(&self) -> Vec<String> {
        self.jobs.keys().cloned().collect()
    }

    /// One job, to change.
    pub(crate) fn job_mut(&mut self, id: &str) -> Option<&mut JobInfo> {
        self.jobs.get_mut(id)
    }

    /// Deploy the next attempt of a restarting job.
    pub(crate) fn place_next_attempt(
        &mut self,
        id: &str,
    ) -> std::result::Result<Vec<(String, Deploy)>, String> {
        let deploys = self.place(id)?;
        let job = self.jobs.get_mut(id).expect("placed");
        job.attempt += 1;
        job.restart_at = None;
        job.last_trigger = None;
        let attempt = job.attempt;
        job.set_status(JobStatus::Created, &format!("attempt {attempt} deployed"));
        Ok(deploys
            .into_iter()
            .map(|(a, mut d)| {
                d.attempt = attempt;
                (a, d)
            })
            .collect())
    }

    /// Forget the oldest finished jobs beyond `history_max`; running jobs
    /// are always kept.
    fn forget_old_jobs(&mut self) {
        let finished: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.status.is_terminal())
            .map(|j| j.id.clone())
            .collect();
        let excess = (finished.len() + 1).saturating_sub(self.history_max.max(1));
        for id in finished.into_iter().take(excess) {
            self.jobs.remove(&id);
        }
    }

    /// Fail a job for good, releasing its slots.
    /// A restarted attempt could not be deployed: it fails, restarting
    /// again if restarts are left. Returns the workers of the attempt, to
    /// cancel what was deployed.
    pub(crate) fn redeployment_failed(&mut self, id: &str, cause: String) -> Vec<String> {
        let Some(job) = self.jobs.get_mut(id) else {
            return vec![];
        };
        if job.status.is_terminal() || job.status == JobStatus::Restarting {
            return vec![];
        }
        job.fail_or_restart(cause);
        let workers = job.worker_addresses();
        if job.status.is_terminal() {
            self.release_slots(id);
        }
        workers
    }

    pub(crate) fn job_failed(&mut self, id: &str, cause: String) {
        if let Some(job) = self.jobs.get_mut(id) {
            job.fail(cause);
        }
        self.release_slots(id);
    }

    /// Registered workers (lost ones included, marked).
    pub fn workers(&self) -> Vec<WorkerInfo> {
        self.workers
            .values()
            .map(|w| WorkerInfo {
                last_heartbeat_ms_ago: w.last_seen.elapsed().as_millis() as u64,
                ..w.clone()
            })
            .collect()
    }

    /// Every job, newest last.
    pub fn jobs(&self) -> Vec<JobInfo> {
        self.jobs.values().cloned().collect()
    }

    /// A job, borrowed.
    pub(crate) fn job_ref(&self, id: &str) -> Option<&JobInfo> {
        self.jobs.get(id)
    }

    /// Every job, borrowed.
    pub(crate) fn job_refs(&self) -> impl Iterator<Item = &JobInfo> {
        self.jobs.values()
    }

    /// One job.
    pub fn job(&self, id: &str) -> Option<JobInfo> {
        self.jobs.get(id).cloned()
    }

    /// A job's status (without copying its details).
    pub fn job_status(&self, id: &str) -> Option<JobStatus> {
        self.jobs.get(id).map(|j| j.status)
    }

    /// Whether this coordinator may act on its jobs and workers: always,
    /// but with an HA folder only while it leads within its lease.
    pub(crate) fn may_act(&self) -> bool {
        self.leadership.as_ref().is_none_or(|l| l.may_act())
    }

    /// Free slots over the live workers.
    pub(crate) fn free_slots_total(&self) -> usize {
        self.free_slots().iter().map(|(_, n)| n).sum()
    }

    /// A running job's graph.
    pub(crate) fn job_graph(&self, id: &str) -> Option<&JobGraph> {
        self.jobs.get(id)?.graph.as_ref()
    }

    /// Where a job started from (a savepoint's `chk-N` folder), if anywhere.
    pub(crate) fn initial_restore(&self, id: &str) -> Option<String> {
        let point = self.jobs.get(id)?.initial_restore.as_ref()?;
        Some(format!(
            "{}/chk-{}",
            point.dir.trim_end_matches('/'),
            point.id
        ))
    }

    /// A job that ended under an earlier coordinator, as the job store
    /// recorded it (listed, not run; one this coordinator knows wins).
    pub(crate) fn add_ended(&mut self, stored: &crate::job_store::StoredJob) {
        if self.jobs.contains_key(&stored.id) {
            return;
        }
        let status = match stored.status.as_str() {
            "FINISHED" => JobStatus::Finished,
            "CANCELED" => JobStatus::Canceled,
            _ => JobStatus::Failed,
        };
        let mut info = JobInfo::new(stored.id.clone(), stored.name.clone(), 0, stored.attempt);
        info.status = status;
        info.failure = stored.failure.clone();
        info.submitted_at_ms = stored.submitted_at_ms;
        info.ended_at_ms = stored.ended_at_ms;
        info.history = vec![format!(
            "{} {}: as recorded in the HA folder's job store",
            stored.ended_at_ms.unwrap_or(stored.submitted_at_ms),
            stored.status
        )];
        self.jobs.insert(stored.id.clone(), info);
    }

    /// With an HA folder: `None` until it leads and has read its job
    /// store, then the jobs (id, name) the store listed as running, which
    /// it runs again.
    pub fn recovered_jobs(&self) -> Option<Vec<(String, String)>> {
        self.recovered.clone()
    }

    /// New job ids go on after `job-{n}` (ids a job store holds).
    pub(crate) fn continue_job_ids_after(&mut self, n: u64) {
        self.next_job = self.next_job.max(n + 1);
    }

    fn free_slots(&self) -> Vec<(String, usize)> {
        self.workers
            .values()
            .filter(|w| !w.lost)
            .map(|w| (w.id.clone(), w.slots - w.slots_used.min(w.slots)))
            .collect()
    }

    /// Accept a job: claim its slots round-robin over the workers and
    /// record its placement. Returns the deployments to send.
    pub fn submit(
        &mut self,
        job: JobGraph,
        restore: Option<(weir_core::cluster::RestorePoint, bool)>,
    ) -> std::result::Result<(String, Vec<(String, Deploy)>), SubmitError> {
        self.submit_as(job, restore, None)
    }

    /// [`Self::submit`] as `(id, attempt)` when given (a job recovered
    /// from the job store keeps its id, and its attempts go on after the
    /// one that ran: workers may still be stopping that one), else the next
    /// id's first attempt.
    pub fn submit_as(
        &mut self,
        job: JobGraph,
        restore: Option<(weir_core::cluster::RestorePoint, bool)>,
        recovered: Option<(String, u32)>,
    ) -> std::result::Result<(String, Vec<(String, Deploy)>), SubmitError> {
        job.validate().map_err(SubmitError::Invalid)?;
        self.forget_old_jobs();
        let (id, attempt) = match recovered {
            Some(recovered) => recovered,
            None => {
                self.next_job += 1;
                (format!("job-{:04}", self.next_job - 1), 0)
            }
        };
        let needed = job
            .vertices
            .iter()
            .map(|v| v.parallelism)
            .max()
            .unwrap_or(1);
        let mut info = JobInfo::new(id.clone(), job.job_name.clone(), needed, attempt);
        info.observed = crate::metrics::JobObservations {
            plan: crate::metrics::plan_of(&job),
            config: serde_json::to_value(&job.config).unwrap_or_default(),
            ..Default::default()
        };
        if job.config.runtime_mode == weir_core::config::RuntimeMode::Streaming {
            let base = job.config.checkpoint_dir.clone().unwrap_or_else(|| {
                std::env::temp_dir()
                    .join("weir-checkpoints")
                    .display()
                    .to_string()
            });
            let dir = format!("{}/{id}-{}", base.trim_end_matches('/'), now_ms());
            info.storage =
                Some(weir_state::CheckpointStorage::open(&dir).map_err(SubmitError::Invalid)?);
            info.checkpoint_dir = Some(dir);
        }
        if let Some((point, allow)) = restore {
            info.record(format!(
                "{} restoring savepoint {} (checkpoint {})",
                now_ms(),
                point.dir,
                point.id
            ));
            info.initial_restore = Some(point);
            info.allow_non_restored_state = allow;
        }
        info.graph = Some(job);
        self.jobs.insert(id.clone(), info);
        let deploys = self.place(&id).map_err(|message| {
            // Recorded as FAILED, with both numbers, and refused; its
            // checkpoint folder, made a moment ago and empty, goes.
            if let Some(dir) = self.jobs.get(&id).and_then(|j| j.checkpoint_dir.clone())
                && !dir.contains("://")
            {
                let _ = std::fs::remove_dir(&dir);
            }
            self.job_failed(&id, message.clone());
            SubmitError::InsufficientSlots {
                job_id: id.clone(),
                message,
            }
        })?;
        Ok((id, deploys))
    }

    /// Claim slots for the job's current attempt (slot i holds subtask i of
    /// every vertex; slots go round-robin over the live workers) and build
    /// its deployments. Errors name the slots missing.
    pub(crate) fn place(&mut self, id: &str) -> std::result::Result<Vec<(String, Deploy)>, String> {
        let Some(info) = self.jobs.get(id) else {
            return Err(format!("no job '{id}'"));
        };
        let Some(job) = info.graph.clone() else {
            return Err(format!("job '{id}' has ended"));
        };
        let needed = info.slots;
        let mut free = self.free_slots();
        let available: usize = free.iter().map(|(_, n)| n).sum();
        if available < needed {
            return Err(format!(
                "job '{}' needs {needed} slots (its largest parallelism) but the cluster has \
                 {available} free ({} live workers)",
                job.job_name,
                free.len()
            ));
        }
        let mut slot_worker = Vec::with_capacity(needed);
        let mut i = 0;
        let workers = free.len();
        while slot_worker.len() < needed {
            let (wid, n) = &mut free[i % workers];
            if *n > 0 {
                *n -= 1;
                slot_worker.push(wid.clone());
            }
            i += 1;
        }
        for w in &slot_worker {
            if let Some(worker) = self.workers.get_mut(w) {
                worker.slots_used += 1;
            }
        }
        let addresses: Vec<String> = slot_worker
            .iter()
            .map(|w| self.workers[w].address.clone())
            .collect();
        let placement: Vec<Vec<String>> = job
            .vertices
            .iter()
            .map(|v| (0..v.parallelism).map(|s| addresses[s].clone()).collect())
            .collect();
        let info = self.jobs.get_mut(id).expect("checked above");
        info.slots_held = true;
        info.flight_sinks = job
            .vertices
            .iter()
            .flat_map(|v| v.nodes.iter().map(move |&n| (v.id, n)))
            .filter_map(|(v, n)| match &job.nodes[n].kind {
                StreamNodeKind::Sink(sink) => {
                    let name = weir_flight::connector::flight_sink_name(sink, &job.nodes[n].name)?;
                    let mut endpoints = placement[v].clone();
                    endpoints.sort();
                    endpoints.dedup();
                    Some(FlightSinkInfo { name, endpoints })
                }
                _ => None,
            })
            .collect();
        info.vertices = job
            .vertices
            .iter()
            .map(|v| VertexInfo {
                id: v.id,
                name: bounded_text(v.name.clone()),
                parallelism: v.parallelism,
                subtasks: (0..v.parallelism)
                    .map(|s| SubtaskInfo {
                        subtask: s,
                        state: TaskState::Deploying,
                        worker: slot_worker[s].clone(),
                        address: addresses[s].clone(),
                        error: None,
                        back_pressured_ms: 0,
                        back_pressured_time_ms_per_second: 0,
                        source_rows: 0,
                        source_rows_per_second: 0,
                        metrics: None,
                        sample: None,
                        live: Default::default(),
                    })
                    .collect(),
            })
            .collect();
        let restore = match (&info.checkpoint_dir, info.checkpoints.last()) {
            (Some(dir), Some(&id)) => Some(weir_core::cluster::RestorePoint {
                dir: dir.clone(),
                id,
            }),
            _ => info.initial_restore.clone(),
        };
        if restore.is_some() {
            info.observed.last_restore_ms = Some(now_ms());
        }
        let checkpoints =
            info.checkpoint_dir
                .clone()
                .map(|dir| weir_core::cluster::DeployCheckpoints {
                    dir,
                    restore,
                    allow_non_restored_state: info.allow_non_restored_state,
                });
        let attempt = info.attempt;
        let deploys = info
            .worker_addresses()
            .into_iter()
            .map(|addr| {
                (
                    addr.clone(),
                    Deploy {
                        job_id: id.to_string(),
                        job: job.clone(),
                        placement: placement.clone(),
                        address: addr,
                        attempt,
                        checkpoints: checkpoints.clone(),
                    },
                )
            })
            .collect();
        Ok(deploys)
    }

    pub(crate) fn release_slots(&mut self, job_id: &str) {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        if !std::mem::take(&mut job.slots_held) {
            return;
        }
        // Slot sharing: one slot per (worker, subtask index).
        let slots: std::collections::BTreeSet<(String, usize)> = self.jobs[job_id]
            .tasks()
            .map(|t| (t.worker.clone(), t.subtask))
            .collect();
        for (worker, _) in slots {
            if let Some(w) = self.workers.get_mut(&worker) {
                w.slots_used = w.slots_used.saturating_sub(1);
            }
        }
    }

    /// Apply a task report; returns the workers to send a cancel to when
    /// the job just failed.
    pub(crate) fn apply_report(&mut self, worker_id: &str, r: &TaskReport) -> Vec<String> {
        let Some(job) = self.jobs.get_mut(&r.job_id) else {
            return vec![];
        };
        let Some(task) = job
            .vertices
            .get_mut(r.vertex)
            .and_then(|v| v.subtasks.get_mut(r.subtask))
        else {
            return vec![];
        };
        if task.worker != worker_id || r.attempt != job.attempt {
            return vec![];
        }
        if let Some(sample) = &r.live {
            task.live.absorb(sample.clone());
        }
        let now = Instant::now();
        // Live reports (heartbeats) carry the counters; state-change
        // pushes carry zeros and are not samples.
        let live = r.back_pressured_ms > 0 || r.source_rows > 0;
        match task.sample {
            Some((at, ms, rows)) if live => {
                let elapsed = now.duration_since(at).as_millis() as u64;
                if elapsed >= 100 && r.back_pressured_ms >= ms && r.source_rows >= rows {
                    task.back_pressured_time_ms_per_second =
                        ((r.back_pressured_ms - ms) * 1000 / elapsed).min(1000);
                    task.source_rows_per_second = (r.source_rows - rows) * 1000 / elapsed;
                    task.sample = Some((now, r.back_pressured_ms, r.source_rows));
                }
            }
            None if live => task.sample = Some((now, r.back_pressured_ms, r.source_rows)),
            _ => {}
        }
        task.back_pressured_ms = task.back_pressured_ms.max(r.back_pressured_ms);
        task.source_rows = task.source_rows.max(r.source_rows);
        // Terminal states are final; reports may arrive out of order.
        if !task.state.is_terminal() {
            task.state = r.state;
            task.error = r.error.clone();
            if r.metrics.is_some() {
                task.metrics = r.metrics.clone();
            }
        }
        let vertex_name = job.vertices[r.vertex].name.clone();
        let was_terminal = job.status.is_terminal();
        let mut cancel = vec![];
        let parallelism = job.vertices[r.vertex].parallelism;
        let cause = || {
            format!(
                "task {vertex_name} ({}/{parallelism}) on {worker_id} failed: {}",
                r.subtask + 1,
                r.error.as_deref().unwrap_or("unknown error")
            )
        };
        if r.state == TaskState::Failed
            && !r.symptom
            && job.failure_is_symptom
            && matches!(job.status, JobStatus::Restarting | JobStatus::Failed)
        {
            // The task whose failure the earlier report only echoed.
            let cause = bounded_text(cause());
            let echo = job.failure.replace(cause.clone()).unwrap_or_default();
            job.failure_is_symptom = false;
            job.exception(
                r.error.clone().unwrap_or_default(),
                Some(format!("{vertex_name} ({}/{parallelism})", r.subtask + 1)),
                Some(worker_id),
            );
            job.record(format!("{} earlier symptom: {echo}", now_ms()));
            job.record(format!("{} cause: {cause}", now_ms()));
        } else if job.status == JobStatus::Restarting {
            // The failed attempt's tasks winding down.
        } else if r.state == TaskState::Failed
            && !was_terminal
            && job.status != JobStatus::Cancelling
        {
            let cause = cause();
            job.exception(
                r.error.clone().unwrap_or_default(),
                Some(format!("{vertex_name} ({}/{parallelism})", r.subtask + 1)),
                Some(worker_id),
            );
            job.fail_or_restart(cause);
            job.failure_is_symptom = r.symptom;
            cancel = job.worker_addresses();
        } else if !was_terminal {
            let states: Vec<TaskState> = job.tasks().map(|t| t.state).collect();
            if states.iter().all(|s| *s == TaskState::Finished) {
                job.set_status(JobStatus::Finished, "every task finished");
            } else if job.status == JobStatus::Cancelling && states.iter().all(|s| s.is_terminal())
            {
                match job.stopped_with.clone() {
                    Some(path) => job.set_status(
                        JobStatus::Finished,
                        &format!("stopped with savepoint {path}"),
                    ),
                    None => job.set_status(JobStatus::Canceled, "every task stopped"),
                }
            } else if job.status == JobStatus::Created
                && states
                    .iter()
                    .all(|s| matches!(s, TaskState::Running | TaskState::Finished))
            {
                job.set_status(JobStatus::Running, "every task deployed");
            }
        }
        if !was_terminal && job.status.is_terminal() {
            let id = r.job_id.clone();
            self.release_slots(&id);
        }
        cancel
    }

    /// Request cancellation; returns the workers to tell.
    pub fn cancel(&mut self, job_id: &str) -> Option<Vec<String>> {
        let job = self.jobs.get_mut(job_id)?;
        if job.status.is_terminal() {
            return Some(vec![]);
        }
        job.set_status(JobStatus::Cancelling, "cancellation requested");
        if job.tasks().all(|t| t.state.is_terminal()) {
            job.set_status(JobStatus::Canceled, "no task was running");
        }
        let workers = job.worker_addresses();
        if job.status.is_terminal() {
            self.release_slots(job_id);
        }
        Some(workers)
    }

    /// Workers silent for too long: mark them lost and fail their jobs.
    /// Returns the workers to tell about cancelled jobs.
    pub(crate) fn check_heartbeats(&mut self) -> Vec<(String, String)> {
        let timeout = self.heartbeat_timeout;
        let silent: Vec<String> = self
            .workers
            .values()
            .filter(|w| !w.lost && w.last_seen.elapsed() > timeout)
            .map(|w| w.id.clone())
            .collect();
        let why = format!("no heartbeat for {} ms", timeout.as_millis());
        silent
            .iter()
            .flat_map(|wid| self.declare_lost(wid, &why))
            .collect()
    }

    /// Mark worker `wid` lost and fail every live job with a task on it;
    /// a job that failed moments ago from a broken channel gets the lost
    /// worker as its cause. Returns the workers to tell about cancelled jobs.
    pub(crate) fn declare_lost(&mut self, wid: &str, why: &str) -> Vec<(String, String)> {
        let Some(worker) = self.workers.get_mut(wid).filter(|w| !w.lost) else {
            return vec![];
        };
        worker.lost = true;
        let addr = worker.address.clone();
        let cause = format!("worker {wid} at {addr} was lost: {why}");
        tracing::warn!("{cause}");
        let window = self.heartbeat_timeout * 2;
        let mut cancels = vec![];
        let mut ended = vec![];
        for job in self.jobs.values_mut() {
            if !job.tasks().any(|t| t.worker == wid) {
                continue;
            }
            let recent_echo = matches!(job.status, JobStatus::Failed | JobStatus::Restarting)
                && job.failed_at.is_some_and(|t| t.elapsed() < window)
                && !job
                    .failure
                    .as_deref()
                    .is_some_and(|f| f.contains(" was lost: "));
            if recent_echo {
                // Its tasks elsewhere saw the broken channels first; the
                // lost worker is the cause.
                let echo = job.failure.take().unwrap_or_default();
                job.record(format!("{} earlier symptom: {echo}", now_ms()));
                job.failure = Some(cause.clone());
                job.record(format!("{} cause: {cause}", now_ms()));
                job.exception(cause.clone(), None, Some(&addr));
            } else if !job.status.is_terminal() && job.status != JobStatus::Restarting {
                job.fail_or_restart(cause.clone());
                if job.status.is_terminal() {
                    ended.push(job.id.clone());
                }
                for a in job.worker_addresses() {
                    if a != addr {
                        cancels.push((job.id.clone(), a));
                    }
                }
            }
            for t in job.vertices.iter_mut().flat_map(|v| &mut v.subtasks) {
                if t.worker == wid && !t.state.is_terminal() {
                    t.state = TaskState::Failed;
                    t.error = Some(cause.clone());
                }
            }
        }
        for id in ended {
            self.release_slots(&id);
        }
        cancels
    }

    pub(crate) fn worker_at(&self, addr: &str) -> Option<String> {
        self.workers
            .values()
            .find(|w| w.address == addr && !w.lost)
            .map(|w| w.id.clone())
    }
}

/// Default of `jobs.history.max-size`: finished jobs the coordinator keeps.
pub const DEFAULT_JOBS_HISTORY_MAX: usize = 1000;

/// Status changes kept per job (besides its submission).
pub(crate) const HISTORY_ENTRIES: usize = 200;

/// Submit a job and deploy it; returns its id. Deployment failures fail
/// the job (and cancel what was deployed) with the worker named.
pub async fn submit(
    state: &Arc<Mutex<ClusterState>>,
    job: JobGraph,
    restore: Option<(weir_core::cluster::RestorePoint, bool)>,
) -> std::result::Result<String, SubmitError> {
    submit_as(state, job, restore, None).await
}

/// [`submit`] as `(id, attempt)` when given (a recovered job keeps its id).
pub async fn submit_as(
    state: &Arc<Mutex<ClusterState>>,
    job: JobGraph,
    restore: Option<(weir_core::cluster::RestorePoint, bool)>,
    recovered: Option<(String, u32)>,
) -> std::result::Result<String, SubmitError> {
    let (id, deploys, token) = {
        let mut s = lock(state);
        let (id, deploys) = s.submit_as(job, restore, recovered)?;
        for job in s.jobs.get_mut(&id).into_iter() {
            for t in job.vertices.iter_mut().flat_map(|v| &mut v.subtasks) {
                t.state = TaskState::Deploying;
            }
        }
        (id, deploys, s.credentials.clone())
    };
    let calls = deploys.into_iter().map(|(addr, d)| {
        let token = token.clone();
        async move {
            let body = serde_json::to_vec(&d).map_err(|e| WeirError::plan(e.to_string()))?;
            call_action(&addr, &token, cluster::DEPLOY, body)
                .await
                .map(|_| ())
        }
    });
    let results = futures::future::join_all(calls).await;
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        // As any failure of the job: the restart strategy decides (a
        // worker that cannot be reached is found lost meanwhile).
        let workers = lock(state).redeployment_failed(&id, format!("deployment failed: {e}"));
        probe_workers(state, workers.clone());
        send_cancels(
            token,
            workers.into_iter().map(|a| (id.clone(), a)).collect(),
        );
    }
    Ok(id)
}

/// Cancel a job; `None` when unknown.
pub fn cancel(state: &Arc<Mutex<ClusterState>>, job_id: &str) -> Option<JobStatus> {
    let mut s = lock(state);
    let workers = s.cancel(job_id)?;
    let status = s.jobs.get(job_id).map(|j| j.status)?;
    let token = s.credentials.clone();
    drop(s);
    send_cancels(
        token,
        workers
            .into_iter()
            .map(|a| (job_id.to_string(), a))
            .collect(),
    );
    Some(status)
}

/// Submit a job from its JSON text (REST body).
pub async fn submit_json(
    state: &Arc<Mutex<ClusterState>>,
    text: &str,
    from_savepoint: Option<&str>,
    allow_non_restored_state: bool,
) -> std::result::Result<String, SubmitError> {
    let job = JobGraph::from_json(text).map_err(SubmitError::Invalid)?;
    let connectors = lock(state).connectors.clone();
    if let Some(connectors) = connectors {
        job.check_connectors(connectors.as_ref())
            .map_err(SubmitError::Invalid)?;
    }
    // The job's own `restore_from` applies when the request names none.
    let from_savepoint = from_savepoint.or(job.config.restore_from.as_deref());
    let allow_non_restored_state = allow_non_restored_state || job.config.allow_non_restored_state;
    let restore = match from_savepoint {
        Some(path) => {
            let (storage, id) = weir_state::CheckpointStorage::open_restore_point(path)
                .await
                .map_err(SubmitError::Invalid)?;
            // Read it now: a corrupt manifest is refused at submission.
            storage.manifest(id).await.map_err(SubmitError::Invalid)?;
            Some((
                weir_core::cluster::RestorePoint {
                    // The folder holding chk-N, also when `path` named it.
                    dir: storage.url().to_string(),
                    id,
                },
                allow_non_restored_state,
            ))
        }
        None => None,
    };
    submit(state, job, restore).await
}

/// Where a savepoint goes: a URL (`s3://…`, `file://…`) or an absolute path
/// as given; nothing, `""` or a relative path inside the default savepoint
/// folder (`$TMPDIR/weir-savepoints`), never against the coordinator's
/// working directory or `/`. A path that climbs out with `..` is refused.
pub(crate) fn savepoint_base(dir: Option<&str>) -> std::result::Result<String, String> {
    let default = std::env::temp_dir().join("weir-savepoints");
    let dir = dir.map(str::trim).unwrap_or_default();
    if dir.contains("://") {
        return Ok(dir.to_string());
    }
    let path = std::path::Path::new(dir);
    if path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!(
            "savepoint folder '{dir}' climbs out with '..'; give an absolute path or one inside {}",
            default.display()
        ));
    }
    let resolved = if path.is_absolute() {
        path.to_path_buf()
    } else {
        default.join(path)
    };
    Ok(resolved.display().to_string())
}

/// Ask for a savepoint of a running job into a new folder under `dir`
/// (resolved by [`savepoint_base`]); with `stop`, the job ends once it is
/// taken. Returns the folder, an absolute path or URL.
pub fn request_savepoint(
    state: &Arc<Mutex<ClusterState>>,
    job_id: &str,
    dir: Option<String>,
    stop: bool,
    drain: bool,
) -> std::result::Result<String, String> {
    let mut s = lock(state);
    let job = s
        .job_mut(job_id)
        .ok_or_else(|| format!("no job '{job_id}'"))?;
    if job.status != JobStatus::Running {
        return Err(format!(
            "job '{job_id}' is {:?}: only a running job can take a savepoint",
            job.status
        ));
    }
    if job.checkpoint_dir.is_none() {
        return Err(format!(
            "job '{job_id}' runs in batch mode: it has no savepoints"
        ));
    }
    if job.savepoint_request.is_some() {
        return Err(format!("job '{job_id}' is already taking a savepoint"));
    }
    let base = savepoint_base(dir.as_deref())?;
    let path = format!(
        "{}/savepoint-{job_id}-{}",
        base.trim_end_matches('/'),
        now_ms()
    );
    let storage = weir_state::CheckpointStorage::open(&path).map_err(|e| e.to_string())?;
    job.savepoint_request = Some(crate::checkpoints::SavepointRequest {
        path: path.clone(),
        storage,
        stop,
        drain,
        triggered: false,
    });
    Ok(path)
}
