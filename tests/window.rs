//! Keyed tumbling windows: identical results across parallelism and runtime
//! modes, and equal to a naive reference on random out-of-order input.

use std::collections::BTreeMap;
use std::time::Duration;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type, TimestampMillisecondType};
use proptest::prelude::*;
use weir_core::config::RuntimeMode;
use weir_core::spec::{AggregateSpec, CollectHandle, MemorySourceSpec, SinkSpec, SourceSpec};
use weir_core::time::{
    CumulativeEventTimeWindows, EventTimeSessionWindows, SlidingEventTimeWindows,
    TumblingEventTimeWindows, WatermarkStrategy, WindowAssigner,
};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};
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

/// Run source -> key_by(key) -> window -> collect.
fn run_window_job(
    source: SourceSpec,
    parallelism: usize,
    mode: RuntimeMode,
    assigner: WindowAssigner,
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
    .window(assigner)
    .aggregate(aggregates())
    .unwrap()
    .sink_to(SinkSpec::from(out.clone()), "collect")
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
    let second = Duration::from_secs(1);
    for assigner in [
        TumblingEventTimeWindows::of(second),
        SlidingEventTimeWindows::of(second * 3, second),
        CumulativeEventTimeWindows::of(second, second * 4),
        EventTimeSessionWindows::with_gap(Duration::from_millis(2)),
    ] {
        let mut reference: Option<Vec<String>> = None;
        for mode in [RuntimeMode::Streaming, RuntimeMode::Batch] {
            for p in [1, 2, 4] {
                let source = SourceSpec::from(generator.clone());
                let (batches, late) = run_window_job(source, p, mode, assigner, 1000);
                assert_eq!(late, 0, "out-of-orderness is within the bound");
                let rows = sorted_rows(&batches);
                assert!(rows.len() > 1000, "{assigner:?}: got {} rows", rows.len());
                match &reference {
                    None => reference = Some(rows),
                    Some(r) => assert_eq!(r, &rows, "{assigner:?} p={p}, {mode:?} differs"),
                }
            }
        }
        if matches!(assigner, WindowAssigner::Tumbling { .. }) {
            // Every event counted exactly once in tumbling windows.
            let (batches, _) = run_window_job(
                SourceSpec::from(generator.clone()),
                2,
                RuntimeMode::Streaming,
                assigner,
                1000,
            );
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
            assert_eq!(total, 200_000);
        }
    }
}

/// window_start, window_end, key, count, sum, min, max, avg (as bits, so rows sort).
type Row = (i64, i64, i64, i64, i64, i64, i64, u64);

/// A test event: (key, value, ts).
type Event = (i64, i64, i64);

/// (window_start, window_end, key).
type WindowKey = (i64, i64, i64);

/// Rows of the window output, each with its `is_update` flag (false when the
/// column is absent).
fn weir_rows(batches: &[RecordBatch]) -> Vec<(Row, bool)> {
    let mut rows = Vec::new();
    for b in batches {
        let ts = |i: usize| b.column(i).as_primitive::<TimestampMillisecondType>();
        let int = |i: usize| b.column(i).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            let row = (
                ts(0).value(r),
                ts(1).value(r),
                int(2).value(r),
                int(3).value(r),
                int(4).value(r),
                int(5).value(r),
                int(6).value(r),
                b.column(7).as_primitive::<Float64Type>().value(r).to_bits(),
            );
            let update = b.num_columns() > 8 && b.column(8).as_boolean().value(r);
            rows.push((row, update));
        }
    }
    rows
}

/// (key, value, ts) rows of event batches.
fn event_rows(batches: &[RecordBatch]) -> Vec<(i64, i64, i64)> {
    let mut rows = Vec::new();
    for b in batches {
        let k = b.column(0).as_primitive::<Int64Type>();
        let v = b.column(1).as_primitive::<Int64Type>();
        let t = b.column(2).as_primitive::<TimestampMillisecondType>();
        for r in 0..b.num_rows() {
            rows.push((k.value(r), v.value(r), t.value(r)));
        }
    }
    rows
}

