//! The local executor: runs a whole job graph in this process.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;
use weir_core::api::StreamExecutionEnvironment;
use weir_core::config::WeirConfig;
use weir_core::graph::{
    JobExecutor, JobGraph, JobResult, Partitioner, StreamNodeKind, TaskMetrics,
};
use weir_core::keys::KeyGroupRange;
use weir_core::{Result, WeirError};
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
    Ok(StreamExecutionEnvironment::new(config).with_executor(Arc::new(LocalExecutor)))
}

impl JobExecutor for LocalExecutor {
    fn execute(&self, job: JobGraph) -> Result<JobResult> {
        let threads = match job.config.worker_threads {
            0 => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            n => n,
        };
        // A dedicated thread, so that execute() also works when the caller is
        // itself inside an async runtime.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(threads)
                        .thread_name("weir-task")
                        .enable_time()
                        .build()
                        .map_err(|e| WeirError::Execution(format!("cannot start runtime: {e}")))?;
                    runtime.block_on(run_job(job))
                })
                .join()
                .map_err(|_| WeirError::Execution("job runner thread panicked".into()))?
        })
    }
}

/// Build every task of `job`, run them all, and fail fast on the first error.
pub async fn run_job(job: JobGraph) -> Result<JobResult> {
    let started = Instant::now();
    let tasks = build_tasks(&job)?;
    let mut set = JoinSet::new();
    let mut names = HashMap::new();
    for task in tasks {
        let name = task.name.clone();
        let handle = set.spawn(async move {
            let name = task.name.clone();
            task.run().await.map_err(|e| WeirError::Task {
                task: name,
                source: Box::new(e),
            })
        });
        names.insert(handle.id(), name);
    }
    let mut metrics: Vec<TaskMetrics> = Vec::new();
    let mut failure: Option<WeirError> = None;
    while let Some(joined) = set.join_next_with_id().await {
        let outcome = match joined {
            Ok((_, r)) => r,
            Err(e) => Err(WeirError::Task {
                task: names.get(&e.id()).cloned().unwrap_or_default(),
                source: Box::new(WeirError::Execution(if e.is_panic() {
                    panic_message(e.into_panic())
                } else {
                    "cancelled".into()
                })),
            }),
        };
        match outcome {
            Ok(m) => metrics.push(m),
            Err(e) => {
                // Tasks downstream of a failure see closed channels; keep the
                // root cause, not the echoes.
                if failure.is_none() || is_echo(failure.as_ref()) {
                    failure = Some(e);
                }
                set.abort_all();
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    metrics.sort_by_key(|m| (m.vertex, m.subtask));
    Ok(JobResult {
        job_name: job.job_name.clone(),
        duration: started.elapsed(),
        tasks: metrics,
    })
}

fn is_echo(e: Option<&WeirError>) -> bool {
    matches!(e, Some(WeirError::Task { source, .. }) if matches!(source.as_ref(), WeirError::Execution(m) if m.contains("closed")))
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

/// Instantiate the tasks of `job`: operators, sources, and local channels.
pub fn build_tasks(job: &JobGraph) -> Result<Vec<Task>> {
    let exec = job.execution_graph();
    let capacity = job.config.channel_capacity;
    // senders[(edge, producer)] ordered by consumer; receivers[(vertex, subtask)].
    let mut senders: HashMap<(usize, usize), Vec<Box<dyn ChannelSender>>> = HashMap::new();
    let mut receivers: HashMap<(usize, usize), Vec<Box<dyn ChannelReceiver>>> = HashMap::new();
    for c in &exec.channels {
        let edge = &job.edges[c.job_edge];
        let name = format!("{}.{}->{}.{}", edge.source, c.producer, edge.target, c.consumer);
        let (tx, rx) = local_channel(capacity, name);
        senders.entry((c.job_edge, c.producer)).or_default().push(tx);
        receivers.entry((edge.target, c.consumer)).or_default().push(rx);
    }
    let mut tasks = Vec::with_capacity(exec.subtasks.len());
    for st in &exec.subtasks {
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
                TaskInput::Gate(InputGate::new(
                    receivers.remove(&(st.vertex, st.subtask)).unwrap_or_default(),
                )),
                &vertex.nodes[..],
            ),
        };
        let operators = chain_nodes
            .iter()
            .map(|&n| create_operator(&job.nodes[n], &ctx))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| task_error(&st.name, e))?;
        let outputs = job
            .out_edges(st.vertex)
            .map(|(idx, e)| {
                let senders = senders.remove(&(idx, st.subtask)).unwrap_or_default();
                let partitioner = BatchPartitioner::new(
                    if e.partitioner == Partitioner::Forward {
                        Partitioner::Forward
                    } else {
                        e.partitioner.clone()
                    },
                    senders.len(),
                    job.config.max_parallelism,
                    st.subtask,
                );
                RecordWriter::new(partitioner, senders)
            })
            .collect();
        tasks.push(Task {
            name: st.name.clone(),
            vertex: st.vertex,
            subtask: st.subtask,
            input,
            chain: OperatorChain::new(operators),
            outputs,
            mode: job.config.runtime_mode,
        });
    }
    Ok(tasks)
}

fn task_error(task: &str, e: WeirError) -> WeirError {
    WeirError::Task {
        task: task.to_string(),
        source: Box::new(e),
    }
}
