//! The worker process (Flink's TaskManager): offers slots to a coordinator,
//! runs the subtasks deployed to it and exchanges records with other
//! workers over its Flight endpoint.
//!
//! One Flight endpoint per worker serves three things: exchange streams
//! from other workers (`do_put`), the worker's sinks to clients (`do_get`,
//! `list_flights`) and the coordinator's control calls (`deploy`,
//! `cancel`). Channels between two subtasks on this worker are local
//! queues; a channel whose consumer runs on another worker is a Flight
//! stream to that worker, whose own endpoint receives it — the same channel
//! trait either way.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use weir_core::cluster::{
    self, Cancel, CheckpointAckMessage, CheckpointComplete, Deploy, Heartbeat, HeartbeatReply,
    RegisterWorker, Registered, TaskReport, TaskState, TaskUpdate, TriggerCheckpoint,
};
use weir_state::CheckpointStorage;

use crate::checkpoint::{CheckpointAck, task_checkpoints, write_ack};
use crate::task::TaskInput;
use weir_core::{Result, Secret, WeirError};
use weir_flight::{
    ActionHandler, Credentials, ExchangeServer, FlightNode, LazyFlightSender, TlsPem, call_action,
};

use crate::channel::local_channel;
use crate::executor::{TaskEvent, build_placed_tasks, run_observed_tasks};

/// How a worker is started.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The coordinator's control address (`host:port`); several,
    /// comma-separated, for coordinators sharing an HA folder (the worker
    /// registers with the one that leads, and looks again when it stops
    /// answering).
    pub coordinator: String,
    /// Task slots offered.
    pub slots: usize,
    /// Where the worker's Flight endpoint listens; default `127.0.0.1:0`.
    pub bind: SocketAddr,
    /// The cluster token: required from callers, presented to the
    /// coordinator and to other workers.
    pub token: Option<Secret>,
    /// Serve the endpoint over TLS with this PEM certificate and key; the
    /// coordinator and the other workers are then reached over TLS too.
    pub tls: Option<TlsPem>,
    /// The CA (PEM) that signed the cluster's certificates; default: the
    /// worker's own certificate (one self-signed certificate for the cluster).
    pub tls_ca: Option<Vec<u8>>,
    /// Serve Prometheus' `/metrics` (every subtask here) on this address.
    pub metrics: Option<SocketAddr>,
}

impl WorkerOptions {
    /// A worker of `slots` slots for the coordinator at `coordinator`.
    pub fn new(coordinator: impl Into<String>, slots: usize) -> Self {
        Self {
            coordinator: coordinator.into(),
            slots,
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            tls: None,
            tls_ca: None,
            metrics: None,
        }
    }

    /// What this worker presents to the coordinator and other workers.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            token: self.token.clone(),
            tls_ca: self
                .tls
                .as_ref()
                .map(|t| Arc::new(self.tls_ca.clone().unwrap_or_else(|| t.cert.clone()))),
            epoch: None,
        }
    }
}

type TaskKey = (String, usize, usize);

struct JobOnWorker {
    cancel: Arc<watch::Sender<bool>>,
    /// The job's id and name.
    job: (String, String),
    /// Live metrics of its tasks here.
    counters: Vec<Arc<weir_core::metrics::LiveTask>>,
    /// Barrier triggers of the local source tasks.
    triggers: Vec<tokio::sync::mpsc::UnboundedSender<weir_core::message::CheckpointBarrier>>,
    /// The newest completed checkpoint, watched by the tasks.
    completed: watch::Sender<u64>,
    /// Storage of savepoints in flight, by checkpoint id.
    savepoints: SavepointTargets,
}

/// Where each savepoint in flight is written, by checkpoint id.
type SavepointTargets = Arc<Mutex<HashMap<u64, CheckpointStorage>>>;

/// Key of one deployment attempt of a job on this worker.
fn job_key(job_id: &str, attempt: u32) -> String {
    format!("{job_id}@{attempt}")
}

struct WorkerState {
    options: WorkerOptions,
    credentials: Credentials,
    address: String,
    worker_id: Mutex<String>,
    /// The coordinator it registered with (of those `options.coordinator`
    /// lists, comma-separated: the leader of an HA cluster).
    leader: Mutex<String>,
    /// This process's own id, sent with every registration, heartbeat and
    /// update ([`cluster::new_instance_id`]).
    instance: String,
    exchange: ExchangeServer,
    jobs: Mutex<HashMap<String, JobOnWorker>>,
    reports: Mutex<HashMap<TaskKey, TaskReport>>,
    runtime: tokio::runtime::Handle,
}

