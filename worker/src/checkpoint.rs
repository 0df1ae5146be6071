//! Checkpoints in the task runtime, and the checkpoint coordinator of the
//! embedded (in-process) executor.
//!
//! The protocol is Flink's aligned-barrier snapshot:
//!
//! 1. the coordinator triggers checkpoint *n*: every source task, between two
//!    batches, snapshots its source position and chain and sends barrier *n*
//!    downstream in-band;
//! 2. a task with several input channels stops reading a channel once it has
//!    delivered barrier *n* (its data stays queued), and when every channel
//!    has, snapshots its chain and forwards the barrier;
//! 3. each task hands its snapshot (Arrow tables) to the coordinator and goes
//!    on processing — the coordinator writes the Parquet files, so uploads
//!    never stall the pipeline;
//! 4. when every task has acknowledged *n* and every file is written, the
//!    coordinator writes `chk-n/_metadata` (the commit point), drops old
//!    checkpoints beyond the retained count and tells every task, which
//!    calls `notify_checkpoint_complete` (two-phase-commit sinks publish).
//!
//! A task that cannot snapshot (an operator without checkpoint support, an
//! I/O error) declines: the checkpoint is abandoned, the job goes on.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use weir_core::graph::JobGraph;
use weir_core::keys::KeyGroupRange;
use weir_core::message::{AlignmentMode, BarrierKind, CheckpointBarrier};
use weir_core::{Result, WeirError};
use weir_operators::StateTable;
use weir_state::{CheckpointStorage, Manifest, OperatorHandle, SharedFiles, SubtaskHandle};

/// A task's answer to a checkpoint.
pub struct CheckpointAck {
    /// Checkpoint id.
    pub checkpoint: u64,
    /// Job vertex.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// Its key groups.
    pub key_groups: KeyGroupRange,
    /// How long its barrier took to align, in ms (tasks fed by channels).
    pub alignment_ms: Option<u64>,
    /// Per stream node of the task (source first, then the chain): its
    /// tables; or why the task declined.
    pub result: std::result::Result<Vec<(usize, Vec<StateTable>)>, String>,
}

/// What a task needs to take part in checkpoints.
pub struct TaskCheckpoints {
    /// Triggers (source tasks only).
    pub triggers: Option<mpsc::UnboundedReceiver<CheckpointBarrier>>,
    /// Where acknowledgements go.
    pub acks: std::sync::mpsc::Sender<CheckpointAck>,
    /// The newest completed checkpoint.
    pub completed: watch::Receiver<u64>,
    /// Stream node of each chained operator, head first.
    pub chain_nodes: Vec<usize>,
    /// The source's stream node (source tasks).
    pub source_node: Option<usize>,
}

/// Checkpointing settings of a job.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// Time between two checkpoint triggers.
    pub interval: Duration,
    /// A checkpoint not complete after this long is abandoned.
    pub timeout: Duration,
    /// Completed checkpoints kept.
    pub retained: usize,
    /// Least time from one checkpoint's end to the next trigger.
    pub min_pause: Duration,
    /// Consecutive failures tolerated (none: unlimited).
    pub tolerable_failures: Option<u32>,
}

/// The coordinator side, in-process: triggers, collects, writes, commits.
pub struct LocalCheckpointCoordinator {
    storage: CheckpointStorage,
    config: CheckpointConfig,
    job: JobGraph,
    triggers: Vec<mpsc::UnboundedSender<CheckpointBarrier>>,
    acks: std::sync::mpsc::Receiver<CheckpointAck>,
    completed: watch::Sender<u64>,
    tasks: usize,
    next_id: u64,
    /// Completed and abandoned checkpoints, for reporting.
    pub stats: Arc<std::sync::Mutex<CheckpointStats>>,
    /// Incremental checkpoints: the shared files that may be reused.
    shared: Option<SharedFiles>,
}

/// What the coordinator has done so far.
#[derive(Debug, Clone, Default)]
pub struct CheckpointStats {
    /// Completed checkpoint ids.
    pub completed: Vec<u64>,
    /// Abandoned checkpoints with the reason.
    pub declined: Vec<(u64, String)>,
    /// Duration and bytes of each completed checkpoint.
    pub sizes: Vec<(u64, Duration, u64)>,
    /// The newest checkpoint id triggered.
    pub last_triggered: u64,
    /// Why the job must fail over (too many failed checkpoints).
    pub fatal: Option<String>,
}

