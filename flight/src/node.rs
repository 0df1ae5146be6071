//! One Flight endpoint per process: what a worker or coordinator serves.
//!
//! A worker's endpoint receives exchange streams (`do_put`), serves its
//! sinks to clients (`list_flights`, `get_flight_info`, `get_schema`,
//! `do_get`, `handshake`) and takes control calls from the coordinator
//! (`do_action`: deploy, cancel). The coordinator's endpoint takes the
//! workers' registration, heartbeats and task updates as actions. Control
//! calls are Flight actions whose bodies are JSON: the protocol lives in
//! one place, Flight's own protobuf service, and the same token check and
//! TLS guard every call.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use weir_core::{Result, Secret, WeirError};

use crate::exchange::ExchangeServer;
use crate::sinks::{SinkServer, TlsPem, authorize};

/// Handles the control calls (`do_action`) of a node.
#[tonic::async_trait]
pub trait ActionHandler: Send + Sync + 'static {
    /// Answer action `kind` with `body`; errors become the call's `Status`.
    async fn handle(&self, kind: &str, body: Bytes) -> std::result::Result<Bytes, Status>;
    /// The leader epoch the caller presented ([`Credentials::epoch`]),
    /// checked before [`Self::handle`]: a handler that fences refuses an
    /// epoch older than one it has seen ([`EpochFence`]).
    fn check_epoch(&self, _epoch: Option<u64>) -> std::result::Result<(), Status> {
        Ok(())
    }
    /// The actions understood, for `list_actions`.
    fn actions(&self) -> Vec<(&'static str, &'static str)>;
}

/// A process's Flight endpoint.
#[derive(Clone)]
pub struct FlightNode {
    exchange: Option<ExchangeServer>,
    sinks: Option<SinkServer>,
    actions: Option<Arc<dyn ActionHandler>>,
}

impl FlightNode {
    /// An endpoint serving the given parts; calls to absent parts are
    /// `unimplemented`.
    pub fn new(
        exchange: Option<ExchangeServer>,
        sinks: bool,
        token: Option<Secret>,
        actions: Option<Arc<dyn ActionHandler>>,
    ) -> Self {
        Self {
            exchange,
            sinks: sinks.then(|| SinkServer::with_token(token)),
            actions,
        }
    }

    /// Serve on `addr` (port 0 picks one), requiring `token` on every call
    /// when given, over TLS when `tls` is given. Returns the bound address.
    pub async fn serve(
        self,
        addr: SocketAddr,
        token: Option<Secret>,
        tls: Option<TlsPem>,
    ) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let mut builder = tonic::transport::Server::builder()
            .initial_stream_window_size(Some(crate::exchange::STREAM_WINDOW))
            .initial_connection_window_size(Some(crate::exchange::CONNECTION_WINDOW))
            .max_frame_size(Some(crate::exchange::MAX_FRAME))
            .tcp_nodelay(true);
        if let Some(tls) = tls {
            let identity = tonic::transport::Identity::from_pem(tls.cert, tls.key);
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|e| {
                    WeirError::Config(format!(
                        "Flight TLS configuration (certificate or key unusable): {e}"
                    ))
                })?;
        }
        let (listener, bound) = bind(addr).await?;
        // The builder's tcp_nodelay applies only to listeners tonic binds
        // itself: without it here, a small reply waits on the peer's delayed
        // ACK (40 ms on Linux) behind an unacknowledged write.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let service = tonic::service::interceptor::InterceptedService::new(
            FlightServiceServer::new(self).max_decoding_message_size(256 * 1024 * 1024),
            move |request: Request<()>| authorize(&request, token.as_ref()).map(|_| request),
        );
        // With a shutdown signal, tonic tells each open connection to wind
        // down (HTTP/2 GOAWAY) when this task is aborted; without one the
        // connections outlive the endpoint, and a peer's shared connection
        // ([`crate::peers`]) would go on reaching a stopped node.
        let handle = tokio::spawn(async move {
            if let Err(e) = builder
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, std::future::pending())
                .await
            {
                tracing::error!("Flight endpoint stopped: {e}");
            }
        });
        Ok((bound, handle))
    }
}