/// A running worker; dropping it stops the endpoint and cancels its tasks.
pub struct WorkerNode {
    state: Arc<WorkerState>,
    address: SocketAddr,
    _serving: tokio::task::JoinHandle<()>,
    runtime: Option<tokio::runtime::Runtime>,
    metrics: Option<SocketAddr>,
}

impl WorkerNode {
    /// Start the endpoint, register with the coordinator (retrying for up to
    /// `register_timeout`) and keep heartbeating.
    pub fn start(options: WorkerOptions, register_timeout: Duration) -> Result<Self> {
        if options.slots == 0 {
            return Err(WeirError::Config("a worker needs at least one slot".into()));
        }
        if !options.bind.ip().is_loopback() && options.token.is_none() {
            return Err(WeirError::Config(format!(
                "binding {} (not loopback) requires a token",
                options.bind
            )));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-worker")
            .enable_all()
            .build()
            .map_err(|e| WeirError::Execution(format!("cannot start the worker runtime: {e}")))?;
        let exchange = ExchangeServer::new();
        let (state, address, serving) = runtime.block_on(async {
            let state_cell: Arc<Mutex<Option<Arc<WorkerState>>>> = Arc::default();
            let handler = Arc::new(WorkerActions {
                state: Arc::clone(&state_cell),
                epochs: Default::default(),
            });
            let node = FlightNode::new(
                Some(exchange.clone()),
                true,
                options.token.clone(),
                Some(handler),
            );
            let (address, serving) = node
                .serve(options.bind, options.token.clone(), options.tls.clone())
                .await?;
            let state = Arc::new(WorkerState {
                address: address.to_string(),
                credentials: options.credentials(),
                options: options.clone(),
                worker_id: Mutex::new(String::new()),
                leader: Mutex::new(coordinators(&options.coordinator)[0].clone()),
                instance: cluster::new_instance_id(),
                exchange,
                jobs: Mutex::default(),
                reports: Mutex::default(),
                runtime: tokio::runtime::Handle::current(),
            });
            *state_cell.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&state));
            Ok::<_, WeirError>((state, address, serving))
        })?;
        if options.metrics.is_some_and(|a| !a.ip().is_loopback()) && options.token.is_none() {
            return Err(WeirError::Config(
                "serving metrics beyond loopback requires a token".into(),
            ));
        }
        let metrics = match options.metrics {
            Some(addr) => {
                let reader = Arc::clone(&state);
                let source: crate::node_metrics::Source = Arc::new(move || {
                    lock(&reader.jobs)
                        .values()
                        .map(|j| (j.job.0.clone(), j.job.1.clone(), j.counters.clone()))
                        .collect()
                });
                Some(runtime.block_on(crate::node_metrics::serve(
                    addr,
                    options.token.clone(),
                    source,
                ))?)
            }
            None => None,
        };
        let interval = runtime.block_on(register(&state, register_timeout))?;
        runtime.spawn(heartbeats(Arc::clone(&state), interval));
        Ok(Self {
            state,
            address,
            _serving: serving,
            runtime: Some(runtime),
            metrics,
        })
    }

    /// Where its Prometheus `/metrics` is served, when it is.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// The worker's Flight endpoint.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The id the coordinator gave this worker.
    pub fn worker_id(&self) -> String {
        lock(&self.state.worker_id).clone()
    }
}

