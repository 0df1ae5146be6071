//! A slow sink holds back the source: the rows in flight between them stay
//! bounded by the channel capacities, whatever the sink's speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use weir_core::spec::SourceSpec;
use weir_core::time::WatermarkStrategy;
use weir_operators::connectors::{ColumnGen, GeneratorSpec};

const BATCH: usize = 1000;
const PRODUCERS: usize = 2;
const CONSUMERS: usize = 2;

/// Run generator -> hash -> slow map -> blackhole; return the largest number
/// of rows produced by the source but not yet processed by the slow operator.
fn max_rows_in_flight(channel_capacity: usize) -> u64 {
    let produced = Arc::new(AtomicU64::new(0));
    let consumed = Arc::new(AtomicU64::new(0));
    let max_in_flight = Arc::new(AtomicU64::new(0));
    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| {
        c.batch_size = BATCH;
        c.channel_capacity = channel_capacity;
        c.default_parallelism = PRODUCERS;
    });
    let generator = GeneratorSpec::new(Some(400_000))
        .column("k", ColumnGen::Key { cardinality: 1000 })
        .column("v", ColumnGen::Sequence);
    let stream = env
        .from_source(
            SourceSpec::from(generator),
            WatermarkStrategy::no_watermarks(),
            "gen",
        )
        .unwrap();
    let schema = Arc::clone(stream.schema());
    let p = Arc::clone(&produced);
    let counted = stream
        .map_batches("CountProduced", Arc::clone(&schema), move |b| {
            p.fetch_add(b.num_rows() as u64, Ordering::SeqCst);
            Ok(b)
        })
        .unwrap();
    let (c, p, m) = (
        Arc::clone(&consumed),
        Arc::clone(&produced),
        Arc::clone(&max_in_flight),
    );
    counted
        .key_by(&["k"])
        .unwrap()
        .as_stream()
        .map_batches("SlowOperator", schema, move |b| {
            let in_flight = p
                .load(Ordering::SeqCst)
                .saturating_sub(c.load(Ordering::SeqCst));
            m.fetch_max(in_flight, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(400));
            c.fetch_add(b.num_rows() as u64, Ordering::SeqCst);
            Ok(b)
        })
        .unwrap()
        .set_parallelism(CONSUMERS)
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "blackhole")
        .unwrap();
    env.execute("backpressure").unwrap();
    assert_eq!(
        consumed.load(Ordering::SeqCst),
        400_000,
        "every row arrives"
    );
    max_in_flight.load(Ordering::SeqCst)
}

/// Rows that can legitimately be in flight: every channel full, plus the
/// batch each producer is sending and the batch each consumer is processing.
fn bound(channel_capacity: usize) -> u64 {
    ((PRODUCERS * CONSUMERS * channel_capacity + PRODUCERS + CONSUMERS) * BATCH) as u64
}

#[test]
fn slow_operator_bounds_rows_in_flight() {
    let max = max_rows_in_flight(2);
    println!("capacity 2: max rows in flight {max}, bound {}", bound(2));
    assert!(
        max <= bound(2),
        "rows in flight {max} exceed the bound {}",
        bound(2)
    );

    // Control: with deep queues the same measurement sees far more in flight,
    // so the bound above is a property of the channels, not of the test.
    let deep = max_rows_in_flight(64);
    println!("capacity 64: max rows in flight {deep}");
    assert!(
        deep > bound(2),
        "deep queues should hold more than {} rows, saw {deep}",
        bound(2)
    );
}
