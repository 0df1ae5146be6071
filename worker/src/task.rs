//! A task: one subtask of a job vertex, running its operator chain.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use weir_core::config::RuntimeMode;
use weir_core::graph::TaskMetrics;
use weir_core::message::{CheckpointBarrier, StreamMessage, Watermark};
use weir_core::metrics::LiveTask;
use weir_core::time::WatermarkStrategy;
use weir_core::{Result, WeirError};
use weir_operators::partition::BatchPartitioner;
use weir_operators::process::now_ms;
use weir_operators::window::timestamps;
use weir_operators::{Source, SourcePoll, StateTable};

use crate::chain::{ChainOutput, OperatorChain};
use crate::channel::ChannelSender;
use crate::gate::{GateEvent, InputGate};

/// The writer of one outgoing job edge: partitions batches over its channels
/// and broadcasts control messages to all of them.
pub struct RecordWriter {
    partitioner: BatchPartitioner,
    senders: Vec<Box<dyn ChannelSender>>,
    parts: Vec<(usize, RecordBatch)>,
    back_pressured: Arc<AtomicU64>,
    bytes_out: Option<Arc<LiveTask>>,
}

impl RecordWriter {
    /// A writer sending to `senders` (ordered by consumer subtask).
    pub fn new(partitioner: BatchPartitioner, senders: Vec<Box<dyn ChannelSender>>) -> Self {
        Self {
            partitioner,
            senders,
            parts: Vec::new(),
            back_pressured: Arc::default(),
            bytes_out: None,
        }
    }

    /// Count what it sends (bytes out, time back-pressured) in `live`.
    pub fn with_live_metrics(mut self, live: &Arc<LiveTask>) -> Self {
        self.back_pressured = Arc::clone(&live.back_pressured_ns);
        self.bytes_out = live.enabled.then(|| Arc::clone(live));
        self
    }