impl Drop for WorkerNode {
    fn drop(&mut self) {
        for job in lock(&self.state.jobs).values() {
            job.cancel.send_replace(true);
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The coordinators an address list names (`a,b,c`; at least one).
fn coordinators(list: &str) -> Vec<String> {
    let all: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    if all.is_empty() {
        vec![list.to_string()]
    } else {
        all
    }
}

/// The coordinator calls go to.
fn leader(state: &WorkerState) -> String {
    lock(&state.leader).clone()
}

async fn register(state: &Arc<WorkerState>, timeout: Duration) -> Result<Duration> {
    let body = serde_json::to_vec(&RegisterWorker {
        address: state.address.clone(),
        slots: state.options.slots,
        instance: state.instance.clone(),
    })
    .map_err(|e| WeirError::Execution(e.to_string()))?;
    let deadline = tokio::time::Instant::now() + timeout;
    let all = coordinators(&state.options.coordinator);
    let mut next = all.iter().position(|a| *a == leader(state)).unwrap_or(0);
    loop {
        // Each coordinator in turn: standbys refuse, the leader takes it.
        let address = all[next % all.len()].clone();
        next += 1;
        // A coordinator that accepts the connection but does not answer
        // (paused) is skipped like one that refuses it.
        let call = call_action(
            &address,
            &state.credentials,
            cluster::REGISTER,
            body.clone(),
        );
        let answer = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .unwrap_or_else(|_| Err(WeirError::Execution(format!("{address} did not answer"))));
        match answer {
            Ok(reply) => {
                let r: Registered = serde_json::from_slice(&reply).map_err(|e| {
                    WeirError::Execution(format!("malformed registration reply: {e}"))
                })?;
                tracing::info!("registered as {} with {address}", r.worker_id);
                *lock(&state.worker_id) = r.worker_id;
                *lock(&state.leader) = address;
                return Ok(Duration::from_millis(r.heartbeat_interval_ms.max(10)));
            }
            Err(e @ WeirError::Config(_)) => return Err(e),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(WeirError::Execution(format!(
                    "cannot register with the coordinator at {}: {e}",
                    state.options.coordinator
                )));
            }
            Err(_) if next % all.len() == 0 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => {}
        }
    }
}

fn current_reports(state: &WorkerState) -> Vec<TaskReport> {
    let jobs = lock(&state.jobs);
    let mut reports = lock(&state.reports);
    for (job_id, job) in jobs.iter() {
        for live in &job.counters {
            if let Some(r) = reports.get_mut(&(job_id.clone(), live.vertex, live.subtask)) {
                let sample = live.sample();
                r.back_pressured_ms = sample.back_pressured_ms;
                r.source_rows = live.source_rows.load(Ordering::Relaxed);
                r.live = Some(sample);
            }
        }
    }
    reports.values().cloned().collect()
}

/// How long a registration or heartbeat waits for the coordinator's answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Heartbeats failed in a row before a worker looks for the leader again.
const LOST_COORDINATOR_HEARTBEATS: u32 = 3;

/// Stop every task (the coordinator that deployed them is gone or has
/// forgotten this worker) and register with whichever coordinator leads.
async fn rejoin(state: &Arc<WorkerState>) {
    for job in lock(&state.jobs).values() {
        job.cancel.send_replace(true);
    }
    while let Err(e) = register(state, Duration::from_secs(30)).await {
        tracing::warn!("{e}");
    }
}

async fn heartbeats(state: Arc<WorkerState>, interval: Duration) {
    let mut failures = 0u32;
    let mut ticker = tokio::time::interval(interval);
    loop {
        ticker.tick().await;
        let beat = Heartbeat {
            worker_id: lock(&state.worker_id).clone(),
            instance: state.instance.clone(),
            tasks: current_reports(&state),
        };
        let Ok(body) = serde_json::to_vec(&beat) else {
            continue;
        };
        let to = leader(&state);
        let call = call_action(&to, &state.credentials, cluster::HEARTBEAT, body);
        let answer = tokio::time::timeout(CALL_TIMEOUT.max(interval), call)
            .await
            .unwrap_or_else(|_| Err(WeirError::Execution("no answer".into())));
        match answer {
            Ok(reply) => {
                let known = serde_json::from_slice::<HeartbeatReply>(&reply)
                    .map(|r| r.known)
                    .unwrap_or(true);
                failures = 0;
                if !known {
                    tracing::warn!("the coordinator no longer knows this worker; re-registering");
                    rejoin(&state).await;
                }
            }
            Err(e) => {
                tracing::warn!("heartbeat failed: {e}");
                failures += 1;
                // The coordinator is gone or stands by now: whoever leads
                // next runs this worker's jobs again from a checkpoint.
                if failures >= LOST_COORDINATOR_HEARTBEATS {
                    failures = 0;
                    rejoin(&state).await;
                }
            }
        }
    }
}

fn push_update(state: &Arc<WorkerState>, report: TaskReport) {
    lock(&state.reports).insert(
        (
            job_key(&report.job_id, report.attempt),
            report.vertex,
            report.subtask,
        ),
        report.clone(),
    );
    let update = TaskUpdate {
        worker_id: lock(&state.worker_id).clone(),
        instance: state.instance.clone(),
        report,
    };
    let state2 = Arc::clone(state);
    state.runtime.spawn(async move {
        if let Ok(body) = serde_json::to_vec(&update)
            && let Err(e) = call_action(
                &leader(&state2),
                &state2.credentials,
                cluster::TASK_UPDATE,
                body,
            )
            .await
        {
            tracing::warn!("task update not delivered (the next heartbeat repeats it): {e}");
        }
    });
}

fn deploy(state: &Arc<WorkerState>, d: Deploy) -> Result<()> {
    d.job.validate()?;
    let placement = d.placement;
    if placement.len() != d.job.vertices.len()
        || placement
            .iter()
            .zip(&d.job.vertices)
            .any(|(p, v)| p.len() != v.parallelism)
    {
        return Err(WeirError::plan(
            "placement does not match the job's vertices",
        ));
    }
    let key = job_key(&d.job_id, d.attempt);
    if lock(&state.jobs).contains_key(&key) {
        return Err(WeirError::plan(format!(
            "job {} (attempt {}) is already deployed here",
            d.job_id, d.attempt
        )));
    }
    let me = d.address.clone();
    let is_local = |v: usize, s: usize| placement[v][s] == me;
    let (capacity, compression) = (
        d.job.config.channel_capacity,
        d.job.config.exchange_compression,
    );
    let (job_id, attempt) = (d.job_id.clone(), d.attempt);
    let exchange = state.exchange.clone();
    let credentials = state.credentials.clone();
    let mut tasks = build_placed_tasks(&d.job, &is_local, &mut |c| {
        let id = format!("{key}/{}", c.name);
        Ok(match (c.producer_here, c.consumer_here) {
            (true, true) => {
                let (tx, rx) = local_channel(capacity, c.name.clone());
                (Some(tx), Some(rx))
            }
            (true, false) => {
                let target: SocketAddr = placement[c.consumer.0][c.consumer.1]
                    .parse()
                    .map_err(|_| WeirError::plan("bad worker address in placement"))?;
                let tx = LazyFlightSender::new(target, id, capacity)
                    .with_credentials(credentials.clone())
                    .with_compression(compression);
                (Some(Box::new(tx) as _), None)
            }
            (false, true) => (None, Some(exchange.register(&id, capacity))),
            (false, false) => (None, None),
        })
    })?;
    // Checkpoints: restore the attempt's state, wire barriers and acks.
    let (completed, completed_rx) = watch::channel(0u64);
    let mut triggers = Vec::new();
    let savepoints: SavepointTargets = Arc::default();
    if let Some(c) = &d.checkpoints {
        let storage = CheckpointStorage::open(&c.dir)?;
        let mut shared = weir_state::SharedFiles::new();
        if let Some(point) = &c.restore {
            let from = CheckpointStorage::open(&point.dir)?;
            let manifest = state.runtime.block_on(from.manifest(point.id))?;
            if point.dir == c.dir {
                shared.seed(&manifest);
            }
            state.runtime.block_on(crate::recovery::restore(
                &from,
                Some(&manifest),
                &d.job,
                &mut tasks,
                c.allow_non_restored_state,
            ))?;
            completed.send_replace(point.id);
        } else if attempt > 0 {
            state.runtime.block_on(crate::recovery::restore(
                &storage, None, &d.job, &mut tasks, false,
            ))?;
        }
        let (acks, ack_rx) = std::sync::mpsc::channel::<CheckpointAck>();
        for (task, input) in &mut tasks {
            let is_source = matches!(input, TaskInput::Source { .. });
            let trigger = is_source.then(|| {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                triggers.push(tx);
                rx
            });
            task.checkpoints = Some(task_checkpoints(
                &d.job,
                task,
                is_source,
                trigger,
                acks.clone(),
                completed_rx.clone(),
            ));
        }
        forward_acks(
            state,
            storage,
            Arc::clone(&savepoints),
            d.job.clone(),
            job_id.clone(),
            attempt,
            ack_rx,
            d.job.config.checkpoint_incremental.then_some(shared),
            completed_rx,
        )?;
    }
    let (cancel, _) = watch::channel(false);
    let cancel = Arc::new(cancel);
    for (t, _) in &mut tasks {
        t.job = format!("{job_id} '{}'", d.job.job_name);
    }
    let counters = tasks.iter().map(|(t, _)| Arc::clone(&t.live)).collect();
    let report = |vertex, subtask, state, error, metrics| TaskReport {
        job_id: job_id.clone(),
        vertex,
        subtask,
        state,
        error,
        symptom: false,
        back_pressured_ms: 0,
        source_rows: 0,
        live: None,
        attempt,
        metrics,
    };
    for (t, _) in &tasks {
        push_update(
            state,
            report(t.vertex, t.subtask, TaskState::Deploying, None, None),
        );
    }
    lock(&state.jobs).insert(
        key.clone(),
        JobOnWorker {
            cancel: Arc::clone(&cancel),
            job: (job_id.clone(), d.job.job_name.clone()),
            counters,
            triggers,
            completed,
            savepoints,
        },
    );
    let observer_state = Arc::clone(state);
    let cancelled = cancel.subscribe();
    let observer_job = job_id.clone();
    let observer = Arc::new(move |event: TaskEvent<'_>| {
        let symptom = matches!(&event, TaskEvent::Ended { outcome: Err(e), .. } if e.is_symptom());
        let (vertex, subtask, task_state, error, metrics) = match event {
            TaskEvent::Running { vertex, subtask } => {
                (vertex, subtask, TaskState::Running, None, None)
            }
            TaskEvent::Ended {
                vertex,
                subtask,
                outcome,
            } => match outcome {
                Ok(m) => (vertex, subtask, TaskState::Finished, None, Some(m.clone())),
                // A task that failed on its own is reported failed even when
                // the cancellation its failure caused got here first.
                Err(e) if *cancelled.borrow() && e.is_symptom() => {
                    (vertex, subtask, TaskState::Canceled, None, None)
                }
                Err(e) => (
                    vertex,
                    subtask,
                    TaskState::Failed,
                    Some(e.to_string()),
                    None,
                ),
            },
        };
        push_update(
            &observer_state,
            TaskReport {
                job_id: observer_job.clone(),
                vertex,
                subtask,
                state: task_state,
                error,
                symptom,
                back_pressured_ms: 0,
                source_rows: 0,
                live: None,
                attempt,
                metrics,
            },
        );
    });
    let done_state = Arc::clone(state);
    std::thread::Builder::new()
        .name(format!("weir job {key}"))
        .spawn(move || {
            if let Err(e) = run_observed_tasks(tasks, cancel, observer) {
                tracing::info!("job {key} ended on this worker: {e}");
            }
            lock(&done_state.jobs).remove(&key);
        })
        .map_err(|e| WeirError::Execution(format!("cannot start the job thread: {e}")))?;
    Ok(())
}

/// Write the snapshots local tasks hand over, and acknowledge each to the
/// coordinator — uploads run beside the tasks, which keep processing.
#[allow(clippy::too_many_arguments)]
fn forward_acks(
    state: &Arc<WorkerState>,
    storage: CheckpointStorage,
    savepoints: SavepointTargets,
    job: weir_core::graph::JobGraph,
    job_id: String,
    attempt: u32,
    acks: std::sync::mpsc::Receiver<CheckpointAck>,
    mut shared: Option<weir_state::SharedFiles>,
    completed: watch::Receiver<u64>,
) -> Result<()> {
    let state = Arc::clone(state);
    std::thread::Builder::new()
        .name(format!("weir acks {job_id}@{attempt}"))
        .spawn(move || {
            for ack in acks {
                let checkpoint_id = ack.checkpoint;
                let alignment_ms = ack.alignment_ms;
                let savepoint = lock(&savepoints).get(&checkpoint_id).cloned();
                if let Some(shared) = &mut shared {
                    shared.complete(*completed.borrow());
                }
                let result = match savepoint {
                    // Savepoints are self-contained: no shared files.
                    Some(target) => state.runtime.block_on(write_ack(&target, &job, ack, None)),
                    None => state
                        .runtime
                        .block_on(write_ack(&storage, &job, ack, shared.as_mut())),
                };
                let message = CheckpointAckMessage {
                    worker_id: lock(&state.worker_id).clone(),
                    job_id: job_id.clone(),
                    attempt,
                    checkpoint_id,
                    result,
                    alignment_ms,
                };
                let Ok(body) = serde_json::to_vec(&message) else {
                    continue;
                };
                if let Err(e) = state.runtime.block_on(call_action(
                    &leader(&state),
                    &state.credentials,
                    cluster::CHECKPOINT_ACK,
                    body,
                )) {
                    tracing::warn!("checkpoint {checkpoint_id} acknowledgement lost: {e}");
                }
            }
        })
        .map_err(|e| WeirError::Execution(format!("cannot start the ack thread: {e}")))?;
    Ok(())
}

struct WorkerActions {
    state: Arc<Mutex<Option<Arc<WorkerState>>>>,
    /// Deploys, cancels and checkpoint calls from a coordinator that no
    /// longer leads are refused.
    epochs: weir_flight::EpochFence,
}

fn bad_request(e: impl std::fmt::Display) -> tonic::Status {
    tonic::Status::invalid_argument(e.to_string())
}

#[tonic::async_trait]
impl ActionHandler for WorkerActions {
    fn check_epoch(&self, epoch: Option<u64>) -> std::result::Result<(), tonic::Status> {
        self.epochs.admit(epoch)
    }

