//! Channels over Arrow Flight.
//!
//! The consumer side hosts a [`ExchangeServer`]: it registers the channels
//! it expects (by opaque channel id) and serves `do_put`. A producer opens a
//! [`FlightChannelSender`] with the server's address and the channel id; its
//! messages flow as one `do_put` stream. Back-pressure is end to end: the
//! receiver's queue is bounded, a full queue stops the server reading the
//! stream, HTTP/2 flow control then stops the client, and the client's own
//! bounded queue makes `send` wait.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, FlightDescriptor, PutResult};
use futures::stream::{BoxStream, StreamExt};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};
use weir_core::channel::{ChannelReceiver, ChannelSender, SendFuture};
use weir_core::message::StreamMessage;
use weir_core::{Result, WeirError};

use crate::node::Credentials;

use crate::codec::{MessageEncoder, decode_control};
use weir_core::config::ExchangeCompression;

/// HTTP/2 flow-control windows of exchange streams and connections: the
/// bytes in flight per channel, on top of the bounded queues at both ends.
pub(crate) const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
pub(crate) const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
/// HTTP/2 frame size: a batch goes out in a few frames, not hundreds of 16 KiB ones.
pub(crate) const MAX_FRAME: u32 = 1024 * 1024;

type Registry = Arc<Mutex<HashMap<String, mpsc::Sender<Result<StreamMessage>>>>>;
/// The priority lanes of the registered channels, by channel id.
type Priorities = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<StreamMessage>>>>;

/// The Flight action that hands an unaligned barrier to a channel's
/// priority lane, overtaking the data queued in the stream. Body: the
/// barrier's control encoding, then the channel id (UTF-8).
pub const PRIORITY_BARRIER_ACTION: &str = "weir.exchange.priority-barrier";

/// The consumer side: a Flight server receiving the channels registered on it.
#[derive(Clone)]
pub struct ExchangeServer {
    registry: Registry,
    priorities: Priorities,
    registered: Arc<tokio::sync::Notify>,
    wait: std::time::Duration,
}

impl Default for ExchangeServer {
    fn default() -> Self {
        Self {
            registry: Registry::default(),
            priorities: Priorities::default(),
            registered: Arc::default(),
            wait: REGISTRATION_WAIT,
        }
    }
}

/// How long a producer's stream waits for its consumer to be deployed:
/// the workers of a job are deployed concurrently, so a fast producer may
/// call before the consumer's worker has registered the channel.
const REGISTRATION_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl ExchangeServer {
    /// A server with no channels yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Refuse streams for channels not registered within `wait` (default 30 s).
    pub fn with_registration_wait(mut self, wait: std::time::Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Expect channel `id`; its messages queue up to `capacity` deep.
    pub fn register(&self, id: &str, capacity: usize) -> Box<dyn ChannelReceiver> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), tx);
        let (priority_tx, priority) = mpsc::unbounded_channel();
        self.priorities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), priority_tx);
        self.registered.notify_waiters();
        Box::new(FlightChannelReceiver {
            rx,
            priority,
            id: id.to_string(),
            priorities: Arc::clone(&self.priorities),
        })
    }

    /// Hand the barrier of a [`PRIORITY_BARRIER_ACTION`] body to its
    /// channel's priority lane. A channel no longer here has ended: nothing
    /// to overtake.
    pub(crate) fn deliver_priority(&self, body: &[u8]) -> std::result::Result<(), Status> {
        let bad = || Status::invalid_argument("malformed priority barrier");
        let (control, id) = body.split_at_checked(BARRIER_LEN).ok_or_else(bad)?;
        let barrier = match decode_control(control) {
            Ok(StreamMessage::Barrier(b) | StreamMessage::PriorityBarrier(b)) => b,
            _ => return Err(bad()),
        };
        let id = std::str::from_utf8(id).map_err(|_| bad())?;
        if let Some(lane) = self
            .priorities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
        {
            let _ = lane.send(StreamMessage::PriorityBarrier(barrier));
        }
        Ok(())
    }

    /// Serve on `addr` (port 0 picks one) until the returned handle is
    /// dropped or aborted; returns the bound address.
    pub async fn serve(
        &self,
        addr: SocketAddr,
    ) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        crate::node::FlightNode::new(Some(self.clone()), false, None, None)
            .serve(addr, None, None)
            .await
    }
}

/// Bytes of a barrier's control encoding.
const BARRIER_LEN: usize = 19;

struct FlightChannelReceiver {
    rx: mpsc::Receiver<Result<StreamMessage>>,
    priority: mpsc::UnboundedReceiver<StreamMessage>,
    id: String,
    priorities: Priorities,
}

