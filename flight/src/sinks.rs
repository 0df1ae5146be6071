//! The Flight endpoint clients read sinks from.
//!
//! `list_flights` lists every readable sink of the process (one
//! `FlightInfo` each: the sink name as descriptor path, its schema, one
//! endpoint with the sink's opaque ticket); `get_flight_info` answers for a
//! sink name, `get_schema` its schema; `do_get` streams a sink from its first row — or from row `N`
//! when the ticket is `<ticket>:<N>`, so a client resumes where it stopped —
//! and then follows it until every subtask has finished. Tickets are opaque random ids
//! checked against the known sinks — never paths.
//!
//! With a token configured every call must carry
//! `authorization: Bearer <token>`; others are refused as unauthenticated
//! before they reach the service. Clients that log in the Flight way
//! (`handshake` with `authorization: Basic base64(user:token)`, as pyarrow's
//! `authenticate_basic_token`) get the bearer header back from `handshake`;
//! the user name is not checked, the token is the credential.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::sinkhub::{RowsDropped, SinkBuffer, SinkHub};
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{
    Criteria, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest,
    HandshakeResponse, SchemaResult, Ticket,
};
use futures::stream::{BoxStream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use weir_core::{Result, Secret, WeirError};

/// A PEM certificate chain and private key for serving over TLS.
#[derive(Clone)]
pub struct TlsPem {
    /// Certificate chain (PEM).
    pub cert: Vec<u8>,
    /// Private key (PEM).
    pub key: Vec<u8>,
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never printed.
        write!(f, "TlsPem({} bytes of certificate)", self.cert.len())
    }
}

impl TlsPem {
    /// Read both files; errors name the file.
    pub fn read(cert: &std::path::Path, key: &std::path::Path) -> Result<Self> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| WeirError::io(p.display().to_string(), e))
        };
        Ok(Self {
            cert: read(cert)?,
            key: read(key)?,
        })
    }
}

/// Serves the process's readable sinks to Flight clients.
#[derive(Clone, Default)]
pub struct SinkServer {
    token: Option<Secret>,
}

impl SinkServer {
    /// The sink service, answering `handshake` with `token`'s bearer header.
    pub fn with_token(token: Option<Secret>) -> Self {
        Self { token }
    }

    /// Serve on `addr` (port 0 picks one), requiring `token` from clients when
    /// given and speaking TLS with `tls` (PEM certificate chain and key) when
    /// given; returns the bound address.
    pub async fn serve(
        addr: SocketAddr,
        token: Option<Secret>,
        tls: Option<TlsPem>,
    ) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        crate::node::FlightNode::new(None, true, token.clone(), None)
            .serve(addr, token, tls)
            .await
    }
}

/// Check the request's bearer token against `token` (none: open).
pub(crate) fn authorize(
    request: &Request<()>,
    token: Option<&Secret>,
) -> std::result::Result<(), Status> {
    let Some(token) = token else {
        return Ok(());
    };
    let header = request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Status::unauthenticated("a bearer token is required"))?;
    let presented = if let Some(bearer) = header.strip_prefix("Bearer ") {
        bearer.to_owned()
    } else if let Some(basic) = header.strip_prefix("Basic ") {
        basic_password(basic)
            .ok_or_else(|| Status::unauthenticated("malformed basic credentials"))?
    } else {
        return Err(Status::unauthenticated("a bearer token is required"));
    };
    if constant_time_eq(presented.as_bytes(), token.expose().as_bytes()) {
        Ok(())
    } else {
        Err(Status::unauthenticated("invalid token"))
    }
}

/// The password of `base64(user:password)`.
fn basic_password(encoded: &str) -> Option<String> {
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':')
        .map(|(_, password)| password.to_owned())
}

/// Equality whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The sink a descriptor names (its path's first element).
fn described(descriptor: &FlightDescriptor) -> std::result::Result<Arc<SinkBuffer>, Status> {
    let name = descriptor
        .path
        .first()
        .ok_or_else(|| Status::invalid_argument("the descriptor must name a sink (path)"))?;
    SinkHub::global()
        .by_name(name)
        .ok_or_else(|| Status::not_found(format!("no sink named '{name}'")))
}

fn info(sink: &SinkBuffer) -> std::result::Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(&sink.schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_descriptor(FlightDescriptor::new_path(vec![sink.name.clone()]))
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(sink.ticket.clone())))
        .with_total_records(sink.num_rows() as i64))
}

