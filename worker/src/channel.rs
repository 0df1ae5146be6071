//! In-process channels: the bounded in-memory implementation of
//! [`weir_core::channel`]'s sender and receiver traits.

use std::task::{Context, Poll};

use tokio::sync::mpsc;
pub use weir_core::channel::{ChannelReceiver, ChannelSender, SendFuture};
use weir_core::message::StreamMessage;
use weir_core::{Result, WeirError};

/// A bounded in-memory channel holding at most `capacity` messages.
pub fn local_channel(
    capacity: usize,
    name: String,
) -> (Box<dyn ChannelSender>, Box<dyn ChannelReceiver>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let (priority_tx, priority) = mpsc::unbounded_channel();
    (
        Box::new(LocalSender {
            tx,
            priority: priority_tx,
            name,
        }),
        Box::new(LocalReceiver { rx, priority }),
    )
}

struct LocalSender {
    tx: mpsc::Sender<StreamMessage>,
    /// Unaligned barriers overtake the queue here.
    priority: mpsc::UnboundedSender<StreamMessage>,
    name: String,
}

impl ChannelSender for LocalSender {
    fn send(&mut self, message: StreamMessage) -> SendFuture<'_> {
        Box::pin(async move {
            self.tx.send(message).await.map_err(|_| {
                WeirError::ChannelGone(format!("channel {} closed by its consumer", self.name))
            })
        })
    }

    fn send_priority(&mut self, barrier: weir_core::message::CheckpointBarrier) -> SendFuture<'_> {
        // Never blocks: a consumer that is gone shows up on the next send.
        let _ = self.priority.send(StreamMessage::PriorityBarrier(barrier));
        Box::pin(async { Ok(()) })
    }

    fn ready(&mut self) -> SendFuture<'_> {
        Box::pin(async move {
            // The only producer of this channel: a slot seen free stays free
            // until this task sends.
            self.tx.reserve().await.map(drop).map_err(|_| {
                WeirError::ChannelGone(format!("channel {} closed by its consumer", self.name))
            })
        })
    }
}

struct LocalReceiver {
    rx: mpsc::Receiver<StreamMessage>,
    priority: mpsc::UnboundedReceiver<StreamMessage>,
}

impl ChannelReceiver for LocalReceiver {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamMessage>>> {
        if let Poll::Ready(Some(m)) = self.priority.poll_recv(cx) {
            return Poll::Ready(Some(Ok(m)));
        }
        self.rx.poll_recv(cx).map(|m| m.map(Ok))
    }

    fn poll_priority(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamMessage>> {
        match self.priority.poll_recv(cx) {
            // A closed priority lane is not an event; the data lane reports it.
            Poll::Ready(None) => Poll::Pending,
            other => other,
        }
    }
}
