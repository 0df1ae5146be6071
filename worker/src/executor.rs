//! The local executor: runs a whole job graph in this process.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Instant;

use tokio::sync::watch;
use weir_core::api::StreamExecutionEnvironment;
use weir_core::config::{ExchangeMode, WeirConfig};
use weir_core::graph::{JobClient, JobExecutor, JobGraph, JobResult, StreamNodeKind, TaskMetrics};
use weir_core::keys::KeyGroupRange;
use weir_core::message::Watermark;
use weir_core::metrics::LiveTask;
use weir_core::{Result, WeirError};
use weir_flight::{ExchangeServer, LazyFlightSender, SinkServer, TlsPem};
use weir_operators::partition::BatchPartitioner;
use weir_operators::{OperatorContext, create_operator, create_source};

use crate::chain::OperatorChain;
use crate::channel::{ChannelReceiver, ChannelSender, local_channel};
use crate::gate::InputGate;
use crate::task::{RecordWriter, Task, TaskInput};

/// Runs every subtask of a job as a task on an in-process multi-threaded
/// runtime, connected by bounded in-memory channels: the embedded default.
#[derive(Debug, Clone, Default)]
pub struct LocalExecutor;

/// An environment that runs jobs in this process, configured from defaults
/// and `WEIR_*` environment variables.
pub fn local_environment() -> Result<StreamExecutionEnvironment> {
    let config = WeirConfig::default().with_env()?;
    Ok(StreamExecutionEnvironment::new(config)
        .with_executor(Arc::new(LocalExecutor))
        .with_connectors(Arc::new(crate::connectors::ProcessConnectors)))
}

impl JobExecutor for LocalExecutor {
    fn submit(&self, job: JobGraph) -> Result<Box<dyn JobClient>> {
        let (cancel, _) = watch::channel(false);
        let cancel = Arc::new(cancel);
        let cancelled = Arc::new(AtomicBool::new(false));
        let name = job.job_name.clone();
        let sinks = SinkHost::start_if_needed(&job)?;
        let signal = Arc::clone(&cancel);
        let (watermarks, run): (Vec<_>, Box<dyn FnOnce() -> Result<JobResult> + Send>) =
            if checkpoints_enabled(&job) {
                // Tasks are rebuilt on every restart: no fixed watermarks.
                (
                    vec![],
                    Box::new(move || crate::recovery::run_checkpointed(job, Some(signal))),
                )
            } else {
                let (tasks, host) = build_tasks(&job)?;
                let watermarks = tasks
                    .iter()
                    .map(|(t, _)| (t.name.clone(), Arc::clone(&t.live.watermark_in)))
                    .collect();
                (
                    watermarks,
                    Box::new(move || {
                        let result = run_tasks(job, tasks, signal);
                        drop(host);
                        result
                    }),
                )
            };
        let thread = std::thread::Builder::new()
            .name(format!("weir job: {name}").chars().take(60).collect())
            .spawn(run)
            .map_err(|e| WeirError::Execution(format!("cannot start job thread: {e}")))?;
        Ok(Box::new(LocalJob {
            name,
            cancel,
            cancelled,
            thread,
            watermarks,
            sinks,
        }))
    }

    fn execute(&self, job: JobGraph) -> Result<JobResult> {
        // Flight sinks are served while the job runs (use `execute_async`
        // for the endpoint and to keep serving after the job ends).
        let sinks = SinkHost::start_if_needed(&job)?;
        if let Some(host) = &sinks {
            tracing::info!(
                "Flight sinks and sources of '{}' served on {}",
                job.job_name,
                host.addr
            );
        }
        let result = run_job(job);
        drop(sinks);
        result
    }
}

/// A job running on the local executor.
struct LocalJob {
    name: String,
    cancel: Arc<watch::Sender<bool>>,
    cancelled: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<JobResult>>,
    watermarks: Vec<(String, Arc<AtomicI64>)>,
    sinks: Option<SinkHost>,
}

