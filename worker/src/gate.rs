//! The input gate: one task's view of all its input channels.

use std::future::poll_fn;
use std::task::{Context, Poll};

use arrow::record_batch::RecordBatch;
use weir_core::message::{CheckpointBarrier, StreamMessage, Watermark};
use weir_core::{Result, WeirError};

use crate::channel::ChannelReceiver;

/// What the gate hands to the task.
#[derive(Debug)]
pub enum GateEvent {
    /// A data batch from a channel of input `.0`.
    Data(usize, RecordBatch),
    /// The combined watermark advanced.
    Watermark(Watermark),
    /// Every input channel became idle (`true`) or one became active (`false`).
    Idle(bool),
    /// A checkpoint barrier arrived on a channel (aligned: on every channel;
    /// unaligned: on the first one — snapshot now).
    Barrier(CheckpointBarrier),
    /// Unaligned checkpoint `.0`: every channel's in-band barrier arrived;
    /// `.1` are the batches (with their input) that were in flight — received
    /// after the snapshot but sent before the barrier — to store with it.
    InFlight(u64, Vec<(usize, RecordBatch)>),
    /// Every channel delivered end-of-stream.
    EndOfInput,
}

struct InputChannel {
    receiver: Box<dyn ChannelReceiver>,
    input: usize,
    watermark: Watermark,
    idle: bool,
    finished: bool,
    /// Delivered the barrier being aligned: not read until the others have.
    blocked: bool,
}

/// Merges the task's input channels. The gate owns the watermark minimum: it
/// forwards `min(watermark of every non-idle, unfinished channel)` whenever
/// that minimum advances, so operators never see a watermark go back.
/// Channels are polled round-robin, so a busy channel cannot starve others.
pub struct InputGate {
    channels: Vec<InputChannel>,
    watermark: Watermark,
    all_idle: bool,
    next: usize,
    remaining: usize,
    stashed: Option<GateEvent>,
    /// The barrier being aligned, and since when.
    aligning: Option<CheckpointBarrier>,
    aligning_since: Option<std::time::Instant>,
    /// How long the last barrier took from its first channel to its last.
    last_alignment: Option<std::time::Duration>,
    /// The unaligned checkpoint whose in-flight data is being recorded.
    unaligned: Option<Unaligned>,
    /// Messages taken out of their channels early (to complete an unaligned
    /// checkpoint's in-flight record), still to be processed, in order.
    backlog: std::collections::VecDeque<(usize, StreamMessage)>,
    /// Bytes of the batches in the backlog.
    backlog_bytes: usize,
    /// Read no further ahead for an unaligned checkpoint once the backlog
    /// holds this many bytes: what a full channel frees fills up again, so
    /// reading ahead without a limit would grow without bound under
    /// sustained back-pressure. Beyond it, the checkpoint's in-flight data
    /// is recorded as the task gets to it.
    read_ahead_limit: usize,
    /// At-least-once checkpoints: a channel that delivered the barrier
    /// goes on being read; the snapshot comes with the last barrier.
    at_least_once: bool,
}

/// Default [`InputGate::with_read_ahead_limit`].
pub const DEFAULT_READ_AHEAD_LIMIT: usize = 64 * 1024 * 1024;

/// An unaligned checkpoint between its snapshot and the last in-band
/// barrier.
struct Unaligned {
    id: u64,
    /// Channels whose in-band barrier has not come: their data is recorded.
    recording: Vec<bool>,
    /// Recorded batches and their input.
    in_flight: Vec<(usize, RecordBatch)>,
}

impl InputGate {
    /// A gate over `receivers` of a single-input task.
    pub fn new(receivers: Vec<Box<dyn ChannelReceiver>>) -> Self {
        Self::with_inputs(receivers.into_iter().map(|r| (0, r)).collect())
    }