/// Whether an HTTP `Authorization` header value presents `token` as a
/// bearer token (the scheme case-insensitive, RFC 9110 §11.1; compared in
/// constant time).
pub fn bearer_matches(authorization: Option<&str>, token: &weir_core::Secret) -> bool {
    let presented = authorization.and_then(|v| {
        let (scheme, credentials) = v.trim().split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| credentials.trim_start())
    });
    presented.is_some_and(|p| {
        p.len() == token.expose().len()
            && p.bytes()
                .zip(token.expose().bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

/// Listen on `addr` (port 0 picks one); errors name the address.
pub async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| WeirError::io(addr.to_string(), e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| WeirError::io(addr.to_string(), e))?;
    Ok((listener, bound))
}

fn absent(what: &str) -> Status {
    Status::unimplemented(format!("this endpoint does not serve {what}"))
}

#[tonic::async_trait]
impl FlightService for FlightNode {
    type HandshakeStream = BoxStream<'static, std::result::Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, std::result::Result<FlightInfo, Status>>;
    type DoGetStream = BoxStream<'static, std::result::Result<FlightData, Status>>;
    type DoPutStream = BoxStream<'static, std::result::Result<PutResult, Status>>;
    type DoActionStream = BoxStream<'static, std::result::Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, std::result::Result<ActionType, Status>>;
    type DoExchangeStream = BoxStream<'static, std::result::Result<FlightData, Status>>;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        match &self.sinks {
            Some(s) => s.handshake(request).await,
            None => Ok(Response::new(
                futures::stream::iter([Ok(HandshakeResponse::default())]).boxed(),
            )),
        }
    }
    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        match &self.sinks {
            Some(s) => s.list_flights(request).await,
            None => Ok(Response::new(futures::stream::empty().boxed())),
        }
    }
    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        match &self.sinks {
            Some(s) => s.get_flight_info(request).await,
            None => Err(absent("sinks")),
        }
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("poll_flight_info"))
    }
    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        match &self.sinks {
            Some(s) => s.get_schema(request).await,
            None => Err(absent("sinks")),
        }
    }
    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        match &self.sinks {
            Some(s) => s.do_get(request).await,
            None => Err(absent("sinks")),
        }
    }
    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        // A path descriptor names a table a client pushes into; the
        // exchange between workers names its channels by command.
        let mut stream = request.into_inner().peekable();
        let first = std::pin::Pin::new(&mut stream)
            .peek()
            .await
            .ok_or_else(|| Status::invalid_argument("empty put stream"))?
            .as_ref()
            .map_err(|e| e.clone())?;
        let descriptor = first.flight_descriptor.as_ref().ok_or_else(|| {
            Status::invalid_argument("the first message must carry the descriptor")
        })?;
        if descriptor.r#type() == arrow_flight::flight_descriptor::DescriptorType::Path {
            if self.sinks.is_none() {
                return Err(absent("Flight sources"));
            }
            let path = descriptor.path.clone();
            return crate::ingest::do_put(path, stream).await;
        }
        match &self.exchange {
            Some(e) => e.do_put(stream).await,
            None => Err(absent("exchange streams")),
        }
    }
    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        if request.get_ref().r#type == crate::exchange::PRIORITY_BARRIER_ACTION
            && let Some(exchange) = &self.exchange
        {
            exchange.deliver_priority(&request.get_ref().body)?;
            return Ok(Response::new(futures::stream::empty().boxed()));
        }
        let Some(handler) = &self.actions else {
            return Err(absent("actions"));
        };
        let epoch = request
            .metadata()
            .get(EPOCH_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        handler.check_epoch(epoch)?;
        let action = request.into_inner();
        let body = handler.handle(&action.r#type, action.body).await?;
        let result = arrow_flight::Result { body };
        Ok(Response::new(futures::stream::iter([Ok(result)]).boxed()))
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        let actions = self
            .actions
            .as_ref()
            .map(|h| h.actions())
            .unwrap_or_default()
            .into_iter()
            .map(|(kind, description)| {
                Ok(ActionType {
                    r#type: kind.into(),
                    description: description.into(),
                })
            })
            .collect::<Vec<_>>();
        Ok(Response::new(futures::stream::iter(actions).boxed()))
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("do_exchange"))
    }
}

/// What a process presents to and expects from the cluster's other Flight
/// endpoints: the cluster token, and the CA certificate (PEM) that signed
/// their TLS certificates — with one, every connection is TLS.
#[derive(Clone, Default)]
pub struct Credentials {
    /// Bearer token sent on every call.
    pub token: Option<Secret>,
    /// Trusted CA (PEM); `None` speaks plain HTTP/2.
    pub tls_ca: Option<Arc<Vec<u8>>>,
    /// The leader epoch sent with every action: a coordinator of an HA
    /// cluster presents the epoch it leads, and workers refuse an older one.
    pub epoch: Option<u64>,
}

/// The metadata header carrying [`Credentials::epoch`].
pub const EPOCH_HEADER: &str = "weir-leader-epoch";