/// The task-side ends made for one run of a job.
pub struct CheckpointWiring {
    /// For each source subtask `(vertex, subtask)`: its trigger receiver.
    pub triggers: HashMap<(usize, usize), mpsc::UnboundedReceiver<CheckpointBarrier>>,
    /// Cloned into every task.
    pub acks: std::sync::mpsc::Sender<CheckpointAck>,
    /// Cloned into every task.
    pub completed: watch::Receiver<u64>,
}

impl LocalCheckpointCoordinator {
    /// A coordinator for `job`, whose source subtasks are `sources` and which
    /// has `tasks` tasks in all; checkpoint ids continue after `last_id`.
    pub fn new(
        job: &JobGraph,
        storage: CheckpointStorage,
        config: CheckpointConfig,
        sources: &[(usize, usize)],
        tasks: usize,
        last_id: u64,
    ) -> (Self, CheckpointWiring) {
        let (ack_tx, ack_rx) = std::sync::mpsc::channel();
        let (completed_tx, completed_rx) = watch::channel(last_id);
        let mut triggers = Vec::new();
        let mut receivers = HashMap::new();
        for &s in sources {
            let (tx, rx) = mpsc::unbounded_channel();
            triggers.push(tx);
            receivers.insert(s, rx);
        }
        (
            Self {
                storage,
                config,
                job: job.clone(),
                triggers,
                acks: ack_rx,
                completed: completed_tx,
                tasks,
                next_id: last_id + 1,
                stats: Arc::default(),
                shared: job.config.checkpoint_incremental.then(SharedFiles::new),
            },
            CheckpointWiring {
                triggers: receivers,
                acks: ack_tx,
                completed: completed_rx,
            },
        )
    }

    /// Incremental checkpoints may reuse the shared files of `restored`, a
    /// checkpoint of the same storage.
    pub fn reuse_files_of(&mut self, restored: &Manifest) {
        if let Some(shared) = &mut self.shared {
            shared.seed(restored);
        }
    }

    /// Trigger checkpoints every interval until `stop` is set or a source has
    /// ended (a finished source can no longer inject barriers).
    pub fn run(mut self, stop: Arc<AtomicBool>, fail_job: Arc<watch::Sender<bool>>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!("checkpoint coordinator cannot start: {e}");
                return;
            }
        };
        let mut declined_in_a_row = 0u32;
        let mut last_trigger = Instant::now();
        let mut last_end = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            // Trigger to trigger `interval`, end to trigger `min_pause`.
            let next = (last_trigger + self.config.interval).max(last_end + self.config.min_pause);
            if !sleep_unless(&stop, next.saturating_duration_since(Instant::now())) {
                return;
            }
            last_trigger = Instant::now();
            let id = self.next_id;
            self.next_id += 1;
            self.stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .last_triggered = id;
            let started = Instant::now();
            let barrier = CheckpointBarrier {
                id,
                timestamp: weir_operators::process::now_ms(),
                kind: BarrierKind::Checkpoint,
                mode: if self.job.config.checkpoint_unaligned {
                    AlignmentMode::Unaligned
                } else {
                    AlignmentMode::Aligned
                },
            };
            if self.triggers.iter().any(|t| t.send(barrier).is_err()) {
                // A source has finished: no further checkpoint can complete.
                return;
            }
            let outcome = runtime.block_on(self.collect(id, barrier.timestamp, &stop));
            last_end = Instant::now();
            match outcome {
                Ok(Some(bytes)) => {
                    declined_in_a_row = 0;
                    let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
                    s.completed.push(id);
                    s.sizes.push((id, started.elapsed(), bytes));
                    drop(s);
                    self.completed.send_replace(id);
                    if let Err(e) = runtime.block_on(self.storage.retain(self.config.retained)) {
                        tracing::warn!("checkpoint retention: {e}");
                    }
                }
                Ok(None) => return,
                Err(reason) => {
                    tracing::warn!("checkpoint {id} declined: {reason}");
                    declined_in_a_row += 1;
                    let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
                    s.declined.push((id, reason.to_string()));
                    if self
                        .config
                        .tolerable_failures
                        .is_some_and(|t| declined_in_a_row > t)
                    {
                        s.fatal = Some(format!(
                            "{declined_in_a_row} checkpoints failed in a row (tolerable: {}); \
                             the last: {reason}",
                            self.config.tolerable_failures.unwrap_or(0)
                        ));
                        drop(s);
                        fail_job.send_replace(true);
                        return;
                    }
                }
            }
        }
    }

    /// Gather every task's acknowledgement of `id`, write the tables, commit.
    /// `Ok(None)` when the job is stopping.
    async fn collect(&mut self, id: u64, timestamp: i64, stop: &AtomicBool) -> Result<Option<u64>> {
        let deadline = Instant::now() + self.config.timeout;
        let mut subtasks = Vec::new();
        let mut acked = 0;
        while acked < self.tasks {
            if stop.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let ack = match self.acks.recv_timeout(Duration::from_millis(20)) {
                Ok(a) => a,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if Instant::now() > deadline {
                        return Err(WeirError::Execution(format!(
                            "checkpoint {id} timed out after {:?} ({acked} of {} tasks acknowledged)",
                            self.config.timeout, self.tasks
                        )));
                    }
                    continue;
                }
                Err(_) => return Ok(None),
            };
            if ack.checkpoint != id {
                continue; // a late answer to an abandoned checkpoint
            }
            acked += 1;
            let (vertex, subtask) = (ack.vertex, ack.subtask);
            let handle = write_ack(&self.storage, &self.job, ack, self.shared.as_mut())
                .await
                .map_err(|reason| {
                    WeirError::Execution(format!("task {vertex}.{subtask} declined: {reason}"))
                })?;
            subtasks.push(handle);
        }
        subtasks.sort_by_key(|s| (s.vertex, s.subtask));
        let manifest = Manifest {
            job_name: self.job.job_name.clone(),
            checkpoint_id: id,
            timestamp_ms: timestamp,
            max_parallelism: self.job.config.max_parallelism,
            subtasks,
            leader_epoch: None,
        };
        self.storage.commit(&manifest).await?;
        if let Some(shared) = &mut self.shared {
            shared.complete(id);
        }
        Ok(Some(manifest.written_bytes()))
    }
}