impl Drop for FlightChannelReceiver {
    fn drop(&mut self) {
        self.priorities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl ChannelReceiver for FlightChannelReceiver {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<StreamMessage>>> {
        if let Poll::Ready(Some(m)) = self.priority.poll_recv(cx) {
            return Poll::Ready(Some(Ok(m)));
        }
        self.rx.poll_recv(cx)
    }

    fn poll_priority(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamMessage>> {
        match self.priority.poll_recv(cx) {
            Poll::Ready(None) => Poll::Pending,
            other => other,
        }
    }
}

fn channel_id(descriptor: Option<&FlightDescriptor>) -> std::result::Result<String, Status> {
    let d = descriptor.ok_or_else(|| {
        Status::invalid_argument("the first message must carry the channel descriptor")
    })?;
    String::from_utf8(d.cmd.to_vec())
        .map_err(|_| Status::invalid_argument("channel id is not UTF-8"))
}

impl ExchangeServer {
    /// Receive one channel's stream (the node's `do_put`).
    pub(crate) async fn do_put(
        &self,
        mut stream: futures::stream::Peekable<Streaming<FlightData>>,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<PutResult, Status>>>,
        Status,
    > {
        let first = std::pin::Pin::new(&mut stream)
            .peek()
            .await
            .ok_or_else(|| Status::invalid_argument("empty exchange stream"))?
            .as_ref()
            .map_err(|e| e.clone())?;
        let id = channel_id(first.flight_descriptor.as_ref())?;
        let deadline = tokio::time::Instant::now() + self.wait;
        let tx = loop {
            let registered = self.registered.notified();
            tokio::pin!(registered);
            registered.as_mut().enable();
            let found = self
                .registry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            if let Some(tx) = found {
                break tx;
            }
            if tokio::time::timeout_at(deadline, registered).await.is_err() {
                return Err(Status::not_found(format!(
                    "no channel '{id}' is expected here"
                )));
            }
        };
        // Frames come from another process: their lengths are checked
        // before the decoder allocates by them.
        let flights = stream.map(|r| {
            let data = r.map_err(|s| arrow_flight::error::FlightError::Tonic(Box::new(s)))?;
            weir_core::wire::check_ipc_message(&data.data_header, &data.data_body)
                .map_err(|e| arrow_flight::error::FlightError::DecodeError(e.to_string()))?;
            Ok(data)
        });
        let mut decoder = FlightDataDecoder::new(flights);
        while let Some(item) = decoder.next().await {
            let message = match item {
                Ok(decoded) => match decoded.payload {
                    DecodedPayload::RecordBatch(batch) => StreamMessage::Data(batch),
                    DecodedPayload::Schema(_) => continue,
                    DecodedPayload::None => match decode_control(&decoded.inner.app_metadata) {
                        Ok(m) => m,
                        Err(e) => {
                            let _ = tx.send(Err(e)).await;
                            return Err(Status::invalid_argument("malformed control message"));
                        }
                    },
                },
                Err(e) => {
                    let _ = tx
                        .send(Err(WeirError::ChannelGone(format!("channel '{id}': {e}"))))
                        .await;
                    return Err(Status::internal(format!("channel '{id}': {e}")));
                }
            };
            let end = matches!(message, StreamMessage::EndOfStream);
            // A full queue stops reading here: HTTP/2 flow control does the rest.
            if tx.send(Ok(message)).await.is_err() {
                return Err(Status::cancelled(format!(
                    "channel '{id}': the consumer is gone"
                )));
            }
            if end {
                break;
            }
        }
        Ok(Response::new(futures::stream::empty().boxed()))
    }
}

/// The producer side of a channel over Flight.
pub struct FlightChannelSender {
    id: String,
    encoder: MessageEncoder,
    tx: Option<mpsc::Sender<FlightData>>,
    call: Option<tokio::task::JoinHandle<std::result::Result<(), Status>>>,
    first: bool,
}

impl FlightChannelSender {
    /// Open channel `id` to the exchange server at `addr`; at most
    /// `capacity` encoded messages wait on this side.
    pub async fn connect(addr: SocketAddr, id: &str, capacity: usize) -> Result<Self> {
        Self::connect_with(addr, id, capacity, &Credentials::default()).await
    }

    /// As [`Self::connect`], presenting the cluster's token and speaking TLS
    /// when `credentials` say so.
    pub async fn connect_with(
        addr: SocketAddr,
        id: &str,
        capacity: usize,
        credentials: &Credentials,
    ) -> Result<Self> {
        // The task's channels towards one worker are streams of one
        // connection; a peer that cannot be reached fails the first send.
        let channel = crate::peers::channel(&addr.to_string(), credentials)?;
        let bearer = credentials.bearer()?;
        let mut client =
            FlightServiceClient::with_interceptor(channel, move |mut request: Request<()>| {
                if let Some(b) = &bearer {
                    request.metadata_mut().insert("authorization", b.clone());
                }
                Ok(request)
            });
        let (tx, rx) = mpsc::channel::<FlightData>(capacity.max(1));
        let call = tokio::spawn(async move {
            let frames = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|frame| (frame, rx))
            });
            let mut responses = client.do_put(frames).await?.into_inner();
            while let Some(r) = responses.next().await {
                r?;
            }
            Ok(())
        });
        Ok(Self {
            id: id.to_string(),
            encoder: MessageEncoder::default(),
            tx: Some(tx),
            call: Some(call),
            first: true,
        })
    }

    async fn failure(&mut self) -> WeirError {
        let reason = match self.call.take() {
            Some(call) => match call.await {
                Ok(Err(status)) => status.message().to_string(),
                Ok(Ok(())) => "the stream ended".into(),
                Err(e) => e.to_string(),
            },
            None => "the channel is closed".into(),
        };
        WeirError::ChannelGone(format!("Flight channel '{}' failed: {reason}", self.id))
    }

    /// Compress the batches this channel sends with `codec` (before its
    /// first message).
    pub fn compress(&mut self, codec: ExchangeCompression) -> Result<()> {
        self.encoder = MessageEncoder::new(codec)?;
        Ok(())
    }

    async fn send_message(&mut self, message: StreamMessage) -> Result<()> {
        let end = matches!(message, StreamMessage::EndOfStream);
        let mut frames = self.encoder.encode(&message)?;
        if self.first {
            if let Some(f) = frames.first_mut() {
                f.flight_descriptor = Some(FlightDescriptor::new_cmd(self.id.clone()));
            }
            self.first = false;
        }
        for frame in frames {
            let Some(tx) = &self.tx else {
                return Err(self.failure().await);
            };
            if tx.send(frame).await.is_err() {
                return Err(self.failure().await);
            }
        }
        if end {
            // Close the stream and wait for the server to take everything.
            self.tx = None;
            if let Some(call) = self.call.take() {
                match call.await {
                    Ok(Ok(())) => {}
                    Ok(Err(status)) => {
                        return Err(WeirError::Execution(format!(
                            "Flight channel '{}' failed: {}",
                            self.id,
                            status.message()
                        )));
                    }
                    Err(e) => return Err(WeirError::Execution(e.to_string())),
                }
            }
        }
        Ok(())
    }
}

impl ChannelSender for FlightChannelSender {
    fn send(&mut self, message: StreamMessage) -> SendFuture<'_> {
        Box::pin(self.send_message(message))
    }