/// The newest leader epoch a process has been called with: calls from an
/// older one (a coordinator that lost its lease) are refused.
#[derive(Default)]
pub struct EpochFence(std::sync::atomic::AtomicU64);

impl EpochFence {
    /// Admit a call presenting `epoch` (none: a coordinator without HA).
    pub fn admit(&self, epoch: Option<u64>) -> std::result::Result<(), Status> {
        let Some(epoch) = epoch else {
            return Ok(());
        };
        let newest = self
            .0
            .fetch_max(epoch, std::sync::atomic::Ordering::SeqCst)
            .max(epoch);
        if epoch < newest {
            return Err(Status::failed_precondition(format!(
                "a call from the leader of epoch {epoch}, superseded by epoch {newest}"
            )));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credentials(token: {}, tls: {})",
            if self.token.is_some() { "set" } else { "none" },
            self.tls_ca.is_some()
        )
    }
}

impl Credentials {
    /// Credentials with `token` and no TLS.
    pub fn token(token: Option<Secret>) -> Self {
        Self {
            token,
            tls_ca: None,
            epoch: None,
        }
    }

    /// An endpoint for `addr` (`host:port`): `https` with the CA when TLS is
    /// configured, else `http`.
    pub fn endpoint(&self, addr: &str) -> Result<tonic::transport::Endpoint> {
        let scheme = if self.tls_ca.is_some() {
            "https"
        } else {
            "http"
        };
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| WeirError::Config(format!("bad address {addr}: {e}")))?;
        if let Some(ca) = &self.tls_ca {
            let tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca.as_slice()));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| WeirError::Config(format!("TLS towards {addr}: {e}")))?;
        }
        Ok(endpoint)
    }

    /// The `authorization` header value, if a token is set.
    pub fn bearer(&self) -> Result<Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>> {
        self.token
            .as_ref()
            .map(|t| format!("Bearer {}", t.expose()).parse())
            .transpose()
            .map_err(|_| WeirError::Config("the token is not a valid header value".into()))
    }
}

/// How long a control call may take, connection included.
const ACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Call action `kind` on the node at `addr` with a JSON `body`; returns the
/// reply body. Errors name the address and the action. The call goes over
/// the process's shared connection to `addr` ([`crate::peers`]); one that
/// fails on the connection (the peer restarted at the same address) is made
/// once more on a new connection.
pub async fn call_action(
    addr: &str,
    credentials: &Credentials,
    kind: &str,
    body: Vec<u8>,
) -> Result<Bytes> {
    let fail = |m: String| WeirError::Execution(format!("{kind} on {addr}: {m}"));
    let body = Bytes::from(body);
    let bearer = credentials.bearer()?;
    let mut retried = false;
    loop {
        let channel = crate::peers::channel(addr, credentials).map_err(|e| fail(e.to_string()))?;
        let call = action_once(
            channel,
            bearer.clone(),
            credentials.epoch,
            kind,
            body.clone(),
        );
        let status = match tokio::time::timeout(ACTION_TIMEOUT, call).await {
            Err(_) => return Err(fail(format!("no answer within {ACTION_TIMEOUT:?}"))),
            Ok(Ok(reply)) => return Ok(reply),
            Ok(Err(status)) => status,
        };
        if status.code() == tonic::Code::Unauthenticated {
            // A wrong or missing token: retrying cannot help.
            return Err(WeirError::Config(format!(
                "{kind} on {addr} refused: {}",
                status.message()
            )));
        }
        if crate::peers::is_transport_failure(&status) {
            crate::peers::forget(addr, credentials);
            if !retried {
                retried = true;
                continue;
            }
            return Err(fail(format!("unreachable: {}", status.message())));
        }
        return Err(fail(status.message().to_string()));
    }
}

async fn action_once(
    channel: tonic::transport::Channel,
    bearer: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    epoch: Option<u64>,
    kind: &str,
    body: Bytes,
) -> std::result::Result<Bytes, Status> {
    let mut client = FlightServiceClient::new(channel).max_decoding_message_size(256 * 1024 * 1024);
    let mut request = Request::new(Action {
        r#type: kind.to_string(),
        body,
    });
    if let Some(header) = bearer {
        request.metadata_mut().insert("authorization", header);
    }
    if let Some(epoch) = epoch {
        request
            .metadata_mut()
            .insert(EPOCH_HEADER, epoch.to_string().parse().expect("digits"));
    }
    let mut replies = client.do_action(request).await?.into_inner();
    match replies.next().await {
        Some(Ok(r)) => Ok(r.body),
        Some(Err(s)) => Err(s),
        None => Ok(Bytes::new()),
    }
}