impl JobClient for LocalJob {
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel.send_replace(true);
    }

    fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    fn sink_endpoint(&self) -> Option<std::net::SocketAddr> {
        self.sinks.as_ref().map(|s| s.addr)
    }

    fn watermarks(&self) -> Vec<(String, Watermark)> {
        self.watermarks
            .iter()
            .map(|(n, w)| (n.clone(), Watermark(w.load(Ordering::Relaxed))))
            .collect()
    }

    fn wait(self: Box<Self>) -> Result<JobResult> {
        let outcome = self
            .thread
            .join()
            .map_err(|_| WeirError::Execution("job thread panicked".into()))?;
        if self.cancelled.load(Ordering::SeqCst) {
            return Err(WeirError::Cancelled(self.name));
        }
        outcome
    }
}

/// Whether `job` runs under checkpoint control: a streaming job with a
/// checkpoint interval, or one starting from a savepoint.
pub fn checkpoints_enabled(job: &JobGraph) -> bool {
    (job.config.checkpoint_interval.is_some() || job.config.restore_from.is_some())
        && job.config.runtime_mode == weir_core::config::RuntimeMode::Streaming
}

/// Build every task of `job` and run each on its own thread (as Flink runs
/// each task on its own thread: a blocking user function or a slow sink
/// stalls only its own task, and back-pressure does the rest). The first
/// failure cancels every other task; the root cause is returned.
pub fn run_job(job: JobGraph) -> Result<JobResult> {
    if checkpoints_enabled(&job) {
        return crate::recovery::run_checkpointed(job, None);
    }
    let (tasks, host) = build_tasks(&job)?;
    let result = run_tasks(job, tasks, Arc::new(watch::channel(false).0));
    drop(host);
    result
}

/// A task starting or ending, for whoever tracks task states.
pub enum TaskEvent<'a> {
    /// The task's thread is running it.
    Running {
        /// Job vertex.
        vertex: usize,
        /// Subtask index.
        subtask: usize,
    },
    /// The task ended.
    Ended {
        /// Job vertex.
        vertex: usize,
        /// Subtask index.
        subtask: usize,
        /// Its metrics, or why it failed.
        outcome: &'a Result<TaskMetrics>,
    },
}

/// Observes task events (called from the task threads).
pub type TaskObserver = Arc<dyn Fn(TaskEvent<'_>) + Send + Sync>;

/// Run built tasks until they end or `cancel_tx` is set.
fn run_tasks(
    job: JobGraph,
    tasks: Vec<(Task, TaskInput)>,
    cancel_tx: Arc<watch::Sender<bool>>,
) -> Result<JobResult> {
    let started = Instant::now();
    let metrics = run_observed_tasks(tasks, cancel_tx, Arc::new(|_| {}))?;
    Ok(JobResult {
        job_name: job.job_name.clone(),
        duration: started.elapsed(),
        tasks: metrics,
        ..Default::default()
    })
}

/// Run built tasks, each on its own thread, until they end or `cancel_tx`
/// is set; the first failure cancels the rest and is returned (the root
/// cause, not the echoes in the tasks next to it).
pub fn run_observed_tasks(
    tasks: Vec<(Task, TaskInput)>,
    cancel_tx: Arc<watch::Sender<bool>>,
    observer: TaskObserver,
) -> Result<Vec<TaskMetrics>> {
    let cancel_rx = cancel_tx.subscribe();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<(String, Result<TaskMetrics>)>();
    let mut threads = Vec::with_capacity(tasks.len());
    for (task, input) in tasks {
        let name = task.name.clone();
        let done = done_tx.clone();
        let mut cancel = cancel_rx.clone();
        let thread_name = format!("weir: {name}");
        let observer = Arc::clone(&observer);
        let spawned = std::thread::Builder::new()
            .name(thread_name.chars().take(60).collect())
            .spawn(move || {
                let name = task.name.clone();
                // Every log line of the task names its job and itself.
                let span = tracing::info_span!("task", job = %task.job, task = %name);
                let _entered = span.enter();
                let (vertex, subtask) = (task.vertex, task.subtask);
                observer(TaskEvent::Running { vertex, subtask });
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| WeirError::Execution(format!("cannot start runtime: {e}")))?;
                    runtime.block_on(async move {
                        tokio::select! {
                            r = task.run(input) => r,
                            _ = cancel.wait_for(|c| *c) => Err(WeirError::Execution("cancelled".into())),
                        }
                    })
                }))
                .unwrap_or_else(|p| Err(WeirError::Execution(panic_message(p))));
                observer(TaskEvent::Ended {
                    vertex,
                    subtask,
                    outcome: &outcome,
                });
                let _ = done.send((name, outcome));
            })
            .map_err(|e| WeirError::Execution(format!("cannot start task thread for {name}: {e}")))?;
        threads.push(spawned);
    }
    drop(done_tx);
    let mut metrics: Vec<TaskMetrics> = Vec::new();
    let mut failure: Option<WeirError> = None;
    for (task, outcome) in done_rx.iter() {
        match outcome {
            Ok(m) => metrics.push(m),
            Err(e) => {
                let e = WeirError::Task {
                    task,
                    source: Box::new(e),
                };
                // Tasks next to a failure see closed channels or the
                // cancellation; keep the root cause, not the echoes.
                if failure.as_ref().is_none_or(is_echo) {
                    failure = Some(e);
                }
                let _ = cancel_tx.send(true);
            }
        }
    }
    for t in threads {
        let _ = t.join();
    }
    if let Some(e) = failure {
        return Err(e);
    }
    metrics.sort_by_key(|m| (m.vertex, m.subtask));
    Ok(metrics)
}