/// Split a presented ticket into the sink's ticket and the row to start at
/// (`None`: the oldest retained row).
fn parse_ticket(bytes: &[u8]) -> std::result::Result<(&str, Option<usize>), Status> {
    let ticket =
        std::str::from_utf8(bytes).map_err(|_| Status::invalid_argument("ticket is not UTF-8"))?;
    match ticket.split_once(':') {
        None => Ok((ticket, None)),
        Some((id, offset)) => {
            let offset = offset.parse().map_err(|_| {
                Status::invalid_argument(format!(
                    "ticket offset {offset:?} is not a row number (expected <ticket>:<row>)"
                ))
            })?;
            Ok((id, Some(offset)))
        }
    }
}

fn dropped(e: RowsDropped) -> Status {
    Status::out_of_range(e.to_string())
}

/// The rows of `sink` from `from` on, then new ones as they come (woken by
/// the sink, not by polling), until it
/// finishes. A reader that falls behind the sink's retention ends with an
/// error naming the rows it missed.
fn follow(
    sink: Arc<SinkBuffer>,
    from: Option<usize>,
) -> BoxStream<'static, arrow_flight::error::Result<RecordBatch>> {
    futures::stream::unfold(Some((sink, from)), |state| async move {
        let (sink, next) = state?;
        let read = loop {
            let changed = sink.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let finished = sink.is_finished();
            match sink.read_from(next) {
                Ok((batches, _)) if batches.is_empty() && finished => return None,
                Ok((batches, _)) if batches.is_empty() => changed.await,
                read => break read,
            }
        };
        match read {
            Ok((batches, end)) => {
                let items = futures::stream::iter(batches.into_iter().map(Ok)).boxed();
                Some((items, Some((sink, Some(end)))))
            }
            Err(e) => {
                let error = FlightError::Tonic(Box::new(dropped(e)));
                Some((futures::stream::iter([Err(error)]).boxed(), None))
            }
        }
    })
    .flatten()
    .boxed()
}

/// The sink half of a node's Flight service.
impl SinkServer {
    pub(crate) async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<FlightInfo, Status>>>,
        Status,
    > {
        let infos: Vec<_> = SinkHub::global().list().iter().map(|s| info(s)).collect();
        Ok(Response::new(futures::stream::iter(infos).boxed()))
    }

    pub(crate) async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let sink = described(&request.into_inner())?;
        Ok(Response::new(info(&sink)?))
    }

    pub(crate) async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<FlightData, Status>>>,
        Status,
    > {
        let ticket = request.into_inner().ticket;
        let (id, from) = parse_ticket(&ticket)?;
        let sink = SinkHub::global()
            .by_ticket(id)
            .ok_or_else(|| Status::not_found("unknown ticket"))?;
        // An offset retention has already passed is refused up front.
        if let Some(from) = from {
            sink.check_retained(from).map_err(dropped)?;
        }
        let schema = Arc::clone(&sink.schema);
        let frames = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(follow(sink, from))
            .map(|r| {
                r.map_err(|e| match e {
                    FlightError::Tonic(status) => *status,
                    e => Status::internal(e.to_string()),
                })
            });
        Ok(Response::new(frames.boxed()))
    }

    pub(crate) async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<HandshakeResponse, Status>>>,
        Status,
    > {
        // The interceptor has checked the credentials already.
        let reply = futures::stream::iter([Ok(HandshakeResponse::default())]).boxed();
        let mut response = Response::new(reply);
        if let Some(token) = &self.token {
            let bearer = format!("Bearer {}", token.expose())
                .parse()
                .map_err(|_| Status::internal("the token is not a valid header value"))?;
            response.metadata_mut().insert("authorization", bearer);
        }
        Ok(response)
    }
    pub(crate) async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        let sink = described(&request.into_inner())?;
        let options = arrow::ipc::writer::IpcWriteOptions::default();
        let schema = SchemaResult::try_from(arrow_flight::SchemaAsIpc::new(&sink.schema, &options))
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(schema))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_carry_an_optional_row_offset() {
        assert_eq!(parse_ticket(b"abc").unwrap(), ("abc", None));
        assert_eq!(parse_ticket(b"abc:42").unwrap(), ("abc", Some(42)));
        assert!(parse_ticket(b"abc:-1").is_err());
        assert!(parse_ticket(&[0xff]).is_err());
    }

    #[test]
    fn basic_credentials_carry_the_token_as_password() {
        // base64("weir:s3cret")
        assert_eq!(
            basic_password("d2VpcjpzM2NyZXQ=").as_deref(),
            Some("s3cret")
        );
        assert_eq!(basic_password("not base64!"), None);
    }

    #[test]
    fn tokens_compare_in_full() {
        assert!(constant_time_eq(b"token", b"token"));
        assert!(!constant_time_eq(b"token", b"tokex"));
        assert!(!constant_time_eq(b"token", b"tok"));
    }
}