    async fn handle(&self, kind: &str, body: Bytes) -> std::result::Result<Bytes, tonic::Status> {
        let state = lock(&self.state)
            .clone()
            .ok_or_else(|| tonic::Status::unavailable("the worker is starting"))?;
        match kind {
            cluster::DEPLOY => {
                let d: Deploy = serde_json::from_slice(&body)
                    .map_err(|e| bad_request(format!("malformed deployment: {e}")))?;
                let state2 = Arc::clone(&state);
                tokio::task::spawn_blocking(move || deploy(&state2, d))
                    .await
                    .map_err(|e| tonic::Status::internal(e.to_string()))?
                    .map_err(bad_request)?;
                Ok(Bytes::from_static(b"{}"))
            }
            cluster::CANCEL => {
                let c: Cancel = serde_json::from_slice(&body)
                    .map_err(|e| bad_request(format!("malformed cancel: {e}")))?;
                let prefix = format!("{}@", c.job_id);
                for (key, job) in lock(&state.jobs).iter() {
                    if key.starts_with(&prefix) {
                        job.cancel.send_replace(true);
                    }
                }
                Ok(Bytes::from_static(b"{}"))
            }
            cluster::PING => Ok(Bytes::from_static(b"{}")),
            cluster::TRIGGER_CHECKPOINT => {
                let t: TriggerCheckpoint = serde_json::from_slice(&body)
                    .map_err(|e| bad_request(format!("malformed trigger: {e}")))?;
                let barrier = weir_core::message::CheckpointBarrier {
                    id: t.checkpoint_id,
                    timestamp: t.timestamp,
                    kind: match (&t.savepoint_dir, t.drain, t.stop) {
                        (Some(_), true, _) => weir_core::message::BarrierKind::SavepointDrain,
                        (Some(_), false, true) => weir_core::message::BarrierKind::SavepointSuspend,
                        (Some(_), false, false) => weir_core::message::BarrierKind::Savepoint,
                        (None, _, _) => weir_core::message::BarrierKind::Checkpoint,
                    },
                    mode: if t.unaligned {
                        weir_core::message::AlignmentMode::Unaligned
                    } else {
                        weir_core::message::AlignmentMode::Aligned
                    },
                };
                if let Some(job) = lock(&state.jobs).get(&job_key(&t.job_id, t.attempt)) {
                    if let Some(dir) = &t.savepoint_dir {
                        let target = CheckpointStorage::open(dir).map_err(bad_request)?;
                        lock(&job.savepoints).insert(t.checkpoint_id, target);
                    }
                    for trigger in &job.triggers {
                        let _ = trigger.send(barrier);
                    }
                }
                Ok(Bytes::from_static(b"{}"))
            }
            cluster::CHECKPOINT_COMPLETE => {
                let c: CheckpointComplete = serde_json::from_slice(&body)
                    .map_err(|e| bad_request(format!("malformed completion: {e}")))?;
                if let Some(job) = lock(&state.jobs).get(&job_key(&c.job_id, c.attempt)) {
                    job.completed.send_replace(c.checkpoint_id);
                }
                Ok(Bytes::from_static(b"{}"))
            }
            other => Err(tonic::Status::invalid_argument(format!(
                "unknown action '{other}'"
            ))),
        }
    }

    fn actions(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            (cluster::DEPLOY, "run subtasks of a job"),
            (cluster::CANCEL, "stop a job's tasks"),
            (cluster::PING, "liveness probe"),
        ]
    }
}