    fn ready(&mut self) -> SendFuture<'_> {
        Box::pin(async move {
            let Some(tx) = &self.tx else {
                return Ok(());
            };
            let open = tx.reserve().await.is_ok();
            if open {
                Ok(())
            } else {
                Err(self.failure().await)
            }
        })
    }
}

/// A [`FlightChannelSender`] that connects on its first message, from
/// inside the task that owns it.
pub struct LazyFlightSender {
    credentials: Credentials,
    compression: ExchangeCompression,
    addr: SocketAddr,
    id: String,
    capacity: usize,
    inner: Option<FlightChannelSender>,
}

impl LazyFlightSender {
    /// A sender for channel `id` at `addr`.
    pub fn new(addr: SocketAddr, id: String, capacity: usize) -> Self {
        Self {
            credentials: Credentials::default(),
            compression: ExchangeCompression::None,
            addr,
            id,
            capacity,
            inner: None,
        }
    }

    /// Connect with the cluster's token and TLS.
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = credentials;
        self
    }

    /// Compress the batches sent with `codec` (the job's
    /// `exchange_compression`).
    pub fn with_compression(mut self, codec: ExchangeCompression) -> Self {
        self.compression = codec;
        self
    }
}

impl ChannelSender for LazyFlightSender {
    fn send(&mut self, message: StreamMessage) -> SendFuture<'_> {
        Box::pin(async move {
            if self.inner.is_none() {
                let mut sender = FlightChannelSender::connect_with(
                    self.addr,
                    &self.id,
                    self.capacity,
                    &self.credentials,
                )
                .await?;
                sender.compress(self.compression)?;
                self.inner = Some(sender);
            }
            let inner = self.inner.as_mut().expect("connected above");
            inner.send_message(message).await
        })
    }

    fn send_priority(&mut self, barrier: weir_core::message::CheckpointBarrier) -> SendFuture<'_> {
        Box::pin(async move {
            let Some(control) = crate::codec::encode_control(&StreamMessage::Barrier(barrier))
            else {
                return Ok(());
            };
            let mut body = control.to_vec();
            body.extend_from_slice(self.id.as_bytes());
            // Best effort: should the call fail, the in-band barrier that
            // follows still completes the checkpoint, only later.
            if let Err(e) = crate::node::call_action(
                &self.addr.to_string(),
                &self.credentials,
                PRIORITY_BARRIER_ACTION,
                body,
            )
            .await
            {
                tracing::debug!("priority barrier on channel '{}': {e}", self.id);
            }
            Ok(())
        })
    }

    fn ready(&mut self) -> SendFuture<'_> {
        match &mut self.inner {
            Some(inner) => inner.ready(),
            None => Box::pin(async { Ok(()) }),
        }
    }
}
