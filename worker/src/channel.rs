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
    fn send(&mut self, message: StreamMessage) -> SendFuture<'_> {
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
