//! Channels over a real Flight server on loopback.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, DictionaryArray, Int64Array, StringArray};
use arrow::datatypes::Int32Type;
use arrow::record_batch::RecordBatch;
use weir_core::channel::{ChannelReceiver, ChannelSender};
use weir_core::message::{AlignmentMode, BarrierKind, CheckpointBarrier, StreamMessage, Watermark};
use weir_flight::{ExchangeServer, FlightChannelSender};

fn batch(from: i64, n: i64) -> RecordBatch {
    let words: DictionaryArray<Int32Type> = (from..from + n)
        .map(|i| ["alpha", "beta", "gamma"][(i % 3) as usize])
        .collect();
    RecordBatch::try_from_iter(vec![
        (
            "n",
            Arc::new(Int64Array::from_iter_values(from..from + n)) as ArrayRef,
        ),
        ("word", Arc::new(words) as ArrayRef),
        (
            "text",
            Arc::new(StringArray::from_iter_values(
                (from..from + n).map(|i| format!("row {i}")),
            )) as ArrayRef,
        ),
    ])
    .unwrap()
}

async fn recv(rx: &mut Box<dyn ChannelReceiver>) -> Option<weir_core::Result<StreamMessage>> {
    poll_fn(|cx| rx.poll_recv(cx)).await
}

fn describe(m: &StreamMessage) -> String {
    match m {
        StreamMessage::Data(b) => format!("data {} rows, first {:?}", b.num_rows(), b.slice(0, 1)),
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_in_order_with_their_content() {
    let server = ExchangeServer::new();
    let mut rx = server.register("job/0/1", 4);
    let (addr, handle) = server.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    assert!(addr.ip().is_loopback());
    let barrier = CheckpointBarrier {
        id: 7,
        timestamp: 1_700_000_000_000,
        kind: BarrierKind::Savepoint,
        mode: AlignmentMode::Aligned,
    };
    let sent = vec![
        StreamMessage::Watermark(Watermark(5)),
        StreamMessage::Data(batch(0, 1000)),
        StreamMessage::Idle(true),
        StreamMessage::Barrier(barrier),
        StreamMessage::Data(batch(1000, 10)),
        StreamMessage::Watermark(Watermark::MAX),
        StreamMessage::EndOfStream,
    ];
    let to_send = sent.clone();
    let producer = tokio::spawn(async move {
        let mut tx = FlightChannelSender::connect(addr, "job/0/1", 2)
            .await
            .unwrap();
        for m in to_send {
            tx.send(m).await.unwrap();
        }
    });
    let mut got = Vec::new();
    while got.len() < sent.len() {
        got.push(
            recv(&mut rx)
                .await
                .expect("channel open")
                .expect("no error"),
        );
    }
    producer.await.unwrap();
    let (a, b): (Vec<_>, Vec<_>) = (
        sent.iter().map(describe).collect(),
        got.iter().map(describe).collect(),
    );
    assert_eq!(a, b);
    // Batches come back equal, dictionaries included.
    if let (StreamMessage::Data(x), StreamMessage::Data(y)) = (&sent[1], &got[1]) {
        assert_eq!(x, y);
    }
    handle.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_channel_is_refused() {
    let server = ExchangeServer::new().with_registration_wait(Duration::from_millis(200));
    let (addr, handle) = server.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut tx = FlightChannelSender::connect(addr, "nobody/expects/this", 2)
        .await
        .unwrap();
    let mut result = Ok(());
    for _ in 0..50 {
        result = tx.send(StreamMessage::Data(batch(0, 10))).await;
        if result.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if result.is_ok() {
        result = tx.send(StreamMessage::EndOfStream).await;
    }
    let err = result.unwrap_err().to_string();
    assert!(err.contains("no channel 'nobody/expects/this'"), "{err}");
    handle.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_does_not_read_stops_the_producer() {
    let server = ExchangeServer::new();
    let mut rx = server.register("slow", 1);
    let (addr, handle) = server.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut tx = FlightChannelSender::connect(addr, "slow", 1).await.unwrap();
    // 1 MB batches: HTTP/2 windows, the server's queue and ours fill up.
    let big = batch(0, 40_000);
    let mut sent = 0usize;
    let blocked = loop {
        match tokio::time::timeout(
            Duration::from_millis(500),
            tx.send(StreamMessage::Data(big.clone())),
        )
        .await
        {
            Ok(r) => {
                r.unwrap();
                sent += 1;
                assert!(sent < 200, "the producer never blocked: no back-pressure");
            }
            Err(_) => break sent,
        }
    };
    assert!(blocked < 200);
    // Reading one message lets the producer go on.
    assert!(matches!(
        recv(&mut rx).await,
        Some(Ok(StreamMessage::Data(_)))
    ));
    handle.abort();
    println!("producer blocked after {blocked} batches of 1 MB");
}

/// A compressed channel's batches arrive equal, also one that compresses
/// to far less than a byte a row (the receiving side's frame check counts
/// what the buffers hold uncompressed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_channels_deliver_their_batches() {
    use weir_core::config::ExchangeCompression;
    // The channel's schema, every value the same.
    let words: DictionaryArray<Int32Type> = std::iter::repeat_n("alpha", 100_000).collect();
    let constant = RecordBatch::try_from_iter(vec![
        (
            "n",
            Arc::new(Int64Array::from(vec![42i64; 100_000])) as ArrayRef,
        ),
        ("word", Arc::new(words) as ArrayRef),
        (
            "text",
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                "row", 100_000,
            ))) as ArrayRef,
        ),
    ])
    .unwrap();
    let server = ExchangeServer::new();
    let (addr, handle) = server.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    for codec in [ExchangeCompression::Lz4, ExchangeCompression::Zstd] {
        let id = format!("job/compressed/{codec:?}");
        let mut rx = server.register(&id, 4);
        let sent = vec![
            StreamMessage::Data(batch(0, 1000)),
            StreamMessage::Data(constant.clone()),
            StreamMessage::EndOfStream,
        ];
        let to_send = sent.clone();
        let producer = tokio::spawn(async move {
            let mut tx =
                weir_flight::exchange::LazyFlightSender::new(addr, id, 2).with_compression(codec);
            for m in to_send {
                tx.send(m).await.unwrap();
            }
        });
        // Batches over 2 MiB arrive in slices: compare the rows.
        let mut got = Vec::new();
        loop {
            match recv(&mut rx)
                .await
                .expect("channel open")
                .expect("no error")
            {
                StreamMessage::Data(b) => got.push(b),
                StreamMessage::EndOfStream => break,
                other => panic!("{codec:?}: {other:?}"),
            }
        }
        let sent_batches: Vec<RecordBatch> = sent
            .iter()
            .filter_map(|m| match m {
                StreamMessage::Data(b) => Some(b.clone()),
                _ => None,
            })
            .collect();
        let schema = constant.schema();
        assert_eq!(
            arrow::compute::concat_batches(&schema, &got).unwrap(),
            arrow::compute::concat_batches(&schema, &sent_batches).unwrap(),
            "{codec:?}"
        );
        producer.await.unwrap();
    }
    handle.abort();
}
