//! Connections to the cluster's other Flight endpoints, made once and
//! shared.
//!
//! A tonic [`Channel`] is one HTTP/2 connection that multiplexes any number
//! of calls as streams, and reconnects by itself after the peer went away.
//! The pool keeps one per peer address, TLS trust and tokio runtime:
//! control actions and heartbeats reuse their process's connection instead of
//! a TCP (and TLS) handshake per call, and the exchange channels a task
//! opens towards one worker are streams of one connection. The runtime is
//! part of the key because a connection's I/O is driven by the runtime that
//! opened it: each task thread runs its own, so its channels' frames are
//! written by the thread that encodes them, with no hand-off to a network
//! thread, and a connection never outlives the runtime that drives it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use tonic::transport::Channel;
use weir_core::Result;

use crate::exchange::{CONNECTION_WINDOW, MAX_FRAME, STREAM_WINDOW};
use crate::node::Credentials;

/// How long establishing a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections send HTTP/2 pings this often, so a peer that vanished
/// without closing its socket is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

#[derive(PartialEq, Eq, Hash, Clone)]
struct PeerKey {
    runtime: tokio::runtime::Id,
    addr: String,
    tls: Option<u64>,
}

struct Pooled {
    channel: Channel,
    /// Alive while the runtime that drives the connection is: a task
    /// parked on that runtime holds the strong end.
    runtime_alive: Weak<()>,
}

static POOL: LazyLock<Mutex<HashMap<PeerKey, Pooled>>> = LazyLock::new(Default::default);

/// The liveness token of each runtime that has opened connections.
static RUNTIMES: LazyLock<Mutex<HashMap<tokio::runtime::Id, Weak<()>>>> =
    LazyLock::new(Default::default);

/// A token that lives as long as the current runtime: held by a task that
/// never finishes, which the runtime drops when it shuts down.
fn runtime_token(id: tokio::runtime::Id) -> Weak<()> {
    let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    runtimes.retain(|_, alive| alive.strong_count() > 0);
    if let Some(alive) = runtimes.get(&id) {
        return Weak::clone(alive);
    }
    let token = Arc::new(());
    let alive = Arc::downgrade(&token);
    tokio::spawn(async move {
        let _token = token;
        std::future::pending::<()>().await
    });
    runtimes.insert(id, Weak::clone(&alive));
    alive
}

fn key(addr: &str, credentials: &Credentials) -> Result<PeerKey> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| weir_core::WeirError::Execution(format!("no runtime to reach {addr}: {e}")))?
        .id();
    let tls = credentials.tls_ca.as_ref().map(|ca| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ca.hash(&mut h);
        h.finish()
    });
    Ok(PeerKey {
        runtime,
        addr: addr.to_string(),
        tls,
    })
}

/// The shared connection to the Flight endpoint at `addr` (`host:port`)
/// for the calling runtime. The connection is made on first use: a peer
/// that cannot be reached fails the call made on it, naming the transport
/// error.
pub fn channel(addr: &str, credentials: &Credentials) -> Result<Channel> {
    let key = key(addr, credentials)?;
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pool.get(&key)
        && p.runtime_alive.strong_count() > 0
    {
        return Ok(p.channel.clone());
    }
    let channel = credentials
        .endpoint(addr)?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEP_ALIVE)
        .keep_alive_while_idle(true)
        .initial_stream_window_size(Some(STREAM_WINDOW))
        .initial_connection_window_size(Some(CONNECTION_WINDOW))
        .max_frame_size(Some(MAX_FRAME))
        .tcp_nodelay(true)
        .connect_lazy();
    // Connections of runtimes that have ended go here, so a process that
    // starts a runtime per task does not collect them.
    pool.retain(|_, p| p.runtime_alive.strong_count() > 0);
    let runtime_alive = runtime_token(key.runtime);
    pool.insert(
        key,
        Pooled {
            channel: channel.clone(),
            runtime_alive,
        },
    );
    Ok(channel)
}

/// Forget the connection to `addr` of the calling runtime: the next call
/// makes a new one. For callers that saw the connection fail in a way its
/// own reconnection does not cover (its driving task gone).
pub fn forget(addr: &str, credentials: &Credentials) {
    if let Ok(key) = key(addr, credentials) {
        POOL.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
    }
}

/// Whether a failed call's status was made on this side from a connection
/// failure rather than received from the peer (a status read off the wire
/// has no source error): such a call may be retried once on a new
/// connection, as one made over a connection the peer closed when it
/// stopped, or before it restarted at the same address.
pub fn is_transport_failure(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some()
}