/// Sleep `d` in small steps; false when `stop` was set meanwhile.
fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5).min(end - Instant::now()));
    }
    !stop.load(Ordering::SeqCst)
}

/// Checkpoint plumbing for `task`: its chain's stream nodes and, for a
/// source task, the source node and trigger receiver.
pub fn task_checkpoints(
    job: &JobGraph,
    task: &crate::task::Task,
    is_source: bool,
    triggers: Option<mpsc::UnboundedReceiver<CheckpointBarrier>>,
    acks: std::sync::mpsc::Sender<CheckpointAck>,
    completed: watch::Receiver<u64>,
) -> TaskCheckpoints {
    let nodes = &job.vertices[task.vertex].nodes;
    TaskCheckpoints {
        triggers,
        acks,
        completed,
        chain_nodes: if is_source {
            nodes[1..].to_vec()
        } else {
            nodes.clone()
        },
        source_node: is_source.then(|| nodes[0]),
    }
}

/// Write a task's acknowledged tables to `storage`: its handle for the
/// manifest, or why it declined. With `shared` (incremental checkpoints,
/// never savepoints) keyed tables go in chunks of key groups under
/// `shared/`, each reused while unchanged.
pub async fn write_ack(
    storage: &CheckpointStorage,
    job: &JobGraph,
    ack: CheckpointAck,
    mut shared: Option<&mut SharedFiles>,
) -> std::result::Result<SubtaskHandle, String> {
    let states = ack.result?;
    let mut operators = Vec::new();
    for (node, tables) in states {
        let uid = operator_uid(job, node);
        let mut handles = Vec::new();
        let mut parts: HashMap<String, usize> = HashMap::new();
        for t in tables {
            let part = parts.entry(t.name.clone()).or_default();
            *part += 1;
            let Some(shared) = shared.as_deref_mut() else {
                handles.push(
                    storage
                        .write_table(
                            ack.checkpoint,
                            &uid,
                            &t.name,
                            *part - 1,
                            ack.subtask,
                            ack.key_groups,
                            &t.batch,
                            t.key_columns.as_deref().unwrap_or(&[]),
                        )
                        .await
                        .map_err(|e| e.to_string())?,
                );
                continue;
            };
            // A whole table unchanged since the last checkpoint: its chunks
            // again, without splitting it.
            let table_key = format!(
                "{uid}/{name}-s{subtask}-{:032x}",
                weir_state::content_hash(&t.batch),
                name = t.name,
                subtask = ack.subtask
            );
            if let Some(chunks) = shared.lookup_table(&table_key) {
                let chunks = chunks.to_vec();
                shared.record_table(ack.checkpoint, table_key, &chunks);
                handles.extend(chunks);
                continue;
            }
            let chunks = match &t.key_columns {
                Some(keys) => {
                    key_group_chunks(&t.batch, keys, ack.key_groups, job.config.max_parallelism)
                        .map_err(|e| e.to_string())?
                }
                None => vec![(ack.key_groups, t.batch.clone())],
            };
            let mut written = Vec::with_capacity(chunks.len());
            for (range, chunk) in chunks {
                let handle = storage
                    .write_shared_table(
                        ack.checkpoint,
                        &uid,
                        &t.name,
                        ack.subtask,
                        range,
                        &chunk,
                        t.key_columns.as_deref().unwrap_or(&[]),
                        shared,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                written.push(handle);
            }
            shared.record_table(ack.checkpoint, table_key, &written);
            handles.extend(written);
        }
        if !handles.is_empty() {
            operators.push(OperatorHandle {
                node,
                uid,
                tables: handles,
            });
        }
    }
    Ok(SubtaskHandle {
        vertex: ack.vertex,
        subtask: ack.subtask,
        operators,
    })
}

/// Chunks of key groups an incremental checkpoint writes a keyed table in.
const CHUNKS: u32 = 16;

/// Split a keyed table (key columns `keys`) of a subtask owning `range`
/// into up to [`CHUNKS`] tables of consecutive key groups, each with its
/// sub-range; empty chunks are left out.
fn key_group_chunks(
    batch: &arrow::record_batch::RecordBatch,
    keys: &[usize],
    range: KeyGroupRange,
    max_parallelism: u32,
) -> Result<Vec<(KeyGroupRange, arrow::record_batch::RecordBatch)>> {
    let n = CHUNKS.min(range.len()).max(1);
    let bound = |c: u32| range.start + (c as u64 * range.len() as u64 / n as u64) as u32;
    let mut groups = Vec::new();
    let columns: Vec<arrow::array::ArrayRef> =
        keys.iter().map(|&k| Arc::clone(batch.column(k))).collect();
    weir_core::keys::key_groups(&columns, max_parallelism, &mut Vec::new(), &mut groups)?;
    let mut rows: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
    for (row, &kg) in groups.iter().enumerate() {
        let offset = kg.clamp(range.start, range.end.saturating_sub(1)) - range.start;
        let c = (offset as u64 * n as u64 / range.len().max(1) as u64) as usize;
        rows[c.min(n as usize - 1)].push(row as u32);
    }
    let mut out = Vec::new();
    for (c, picks) in rows.into_iter().enumerate() {
        if picks.is_empty() {
            continue;
        }
        let c = c as u32;
        let indices = arrow::array::UInt32Array::from(picks);
        let chunk = arrow::compute::take_record_batch(batch, &indices)?;
        let sub = KeyGroupRange {
            start: bound(c),
            end: bound(c + 1),
        };
        out.push((sub, chunk));
    }
    Ok(out)
}

/// The uid state is filed under: the operator's `uid()`, else `node-{id}`.
pub fn operator_uid(job: &JobGraph, node: usize) -> String {
    job.nodes
        .get(node)
        .and_then(|n| n.uid.clone())
        .unwrap_or_else(|| format!("node-{node}"))
}

/// The tables of checkpoint `manifest` that subtask `subtask` of `vertex`
/// (now at `parallelism`) restores, per stream node. At the parallelism
/// the checkpoint was taken with, those its own index wrote; after a
/// rescale, every subtask's — keyed operators keep the rows of their key
/// groups, operator state (source splits, sink files) is divided by the
/// operator (even split by the old subtask index). Union list state
/// (`union.*` tables) comes from every old subtask in either case.
pub async fn tables_for(
    storage: &CheckpointStorage,
    manifest: &Manifest,
    job: &JobGraph,
    vertex: usize,
    subtask: usize,
    parallelism: usize,
    allow_non_restored_state: bool,
) -> Result<HashMap<usize, Vec<StateTable>>> {
    let old_parallelism = manifest
        .subtasks
        .iter()
        .filter(|s| s.vertex == vertex)
        .count();
    let rescaled = old_parallelism != parallelism;
    let mut out: HashMap<usize, Vec<StateTable>> = HashMap::new();
    for s in manifest.subtasks.iter().filter(|s| s.vertex == vertex) {
        // Union list state reaches every subtask from every old one.
        let own = rescaled || s.subtask == subtask;
        for op in &s.operators {
            if operator_uid(job, op.node) != op.uid {
                if allow_non_restored_state {
                    continue;
                }
                return Err(WeirError::Execution(format!(
                    "checkpoint {} holds state of operator '{}' that this job does not have \
                     (allow non-restored state to skip it)",
                    manifest.checkpoint_id, op.uid
                )));
            }
            for t in op
                .tables
                .iter()
                .filter(|t| own || weir_core::process::is_union_table(&t.name))
            {
                let batch = storage.read_table(t).await?;
                out.entry(op.node)
                    .or_default()
                    .push(StateTable::new(t.name.clone(), batch));
            }
        }
    }
    Ok(out)
}