    async fn emit(&mut self, batch: RecordBatch) -> Result<()> {
        if let Some(live) = &self.bytes_out {
            live.bytes_out
                .fetch_add(weir_core::metrics::batch_bytes(&batch), Ordering::Relaxed);
        }
        let parts = &mut self.parts;
        self.partitioner.partition(batch, |c, b| {
            parts.push((c, b));
            Ok(())
        })?;
        let started = Instant::now();
        for (c, b) in self.parts.drain(..) {
            self.senders[c].send(StreamMessage::Data(b)).await?;
        }
        // A send that finds room takes well under a microsecond; what is
        // left is the time a full channel held this task back.
        let waited = started.elapsed().as_nanos() as u64;
        if waited > 20_000 {
            self.back_pressured.fetch_add(waited, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn broadcast(&mut self, message: StreamMessage) -> Result<()> {
        for s in &mut self.senders {
            s.send(message.clone()).await?;
        }
        Ok(())
    }

    /// Wait until every channel has room for a message.
    async fn ready(&mut self) -> Result<()> {
        for s in &mut self.senders {
            s.ready().await?;
        }
        Ok(())
    }

    async fn broadcast_priority(&mut self, barrier: CheckpointBarrier) -> Result<()> {
        for s in &mut self.senders {
            s.send_priority(barrier).await?;
        }
        Ok(())
    }
}

/// Wait until every channel of every writer has room; counted as time
/// back-pressured.
async fn outputs_ready(
    outputs: &mut [RecordWriter],
    side_outputs: &mut [(usize, String, RecordWriter)],
) -> Result<()> {
    let side = side_outputs.iter_mut().map(|(_, _, w)| w);
    for w in outputs.iter_mut().chain(side) {
        let started = Instant::now();
        w.ready().await?;
        let waited = started.elapsed().as_nanos() as u64;
        if waited > 20_000 {
            w.back_pressured.fetch_add(waited, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Where a task's records come from.
pub enum TaskInput {
    /// The chain's head is a source.
    Source {
        /// The source reader of this subtask.
        source: Box<dyn Source>,
        /// How its watermarks are derived.
        watermarks: WatermarkStrategy,
        /// Index of the event-time column in the source schema.
        rowtime: Option<usize>,
        /// Name of the source operator (metrics).
        name: String,
    },
    /// Network input channels.
    Gate(InputGate),
}

/// Everything a task needs to run.
pub struct Task {
    /// The job it belongs to (its name, or its id on a worker), for logs.
    pub job: String,
    /// Subtask name.
    pub name: String,
    /// Job vertex id.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// The chained operators (not including a source).
    pub chain: OperatorChain,
    /// One writer per outgoing main-output job edge.
    pub outputs: Vec<RecordWriter>,
    /// Writers of side-output edges: (operator position in the chain, tag).
    pub side_outputs: Vec<(usize, String, RecordWriter)>,
    /// Streaming or batch.
    pub mode: RuntimeMode,
    /// Minimum wall-clock time between two watermarks of a source.
    pub watermark_interval: Duration,
    /// Its live metrics (watermarks, rows, bytes, time idle and
    /// back-pressured), readable while the job runs.
    pub live: Arc<LiveTask>,
    /// The key groups of this subtask.
    pub key_groups: weir_core::keys::KeyGroupRange,
    /// Checkpointing, when the job checkpoints.
    pub checkpoints: Option<crate::checkpoint::TaskCheckpoints>,
    /// An unaligned snapshot waiting for its in-flight data.
    pub unaligned_snapshot: Option<(u64, UnalignedResult)>,
    /// In-flight batches of a restored unaligned checkpoint, processed
    /// before any new input.
    pub replay: Vec<(usize, RecordBatch)>,
    /// An aligned checkpoint still aligning after this long continues as
    /// an unaligned one.
    pub aligned_timeout: Option<Duration>,
    /// How long the barrier being snapshotted took to align (ms).
    pub alignment_ms: Option<u64>,
}

/// A task's snapshot tables per stream node, or why it declined.
pub type UnalignedResult = std::result::Result<Vec<(usize, Vec<StateTable>)>, String>;

impl Task {
    /// Run until `input` ends. Returns the task's metrics.
    pub async fn run(mut self, input: TaskInput) -> Result<TaskMetrics> {
        let source_rows = match input {
            TaskInput::Source {
                source,
                watermarks,
                rowtime,
                name,
            } => Some((name, self.run_source(source, watermarks, rowtime).await?)),
            TaskInput::Gate(gate) => {
                self.run_gate(gate).await?;
                None
            }
        };
        Ok(TaskMetrics {
            task: self.name.clone(),
            vertex: self.vertex,
            subtask: self.subtask,
            operators: self
                .chain
                .metrics(source_rows.as_ref().map(|(n, r)| (n.as_str(), *r))),
        })
    }

    async fn flush(&mut self, tail: &mut ChainOutput) -> Result<()> {
        self.chain.check_memory()?;
        if self.live.enabled {
            self.chain.publish(&self.live);
        }
        for (position, tag, batch) in tail.side.drain(..) {
            // A side output nobody reads is discarded, as in Flink.
            for (p, t, w) in &mut self.side_outputs {
                if *p == position && *t == tag {
                    w.emit(batch.clone()).await?;
                }
            }
        }
        for batch in tail.main.drain(..) {
            match self.outputs.as_mut_slice() {
                [] => {}
                [only] => only.emit(batch).await?,
                many => {
                    for w in many {
                        w.emit(batch.clone()).await?;
                    }
                }
            }
        }
        Ok(())
    }

    async fn broadcast(&mut self, message: StreamMessage) -> Result<()> {
        let side = self.side_outputs.iter_mut().map(|(_, _, w)| w);
        for w in self.outputs.iter_mut().chain(side) {
            w.broadcast(message.clone()).await?;
        }
        Ok(())
    }

    async fn advance_watermark(&mut self, w: Watermark, tail: &mut ChainOutput) -> Result<()> {
        self.live.watermark_in.fetch_max(w.0, Ordering::Relaxed);
        let forward = self.chain.on_watermark(w, tail)?;
        self.flush(tail).await?;
        if let Some(w) = forward {
            self.live.watermark_out.fetch_max(w.0, Ordering::Relaxed);
            self.broadcast(StreamMessage::Watermark(w)).await?;
        }
        Ok(())
    }

    async fn end_of_input(&mut self, tail: &mut ChainOutput) -> Result<()> {
        self.chain.finish(tail)?;
        self.flush(tail).await?;
        self.broadcast(StreamMessage::EndOfStream).await
    }

    async fn run_source(
        &mut self,
        mut source: Box<dyn Source>,
        watermarks: WatermarkStrategy,
        rowtime: Option<usize>,
    ) -> Result<u64> {
        let mut tail = ChainOutput::default();
        let mut rows = 0u64;
        let mut generator = crate::split_watermarks::SplitWatermarks::new(&watermarks);
        let mut emitted = Watermark::MIN;
        let mut last_emit = Instant::now();
        let mut last_data = Instant::now();
        let mut idle = false;
        let mut drained = false;
        let mut suspended = false;
        let streaming = self.mode == RuntimeMode::Streaming;
        loop {
            tokio::task::yield_now().await;
            if let Some(id) = self.checkpoint_notifications()? {
                source.notify_checkpoint_complete(id)?;
            }
            let trigger = match self.room_or_trigger().await? {
                Some(b) => Some(b),
                None => self
                    .checkpoints
                    .as_mut()
                    .and_then(|c| c.triggers.as_mut())
                    .and_then(|t| t.try_recv().ok()),
            };
            if let Some(barrier) = trigger {
                // A later barrier after a stop's savepoint: the stop did
                // not complete (the job goes on), so reading resumes.
                suspended = false;
                if barrier.kind == weir_core::message::BarrierKind::SavepointSuspend {
                    // The job ends with this savepoint: nothing read after
                    // it may reach a sink, nor an end of input commit it.
                    suspended = true;
                }
                if barrier.kind == weir_core::message::BarrierKind::SavepointDrain {
                    // Every window and timer fires into the savepoint; the
                    // source reads no more until the job is stopped.
                    self.advance_watermark(Watermark::MAX, &mut tail).await?;
                    drained = true;
                }
                // A union position reaches every subtask on restore.
                let table = if source.position_is_union() {
                    "union.position"
                } else {
                    "position"
                };
                let position = source
                    .snapshot_position(barrier.id)
                    .map(|p| vec![StateTable::new(table, p)]);
                self.checkpoint(barrier, Some(position)).await?;
            }
            if drained || suspended {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            let polled = source.poll_next()?;
            if let Some(lag) = source.lag() {
                self.live
                    .source_lag
                    .store(i64::try_from(lag).unwrap_or(i64::MAX), Ordering::Relaxed);
            }
            if let Some((done, all)) = source.splits_done() {
                self.live.splits.0.store(done, Ordering::Relaxed);
                self.live.splits.1.store(all, Ordering::Relaxed);
            }
            match polled {
                SourcePoll::Batch(batch) => {
                    rows += batch.num_rows() as u64;
                    self.live.source_rows.store(rows, Ordering::Relaxed);
                    last_data = Instant::now();
                    if idle {
                        idle = false;
                        self.broadcast(StreamMessage::Idle(false)).await?;
                    }
                    if let (Some(idx), true) = (rowtime, streaming) {
                        let name = batch.schema().field(idx).name().clone();
                        let ts = timestamps(batch.column(idx), &name)?;
                        match source.splits_of_last_batch() {
                            Some(runs) => {
                                let mut at = 0;
                                for &(split, n) in runs {
                                    let end = (at + n).min(ts.len());
                                    generator.on_timestamps(Some(split), &ts[at..end]);
                                    at = end;
                                }
                            }
                            None => generator.on_timestamps(None, ts),
                        }
                    }
                    self.chain.process(batch, &mut tail)?;
                    self.flush(&mut tail).await?;
                }
                SourcePoll::Pending(wait) => {
                    // Idle after the idle timeout without data, or at once
                    // when it has nothing to read (a subtask without splits).
                    let quiet = watermarks
                        .idleness
                        .is_some_and(|timeout| last_data.elapsed() >= timeout);
                    if !idle && (quiet || source.is_idle()) {
                        idle = true;
                        self.broadcast(StreamMessage::Idle(true)).await?;
                    }
                    let slept = Instant::now();
                    tokio::time::sleep(wait.max(Duration::from_micros(100))).await;
                    self.live.add_idle(slept.elapsed().as_nanos() as u64);
                }
                SourcePoll::Finished => break,
            }
            self.processing_time(&mut tail).await?;
            // Periodic watermarks, as Flink's auto-watermark interval; a
            // source that reads splits says which, so each counts.
            if streaming
                && last_emit.elapsed() >= self.watermark_interval
                && let Some(splits) = source.active_splits()
            {
                generator.register(&splits);
            }
            if streaming
                && last_emit.elapsed() >= self.watermark_interval
                && let Some(w) = generator.current_watermark()
                && w > emitted
            {
                emitted = w;
                last_emit = Instant::now();
                self.advance_watermark(w, &mut tail).await?;
            }
        }
        // End of a bounded input: the maximum watermark fires everything.
        self.advance_watermark(Watermark::MAX, &mut tail).await?;
        self.end_of_input(&mut tail).await?;
        Ok(rows)
    }

    /// A checkpointed source waits here, before reading more, until its
    /// outputs have room — and takes a checkpoint trigger that comes
    /// meanwhile, so a back-pressured source injects barriers at once
    /// instead of after its blocked send.
    async fn room_or_trigger(&mut self) -> Result<Option<CheckpointBarrier>> {
        let Task {
            outputs,
            side_outputs,
            checkpoints,
            ..
        } = self;
        let Some(triggers) = checkpoints.as_mut().and_then(|c| c.triggers.as_mut()) else {
            return Ok(None);
        };
        tokio::select! {
            biased;
            Some(barrier) = triggers.recv() => Ok(Some(barrier)),
            ready = outputs_ready(outputs, side_outputs) => ready.map(|_| None),
        }
    }

    /// A checkpointed task waits here, before reading more input, until its
    /// outputs have room — and returns an unaligned barrier that overtakes
    /// meanwhile on an input's priority lane.
    async fn room_or_priority_barrier(
        &mut self,
        gate: &mut InputGate,
    ) -> Result<Option<GateEvent>> {
        if self.checkpoints.is_none() {
            return Ok(None);
        }
        let Task {
            outputs,
            side_outputs,
            ..
        } = self;
        tokio::select! {
            biased;
            event = gate.next_priority() => Ok(Some(event)),
            ready = outputs_ready(outputs, side_outputs) => ready.map(|_| None),
        }
    }

    /// Snapshot this task for `barrier` (aligned: every input delivered it),
    /// hand the tables to the coordinator, forward the barrier. `source` is
    /// the source's position (source tasks). A task that cannot snapshot
    /// declines; the job goes on.
    async fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        source: Option<Result<Vec<StateTable>>>,
    ) -> Result<()> {
        let Some(c) = &self.checkpoints else {
            return Ok(());
        };
        let is_source = c.source_node.is_some();
        let mut states = Vec::new();
        let mut failure = None;
        if let (Some(node), Some(position)) = (c.source_node, source) {
            match position {
                Ok(tables) => states.push((node, tables)),
                Err(e) => failure = Some(e.to_string()),
            }
        }
        let nodes = c.chain_nodes.clone();
        match self.chain.snapshot(barrier.id) {
            Ok(tables) => states.extend(nodes.into_iter().zip(tables)),
            Err(e) => failure = failure.or(Some(e.to_string())),
        }
        let result = match failure {
            None => Ok(states),
            Some(reason) => Err(reason),
        };
        let unaligned = barrier.mode == weir_core::message::AlignmentMode::Unaligned;
        let mut barrier = barrier;
        if !unaligned && let Some(timeout) = self.aligned_timeout {
            // An aligned barrier that cannot leave within the aligned-
            // checkpoint timeout (counted from the trigger) goes on unaligned:
            // it overtakes the full queues, and downstream tasks snapshot at
            // once and store the data it overtook.
            let age =
                Duration::from_millis(now_ms().saturating_sub(barrier.timestamp).max(0) as u64);
            let left = timeout.saturating_sub(age);
            let Task {
                outputs,
                side_outputs,
                ..
            } = &mut *self;
            if tokio::time::timeout(left, outputs_ready(outputs, side_outputs))
                .await
                .is_err()
            {
                barrier.mode = weir_core::message::AlignmentMode::Unaligned;
            }
        }
        let overtake = barrier.mode == weir_core::message::AlignmentMode::Unaligned;
        if unaligned && !is_source {
            // The in-flight data still to come completes the snapshot.
            self.unaligned_snapshot = Some((barrier.id, result));
        } else {
            self.acknowledge(barrier.id, result);
        }
        if overtake {
            // Overtake what is queued downstream; the in-band copy below
            // marks the barrier's place for the consumers' in-flight record.
            let side = self.side_outputs.iter_mut().map(|(_, _, w)| w);
            for w in self.outputs.iter_mut().chain(side) {
                w.broadcast_priority(barrier).await?;
            }
        }
        self.broadcast(StreamMessage::Barrier(barrier)).await
    }

    /// Hand a snapshot (or a decline) to the checkpoint coordinator.
    fn acknowledge(
        &mut self,
        checkpoint: u64,
        result: std::result::Result<Vec<(usize, Vec<StateTable>)>, String>,
    ) {
        if let Some(c) = &self.checkpoints {
            let _ = c.acks.send(crate::checkpoint::CheckpointAck {
                checkpoint,
                vertex: self.vertex,
                subtask: self.subtask,
                key_groups: self.key_groups,
                alignment_ms: self.alignment_ms.take(),
                result,
            });
        }
    }

    /// The in-flight data of unaligned checkpoint `id` is complete: store
    /// it with the snapshot, as tables `__inflight_{input}` of the head.
    fn complete_unaligned(&mut self, id: u64, in_flight: Vec<(usize, RecordBatch)>) {
        let Some((pending, result)) = self.unaligned_snapshot.take() else {
            return;
        };
        if pending != id {
            return;
        }
        let head = self
            .checkpoints
            .as_ref()
            .and_then(|c| c.chain_nodes.first().copied());
        let result = result.and_then(|mut states| {
            let mut by_input: std::collections::BTreeMap<usize, Vec<RecordBatch>> =
                Default::default();
            for (input, b) in in_flight {
                by_input.entry(input).or_default().push(b);
            }
            let mut tables = Vec::new();
            for (input, batches) in by_input {
                let schema = batches[0].schema();
                let all =
                    arrow::compute::concat_batches(&schema, &batches).map_err(|e| e.to_string())?;
                tables.push(StateTable::new(format!("__inflight_{input}"), all));
            }
            if let (Some(head), false) = (head, tables.is_empty()) {
                match states.iter_mut().find(|(n, _)| *n == head) {
                    Some((_, t)) => t.extend(tables),
                    None => states.push((head, tables)),
                }
            }
            Ok(states)
        });
        self.acknowledge(id, result);
    }

    /// Tell the chain about checkpoints completed since the last look;
    /// returns the newest one, if any completed.
    fn checkpoint_notifications(&mut self) -> Result<Option<u64>> {
        let Some(c) = &mut self.checkpoints else {
            return Ok(None);
        };
        if !c.completed.has_changed().unwrap_or(false) {
            return Ok(None);
        }
        let id = *c.completed.borrow_and_update();
        self.chain.notify_checkpoint_complete(id)?;
        Ok(Some(id))
    }

    /// Fire processing-time timers that are due.
    async fn processing_time(&mut self, tail: &mut ChainOutput) -> Result<()> {
        let now = now_ms();
        if self.chain.next_processing_timer().is_some_and(|t| t <= now) {
            self.chain.on_processing_time(now, tail)?;
            self.flush(tail).await?;
        }
        Ok(())
    }

    async fn run_gate(&mut self, mut gate: InputGate) -> Result<()> {
        let mut tail = ChainOutput::default();
        let mut completions = self.checkpoints.as_ref().map(|c| c.completed.clone());
        for (input, batch) in std::mem::take(&mut self.replay) {
            self.chain.process_input(input, batch, &mut tail)?;
            self.flush(&mut tail).await?;
        }
        loop {
            // Yield between batches even when input is always ready (a
            // backlog read ahead), so cancellation gets through at once.
            tokio::task::yield_now().await;
            self.checkpoint_notifications()?;
            if let Some(GateEvent::Barrier(b)) = self.room_or_priority_barrier(&mut gate).await? {
                self.checkpoint(b, None).await?;
                continue;
            }
            // Wake for processing-time timers and for an alignment that
            // has taken longer than the aligned-checkpoint timeout.
            let alignment = self
                .aligned_timeout
                .and_then(|t| gate.aligning_since().map(|since| since + t));
            let timer = self.chain.next_processing_timer().map(|at| {
                std::time::Instant::now()
                    + Duration::from_millis(at.saturating_sub(now_ms()).max(0) as u64)
            });
            let wake = match (timer, alignment) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // A completed checkpoint is acted on at once (two-phase-commit
            // sinks publish), even when no input comes.
            let completion = async {
                let changed = match &mut completions {
                    Some(c) => c.changed().await.is_ok(),
                    None => false,
                };
                if !changed {
                    std::future::pending::<()>().await;
                }
            };
            let waiting = Instant::now();
            let event = match wake {
                None => tokio::select! {
                    event = gate.next() => event?,
                    _ = completion => continue,
                },
                Some(at) => {
                    tokio::select! {
                        event = gate.next() => event?,
                        _ = completion => continue,
                        _ = tokio::time::sleep_until(at.into()) => {
                            self.processing_time(&mut tail).await?;
                            match alignment.filter(|a| *a <= std::time::Instant::now()) {
                                Some(_) => match gate.switch_to_unaligned() {
                                    Some(event) => event,
                                    None => continue,
                                },
                                None => continue,
                            }
                        }
                    }
                }
            };
            self.live.add_idle(waiting.elapsed().as_nanos() as u64);
            match event {
                GateEvent::Data(input, batch) => {
                    self.live.add_bytes_in(&batch);
                    self.chain.process_input(input, batch, &mut tail)?;
                    self.flush(&mut tail).await?;
                }
                GateEvent::Watermark(w) => self.advance_watermark(w, &mut tail).await?,
                GateEvent::Idle(idle) => self.broadcast(StreamMessage::Idle(idle)).await?,
                GateEvent::Barrier(b) => {
                    if self.checkpoints.is_none() {
                        return Err(WeirError::Execution(format!(
                            "received checkpoint barrier {} but this job does not checkpoint",
                            b.id
                        )));
                    }
                    self.alignment_ms = gate.last_alignment().map(|d| d.as_millis() as u64);
                    self.checkpoint(b, None).await?;
                }
                GateEvent::InFlight(id, data) => self.complete_unaligned(id, data),
                GateEvent::EndOfInput => break,
            }
        }
        self.end_of_input(&mut tail).await
    }
}
