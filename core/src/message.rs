//! The messages that flow on every channel between operators.

use arrow::record_batch::RecordBatch;

/// Event time in milliseconds since the epoch.
pub type Timestamp = i64;

/// A watermark: the promise that no more records with a timestamp `<=` this
/// value will arrive on the channel that carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Watermark(pub Timestamp);

impl Watermark {
    /// The watermark before any event was seen.
    pub const MIN: Watermark = Watermark(i64::MIN);
    /// The watermark that ends event time: every pending window and timer fires.
    pub const MAX: Watermark = Watermark(i64::MAX);

    /// The timestamp value.
    pub fn timestamp(self) -> Timestamp {
        self.0
    }
}

/// Whether a barrier belongs to a periodic checkpoint or a user savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BarrierKind {
    /// A periodic checkpoint.
    Checkpoint,
    /// A savepoint triggered by the user.
    Savepoint,
    /// A stop-with-savepoint with drain: sources first emit the maximum
    /// watermark, so every window and event-time timer fires into the
    /// savepoint, then read no more (Flink's `stop --drain`).
    SavepointDrain,
    /// A stop-with-savepoint without drain: sources read no more after
    /// it, so nothing past the savepoint reaches a sink (nor an end of
    /// input that would commit it) before the job is cancelled (Flink's
    /// suspending savepoint).
    SavepointSuspend,
}

/// Whether a barrier waits for alignment or overtakes in-flight data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlignmentMode {
    /// Input channels are blocked until every channel has delivered the barrier.
    Aligned,
    /// The barrier overtakes queued data, which is stored with the snapshot.
    Unaligned,
}

/// A checkpoint barrier, injected at the sources and aligned at every task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CheckpointBarrier {
    /// Monotonically increasing checkpoint id.
    pub id: u64,
    /// Wall-clock time the checkpoint was triggered (ms since the epoch).
    pub timestamp: i64,
    /// Checkpoint or savepoint.
    pub kind: BarrierKind,
    /// Aligned or unaligned.
    pub mode: AlignmentMode,
}

/// One message on a channel. Data and control messages share one ordered
/// stream, so a watermark or barrier never overtakes the data sent before it
/// (except unaligned barriers, by design).
#[derive(Debug, Clone)]
pub enum StreamMessage {
    /// A batch of records.
    Data(RecordBatch),
    /// Event-time progress.
    Watermark(Watermark),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// An unaligned barrier that overtook the data queued in a local
    /// channel; the same barrier in-band (`Barrier`) later marks its place.
    PriorityBarrier(CheckpointBarrier),
    /// The channel became idle (`true`) or active again (`false`); idle channels
    /// are excluded from the watermark minimum.
    Idle(bool),
    /// The producer finished; nothing follows on this channel.
    EndOfStream,
}

impl StreamMessage {
    /// Short name of the message kind, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            StreamMessage::Data(_) => "data",
            StreamMessage::Watermark(_) => "watermark",
            StreamMessage::Barrier(_) => "barrier",
            StreamMessage::PriorityBarrier(_) => "priority barrier",
            StreamMessage::Idle(_) => "idle",
            StreamMessage::EndOfStream => "end-of-stream",
        }
    }
}
