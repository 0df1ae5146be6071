//! Channels between tasks.
//!
//! A channel carries [`StreamMessage`]s from one producer subtask to one
//! consumer subtask, in order, with a bounded capacity: a full channel makes
//! the producer wait, which is how back-pressure travels up to the sources.
//! The traits are the seam for the network: within a process a channel is a
//! bounded in-memory queue ([`local_channel`]); across processes an Arrow
//! Flight stream implements the same traits with identical semantics.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use weir_core::message::StreamMessage;
use weir_core::{Result, WeirError};

/// The producing end of a channel.
pub trait ChannelSender: Send {
    /// Send one message, waiting while the channel is full. Fails when the
    /// consumer is gone (its task failed or was cancelled).
    fn send(&mut self, message: StreamMessage) -> BoxFuture<'_, Result<()>>;
}

/// The consuming end of a channel.
pub trait ChannelReceiver: Send {
    /// Poll for the next message. `Ready(None)` means the producer went away
    /// without sending end-of-stream, which the input gate reports as an error.
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamMessage>>>;
}

/// A bounded in-memory channel holding at most `capacity` messages.
pub fn local_channel(
    capacity: usize,
    name: String,
) -> (Box<dyn ChannelSender>, Box<dyn ChannelReceiver>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (
        Box::new(LocalSender { tx, name }),
        Box::new(LocalReceiver { rx }),
    )
}

struct LocalSender {
    tx: mpsc::Sender<StreamMessage>,
    name: String,
}

impl ChannelSender for LocalSender {
    fn send(&mut self, message: StreamMessage) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.tx.send(message).await.map_err(|_| {
                WeirError::Execution(format!("channel {} closed by its consumer", self.name))
            })
        })
    }
}

struct LocalReceiver {
    rx: mpsc::Receiver<StreamMessage>,
}

impl ChannelReceiver for LocalReceiver {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamMessage>>> {
        self.rx.poll_recv(cx).map(|m| m.map(Ok))
    }
}
