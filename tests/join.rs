//! Interval join: equal to a brute-force join on random out-of-order input,
//! at every parallelism and in batch mode.

use std::time::Duration;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Int64Type, TimestampMillisecondType};
use proptest::prelude::*;
use weir_core::config::RuntimeMode;
use weir_core::spec::{CollectHandle, MemorySourceSpec, SinkSpec, SourceSpec};
use weir_core::time::{WatermarkStrategy, WindowAssigner};
use weir_tests::{event_batch, event_schema};

type Event = (i64, i64, i64);
type Pair = (Event, Event);

fn run_join(
    left: &[Vec<Event>],
    right: &[Vec<Event>],
    bounds: (i64, i64),
    jitter: i64,
    parallelism: usize,
    mode: RuntimeMode,
) -> (Vec<Pair>, u64) {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism).set_runtime_mode(mode);
    env.configure(|c| c.watermark_interval = Duration::ZERO);
    let source = |batches: &[Vec<Event>]| {
        SourceSpec::from(MemorySourceSpec::new(
            event_schema(),
            batches.iter().map(|b| event_batch(b)).collect(),
        ))
    };
    let strategy = || {
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(jitter as u64))
    };
    let l = env.from_source(source(left), strategy(), "left").unwrap();
    let r = env.from_source(source(right), strategy(), "right").unwrap();
    let out = CollectHandle::new();
    l.key_by(&["key"])
        .unwrap()
        .interval_join(&r.key_by(&["key"]).unwrap())
        .between(bounds.0, bounds.1)
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
    let result = env.execute("join").unwrap();
    let mut pairs = Vec::new();
    for b in out.batches() {
        pairs.extend(pairs_of(&b));
    }
    pairs.sort();
    (pairs, result.counter("num_late_records_dropped"))
}

fn pairs_of(b: &RecordBatch) -> Vec<Pair> {
    let int = |i: usize| b.column(i).as_primitive::<Int64Type>();
    let ts = |i: usize| b.column(i).as_primitive::<TimestampMillisecondType>();
    (0..b.num_rows())
        .map(|r| {
            (
                (int(0).value(r), int(1).value(r), ts(2).value(r)),
                (int(3).value(r), int(4).value(r), ts(5).value(r)),
            )
        })
        .collect()
}

fn brute_force(left: &[Vec<Event>], right: &[Vec<Event>], (lower, upper): (i64, i64)) -> Vec<Pair> {
    let mut pairs = Vec::new();
    for l in left.iter().flatten() {
        for r in right.iter().flatten() {
            if l.0 == r.0 && l.2 + lower <= r.2 && r.2 <= l.2 + upper {
                pairs.push((*l, *r));
            }
        }
    }
    pairs.sort();
    pairs
}

/// Batches whose time moves forward with jitter of at most `jitter` ms.
fn stream(jitter: i64) -> impl Strategy<Value = Vec<Vec<Event>>> {
    prop::collection::vec(
        prop::collection::vec((0i64..4, 0i64..1000, 0i64..100, 0..=jitter), 0..25),
        1..8,
    )
    .prop_map(|batches| {
        batches
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                b.into_iter()
                    .map(|(k, v, t, j)| (k, v, i as i64 * 100 + t - j))
                    .collect()
            })
            .collect()
    })
}

/// Left batches, right batches, (lower, upper) bounds, out-of-orderness.
type Case = (Vec<Vec<Event>>, Vec<Vec<Event>>, (i64, i64), i64);

fn case() -> impl Strategy<Value = Case> {
    (0i64..60).prop_flat_map(|jitter| {
        let bounds = (-150i64..150, 0i64..200).prop_map(|(lower, width)| (lower, lower + width));
        (stream(jitter), stream(jitter), bounds, Just(jitter))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn interval_join_matches_brute_force((left, right, bounds, jitter) in case()) {
        let expected = brute_force(&left, &right, bounds);
        for (p, mode) in [(1, RuntimeMode::Streaming), (2, RuntimeMode::Streaming), (3, RuntimeMode::Batch)] {
            let (pairs, late) = run_join(&left, &right, bounds, jitter, p, mode);
            prop_assert_eq!(late, 0);
            prop_assert_eq!(&pairs, &expected, "p={} {:?}", p, mode);
        }
    }
}

#[test]
fn bounds_are_validated_when_the_job_is_built() {
    let env = weir_worker::local_environment().unwrap();
    let s = || {
        SourceSpec::from(MemorySourceSpec::new(
            event_schema(),
            vec![event_batch(&[(1, 1, 1)])],
        ))
    };
    let strategy = || WatermarkStrategy::for_monotonous_timestamps("ts");
    let l = env
        .from_source(s(), strategy(), "l")
        .unwrap()
        .key_by(&["key"])
        .unwrap();
    let r = env
        .from_source(s(), strategy(), "r")
        .unwrap()
        .key_by(&["value"])
        .unwrap();
    let err = l
        .interval_join(&r)
        .between(10, -10)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("lower bound 10 ms is above the upper bound -10 ms"),
        "{err}"
    );
    let no_time = env
        .from_source(s(), WatermarkStrategy::no_watermarks(), "n")
        .unwrap()
        .key_by(&["key"])
        .unwrap();
    let err = l
        .interval_join(&no_time)
        .between(0, 1)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("right input has no event time"), "{err}");
}

