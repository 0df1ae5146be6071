//! The CheckpointCoordinator and the restarts of a cluster's jobs.
//!
//! Every running job with a checkpoint interval gets a trigger per interval
//! (one checkpoint in flight at a time): the workers holding its sources
//! inject barrier *n*; every subtask's worker writes that subtask's Parquet
//! files and acknowledges with their handles; when all subtasks have, the
//! coordinator writes `chk-n/_metadata` — the commit point — keeps the
//! newest `checkpoint_retained` checkpoints, and tells the workers, whose
//! two-phase-commit sinks then publish. A task that declines, or a
//! checkpoint older than `checkpoint_timeout`, is abandoned; the job goes on.
//!
//! A job whose task fails or whose worker is lost restarts (while restarts
//! remain) after `restart_delay`: the failed attempt is cancelled, slots are
//! claimed again on the live workers, and the next attempt is deployed with
//! the latest completed checkpoint to restore. Without enough slots it waits
//! for workers to (re)join, up to a minute, then fails.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_core::checkpoint::{Manifest, SubtaskHandle};
use weir_core::cluster::{self, CheckpointAckMessage, CheckpointComplete, TriggerCheckpoint};
use weir_flight::call_action;

use crate::jobs::{ClusterState, JobStatus, lock};
use crate::metrics::{CheckpointRecord, SubtaskCheckpoint};

/// A savepoint asked for and not yet taken.
#[derive(Debug, Clone)]
pub struct SavepointRequest {
    /// Its folder.
    pub path: String,
    /// Storage at that folder.
    pub storage: weir_state::CheckpointStorage,
    /// End the job once it is taken (`weir stop --savepoint`).
    pub stop: bool,
    /// Fire every window and timer first (`weir stop --drain`).
    pub drain: bool,
    /// Whether its barrier is on its way.
    pub triggered: bool,
}

/// A checkpoint in flight.
#[derive(Debug, Clone)]
pub struct PendingCheckpoint {
    /// The savepoint it is, if it is one.
    pub savepoint: Option<SavepointRequest>,
    /// Id.
    pub id: u64,
    /// Trigger time.
    pub started: Instant,
    /// Trigger time, ms since the epoch.
    pub timestamp: i64,
    /// Acknowledged subtasks.
    pub acks: BTreeMap<(usize, usize), SubtaskHandle>,
    /// Ms from the trigger to each acknowledgement.
    pub ack_ms: BTreeMap<(usize, usize), u64>,
    /// Each subtask's barrier alignment, ms, as it measured it.
    pub alignment_ms: BTreeMap<(usize, usize), u64>,
}

impl PendingCheckpoint {
    /// Its history record as it stands: `status`, sizes and per-subtask
    /// figures of the acknowledgements so far.
    pub(crate) fn record(&self, status: &'static str, failure: Option<String>) -> CheckpointRecord {
        let mut operators = BTreeMap::new();
        let subtasks: Vec<SubtaskCheckpoint> = self
            .acks
            .iter()
            .map(|(&(vertex, subtask), h)| {
                let tables = h.operators.iter().flat_map(|o| &o.tables);
                for o in &h.operators {
                    *operators.entry(o.uid.clone()).or_insert(0) +=
                        o.tables.iter().map(|t| t.bytes).sum::<u64>();
                }
                SubtaskCheckpoint {
                    vertex,
                    subtask,
                    end_to_end_duration_ms: self
                        .ack_ms
                        .get(&(vertex, subtask))
                        .copied()
                        .unwrap_or(0),
                    state_size: tables.clone().map(|t| t.bytes).sum(),
                    state_rows: tables.map(|t| t.rows).sum(),
                    alignment_duration_ms: self.alignment_ms.get(&(vertex, subtask)).copied(),
                }
            })
            .collect();
        let own = format!("chk-{}/", self.id);
        let shared = format!("-c{}.parquet", self.id);
        let all = || {
            self.acks
                .values()
                .flat_map(|h| &h.operators)
                .flat_map(|o| &o.tables)
        };
        CheckpointRecord {
            id: self.id,
            status,
            is_savepoint: self.savepoint.is_some(),
            trigger_timestamp: self.timestamp,
            end_to_end_duration: self.started.elapsed().as_millis() as u64,
            state_size: all().map(|t| t.bytes).sum(),
            checkpointed_size: all()
                .filter(|t| t.path.starts_with(&own) || t.path.ends_with(&shared))
                .map(|t| t.bytes)
                .sum(),
            num_acknowledged_subtasks: self.acks.len(),
            failure_message: failure,
            subtasks,
            operators,
        }
    }
}