/// The last emitted value of every (window, key), and which were emitted by
/// a late firing (`is_update`; for a key new to an already fired window this
/// is its first result, as a late firing in Flink's WindowOperator).
fn final_results(rows: &[(Row, bool)]) -> (BTreeMap<WindowKey, Row>, Vec<WindowKey>) {
    let mut last = BTreeMap::new();
    let mut updated = Vec::new();
    for (row, update) in rows {
        let id = (row.0, row.1, row.2);
        if *update {
            updated.push(id);
        }
        last.insert(id, *row);
    }
    updated.sort();
    updated.dedup();
    (last, updated)
}

/// Windows containing `t`, straight from the definitions in SEMANTICS.md.
fn windows_of(assigner: WindowAssigner, t: i64) -> Vec<(i64, i64)> {
    match assigner {
        WindowAssigner::Tumbling { size, .. } => {
            let s = t - t.rem_euclid(size);
            vec![(s, s + size)]
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
        WindowAssigner::Session { .. } | WindowAssigner::Count { .. } => {
            unreachable!("not a pane window")
        }
    }
}

/// Flink's WindowOperator rules, one record at a time: a record skips the
/// windows past `end - 1 + lateness`, and is dropped when that is all of
/// them; a record for a fired window within its lateness re-fires it. The
/// watermark advances after each batch (streaming) or only at the end.
fn reference(
    batches: &[Vec<(i64, i64, i64)>],
    assigner: WindowAssigner,
    bound: i64,
    lateness: i64,
    streaming: bool,
) -> (Vec<(Row, bool)>, Vec<Event>) {
    type Acc = (i64, i64, i64, i64);
    let mut state: BTreeMap<(i64, i64, i64), Acc> = BTreeMap::new();
    let (mut wm, mut max_ts, mut dropped) = (i64::MIN, i64::MIN, Vec::new());
    let mut out = Vec::new();
    let row = |(s, e, k): (i64, i64, i64), (c, sum, lo, hi): Acc| {
        (s, e, k, c, sum, lo, hi, (sum as f64 / c as f64).to_bits())
    };
    let fire =
        |state: &BTreeMap<(i64, i64, i64), Acc>, from: i64, to: i64, out: &mut Vec<(Row, bool)>| {
            for (&(s, e, k), &acc) in state {
                if e - 1 > from && e - 1 <= to {
                    out.push((row((s, e, k), acc), false));
                }
            }
        };
    for batch in batches {
        let mut dirty = std::collections::BTreeSet::new();
        for &(k, v, t) in batch {
            let mut kept = false;
            for (s, e) in windows_of(assigner, t) {
                if e - 1 + lateness <= wm {
                    continue;
                }
                kept = true;
                let a = state.entry((s, e, k)).or_insert((0, 0, i64::MAX, i64::MIN));
                a.0 += 1;
                a.1 += v;
                a.2 = a.2.min(v);
                a.3 = a.3.max(v);
                if e - 1 <= wm {
                    dirty.insert((s, e, k));
                }
            }
            if !kept {
                dropped.push((k, v, t));
            }
        }
        for id in dirty {
            out.push((row(id, state[&id]), true));
        }
        if streaming {
            max_ts = batch.iter().map(|r| r.2).fold(max_ts, i64::max);
            let next = wm.max(max_ts - bound - 1);
            fire(&state, wm, next, &mut out);
            wm = next;
        }
    }
    fire(&state, wm, i64::MAX, &mut out);
    (out, dropped)
}

/// How a window job runs: parallelism, mode, and whether on the disk
/// backend with a budget of a few bytes (every partition spilled after
/// every step, so each is read back only when its rows or timers are due).
#[derive(Clone, Copy)]
struct Run(usize, RuntimeMode, bool);

const STREAMING: Run = Run(1, RuntimeMode::Streaming, false);
const ON_DISK: Run = Run(1, RuntimeMode::Streaming, true);

/// Run the window job over in-memory batches with any assigner.
fn run_assigner(
    batches: &[Vec<(i64, i64, i64)>],
    assigner: WindowAssigner,
    bound: i64,
    lateness: i64,
    Run(parallelism, mode, disk): Run,
    late_side_output: Option<&CollectHandle>,
) -> (Vec<RecordBatch>, u64) {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism).set_runtime_mode(mode);
    // The reference advances the watermark after every batch.
    env.configure(|c| c.watermark_interval = Duration::ZERO);
    if disk {
        env.configure(|c| {
            c.state.backend = weir_core::state_config::StateBackend::Disk;
            c.state.managed_memory = Some(64);
        });
    }
    let out = CollectHandle::new();
    let source = SourceSpec::from(MemorySourceSpec::new(
        event_schema(),
        batches.iter().map(|b| event_batch(b)).collect(),
    ));
    let windowed = env
        .from_source(
            source,
            WatermarkStrategy::for_bounded_out_of_orderness(
                "ts",
                Duration::from_millis(bound as u64),
            ),
            "events",
        )
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(assigner)
        .allowed_lateness(Duration::from_millis(lateness as u64));
    let windowed = match late_side_output {
        Some(_) => windowed.side_output_late_data("late"),
        None => windowed,
    };
    let results = windowed.aggregate(aggregates()).unwrap();
    results
        .sink_to(SinkSpec::from(out.clone()), "collect")
        .unwrap();
    if let Some(late) = late_side_output {
        results
            .side_output("late")
            .unwrap()
            .sink_to(SinkSpec::from(late.clone()), "late")
            .unwrap();
    }
    let result = env.execute("window-test").unwrap();
    if disk {
        // The partitions did go to disk and come back.
        assert!(result.counter("partitions_spilled") > 0);
        assert!(result.counter("partitions_loaded") > 0);
    }
    (out.batches(), result.counter("num_late_records_dropped"))
}