    /// A gate over receivers each tagged with the operator input they feed.
    /// The watermark is the minimum over the channels of all inputs.
    pub fn with_inputs(receivers: Vec<(usize, Box<dyn ChannelReceiver>)>) -> Self {
        let remaining = receivers.len();
        Self {
            channels: receivers
                .into_iter()
                .map(|(input, receiver)| InputChannel {
                    receiver,
                    input,
                    watermark: Watermark::MIN,
                    idle: false,
                    finished: false,
                    blocked: false,
                })
                .collect(),
            watermark: Watermark::MIN,
            all_idle: false,
            next: 0,
            remaining,
            stashed: None,
            aligning: None,
            aligning_since: None,
            last_alignment: None,
            unaligned: None,
            backlog: Default::default(),
            backlog_bytes: 0,
            read_ahead_limit: DEFAULT_READ_AHEAD_LIMIT,
            at_least_once: false,
        }
    }

    /// Track barriers without blocking channels (at-least-once checkpoints).
    pub fn at_least_once(mut self, yes: bool) -> Self {
        self.at_least_once = yes;
        self
    }

    /// Bound the data read ahead (bytes) to complete unaligned checkpoints.
    pub fn with_read_ahead_limit(mut self, bytes: usize) -> Self {
        self.read_ahead_limit = bytes;
        self
    }

    /// The combined watermark forwarded so far.
    pub fn current_watermark(&self) -> Watermark {
        self.watermark
    }