/// Record an abandoned checkpoint; past the tolerable count the job fails
/// over. Returns the workers to cancel when it does.
fn declined(job: &mut crate::jobs::JobInfo, reason: String) -> Vec<String> {
    job.record(reason.clone());
    job.checkpoints_declined += 1;
    job.declined_in_a_row += 1;
    job.last_checkpoint_end = Some(Instant::now());
    if let Some(p) = job.pending.take() {
        job.observed
            .checkpoint(p.record("FAILED", Some(reason.clone())));
        if p.savepoint.is_some() {
            job.savepoint_request = None;
        }
    }
    let tolerable = job
        .graph
        .as_ref()
        .and_then(|g| g.config.checkpoint_tolerable_failures);
    match tolerable {
        Some(t) if job.declined_in_a_row > t => {
            let cause = format!(
                "{} checkpoints failed in a row (tolerable: {t}); the last: {reason}",
                job.declined_in_a_row
            );
            job.declined_in_a_row = 0;
            job.fail_or_restart(cause);
            job.worker_addresses()
        }
        _ => vec![],
    }
}

/// How long a restarting job waits for free slots.
const SLOT_WAIT: Duration = Duration::from_secs(60);

/// Drive checkpoints and restarts of every job, forever.
pub async fn run(state: Arc<Mutex<ClusterState>>) {
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    loop {
        ticker.tick().await;
        if !lock(&state).may_act() {
            // A standby, or a leader whose lease ran out: nothing to
            // trigger, restart or deploy.
            continue;
        }
        let (triggers, deploys, failed_deploys, credentials) = {
            let mut s = lock(&state);
            let credentials = s.credentials();
            let mut triggers = Vec::new();
            let mut deploys = Vec::new();
            let mut failed = Vec::new();
            let ids: Vec<String> = s.job_ids();
            for id in ids {
                if let Some(commit) = s.job_mut(&id).and_then(take_if_complete) {
                    let (state, id) = (Arc::clone(&state), id.clone());
                    tokio::spawn(async move { complete(&state, &id, commit).await });
                }
                restart_if_due(&mut s, &id, &mut deploys, &mut failed);
                if let Some(t) = trigger_if_due(&mut s, &id) {
                    triggers.push(t);
                }
            }
            (triggers, deploys, failed, credentials)
        };
        for call in triggers {
            let (addresses, kind, body) = match call {
                Call::Trigger(a, t) => (
                    a,
                    cluster::TRIGGER_CHECKPOINT,
                    serde_json::to_vec(&t).unwrap_or_default(),
                ),
                Call::Cancel(a, job_id) => (
                    a,
                    cluster::CANCEL,
                    serde_json::to_vec(&cluster::Cancel { job_id }).unwrap_or_default(),
                ),
            };
            for addr in addresses {
                let (credentials, body) = (credentials.clone(), body.clone());
                tokio::spawn(async move {
                    if let Err(e) = call_action(&addr, &credentials, kind, body).await {
                        tracing::warn!("{kind} to {addr}: {e}");
                    }
                });
            }
        }
        for addr in failed_deploys {
            tracing::warn!("{addr}");
        }
        for (job_id, addr, deploy) in deploys {
            let (state, credentials) = (Arc::clone(&state), credentials.clone());
            tokio::spawn(async move {
                let body = serde_json::to_vec(&deploy).unwrap_or_default();
                if let Err(e) = call_action(&addr, &credentials, cluster::DEPLOY, body).await {
                    // A worker that died before it was found lost: the
                    // attempt fails like any other, and restarts if the
                    // job has restarts left (by then the worker is lost).
                    let cancels = lock(&state).redeployment_failed(
                        &job_id,
                        format!("redeployment to {addr} failed: {e}"),
                    );
                    let body = serde_json::to_vec(&cluster::Cancel {
                        job_id: job_id.clone(),
                    })
                    .unwrap_or_default();
                    for other in cancels.into_iter().filter(|a| *a != addr) {
                        let _ =
                            call_action(&other, &credentials, cluster::CANCEL, body.clone()).await;
                    }
                }
            });
        }
    }
}

