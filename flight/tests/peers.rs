//! One connection per peer: the exchange channels a task opens towards one
//! worker and the control calls of a process share an HTTP/2 connection,
//! and a call after the peer restarted at the same address gets through.
#![cfg(target_os = "linux")]

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use tonic::Status;
use weir_core::channel::ChannelSender;
use weir_core::message::StreamMessage;
use weir_flight::{ActionHandler, Credentials, ExchangeServer, FlightChannelSender, FlightNode};

/// Established TCP connections in this process whose local port is `port`
/// (the server's ends of its accepted connections), from /proc.
fn accepted(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local_port = cols[1].rsplit(':').next().unwrap();
            // State 01: ESTABLISHED.
            if u16::from_str_radix(local_port, 16).unwrap() == port && cols[3] == "01" {
                n += 1;
            }
        }
    }
    n
}

fn batch(n: i64) -> RecordBatch {
    RecordBatch::try_from_iter(vec![(
        "n",
        Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
    )])
    .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn channels_to_one_worker_share_a_connection() {
    let server = ExchangeServer::new();
    let ids = ["job/0/0", "job/0/1", "job/0/2"];
    let mut receivers: Vec<_> = ids.iter().map(|id| server.register(id, 8)).collect();
    let (addr, _serving) = server.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut senders = vec![];
    for id in ids {
        let mut tx = FlightChannelSender::connect(addr, id, 4).await.unwrap();
        tx.send(StreamMessage::Data(batch(100))).await.unwrap();
        senders.push(tx);
    }
    for rx in &mut receivers {
        let got = poll_fn(|cx| rx.poll_recv(cx)).await.unwrap().unwrap();
        assert!(matches!(got, StreamMessage::Data(b) if b.num_rows() == 100));
    }
    assert_eq!(accepted(addr.port()), 1, "three channels, one connection");
    for tx in &mut senders {
        tx.send(StreamMessage::EndOfStream).await.unwrap();
    }
    for rx in &mut receivers {
        let got = poll_fn(|cx| rx.poll_recv(cx)).await.unwrap().unwrap();
        assert!(matches!(got, StreamMessage::EndOfStream));
    }
}

struct Echo(&'static str);

#[tonic::async_trait]
impl ActionHandler for Echo {
    async fn handle(&self, kind: &str, body: Bytes) -> Result<Bytes, Status> {
        Ok(Bytes::from(format!(
            "{} {kind} {}",
            self.0,
            String::from_utf8_lossy(&body)
        )))
    }

    fn actions(&self) -> Vec<(&'static str, &'static str)> {
        vec![("ping", "echo")]
    }
}

async fn node(addr: SocketAddr, name: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    FlightNode::new(None, false, None, Some(Arc::new(Echo(name))))
        .serve(addr, None, None)
        .await
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn control_calls_reuse_a_connection_and_survive_a_restart() {
    let (addr, first) = node("127.0.0.1:0".parse().unwrap(), "first").await;
    let credentials = Credentials::default();
    let call = |body: &'static str| {
        let credentials = credentials.clone();
        async move {
            weir_flight::call_action(&addr.to_string(), &credentials, "ping", body.into())
                .await
                .map(|b| String::from_utf8(b.to_vec()).unwrap())
        }
    };
    for i in 0..5 {
        assert_eq!(call("x").await.unwrap(), "first ping x", "call {i}");
    }
    assert_eq!(accepted(addr.port()), 1, "five calls, one connection");

    // The node stops and another starts on the same port: the shared
    // connection is gone, the next call makes a new one.
    first.abort();
    let _ = first.await;
    let (again, _second) = node(addr, "second").await;
    assert_eq!(again, addr);
    assert_eq!(call("y").await.unwrap(), "second ping y");
    assert_eq!(accepted(addr.port()), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_call_to_nobody_names_the_address() {
    // A port just freed: nothing listens there.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    let err = weir_flight::call_action(&addr.to_string(), &Credentials::default(), "ping", vec![])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("ping on {addr}: unreachable")),
        "{err}"
    );
}