fn is_echo(e: &WeirError) -> bool {
    e.is_symptom()
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".into()
    }
}

/// The receiving end of a channel and the consumer input it feeds.
type InputChannelEnd = (usize, Box<dyn ChannelReceiver>);

/// Instantiate the tasks of `job`: operators, sources, and local channels.
/// The Flight exchange of a job run with [`ExchangeMode::Flight`]: a
/// loopback server on its own runtime, alive as long as this value.
pub struct ExchangeHost {
    server: ExchangeServer,
    addr: std::net::SocketAddr,
    _serving: tokio::task::JoinHandle<()>,
    _runtime: tokio::runtime::Runtime,
}

impl ExchangeHost {
    fn start() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-exchange")
            .enable_all()
            .build()
            .map_err(|e| WeirError::Execution(format!("cannot start the exchange runtime: {e}")))?;
        let server = ExchangeServer::new();
        let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let (addr, serving) = runtime.block_on(server.serve(loopback))?;
        Ok(Self {
            server,
            addr,
            _serving: serving,
            _runtime: runtime,
        })
    }
}

/// The Flight endpoint serving a job's Flight sinks, on `sink_bind`
/// (loopback by default), guarded by `sink_token` when set.
struct SinkHost {
    addr: std::net::SocketAddr,
    _serving: tokio::task::JoinHandle<()>,
    _runtime: tokio::runtime::Runtime,
}