/// What the loop sends to workers for a job.
enum Call {
    /// Trigger a checkpoint on these workers.
    Trigger(Vec<String>, TriggerCheckpoint),
    /// Cancel the job's current attempt on these workers.
    Cancel(Vec<String>, String),
}

fn trigger_if_due(s: &mut ClusterState, id: &str) -> Option<Call> {
    let job = s.job_mut(id)?;
    let config = job.graph.as_ref()?.config.clone();
    if job.status != JobStatus::Running {
        return None;
    }
    let savepoint = job
        .savepoint_request
        .as_ref()
        .filter(|r| !r.triggered && job.pending.is_none())
        .cloned();
    if job.stopped_with.is_some() {
        return None;
    }
    if let Some(request) = savepoint {
        if let Some(r) = job.savepoint_request.as_mut() {
            r.triggered = true;
        }
        return Some(Call::Trigger(
            job.worker_addresses(),
            start(job, id, Some(request)),
        ));
    }
    let interval = config.checkpoint_interval?;
    if job.pending.is_none() && job.savepoint_request.is_some() {
        // A savepoint taken and being committed: the next checkpoint comes
        // after it (and never after a stop's savepoint).
        return None;
    }
    if let Some(p) = &job.pending {
        if p.started.elapsed() > config.checkpoint_timeout {
            let reason = format!(
                "checkpoint {} timed out after {:?} ({} of {} subtasks acknowledged)",
                p.id,
                config.checkpoint_timeout,
                p.acks.len(),
                job.tasks().count()
            );
            let cancel = declined(job, reason);
            if !cancel.is_empty() {
                return Some(Call::Cancel(cancel, id.to_string()));
            }
        }
        return None;
    }
    if job.last_trigger.is_some_and(|t| t.elapsed() < interval)
        || job
            .last_checkpoint_end
            .is_some_and(|t| t.elapsed() < config.checkpoint_min_pause)
    {
        return None;
    }
    if job.last_trigger.is_none() {
        // The first checkpoint comes one interval after the start.
        job.last_trigger = Some(Instant::now());
        return None;
    }
    Some(Call::Trigger(job.worker_addresses(), start(job, id, None)))
}

/// Start checkpoint (or savepoint) number `next_checkpoint` of `job`.
fn start(
    job: &mut crate::jobs::JobInfo,
    id: &str,
    savepoint: Option<SavepointRequest>,
) -> TriggerCheckpoint {
    let checkpoint_id = job.next_checkpoint;
    job.next_checkpoint += 1;
    job.last_trigger = Some(Instant::now());
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let savepoint_dir = savepoint.as_ref().map(|r| r.path.clone());
    let drain = savepoint.as_ref().is_some_and(|r| r.drain);
    let stop = savepoint.as_ref().is_some_and(|r| r.stop);
    let unaligned = savepoint.is_none()
        && job
            .graph
            .as_ref()
            .is_some_and(|g| g.config.checkpoint_unaligned);
    job.pending = Some(PendingCheckpoint {
        savepoint,
        id: checkpoint_id,
        started: Instant::now(),
        timestamp,
        acks: BTreeMap::new(),
        ack_ms: BTreeMap::new(),
        alignment_ms: BTreeMap::new(),
    });
    TriggerCheckpoint {
        job_id: id.to_string(),
        attempt: job.attempt,
        checkpoint_id,
        timestamp,
        drain,
        stop,
        savepoint_dir,
        unaligned,
    }
}