/// Windows containing `t` (tumbling, sliding, cumulating), from their definitions.
fn windows_of(assigner: WindowAssigner, t: i64) -> Vec<(i64, i64)> {
    match assigner {
        WindowAssigner::Tumbling { size, .. } => {
            vec![(t - t.rem_euclid(size), t - t.rem_euclid(size) + size)]
        }
        WindowAssigner::Sliding { size, slide, .. } => {
            let mut out = vec![];
            let mut s = t - t.rem_euclid(slide);
            while s > t - size {
                out.push((s, s + size));
                s -= slide;
            }
            out
        }
        WindowAssigner::Cumulate { step, max_size, .. } => {
            let c = t - t.rem_euclid(max_size);
            (1..=max_size / step)
                .map(|k| (c, c + k * step))
                .filter(|&(_, e)| e > t)
                .collect()
        }
        WindowAssigner::Session { .. } | WindowAssigner::Count { .. } => unreachable!(),
    }
}

type WindowPair = (i64, i64, Event, Event);

fn run_window_join(
    left: &[Vec<Event>],
    right: &[Vec<Event>],
    assigner: WindowAssigner,
    jitter: i64,
    parallelism: usize,
    mode: RuntimeMode,
) -> Vec<WindowPair> {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism).set_runtime_mode(mode);
    // A watermark after every batch, so windows close while data flows.
    env.configure(|c| c.watermark_interval = Duration::ZERO);
    let source = |batches: &[Vec<Event>]| {
        SourceSpec::from(MemorySourceSpec::new(
            event_schema(),
            batches.iter().map(|b| event_batch(b)).collect(),
        ))
    };
    let strategy = || {
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(jitter as u64))
    };
    let l = env.from_source(source(left), strategy(), "left").unwrap();
    let r = env.from_source(source(right), strategy(), "right").unwrap();
    let out = CollectHandle::new();
    l.key_by(&["key"])
        .unwrap()
        .window_join(&r.key_by(&["key"]).unwrap(), assigner)
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
    let result = env.execute("window-join").unwrap();
    assert_eq!(result.counter("num_late_records_dropped"), 0);
    let mut rows = Vec::new();
    for b in out.batches() {
        let ts = |i: usize| b.column(i).as_primitive::<TimestampMillisecondType>();
        let int = |i: usize| b.column(i).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            rows.push((
                ts(0).value(r),
                ts(1).value(r),
                (int(2).value(r), int(3).value(r), ts(4).value(r)),
                (int(5).value(r), int(6).value(r), ts(7).value(r)),
            ));
        }
    }
    rows.sort();
    rows
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn window_join_matches_brute_force(
        (left, right, _, jitter) in case(),
        assigner in prop::sample::select(vec![
            WindowAssigner::Tumbling { size: 100, offset: 0 },
            WindowAssigner::Sliding { size: 200, slide: 100, offset: 0 },
            WindowAssigner::Cumulate { step: 50, max_size: 200, offset: 0 },
        ]),
    ) {
        let mut expected = Vec::new();
        for l in left.iter().flatten() {
            for r in right.iter().flatten() {
                if l.0 != r.0 {
                    continue;
                }
                let rw = windows_of(assigner, r.2);
                for w in windows_of(assigner, l.2) {
                    if rw.contains(&w) {
                        expected.push((w.0, w.1, *l, *r));
                    }
                }
            }
        }
        expected.sort();
        for (p, mode) in [(1, RuntimeMode::Streaming), (2, RuntimeMode::Streaming), (3, RuntimeMode::Batch)] {
            let rows = run_window_join(&left, &right, assigner, jitter, p, mode);
            prop_assert_eq!(&rows, &expected, "p={} {:?}", p, mode);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn session_window_join_matches_brute_force(
        (left, right, _, jitter) in case(),
        gap in prop::sample::select(vec![5i64, 20, 60]),
    ) {
        // Sessions per key over the timestamps of both inputs.
        let mut times: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
        for e in left.iter().flatten().chain(right.iter().flatten()) {
            times.entry(e.0).or_default().push(e.2);
        }
        let mut sessions: std::collections::BTreeMap<i64, Vec<(i64, i64)>> = Default::default();
        for (k, mut ts) in times {
            ts.sort();
            let mut list: Vec<(i64, i64)> = Vec::new();
            for t in ts {
                match list.last_mut() {
                    Some(s) if t <= s.1 => s.1 = s.1.max(t + gap),
                    _ => list.push((t, t + gap)),
                }
            }
            sessions.insert(k, list);
        }
        let session_of = |k: i64, t: i64| *sessions[&k].iter().find(|s| s.0 <= t && t < s.1).unwrap();
        let mut expected = Vec::new();
        for l in left.iter().flatten() {
            for r in right.iter().flatten() {
                if l.0 == r.0 && session_of(l.0, l.2) == session_of(r.0, r.2) {
                    let s = session_of(l.0, l.2);
                    expected.push((s.0, s.1, *l, *r));
                }
            }
        }
        expected.sort();
        let assigner = WindowAssigner::Session { gap };
        for (p, mode) in [(1, RuntimeMode::Streaming), (2, RuntimeMode::Streaming), (2, RuntimeMode::Batch)] {
            let rows = run_window_join(&left, &right, assigner, jitter, p, mode);
            prop_assert_eq!(&rows, &expected, "p={} {:?}", p, mode);
        }
    }
}
