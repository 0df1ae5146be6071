//! The channel contract between tasks.
//!
//! A channel carries [`StreamMessage`]s from one producer subtask to one
//! consumer subtask, in order, with a bounded capacity: a full channel makes
//! the producer wait, which is how back-pressure travels up to the sources.
//! Within a process a channel is a bounded in-memory queue (`weir-worker`);
//! across processes an Arrow Flight stream (`weir-flight`) implements the
//! same traits with the same semantics.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Result;
use crate::message::StreamMessage;

/// A boxed future of a channel operation.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// The producing end of a channel.
pub trait ChannelSender: Send {
    /// Send one message, waiting while the channel is full. Fails when the
    /// consumer is gone (its task failed or was cancelled).
    fn send(&mut self, message: StreamMessage) -> SendFuture<'_>;

    /// Send an unaligned barrier ahead of the queued messages, when the
    /// channel has a priority lane (local channels do). Without one this
    /// does nothing: the in-band barrier that follows carries it.
    fn send_priority(&mut self, _barrier: crate::message::CheckpointBarrier) -> SendFuture<'_> {
        Box::pin(async { Ok(()) })
    }

    /// Wait until one message can be sent without waiting (the channel
    /// has room). A task waits here before taking more input, so that it
    /// can still react to checkpoints while back-pressured instead of
    /// being stuck inside a send. Default: ready at once.
    fn ready(&mut self) -> SendFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}

/// The consuming end of a channel.
pub trait ChannelReceiver: Send {
    /// Poll for the next message. `Ready(None)` means the producer went away
    /// without sending end-of-stream, which the input gate reports as an error.
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamMessage>>>;

    /// Poll the priority lane alone (unaligned barriers that overtook the
    /// queue), leaving queued data where it is. Channels without a
    /// priority lane never have anything there.
    fn poll_priority(&mut self, _cx: &mut Context<'_>) -> Poll<Option<StreamMessage>> {
        Poll::Pending
    }
}