impl SinkHost {
    fn start_if_needed(job: &JobGraph) -> Result<Option<Self>> {
        // Flight sinks are read, Flight sources pushed into, on one endpoint.
        fn flight_source(spec: &weir_core::spec::SourceSpec) -> bool {
            match spec {
                weir_core::spec::SourceSpec::Connector(c) => c.connector == "flight",
                weir_core::spec::SourceSpec::Computed(c) => flight_source(&c.inner),
            }
        }
        let uses_flight = job.nodes.iter().any(|n| match &n.kind {
            StreamNodeKind::Sink(s) => s.connector == "flight",
            StreamNodeKind::Source { spec, .. } => flight_source(spec),
            _ => false,
        });
        if !uses_flight {
            return Ok(None);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-sinks")
            .enable_all()
            .build()
            .map_err(|e| WeirError::Execution(format!("cannot start the sink server: {e}")))?;
        let tls = match &job.config.sink_tls {
            Some(files) => Some(TlsPem::read(&files.cert, &files.key)?),
            None => None,
        };
        let (addr, serving) = runtime.block_on(SinkServer::serve(
            job.config.sink_bind,
            job.config.sink_token.clone(),
            tls,
        ))?;
        Ok(Some(Self {
            addr,
            _serving: serving,
            _runtime: runtime,
        }))
    }
}

/// Tasks of a job, and the exchange they need (if any).
pub type BuiltTasks = (Vec<(Task, TaskInput)>, Option<ExchangeHost>);

/// Instantiate the tasks of `job`: operators, sources, and channels.
pub fn build_tasks(job: &JobGraph) -> Result<BuiltTasks> {
    let host = match job.config.exchange {
        ExchangeMode::Local => None,
        ExchangeMode::Flight => Some(ExchangeHost::start()?),
    };
    let capacity = job.config.channel_capacity;
    let tasks = build_placed_tasks(job, &|_, _| true, &mut |c| {
        let name = c.name.as_str();
        let (tx, rx): (Box<dyn ChannelSender>, Box<dyn ChannelReceiver>) = match &host {
            None => local_channel(capacity, name.to_string()),
            Some(h) => (
                Box::new(
                    LazyFlightSender::new(h.addr, name.to_string(), capacity)
                        .with_compression(job.config.exchange_compression),
                ),
                h.server.register(name, capacity),
            ),
        };
        Ok((Some(tx), Some(rx)))
    })?;
    Ok((tasks, host))
}

/// Both ends of a channel as seen from one process: the sender when the
/// producer runs here, the receiver when the consumer does.
pub type ChannelEnds = (
    Option<Box<dyn ChannelSender>>,
    Option<Box<dyn ChannelReceiver>>,
);

/// A channel of the execution graph, seen from one process.
pub struct ChannelInfo {
    /// `edge-source.producer->edge-target.consumer`, unique within a job.
    pub name: String,
    /// Producer (vertex, subtask).
    pub producer: (usize, usize),
    /// Consumer (vertex, subtask).
    pub consumer: (usize, usize),
    /// Whether the producer runs here.
    pub producer_here: bool,
    /// Whether the consumer runs here.
    pub consumer_here: bool,
}

/// Instantiate the tasks of `job` that run in this process (`is_local`
/// of vertex and subtask), with channels from `channel`: the local executor makes every channel here;
/// a worker makes local queues, Flight senders towards other workers and
/// Flight receivers on its own endpoint.
pub fn build_placed_tasks(
    job: &JobGraph,
    is_local: &dyn Fn(usize, usize) -> bool,
    channel: &mut dyn FnMut(&ChannelInfo) -> Result<ChannelEnds>,
) -> Result<Vec<(Task, TaskInput)>> {
    let exec = job.execution_graph();
    // senders[(edge, producer)] ordered by consumer; receivers[(vertex, subtask)].
    let mut senders: HashMap<(usize, usize), Vec<Box<dyn ChannelSender>>> = HashMap::new();
    let mut receivers: HashMap<(usize, usize), Vec<InputChannelEnd>> = HashMap::new();
    for c in &exec.channels {
        let edge = &job.edges[c.job_edge];
        let name = format!(
            "{}.{}->{}.{}",
            edge.source, c.producer, edge.target, c.consumer
        );
        let producer_here = is_local(edge.source, c.producer);
        let consumer_here = is_local(edge.target, c.consumer);
        if !producer_here && !consumer_here {
            continue;
        }
        let (tx, rx) = channel(&ChannelInfo {
            name,
            producer: (edge.source, c.producer),
            consumer: (edge.target, c.consumer),
            producer_here,
            consumer_here,
        })?;
        if let Some(tx) = tx {
            senders
                .entry((c.job_edge, c.producer))
                .or_default()
                .push(tx);
        }
        if let Some(rx) = rx {
            receivers
                .entry((edge.target, c.consumer))
                .or_default()
                .push((edge.target_input, rx));
        }
    }
    let mut tasks = Vec::with_capacity(exec.subtasks.len());
    let connectors = crate::connectors::connectors();
    // One managed-memory budget for the job's tasks in this process.
    let memory = weir_operators::memory::StateMemory::new(&job.config.state);
    let local_tasks = exec
        .subtasks
        .iter()
        .filter(|st| is_local(st.vertex, st.subtask))
        .count();
    for st in exec
        .subtasks
        .iter()
        .filter(|st| is_local(st.vertex, st.subtask))
    {
        let vertex = &job.vertices[st.vertex];
        let ctx = OperatorContext {
            task_name: st.name.clone(),
            subtask: st.subtask,
            parallelism: st.parallelism,
            key_groups: KeyGroupRange::for_subtask(
                st.subtask,
                st.parallelism,
                job.config.max_parallelism,
            ),
            config: job.config.clone(),
            connectors: connectors.clone(),
            memory: memory.clone(),
            local_tasks,
        };
        let head = &job.nodes[vertex.nodes[0]];
        let (input, chain_nodes) = match &head.kind {
            StreamNodeKind::Source { watermarks, .. } => {
                let rowtime = watermarks
                    .timestamp_column
                    .as_ref()
                    .map(|c| head.schema.index_of(c))
                    .transpose()?;
                let source = create_source(head, &ctx).map_err(|e| task_error(&st.name, e))?;
                (
                    TaskInput::Source {
                        source,
                        watermarks: watermarks.clone(),
                        rowtime,
                        name: head.name.clone(),
                    },
                    &vertex.nodes[1..],
                )
            }
            _ => (
                TaskInput::Gate(
                    InputGate::with_inputs(
                        receivers
                            .remove(&(st.vertex, st.subtask))
                            .unwrap_or_default(),
                    )
                    .with_read_ahead_limit(job.config.checkpoint_unaligned_read_ahead)
                    .at_least_once(
                        job.config.checkpoint_mode
                            == weir_core::config::CheckpointingMode::AtLeastOnce,
                    ),
                ),
                &vertex.nodes[..],
            ),
        };
        let operators = chain_nodes
            .iter()
            .map(|&n| create_operator(&job.nodes[n], &ctx))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| task_error(&st.name, e))?;
        let chain = OperatorChain::new(operators).with_memory(&memory);
        let source_name = match &input {
            TaskInput::Source { name, .. } => Some(name.clone()),
            TaskInput::Gate(_) => None,
        };
        let live = Arc::new(
            LiveTask::new(
                st.name.clone(),
                (st.vertex, st.subtask),
                source_name,
                chain.names(),
            )
            .with_enabled(job.config.live_metrics),
        );
        let mut outputs = Vec::new();
        let mut side_outputs = Vec::new();
        for (idx, e) in job.out_edges(st.vertex) {
            let senders = senders.remove(&(idx, st.subtask)).unwrap_or_default();
            let partitioner = BatchPartitioner::new(
                e.partitioner.clone(),
                senders.len(),
                job.config.max_parallelism,
                st.subtask,
            );
            let writer = RecordWriter::new(partitioner, senders).with_live_metrics(&live);
            match &e.tag {
                None => outputs.push(writer),
                Some(tag) => {
                    let position = chain_nodes
                        .iter()
                        .position(|&n| n == e.source_node)
                        .ok_or_else(|| {
                            WeirError::Execution(format!(
                                "side output '{tag}' comes from a node outside its vertex"
                            ))
                        })?;
                    side_outputs.push((position, tag.clone(), writer));
                }
            }
        }
        tasks.push((
            Task {
                job: job.job_name.clone(),
                name: st.name.clone(),
                vertex: st.vertex,
                subtask: st.subtask,
                chain,
                outputs,
                side_outputs,
                mode: job.config.runtime_mode,
                watermark_interval: job.config.watermark_interval,
                live,
                key_groups: ctx.key_groups,
                checkpoints: None,
                unaligned_snapshot: None,
                replay: Vec::new(),
                aligned_timeout: job.config.checkpoint_aligned_timeout,
                alignment_ms: None,
            },
            input,
        ));
    }
    Ok(tasks)
}

fn task_error(task: &str, e: WeirError) -> WeirError {
    WeirError::Task {
        task: task.to_string(),
        source: Box::new(e),
    }
}