/// Batches of (key, value, ts) events, the window assigner, the watermark
/// bound and the allowed lateness.
type Case = (Vec<Vec<(i64, i64, i64)>>, WindowAssigner, i64, i64);

fn assigner_strategy() -> impl Strategy<Value = WindowAssigner> {
    prop_oneof![
        prop::sample::select(vec![100i64, 250, 1000])
            .prop_map(|size| WindowAssigner::Tumbling { size, offset: 0 }),
        (prop::sample::select(vec![(200i64, 100i64), (300, 200), (1000, 250)])).prop_map(
            |(size, slide)| WindowAssigner::Sliding {
                size,
                slide,
                offset: 0
            }
        ),
        (prop::sample::select(vec![(100i64, 400i64), (250, 1000)])).prop_map(|(step, max_size)| {
            WindowAssigner::Cumulate {
                step,
                max_size,
                offset: 0,
            }
        }),
    ]
}

fn event_strategy() -> impl Strategy<Value = Case> {
    (
        assigner_strategy(),
        0i64..400,
        prop::sample::select(vec![0i64, 0, 150, 700]),
    )
        .prop_flat_map(|(assigner, bound, lateness)| {
            let unit = assigner.pane().unwrap().0;
            // Timestamps cluster on pane boundaries (start - 1, start, end - 1)
            // and walk forward with jitter, so late and on-time records occur.
            let event = (
                0i64..4,
                -100i64..100,
                0i64..40,
                prop::sample::select(vec![-1i64, 0, 1, 37]),
                0i64..600,
            )
                .prop_map(move |(k, v, step, edge, jitter)| {
                    (k, v, step * unit / 2 + edge - jitter)
                });
            let batch = prop::collection::vec(event, 1..40);
            (
                prop::collection::vec(batch, 1..12),
                Just(assigner),
                Just(bound),
                Just(lateness),
            )
        })
        .prop_map(|(mut batches, assigner, bound, lateness)| {
            // Make time progress: batch i is shifted forward.
            let unit = assigner.pane().unwrap().0;
            for (i, b) in batches.iter_mut().enumerate() {
                for e in b.iter_mut() {
                    e.2 += i as i64 * unit * 2;
                }
            }
            (batches, assigner, bound, lateness)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn windows_match_naive_reference((batches, assigner, bound, lateness) in event_strategy()) {
        // Streaming at parallelism 1: per-batch watermarks, late records
        // dropped or, within the lateness, updating fired windows.
        // Every other case sends late records to a side output.
        let side = (batches.len() % 2 == 0).then(CollectHandle::new);
        let (out, late) = run_assigner(&batches, assigner, bound, lateness, STREAMING, side.as_ref());
        let (expected, mut expected_late) = reference(&batches, assigner, bound, lateness, true);
        let (weir_final, weir_updated) = final_results(&weir_rows(&out));
        let (ref_final, ref_updated) = final_results(&expected);
        prop_assert_eq!(&weir_final, &ref_final);
        prop_assert_eq!(&weir_updated, &ref_updated);
        // The disk backend: late rows of a spilled partition go through
        // with the next due rows (one late firing where memory has two), so
        // each window's last result, the windows updated late and the rows
        // dropped are compared.
        let (disk_out, disk_late) = run_assigner(&batches, assigner, bound, lateness, ON_DISK, None);
        let (disk_final, disk_updated) = final_results(&weir_rows(&disk_out));
        prop_assert_eq!(disk_final, ref_final);
        prop_assert_eq!(disk_updated, ref_updated);
        prop_assert_eq!(disk_late, expected_late.len() as u64);
        match side {
            Some(side) => {
                prop_assert_eq!(late, 0);
                let mut got = event_rows(&side.batches());
                got.sort();
                expected_late.sort();
                prop_assert_eq!(got, expected_late);
            }
            None => prop_assert_eq!(late, expected_late.len() as u64),
        }
        // Batch mode at parallelism 3: one final watermark, nothing is late,
        // every window fires exactly once.
        let (out, late) = run_assigner(&batches, assigner, bound, lateness, Run(3, RuntimeMode::Batch, false), None);
        let (expected, _) = reference(&batches, assigner, bound, lateness, false);
        let mut rows = weir_rows(&out);
        rows.sort();
        let mut expected = expected;
        expected.sort();
        prop_assert_eq!(rows, expected);
        prop_assert_eq!(late, 0);
    }
}

/// Session windows by Flink's merging rules, one record at a time; within a
/// batch records are taken per key, newest first (Weir's documented order).
/// A record whose merged window is past `end - 1 + lateness` is dropped;
/// one that changes a session whose end has passed fires it again at the
/// end of its batch (`is_update` when the session had fired before).
fn session_reference(
    batches: &[Vec<(i64, i64, i64)>],
    gap: i64,
    bound: i64,
    lateness: i64,
    streaming: bool,
) -> (Vec<(Row, bool)>, Vec<Event>) {
    type Acc = (i64, i64, i64, i64);
    // (start, end, acc, fired, dirty)
    type S = (i64, i64, Acc, bool, bool);
    let mut open: BTreeMap<i64, Vec<S>> = BTreeMap::new();
    let (mut wm, mut max_ts, mut dropped) = (i64::MIN, i64::MIN, Vec::new());
    let mut out = Vec::new();
    let row = |k: i64, s: &S| {
        let (c, sum, lo, hi) = s.2;
        (
            s.0,
            s.1,
            k,
            c,
            sum,
            lo,
            hi,
            (sum as f64 / c as f64).to_bits(),
        )
    };
    // Emit what is due at `wm`, then forget sessions past their lateness.
    let settle = |open: &mut BTreeMap<i64, Vec<S>>, wm: i64, out: &mut Vec<(Row, bool)>| {
        for (&k, list) in open.iter_mut() {
            for s in list.iter_mut() {
                if s.1 - 1 <= wm && (!s.3 || s.4) {
                    out.push((row(k, s), s.3));
                    s.3 = true;
                    s.4 = false;
                }
            }
            list.retain(|s| s.1 - 1 + lateness > wm);
        }
    };
    for batch in batches {
        let mut changed = false;
        // In arrival order, as Flink's WindowOperator.
        for &(k, v, t) in batch {
            let list = open.entry(k).or_default();
            let (s, e) = (t, t + gap);
            let (touching, rest): (Vec<S>, Vec<S>) =
                list.drain(..).partition(|x| x.0 <= e && x.1 >= s);
            *list = rest;
            if touching.is_empty() && e - 1 + lateness <= wm {
                dropped.push((k, v, t));
                continue;
            }
            let mut merged: S = (s, e, (1, v, v, v), false, false);
            for (a, b, (c, sum, lo, hi), fired, _) in touching {
                merged.0 = merged.0.min(a);
                merged.1 = merged.1.max(b);
                merged.2 = (
                    merged.2.0 + c,
                    merged.2.1 + sum,
                    merged.2.2.min(lo),
                    merged.2.3.max(hi),
                );
                merged.3 |= fired;
            }
            merged.4 = merged.1 - 1 <= wm;
            changed |= merged.4;
            list.push(merged);
            list.sort_by_key(|x| x.0);
        }
        if changed {
            settle(&mut open, wm, &mut out);
        }
        if streaming {
            max_ts = batch.iter().map(|r| r.2).fold(max_ts, i64::max);
            wm = wm.max(max_ts - bound - 1);
            settle(&mut open, wm, &mut out);
        }
    }
    settle(&mut open, i64::MAX, &mut out);
    out.sort();
    (out, dropped)
}

/// A record late on its own is dropped even when a newer record of its key
/// arrives right after it, in the next batch with the watermark unchanged
/// (which the disk backend merges into one batch), whose session it would
/// touch: records are taken in arrival order, as Flink's WindowOperator
/// takes them, so how batches are cut between two watermarks does not
/// matter. Key 2's record at 150 is late (watermark 564 - 160 - 1 = 403,
/// its session [150, 350)); its record at 205 opens [205, 405) alone.
#[test]
fn a_late_session_record_is_dropped_whatever_arrives_after_it() {
    let mut second = vec![(0, 0, 150); 15];
    second[12] = (2, 0, 150);
    let batches = vec![vec![(0, 0, 564)], second, vec![(2, 0, 205)]];
    let gap = 200;
    let (expected, dropped) = session_reference(&batches, gap, 160, 0, true);
    assert_eq!(dropped.len(), 15);
    // The disk backend hands a spilled partition's pending rows over as
    // one batch: the second and third batches arrive together.
    for run in [STREAMING, ON_DISK] {
        let assigner = WindowAssigner::Session { gap };
        let (out, late) = run_assigner(&batches, assigner, 160, 0, run, None);
        let mut rows = weir_rows(&out);
        rows.sort();
        assert_eq!(rows, expected);
        assert_eq!(late, 15);
        let sessions: Vec<_> = rows.iter().map(|(r, _)| (r.0, r.1, r.2, r.3)).collect();
        assert_eq!(sessions, vec![(205, 405, 2, 1), (564, 764, 0, 1)]);
    }
}

/// Batches of events, the session gap, the watermark bound and the lateness.
type SessionCase = (Vec<Vec<(i64, i64, i64)>>, i64, i64, i64);

fn session_case() -> impl Strategy<Value = SessionCase> {
    (
        prop::sample::select(vec![10i64, 50, 200]),
        0i64..300,
        prop::sample::select(vec![0i64, 0, 100, 400]),
    )
        .prop_flat_map(|(gap, bound, lateness)| {
            let event = (
                0i64..3,
                -100i64..100,
                0i64..400,
                prop::sample::select(vec![0i64, 0, 1, -1]),
            )
                .prop_map(move |(k, v, t, edge)| (k, v, t + edge * gap));
            let batch = prop::collection::vec(event, 1..30);
            (
                prop::collection::vec(batch, 1..10),
                Just(gap),
                Just(bound),
                Just(lateness),
            )
        })
        .prop_map(|(mut batches, gap, bound, lateness)| {
            for (i, b) in batches.iter_mut().enumerate() {
                for e in b.iter_mut() {
                    e.2 += i as i64 * 150;
                }
            }
            (batches, gap, bound, lateness)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn sessions_match_naive_reference((batches, gap, bound, lateness) in session_case()) {
        let assigner = WindowAssigner::Session { gap };
        let side = (batches.len() % 2 == 0).then(CollectHandle::new);
        let (out, late) = run_assigner(&batches, assigner, bound, lateness, STREAMING, side.as_ref());
        let (expected, mut expected_late) = session_reference(&batches, gap, bound, lateness, true);
        let mut rows = weir_rows(&out);
        rows.sort();
        prop_assert_eq!(&rows, &expected);
        // The disk backend, without lateness (with it, late rows of a
        // spilled partition go through together: fewer late firings).
        if lateness == 0 {
            let (out, late) = run_assigner(&batches, assigner, bound, lateness, ON_DISK, None);
            let mut rows = weir_rows(&out);
            rows.sort();
            prop_assert_eq!(&rows, &expected);
            prop_assert_eq!(late, expected_late.len() as u64);
        }
        match side {
            Some(side) => {
                prop_assert_eq!(late, 0);
                let mut got = event_rows(&side.batches());
                got.sort();
                expected_late.sort();
                prop_assert_eq!(got, expected_late);
            }
            None => prop_assert_eq!(late, expected_late.len() as u64),
        }
        let (out, late) = run_assigner(&batches, assigner, bound, lateness, Run(2, RuntimeMode::Batch, false), None);
        let (expected, _) = session_reference(&batches, gap, bound, lateness, false);
        let mut rows = weir_rows(&out);
        rows.sort();
        prop_assert_eq!(rows, expected);
        prop_assert_eq!(late, 0);
    }
}

#[test]
fn window_all_aggregates_across_keys_in_one_subtask() {
    let generator = GeneratorSpec::new(Some(50_000))
        .column("key", ColumnGen::Key { cardinality: 10 })
        .column("value", ColumnGen::UniformInt { min: -50, max: 50 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 0,
                events_per_second: 10_000,
                max_out_of_orderness_ms: 100,
            },
        );
    let second = TumblingEventTimeWindows::of(Duration::from_secs(1));
    let (keyed, _) = run_window_job(
        SourceSpec::from(generator.clone()),
        2,
        RuntimeMode::Streaming,
        second,
        200,
    );
    let mut per_window: BTreeMap<i64, (i64, i64, i64, i64)> = BTreeMap::new();
    for (row, _) in weir_rows(&keyed) {
        let e = per_window
            .entry(row.0)
            .or_insert((0, 0, i64::MAX, i64::MIN));
        e.0 += row.3;
        e.1 += row.4;
        e.2 = e.2.min(row.5);
        e.3 = e.3.max(row.6);
    }

    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let out = CollectHandle::new();
    let all = env
        .from_source(
            SourceSpec::from(generator),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(200)),
            "events",
        )
        .unwrap()
        .window_all(second)
        .aggregate(aggregates())
        .unwrap();
    assert_eq!(all.schema().field(2).name(), "cnt", "no key columns");
    all.sink_to(SinkSpec::from(out.clone()), "out").unwrap();
    let job = env.job_graph("all").unwrap();
    assert_eq!(job.vertices[1].parallelism, 1);
    env.execute("all").unwrap();
    let mut got = BTreeMap::new();
    for b in out.batches() {
        let int = |i: usize| b.column(i).as_primitive::<Int64Type>();
        let start = b.column(0).as_primitive::<TimestampMillisecondType>();
        for r in 0..b.num_rows() {
            got.insert(
                start.value(r),
                (
                    int(2).value(r),
                    int(3).value(r),
                    int(4).value(r),
                    int(5).value(r),
                ),
            );
        }
    }
    assert_eq!(got, per_window);
}

/// `aggregates()` per key in tumbling `window`s fired by `trigger` (purging
/// on fire if `purge`), into `out`.
fn triggered_aggregate(
    env: &weir_core::api::StreamExecutionEnvironment,
    source: SourceSpec,
    watermarks: WatermarkStrategy,
    window: WindowAssigner,
    trigger: weir_core::time::Trigger,
    purge: bool,
    out: &CollectHandle,
) {
    let mut windowed = env
        .from_source(source, watermarks, "events")
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(window)
        .trigger(trigger);
    if purge {
        windowed = windowed.purge_on_fire();
    }
    windowed
        .aggregate(aggregates())
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
}

#[test]
fn continuous_triggers_fire_early_and_converge_to_the_final_result() {
    use weir_core::time::Trigger;
    // 40 batches moving 100 ms each through 1 s windows, 3 keys.
    let batches: Vec<Vec<Event>> = (0..40i64)
        .map(|b| {
            (0..30i64)
                .map(|i| (i % 3, i - 10, b * 100 + i * 3))
                .collect()
        })
        .collect();
    let run = |trigger: Trigger, purge: bool| {
        let env = weir_worker::local_environment().unwrap();
        env.configure(|c| c.watermark_interval = Duration::ZERO);
        let out = CollectHandle::new();
        let source = SourceSpec::from(MemorySourceSpec::new(
            event_schema(),
            batches.iter().map(|b| event_batch(b)).collect(),
        ));
        let watermarks =
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(10));
        let window = TumblingEventTimeWindows::of(Duration::from_secs(1));
        triggered_aggregate(&env, source, watermarks, window, trigger, purge, &out);
        let result = env.execute("trigger").unwrap();
        (weir_rows(&out.batches()), result.counter("early_firings"))
    };
    let (on_end, _) = run(Trigger::OnWindowEnd, false);
    let quarter = Trigger::continuous_event_time(Duration::from_millis(250));
    let (continuous, early) = run(quarter, false);
    assert!(
        early > 0 && continuous.len() > on_end.len(),
        "early firings happened"
    );
    // The last row of each (window, key) is the final result.
    let (final_rows, _) = final_results(&continuous);
    let (expected, _) = final_results(&on_end);
    assert_eq!(final_rows, expected);
    // Purging: each row covers the records since the previous firing, so
    // counts and sums add up to the window's.
    let (purged, _) = run(quarter, true);
    let mut sums: BTreeMap<WindowKey, (i64, i64)> = BTreeMap::new();
    for (row, _) in &purged {
        let e = sums.entry((row.0, row.1, row.2)).or_default();
        e.0 += row.3;
        e.1 += row.4;
    }
    let totals: BTreeMap<WindowKey, (i64, i64)> =
        expected.iter().map(|(k, r)| (*k, (r.3, r.4))).collect();
    assert_eq!(sums, totals);
    assert!(purged.len() > on_end.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Flink's CountTrigger on tumbling windows, one record at a time: every
    /// n-th record of a (window, key) emits the result so far (or, purging,
    /// since the last firing); nothing fires at the window end.
    #[test]
    fn count_trigger_matches_reference(
        (batches, _, bound, _) in event_strategy(),
        n in 1u64..4,
        purge in any::<bool>(),
    ) {
        use weir_core::time::Trigger;
        let size = 100i64;
        type Acc = (i64, i64, i64, i64);
        let mut state: BTreeMap<(i64, i64), (u64, Acc)> = BTreeMap::new();
        let (mut wm, mut max_ts) = (i64::MIN, i64::MIN);
        let mut expected: Vec<(i64, i64, i64, i64)> = Vec::new();
        for batch in &batches {
            for &(k, v, t) in batch {
                let s = t - t.rem_euclid(size);
                if s + size - 1 <= wm {
                    continue;
                }
                let (c, acc) = state.entry((s, k)).or_insert((0, (0, 0, i64::MAX, i64::MIN)));
                *c += 1;
                acc.0 += 1;
                acc.1 += v;
                if *c % n == 0 {
                    expected.push((s, k, acc.0, acc.1));
                    if purge {
                        *acc = (0, 0, i64::MAX, i64::MIN);
                    }
                }
            }
            max_ts = batch.iter().map(|r| r.2).fold(max_ts, i64::max);
            wm = wm.max(max_ts - bound - 1);
        }
        expected.sort();

        let env = weir_worker::local_environment().unwrap();
        env.configure(|c| c.watermark_interval = Duration::ZERO);
        let out = CollectHandle::new();
        let source = SourceSpec::from(MemorySourceSpec::new(
            event_schema(),
            batches.iter().map(|b| event_batch(b)).collect(),
        ));
        let mut windowed = env
            .from_source(
                source,
                WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(bound as u64)),
                "events",
            )
            .unwrap()
            .key_by(&["key"])
            .unwrap()
            .window(TumblingEventTimeWindows::of(Duration::from_millis(size as u64)))
            .trigger(Trigger::count(n));
        if purge {
            windowed = windowed.purge_on_fire();
        }
        windowed
            .aggregate(vec![AggregateSpec::count_star().alias("cnt"), AggregateSpec::sum("value").alias("total")])
            .unwrap()
            .sink_to(SinkSpec::from(out.clone()), "out")
            .unwrap();
        env.execute("count-trigger").unwrap();
        let mut got = Vec::new();
        for b in out.batches() {
            let start = b.column(0).as_primitive::<TimestampMillisecondType>();
            let int = |i: usize| b.column(i).as_primitive::<Int64Type>();
            for r in 0..b.num_rows() {
                got.push((start.value(r), int(2).value(r), int(3).value(r), int(4).value(r)));
            }
        }
        got.sort();
        prop_assert_eq!(got, expected);
    }
}

/// Benchmark case for the count trigger: records of many keys in one
/// tumbling window (50 000 records of 2 500 keys, then 400 000 of 20 000),
/// firing every 10 records of a key, keeping and purging. Prints records/s:
/// `cargo test --release -p weir-tests --test window count_trigger_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn count_trigger_speed() {
    use weir_core::time::Trigger;
    for (rows, keys) in [(50_000u64, 2_500u64), (400_000, 20_000)] {
        for purge in [false, true] {
            let generator = GeneratorSpec::new(Some(rows))
                .column("key", ColumnGen::Key { cardinality: keys })
                .column("value", ColumnGen::UniformInt { min: 0, max: 1000 })
                .column(
                    "ts",
                    ColumnGen::EventTime {
                        start_ms: 0,
                        events_per_second: 1_000,
                        max_out_of_orderness_ms: 0,
                    },
                );
            let env = weir_worker::local_environment().unwrap();
            let out = CollectHandle::new();
            triggered_aggregate(
                &env,
                SourceSpec::from(generator),
                WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::ZERO),
                TumblingEventTimeWindows::of(Duration::from_secs(1_000_000)),
                Trigger::count(10),
                purge,
                &out,
            );
            let start = std::time::Instant::now();
            env.execute("count-trigger-speed").unwrap();
            let took = start.elapsed();
            let fired: usize = out.batches().iter().map(|b| b.num_rows()).sum();
            assert!(fired as u64 > rows / 20, "{fired} firings");
            println!(
                "count trigger, {keys} keys, purge {purge}: {rows} records, {fired} firings in {took:?} ({:.0} records/s)",
                rows as f64 / took.as_secs_f64()
            );
        }
    }
}
