//! Keyed tumbling windows: identical results across parallelism and runtime
//! modes, and equal to a naive reference on random out-of-order input.

use std::collections::BTreeMap;
use std::time::Duration;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type, TimestampMillisecondType};
use proptest::prelude::*;
use weir_core::config::RuntimeMode;
use weir_core::spec::{
    AggregateSpec, CollectHandle, ColumnGen, GeneratorSpec, MemorySourceSpec, SinkSpec, SourceSpec,
};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_tests::{event_batch, event_schema, sorted_rows};

fn aggregates() -> Vec<AggregateSpec> {
    vec![
        AggregateSpec::count_star().alias("cnt"),
        AggregateSpec::sum("value").alias("total"),
        AggregateSpec::min("value").alias("lo"),
        AggregateSpec::max("value").alias("hi"),
        AggregateSpec::avg("value").alias("mean"),
    ]
}

/// Run source -> key_by(key) -> tumbling(size) -> collect.
fn run_window_job(
    source: SourceSpec,
    parallelism: usize,
    mode: RuntimeMode,
    size_ms: u64,
    bound_ms: u64,
) -> (Vec<RecordBatch>, u64) {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism).set_runtime_mode(mode);
    env.configure(|c| c.batch_size = 1024);
    let out = CollectHandle::new();
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(bound_ms)),
        "events",
    )
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(TumblingEventTimeWindows::of(Duration::from_millis(size_ms)))
    .aggregate(aggregates())
    .unwrap()
    .sink_to(SinkSpec::Collect(out.clone()), "collect")
    .unwrap();
    let result = env.execute("window-test").unwrap();
    (out.batches(), result.counter("num_late_records_dropped"))
}

#[test]
fn results_identical_across_parallelism_and_modes() {
    let generator = GeneratorSpec::new(Some(200_000))
        .column("key", ColumnGen::Key { cardinality: 100 })
        .column(
            "value",
            ColumnGen::UniformInt {
                min: -50,
                max: 1000,
            },
        )
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_700_000_000_000,
                events_per_second: 10_000,
                max_out_of_orderness_ms: 500,
            },
        );
    let mut reference: Option<Vec<String>> = None;
    for mode in [RuntimeMode::Streaming, RuntimeMode::Batch] {
        for p in [1, 2, 4] {
            let (batches, late) = run_window_job(
                SourceSpec::Generator(generator.clone()),
                p,
                mode,
                1000,
                1000,
            );
            assert_eq!(late, 0, "out-of-orderness is within the bound");
            let total: i64 = batches
                .iter()
                .map(|b| {
                    b.column(3)
                        .as_primitive::<Int64Type>()
                        .values()
                        .iter()
                        .sum::<i64>()
                })
                .sum();
            assert_eq!(total, 200_000, "every event counted once (p={p}, {mode:?})");
            let rows = sorted_rows(&batches);
            assert!(
                rows.len() > 1000,
                "20 windows x 100 keys expected, got {}",
                rows.len()
            );
            match &reference {
                None => reference = Some(rows),
                Some(r) => assert_eq!(r, &rows, "p={p}, {mode:?} differs"),
            }
        }
    }
}

/// window_start, window_end, key, count, sum, min, max, avg (as bits, so rows sort).
type Row = (i64, i64, i64, i64, i64, i64, i64, u64);

fn weir_rows(batches: &[RecordBatch]) -> Vec<Row> {
    let mut rows = Vec::new();
    for b in batches {
        let ts = |i: usize| b.column(i).as_primitive::<TimestampMillisecondType>();
        let int = |i: usize| b.column(i).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            rows.push((
                ts(0).value(r),
                ts(1).value(r),
                int(2).value(r),
                int(3).value(r),
                int(4).value(r),
                int(5).value(r),
                int(6).value(r),
                b.column(7).as_primitive::<Float64Type>().value(r).to_bits(),
            ));
        }
    }
    rows.sort();
    rows
}

/// Flink's rules, one record at a time: a record is dropped when its window
/// has already fired (watermark >= window end - 1); the watermark advances
/// after each batch to max_ts - bound - 1; everything fires at the end.
fn reference(
    batches: &[Vec<(i64, i64, i64)>],
    size: i64,
    bound: i64,
    streaming: bool,
) -> (Vec<Row>, u64) {
    let mut windows: BTreeMap<(i64, i64), (i64, i64, i64, i64)> = BTreeMap::new();
    let (mut wm, mut max_ts, mut dropped) = (i64::MIN, i64::MIN, 0);
    for batch in batches {
        for &(k, v, t) in batch {
            let start = t - t.rem_euclid(size);
            if start + size - 1 <= wm {
                dropped += 1;
                continue;
            }
            let e = windows
                .entry((start, k))
                .or_insert((0, 0, i64::MAX, i64::MIN));
            e.0 += 1;
            e.1 += v;
            e.2 = e.2.min(v);
            e.3 = e.3.max(v);
        }
        if streaming {
            max_ts = batch.iter().map(|r| r.2).fold(max_ts, i64::max);
            wm = wm.max(max_ts - bound - 1);
        }
    }
    let rows = windows
        .into_iter()
        .map(|((s, k), (c, sum, lo, hi))| {
            (
                s,
                s + size,
                k,
                c,
                sum,
                lo,
                hi,
                (sum as f64 / c as f64).to_bits(),
            )
        })
        .collect();
    (rows, dropped)
}

/// Batches of (key, value, ts) events, the window size and the watermark bound.
type Case = (Vec<Vec<(i64, i64, i64)>>, i64, i64);

fn event_strategy() -> impl Strategy<Value = Case> {
    let size = prop::sample::select(vec![100i64, 250, 1000]);
    (size, 0i64..400)
        .prop_flat_map(|(size, bound)| {
            // Timestamps cluster on window boundaries (start - 1, start, end - 1)
            // and walk forward with jitter, so both late and on-time records occur.
            let event = (
                0i64..4,
                -100i64..100,
                0i64..40,
                prop::sample::select(vec![-1i64, 0, 1, 37]),
                0i64..600,
            )
                .prop_map(move |(k, v, step, edge, jitter)| {
                    (k, v, step * size / 4 + edge - jitter)
                });
            let batch = prop::collection::vec(event, 1..40);
            (prop::collection::vec(batch, 1..12), Just(size), Just(bound))
        })
        .prop_map(|(mut batches, size, bound)| {
            // Make time progress: batch i is shifted by i windows-worth.
            for (i, b) in batches.iter_mut().enumerate() {
                for e in b.iter_mut() {
                    e.2 += i as i64 * size;
                }
            }
            (batches, size, bound)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn window_matches_naive_reference((batches, size, bound) in event_strategy()) {
        let source = SourceSpec::Memory(MemorySourceSpec {
            schema: event_schema(),
            batches: batches.iter().map(|b| event_batch(b)).collect(),
        });
        // Streaming at parallelism 1: per-batch watermarks, late records dropped.
        let (out, late) = run_window_job(source.clone(), 1, RuntimeMode::Streaming, size as u64, bound as u64);
        let (expected, expected_late) = reference(&batches, size, bound, true);
        prop_assert_eq!(weir_rows(&out), expected);
        prop_assert_eq!(late, expected_late);
        // Batch mode at parallelism 3: one final watermark, nothing is late.
        let (out, late) = run_window_job(source, 3, RuntimeMode::Batch, size as u64, bound as u64);
        let (expected, _) = reference(&batches, size, bound, false);
        prop_assert_eq!(weir_rows(&out), expected);
        prop_assert_eq!(late, 0);
    }
}