type Deployment = (String, String, cluster::Deploy);

fn restart_if_due(
    s: &mut ClusterState,
    id: &str,
    deploys: &mut Vec<Deployment>,
    failed: &mut Vec<String>,
) {
    let Some(job) = s.job_mut(id) else { return };
    if job.status != JobStatus::Restarting || job.restart_at.is_none_or(|t| t > Instant::now()) {
        return;
    }
    let waited = job.restart_at.map(|t| t.elapsed()).unwrap_or_default();
    s.release_slots(id);
    match s.place_next_attempt(id) {
        Ok(list) => {
            for (addr, d) in list {
                deploys.push((id.to_string(), addr, d));
            }
        }
        Err(message) if waited > SLOT_WAIT => {
            s.job_failed(id, format!("cannot restart: {message}"));
            failed.push(format!("job {id} cannot restart: {message}"));
        }
        Err(_) => {} // wait for workers
    }
}

/// A worker's acknowledgement of a checkpoint.
pub async fn acknowledge(state: &Arc<Mutex<ClusterState>>, ack: CheckpointAckMessage) {
    let commit = {
        let mut s = lock(state);
        let Some(job) = s.job_mut(&ack.job_id) else {
            return;
        };
        if ack.attempt != job.attempt {
            return;
        }
        let Some(pending) = job.pending.as_mut().filter(|p| p.id == ack.checkpoint_id) else {
            return;
        };
        match ack.result {
            Err(reason) => {
                let reason = format!(
                    "checkpoint {} declined by {}: {reason}",
                    ack.checkpoint_id, ack.worker_id
                );
                let cancel = declined(job, reason);
                Err((cancel, s.credentials()))
            }
            Ok(handle) => {
                let at = (handle.vertex, handle.subtask);
                pending
                    .ack_ms
                    .insert(at, pending.started.elapsed().as_millis() as u64);
                if let Some(ms) = ack.alignment_ms {
                    pending.alignment_ms.insert(at, ms);
                }
                pending.acks.insert(at, handle);
                Ok(take_if_complete(job))
            }
        }
    };
    match commit {
        Ok(Some(commit)) => complete(state, &ack.job_id, commit).await,
        Ok(None) => {}
        Err((cancel, credentials)) => {
            let body = serde_json::to_vec(&cluster::Cancel {
                job_id: ack.job_id.clone(),
            })
            .unwrap_or_default();
            for addr in cancel {
                let _ = call_action(&addr, &credentials, cluster::CANCEL, body.clone()).await;
            }
        }
    }
}

/// What committing a complete checkpoint needs.
pub(crate) type Commit = (
    weir_state::CheckpointStorage,
    Manifest,
    Option<usize>,
    Option<SavepointRequest>,
    CheckpointRecord,
);

/// The pending checkpoint, taken out when every subtask still running has
/// acknowledged it. Finished subtasks have nothing left to snapshot (their
/// output is committed); they are absent from the manifest, and a restore
/// treats an absent source subtask as finished.
pub(crate) fn take_if_complete(job: &mut crate::jobs::JobInfo) -> Option<Commit> {
    let pending = job.pending.as_ref()?;
    let outstanding = job
        .vertices
        .iter()
        .flat_map(|v| v.subtasks.iter().map(move |t| (v.id, t)))
        .filter(|(v, t)| {
            t.state != weir_core::cluster::TaskState::Finished
                && !pending.acks.contains_key(&(*v, t.subtask))
        })
        .count();
    if outstanding > 0 {
        return None;
    }
    let pending = job.pending.take()?;
    let record = pending.record("COMPLETED", None);
    let graph = job.graph.as_ref();
    let manifest = Manifest {
        job_name: job.name.clone(),
        checkpoint_id: pending.id,
        timestamp_ms: pending.timestamp,
        max_parallelism: graph.map_or(128, |g| g.config.max_parallelism),
        subtasks: pending.acks.into_values().collect(),
        leader_epoch: None,
    };
    let retained = graph.map_or(3, |g| g.config.checkpoint_retained);
    match pending.savepoint {
        // Savepoints are never deleted by retention.
        Some(r) => Some((r.storage.clone(), manifest, None, Some(r), record)),
        None => job
            .storage
            .clone()
            .map(|st| (st, manifest, Some(retained), None, record)),
    }
}