    /// The next event.
    pub async fn next(&mut self) -> Result<GateEvent> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<GateEvent>> {
        if let Some(event) = self.stashed.take() {
            return Poll::Ready(Ok(event));
        }
        // An unaligned checkpoint does not wait for queued data: everything
        // queued before each channel's barrier is read out now, recorded
        // with the checkpoint and processed afterwards.
        if self.unaligned.is_some() {
            if let Err(e) = self.drain_in_flight(cx) {
                return Poll::Ready(Err(e));
            }
            if let Some(done) = self.in_flight_complete() {
                return Poll::Ready(Ok(done));
            }
        }
        while let Some((i, message)) = self.backlog.pop_front() {
            if let StreamMessage::Data(b) = &message {
                self.backlog_bytes = self.backlog_bytes.saturating_sub(b.get_array_memory_size());
            }
            if let Some(event) = self.on_message_from(i, message, true) {
                return Poll::Ready(Ok(event));
            }
        }
        if self.remaining == 0 {
            return Poll::Ready(Ok(GateEvent::EndOfInput));
        }
        let n = self.channels.len();
        // Keep polling until a whole round finds every channel pending.
        let mut pending_in_a_row = 0;
        while pending_in_a_row < n {
            let i = self.next;
            self.next = (self.next + 1) % n;
            if self.channels[i].finished || (self.channels[i].blocked && !self.at_least_once) {
                // A blocked channel keeps its data queued (aligned
                // checkpoints: nothing after barrier n is processed before
                // the snapshot of n), which back-pressures its producer.
                pending_in_a_row += 1;
                continue;
            }
            let message = match self.channels[i].receiver.poll_recv(cx) {
                Poll::Pending => {
                    pending_in_a_row += 1;
                    continue;
                }
                Poll::Ready(None) => {
                    return Poll::Ready(Err(WeirError::ChannelGone(format!(
                        "input channel {i} closed before end of stream (upstream task failed or was cancelled)"
                    ))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(Some(Ok(m))) => m,
            };
            pending_in_a_row = 0;
            if let Some(event) = self.on_message(i, message) {
                return Poll::Ready(Ok(event));
            }
            if self.remaining == 0 {
                return Poll::Ready(Ok(GateEvent::EndOfInput));
            }
        }
        Poll::Pending
    }

    /// Wait for an unaligned barrier on any channel's priority lane, leaving
    /// queued data unread: a back-pressured task waiting for room in its
    /// outputs still snapshots when an unaligned checkpoint overtakes.
    pub async fn next_priority(&mut self) -> GateEvent {
        poll_fn(|cx| {
            for i in 0..self.channels.len() {
                while let Poll::Ready(Some(m)) = self.channels[i].receiver.poll_priority(cx) {
                    if let StreamMessage::PriorityBarrier(b) = m
                        && let Some(event) = self.on_unaligned(i, b, false)
                    {
                        return Poll::Ready(event);
                    }
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Read the recording channels up to their in-band barrier.
    fn drain_in_flight(&mut self, cx: &mut Context<'_>) -> Result<()> {
        let Some(id) = self.unaligned.as_ref().map(|u| u.id) else {
            return Ok(());
        };
        for j in 0..self.channels.len() {
            while self.unaligned.as_ref().is_some_and(|u| u.recording[j])
                && self.backlog_bytes < self.read_ahead_limit
            {
                let message = match self.channels[j].receiver.poll_recv(cx) {
                    Poll::Pending => break,
                    Poll::Ready(None) => {
                        return Err(WeirError::ChannelGone(format!(
                            "input channel {j} closed before end of stream (upstream task failed or was cancelled)"
                        )));
                    }
                    Poll::Ready(Some(m)) => m?,
                };
                let u = self.unaligned.as_mut().expect("checked in the loop");
                match message {
                    StreamMessage::Barrier(b) if b.id == id => u.recording[j] = false,
                    // A newer checkpoint's overtaking barrier, while this
                    // one's data is still read out: that checkpoint starts at
                    // its in-band barrier instead (a snapshot now would miss
                    // the backlog still to be processed).
                    StreamMessage::PriorityBarrier(_) => {}
                    StreamMessage::Data(b) => {
                        u.in_flight.push((self.channels[j].input, b.clone()));
                        self.backlog_bytes += b.get_array_memory_size();
                        self.backlog.push_back((j, StreamMessage::Data(b)));
                    }
                    StreamMessage::EndOfStream => {
                        u.recording[j] = false;
                        self.backlog.push_back((j, StreamMessage::EndOfStream));
                    }
                    other => self.backlog.push_back((j, other)),
                }
            }
        }
        Ok(())
    }

    fn on_message(&mut self, i: usize, message: StreamMessage) -> Option<GateEvent> {
        self.on_message_from(i, message, false)
    }

    /// `from_backlog`: the message was read early and is already recorded.
    fn on_message_from(
        &mut self,
        i: usize,
        message: StreamMessage,
        from_backlog: bool,
    ) -> Option<GateEvent> {
        let ch = &mut self.channels[i];
        match message {
            StreamMessage::Data(b) => {
                ch.idle = false;
                let input = ch.input;
                if let Some(u) = self
                    .unaligned
                    .as_mut()
                    .filter(|u| u.recording[i] && !from_backlog)
                {
                    u.in_flight.push((input, b.clone()));
                }
                self.wake(Some(GateEvent::Data(input, b)))
            }
            StreamMessage::Watermark(w) => {
                if w > ch.watermark {
                    ch.watermark = w;
                }
                ch.idle = false;
                let advanced = self.advance_watermark();
                self.wake(advanced)
            }
            StreamMessage::Idle(idle) => {
                ch.idle = idle;
                let all_idle = self.channels.iter().all(|c| c.idle || c.finished);
                if all_idle && !self.all_idle {
                    // As Flink's watermark valve: when the last active channel
                    // goes idle, the largest watermark of any channel is safe.
                    self.all_idle = true;
                    let max = self.channels.iter().map(|c| c.watermark).max();
                    if let Some(max) = max.filter(|&m| m > self.watermark) {
                        self.watermark = max;
                        self.stashed = Some(GateEvent::Idle(true));
                        return Some(GateEvent::Watermark(max));
                    }
                    return Some(GateEvent::Idle(true));
                }
                if !all_idle && self.all_idle {
                    self.all_idle = false;
                    return Some(GateEvent::Idle(false));
                }
                self.advance_watermark()
            }
            StreamMessage::PriorityBarrier(b) => self.on_unaligned(i, b, false),
            StreamMessage::Barrier(b) if b.mode == weir_core::message::AlignmentMode::Unaligned => {
                self.on_unaligned(i, b, true)
            }
            StreamMessage::Barrier(b) if self.unaligned.as_ref().is_some_and(|u| u.id == b.id) => {
                // An aligned checkpoint that switched to unaligned: this
                // barrier marks the channel's place.
                self.on_unaligned(i, b, true)
            }
            StreamMessage::Barrier(b) => {
                match &self.aligning {
                    Some(a) if a.id > b.id => return None, // an abandoned checkpoint
                    Some(a) if a.id < b.id => {
                        // A newer checkpoint supersedes the one being aligned.
                        for c in &mut self.channels {
                            c.blocked = false;
                        }
                        self.aligning = Some(b);
                    }
                    Some(_) => {}
                    None => {
                        self.aligning = Some(b);
                        self.aligning_since = Some(std::time::Instant::now());
                    }
                }
                self.channels[i].blocked = true;
                self.aligned()
            }
            StreamMessage::EndOfStream => {
                ch.finished = true;
                self.remaining -= 1;
                if let Some(u) = self.unaligned.as_mut() {
                    u.recording[i] = false;
                }
                if let Some(done) = self.in_flight_complete() {
                    self.stashed = self.advance_watermark();
                    return Some(done);
                }
                if self.remaining == 0 {
                    return None;
                }
                if let Some(event) = self.aligned() {
                    self.stashed = self.advance_watermark();
                    return Some(event);
                }
                self.advance_watermark()
            }
        }
    }

    /// Unaligned barrier `b` on channel `i`, overtaking (`in_band` false) or
    /// at its place in the stream (`in_band` true). The first sighting of a
    /// checkpoint snapshots at once; each channel's data is recorded until
    /// its in-band barrier arrives.
    fn on_unaligned(&mut self, i: usize, b: CheckpointBarrier, in_band: bool) -> Option<GateEvent> {
        let mut snapshot = None;
        match &self.unaligned {
            Some(u) if u.id > b.id => return None, // an abandoned checkpoint
            Some(u) if u.id == b.id => {}
            _ => {
                let mut u = self.start_recording(b.id);
                match self.aligning.take() {
                    Some(a) if a.id > b.id => {
                        // A newer aligned checkpoint is under way.
                        self.aligning = Some(a);
                        return None;
                    }
                    Some(a) => {
                        // The checkpoint being aligned went on unaligned
                        // upstream (aligned-checkpoint timeout): channels
                        // that delivered its barrier are done.
                        if a.id == b.id {
                            for (r, c) in u.recording.iter_mut().zip(&self.channels) {
                                *r &= !c.blocked;
                            }
                        }
                        for c in &mut self.channels {
                            c.blocked = false;
                        }
                        self.aligning_since = None;
                    }
                    None => {}
                }
                self.unaligned = Some(u);
                snapshot = Some(GateEvent::Barrier(b));
            }
        }
        if in_band && let Some(u) = self.unaligned.as_mut() {
            u.recording[i] = false;
        }
        let done = self.in_flight_complete();
        match (snapshot, done) {
            (Some(s), Some(d)) => {
                self.stashed = Some(d);
                Some(s)
            }
            (Some(s), None) => Some(s),
            (None, d) => d,
        }
    }

    /// Start recording the in-flight data of unaligned checkpoint `id`,
    /// snapshotting now. Messages already read but not yet processed (the
    /// backlog, a stashed batch) precede the barrier on their channels: they
    /// are part of the in-flight data — up to a channel's barrier of `id`
    /// already in the backlog, after which that channel is done.
    fn start_recording(&self, id: u64) -> Unaligned {
        let mut recording: Vec<bool> = self.channels.iter().map(|c| !c.finished).collect();
        let mut in_flight = Vec::new();
        if let Some(GateEvent::Data(input, b)) = &self.stashed {
            in_flight.push((*input, b.clone()));
        }
        for (j, m) in &self.backlog {
            match m {
                StreamMessage::Data(b) if recording[*j] => {
                    in_flight.push((self.channels[*j].input, b.clone()));
                }
                StreamMessage::Barrier(b) if b.id == id => recording[*j] = false,
                StreamMessage::EndOfStream => recording[*j] = false,
                _ => {}
            }
        }
        Unaligned {
            id,
            recording,
            in_flight,
        }
    }

    /// The in-flight data of the unaligned checkpoint, once every channel's
    /// in-band barrier has arrived.
    fn in_flight_complete(&mut self) -> Option<GateEvent> {
        if self.unaligned.as_ref()?.recording.iter().any(|r| *r) {
            return None;
        }
        let u = self.unaligned.take()?;
        Some(GateEvent::InFlight(u.id, u.in_flight))
    }

    /// The barrier being aligned, once every unfinished channel delivered
    /// it: the channels are released and the barrier handed to the task.
    fn aligned(&mut self) -> Option<GateEvent> {
        self.aligning.as_ref()?;
        if self.channels.iter().any(|c| !c.finished && !c.blocked) {
            return None;
        }
        for c in &mut self.channels {
            c.blocked = false;
        }
        self.last_alignment = self.aligning_since.take().map(|t| t.elapsed());
        self.aligning.take().map(GateEvent::Barrier)
    }

    /// How long the barrier handed over last took to align (from its
    /// first channel to its last; zero with a single input channel).
    pub fn last_alignment(&self) -> Option<std::time::Duration> {
        self.last_alignment
    }

    /// When the barrier being aligned arrived on its first channel.
    pub fn aligning_since(&self) -> Option<std::time::Instant> {
        self.aligning.as_ref().and(self.aligning_since)
    }

    /// Give up aligning: the checkpoint continues unaligned — snapshot now,
    /// record what the channels still missing the barrier deliver before it.
    pub fn switch_to_unaligned(&mut self) -> Option<GateEvent> {
        let mut barrier = self.aligning.take()?;
        self.aligning_since = None;
        barrier.mode = weir_core::message::AlignmentMode::Unaligned;
        let mut unaligned = self.start_recording(barrier.id);
        for (r, c) in unaligned.recording.iter_mut().zip(&self.channels) {
            // A blocked channel delivered the barrier already.
            *r &= !c.blocked;
        }
        self.unaligned = Some(unaligned);
        for c in &mut self.channels {
            c.blocked = false;
        }
        Some(GateEvent::Barrier(barrier))
    }

    /// A channel showed activity: if every channel had been idle, announce
    /// that the input is active again before handing over `event`.
    fn wake(&mut self, event: Option<GateEvent>) -> Option<GateEvent> {
        if !self.all_idle {
            return event;
        }
        self.all_idle = false;
        self.stashed = event;
        Some(GateEvent::Idle(false))
    }

    fn advance_watermark(&mut self) -> Option<GateEvent> {
        let min = self
            .channels
            .iter()
            .filter(|c| !c.idle && !c.finished)
            .map(|c| c.watermark)
            .min()?;
        if min > self.watermark {
            self.watermark = min;
            Some(GateEvent::Watermark(min))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::local_channel;

    #[tokio::test]
    async fn watermark_is_the_minimum_of_active_channels() {
        let (mut a_tx, a_rx) = local_channel(8, "a".into());
        let (mut b_tx, b_rx) = local_channel(8, "b".into());
        let mut gate = InputGate::new(vec![a_rx, b_rx]);
        a_tx.send(StreamMessage::Watermark(Watermark(10)))
            .await
            .unwrap();
        b_tx.send(StreamMessage::Watermark(Watermark(5)))
            .await
            .unwrap();
        match gate.next().await.unwrap() {
            GateEvent::Watermark(w) => assert_eq!(w, Watermark(5)),
            other => panic!("{other:?}"),
        }
        // b goes idle: a alone decides.
        b_tx.send(StreamMessage::Idle(true)).await.unwrap();
        match gate.next().await.unwrap() {
            GateEvent::Watermark(w) => assert_eq!(w, Watermark(10)),
            other => panic!("{other:?}"),
        }
        a_tx.send(StreamMessage::EndOfStream).await.unwrap();
        b_tx.send(StreamMessage::EndOfStream).await.unwrap();
        assert!(matches!(gate.next().await.unwrap(), GateEvent::EndOfInput));
    }

    #[tokio::test]
    async fn all_idle_then_active_again() {
        let (mut a_tx, a_rx) = local_channel(8, "a".into());
        let mut gate = InputGate::new(vec![a_rx]);
        a_tx.send(StreamMessage::Idle(true)).await.unwrap();
        assert!(matches!(gate.next().await.unwrap(), GateEvent::Idle(true)));
        a_tx.send(StreamMessage::Watermark(Watermark(3)))
            .await
            .unwrap();
        assert!(matches!(gate.next().await.unwrap(), GateEvent::Idle(false)));
        assert!(matches!(
            gate.next().await.unwrap(),
            GateEvent::Watermark(Watermark(3))
        ));
    }

    fn batch(v: i64) -> RecordBatch {
        let a: arrow::array::ArrayRef =
            std::sync::Arc::new(arrow::array::Int64Array::from(vec![v]));
        RecordBatch::try_from_iter([("v", a)]).unwrap()
    }

    fn value(b: &RecordBatch) -> i64 {
        use arrow::array::AsArray;
        b.column(0)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .value(0)
    }

    /// An unaligned barrier overtakes queued data; the data before its
    /// in-band copy is the checkpoint's in-flight data, whether read ahead
    /// at once or — past the read-ahead limit — as the task gets to it.
    #[tokio::test]
    async fn unaligned_barriers_record_the_data_they_overtook() {
        for limit in [DEFAULT_READ_AHEAD_LIMIT, 1] {
            let (mut tx, rx) = local_channel(8, "a".into());
            let mut gate = InputGate::new(vec![rx]).with_read_ahead_limit(limit);
            let barrier = CheckpointBarrier {
                id: 1,
                timestamp: 0,
                kind: weir_core::message::BarrierKind::Checkpoint,
                mode: weir_core::message::AlignmentMode::Unaligned,
            };
            for v in [1, 2] {
                tx.send(StreamMessage::Data(batch(v))).await.unwrap();
            }
            tx.send_priority(barrier).await.unwrap();
            tx.send(StreamMessage::Barrier(barrier)).await.unwrap();
            tx.send(StreamMessage::Data(batch(3))).await.unwrap();
            tx.send(StreamMessage::EndOfStream).await.unwrap();
            let (mut data, mut in_flight, mut snapshot_at) = (vec![], None, None);
            loop {
                match gate.next().await.unwrap() {
                    GateEvent::Barrier(b) => snapshot_at = Some((b.id, data.len())),
                    GateEvent::Data(_, b) => data.push(value(&b)),
                    GateEvent::InFlight(id, batches) => {
                        assert_eq!(id, 1);
                        in_flight = Some(batches.iter().map(|(_, b)| value(b)).collect::<Vec<_>>());
                    }
                    GateEvent::EndOfInput => break,
                    _ => {}
                }
            }
            assert_eq!(
                snapshot_at,
                Some((1, 0)),
                "limit {limit}: snapshot before any data"
            );
            assert_eq!(
                data,
                vec![1, 2, 3],
                "limit {limit}: every batch once, in order"
            );
            assert_eq!(in_flight, Some(vec![1, 2]), "limit {limit}");
        }
    }

    #[tokio::test]
    async fn a_vanished_producer_is_an_error() {
        let (tx, rx) = local_channel(8, "a".into());
        drop(tx);
        let mut gate = InputGate::new(vec![rx]);
        assert!(gate.next().await.is_err());
    }
}