/// Commit a complete checkpoint: `_metadata`, then the job's record, the
/// workers' notification, retention, and a requested stop.
pub(crate) async fn complete(state: &Arc<Mutex<ClusterState>>, job_id: &str, commit: Commit) {
    let (storage, mut manifest, retained, savepoint, mut record) = commit;
    let id = manifest.checkpoint_id;
    // With an HA folder only the leader commits, and says in which epoch:
    // a coordinator paused past its lease knows on waking, before it
    // writes anything.
    let leadership = lock(state).leadership.clone();
    if let Some(leadership) = leadership {
        match leadership.confirm().await {
            Ok(epoch) => manifest.leader_epoch = Some(epoch),
            Err(e) => {
                tracing::warn!("checkpoint {id} of {job_id} not committed: {e}");
                if let Some(job) = lock(state).job_mut(job_id) {
                    job.history
                        .push(format!("checkpoint {id} not committed: {e}"));
                }
                return;
            }
        }
    }
    let started = Instant::now();
    let commit = storage.commit(&manifest).await;
    record.end_to_end_duration += started.elapsed().as_millis() as u64;
    if let Err(e) = commit {
        let mut s = lock(state);
        if let Some(job) = s.job_mut(job_id) {
            job.history
                .push(format!("checkpoint {id} not committed: {e}"));
            record.status = "FAILED";
            record.failure_message = Some(format!("not committed: {e}"));
            job.observed.checkpoint(record);
            job.checkpoints_declined += 1;
            if savepoint.is_some() {
                job.savepoint_request = None;
            }
        }
        return;
    }
    let (addresses, attempt, credentials) = {
        let mut s = lock(state);
        let credentials = s.credentials();
        let Some(job) = s.job_mut(job_id) else {
            return;
        };
        match &savepoint {
            Some(r) => {
                job.savepoints.push(r.path.clone());
                job.history
                    .push(format!("savepoint {} taken (checkpoint {id})", r.path));
                job.savepoint_request = None;
                if r.stop {
                    // From here on the job only ends: no checkpoint after
                    // the savepoint may commit output (its files would be
                    // written again by a job resumed from the savepoint).
                    job.stopped_with = Some(r.path.clone());
                }
            }
            None => job.checkpoints.push(id),
        }
        job.declined_in_a_row = 0;
        job.last_checkpoint_end = Some(Instant::now());
        job.observed.checkpoint(record);
        (job.worker_addresses(), job.attempt, credentials)
    };
    let body = serde_json::to_vec(&CheckpointComplete {
        job_id: job_id.to_string(),
        attempt,
        checkpoint_id: id,
    })
    .unwrap_or_default();
    for addr in addresses {
        if let Err(e) = call_action(
            &addr,
            &credentials,
            cluster::CHECKPOINT_COMPLETE,
            body.clone(),
        )
        .await
        {
            tracing::warn!("checkpoint {id} completion to {addr}: {e}");
        }
    }
    if let Some(retained) = retained
        && let Err(e) = storage.retain(retained).await
    {
        tracing::warn!("checkpoint retention: {e}");
    }
    if savepoint.is_some_and(|r| r.stop) {
        let workers = lock(state).cancel(job_id).unwrap_or_default();
        let body = serde_json::to_vec(&cluster::Cancel {
            job_id: job_id.to_string(),
        })
        .unwrap_or_default();
        for addr in workers {
            let _ = call_action(&addr, &credentials, cluster::CANCEL, body.clone()).await;
        }
    }
}
