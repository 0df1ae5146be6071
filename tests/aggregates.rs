//! Window aggregates beyond the basics: count distinct, first/last value by
//! event time, and a user-defined aggregate through DataFusion's trait.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type, TimestampMillisecondType};
use datafusion_common::ScalarValue;
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};
use proptest::prelude::*;
use weir_core::config::RuntimeMode;
use weir_core::spec::{AggregateSpec, CollectHandle, MemorySourceSpec, SinkSpec, SourceSpec};
use weir_core::time::{WatermarkStrategy, WindowAssigner};
use weir_tests::{event_batch, event_schema};

/// Sum of squares of an Int64 column.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SumOfSquares {
    signature: Signature,
}

impl AggregateUDFImpl for SumOfSquares {
    fn name(&self) -> &str {
        "sum_of_squares"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(DataType::Int64)
    }
    fn accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> datafusion_common::Result<Box<dyn Accumulator>> {
        Ok(Box::new(SquaresAccumulator(0)))
    }
    fn state_fields(&self, _args: StateFieldsArgs) -> datafusion_common::Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            "sum_of_squares",
            DataType::Int64,
            true,
        ))])
    }
}

#[derive(Debug)]
struct SquaresAccumulator(i64);

impl Accumulator for SquaresAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion_common::Result<()> {
        self.0 += values[0]
            .as_primitive::<Int64Type>()
            .iter()
            .flatten()
            .map(|v| v * v)
            .sum::<i64>();
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion_common::Result<()> {
        self.0 += states[0]
            .as_primitive::<Int64Type>()
            .iter()
            .flatten()
            .sum::<i64>();
        Ok(())
    }
    fn state(&mut self) -> datafusion_common::Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(Some(self.0))])
    }
    fn evaluate(&mut self) -> datafusion_common::Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.0)))
    }
    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

type Event = (i64, i64, i64);
/// window start, key, count distinct, first, last, sum of squares
type Row = (i64, i64, i64, i64, i64, i64);

fn run(batches: &[Vec<Event>], assigner: WindowAssigner, p: usize, mode: RuntimeMode) -> Vec<Row> {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(p).set_runtime_mode(mode);
    let udf = Arc::new(AggregateUDF::from(SumOfSquares {
        signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
    }));
    let out = CollectHandle::new();
    let source = SourceSpec::from(MemorySourceSpec::new(
        event_schema(),
        batches.iter().map(|b| event_batch(b)).collect(),
    ));
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(50)),
        "events",
    )
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(assigner)
    .aggregate(vec![
        AggregateSpec::count_distinct("value"),
        AggregateSpec::first_value("value"),
        AggregateSpec::last_value("value"),
        AggregateSpec::udf(udf, "value"),
    ])
    .unwrap()
    .sink_to(SinkSpec::from(out.clone()), "out")
    .unwrap();
    let result = env.execute("aggregates").unwrap();
    assert_eq!(result.counter("num_late_records_dropped"), 0);
    let mut rows = Vec::new();
    for b in out.batches() {
        let int = |i: usize| b.column(i).as_primitive::<Int64Type>();
        let start = b.column(0).as_primitive::<TimestampMillisecondType>();
        for r in 0..b.num_rows() {
            rows.push((
                start.value(r),
                int(2).value(r),
                int(3).value(r),
                int(4).value(r),
                int(5).value(r),
                int(6).value(r),
            ));
        }
    }
    rows.sort();
    rows
}

fn reference(batches: &[Vec<Event>], size: i64, slide: i64) -> Vec<Row> {
    let mut windows: BTreeMap<(i64, i64), Vec<(i64, i64)>> = BTreeMap::new();
    for &(k, v, t) in batches.iter().flatten() {
        let mut s = t - t.rem_euclid(slide);
        while s > t - size {
            windows.entry((s, k)).or_default().push((t, v));
            s -= slide;
        }
    }
    windows
        .into_iter()
        .map(|((s, k), mut rows)| {
            rows.sort();
            let distinct: BTreeSet<i64> = rows.iter().map(|r| r.1).collect();
            let squares = rows.iter().map(|r| r.1 * r.1).sum();
            (
                s,
                k,
                distinct.len() as i64,
                rows[0].1,
                rows[rows.len() - 1].1,
                squares,
            )
        })
        .collect()
}

/// Batches moving forward in time with at most 50 ms disorder; timestamps
/// are unique per key so first and last are well defined.
fn batches() -> impl Strategy<Value = Vec<Vec<Event>>> {
    prop::collection::vec(
        prop::collection::vec((0i64..3, -5i64..5, 0i64..100, 0i64..50), 1..30),
        1..8,
    )
    .prop_map(|bs| {
        let mut seen = BTreeSet::new();
        bs.into_iter()
            .enumerate()
            .map(|(i, b)| {
                b.into_iter()
                    .map(|(k, v, t, j)| (k, v, i as i64 * 100 + t - j))
                    .filter(|&(k, _, t)| seen.insert((k, t)))
                    .collect()
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn distinct_first_last_and_udf_match_reference(batches in batches(), sliding in any::<bool>()) {
        let (assigner, size, slide) = if sliding {
            (WindowAssigner::Sliding { size: 200, slide: 100, offset: 0 }, 200, 100)
        } else {
            (WindowAssigner::Tumbling { size: 100, offset: 0 }, 100, 100)
        };
        let expected = reference(&batches, size, slide);
        prop_assert_eq!(run(&batches, assigner, 1, RuntimeMode::Streaming), expected.clone());
        prop_assert_eq!(run(&batches, assigner, 2, RuntimeMode::Batch), expected);
    }
}

#[test]
fn a_small_window_by_hand() {
    // Arrival order 20 then 10: first/last follow event time, not arrival.
    let tumble = WindowAssigner::Tumbling {
        size: 100,
        offset: 0,
    };
    let rows = run(
        &[vec![(1, 3, 20), (1, 2, 10), (1, 3, 30)]],
        tumble,
        1,
        RuntimeMode::Streaming,
    );
    assert_eq!(rows, vec![(0, 1, 2, 2, 3, 22)]);
}

/// Window start, key, row count, lower median of the values.
fn run_median(
    batches: &[Vec<Event>],
    assigner: WindowAssigner,
    p: usize,
    mode: RuntimeMode,
) -> Vec<(i64, i64, i64, i64)> {
    use arrow::array::Int64Array;
    use arrow::datatypes::Schema;
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(p).set_runtime_mode(mode);
    env.configure(|c| c.watermark_interval = Duration::ZERO);
    let schema = Arc::new(Schema::new(vec![
        Field::new("window_start", DataType::Int64, false),
        Field::new("key", DataType::Int64, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("median", DataType::Int64, false),
    ]));
    let out_schema = Arc::clone(&schema);
    let median = move |(start, _end): (i64, i64),
                       rows: &arrow::record_batch::RecordBatch,
                       ranges: &[std::ops::Range<usize>]|
          -> weir_core::Result<Vec<arrow::record_batch::RecordBatch>> {
        let keys = rows.column(0).as_primitive::<Int64Type>();
        let values = rows.column(1).as_primitive::<Int64Type>();
        let (mut k, mut n, mut m) = (vec![], vec![], vec![]);
        for r in ranges {
            let mut vs: Vec<i64> = values.values()[r.clone()].to_vec();
            vs.sort();
            k.push(keys.value(r.start));
            n.push(vs.len() as i64);
            m.push(vs[(vs.len() - 1) / 2]);
        }
        Ok(vec![arrow::record_batch::RecordBatch::try_new(
            Arc::clone(&out_schema),
            vec![
                Arc::new(Int64Array::from(vec![start; k.len()])),
                Arc::new(Int64Array::from(k)),
                Arc::new(Int64Array::from(n)),
                Arc::new(Int64Array::from(m)),
            ],
        )?])
    };
    let out = CollectHandle::new();
    let source = SourceSpec::from(MemorySourceSpec::new(
        event_schema(),
        batches.iter().map(|b| event_batch(b)).collect(),
    ));
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(50)),
        "events",
    )
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(assigner)
    .process("Median", schema, median)
    .unwrap()
    .sink_to(SinkSpec::from(out.clone()), "out")
    .unwrap();
    env.execute("median").unwrap();
    let mut rows = Vec::new();
    for b in out.batches() {
        let c = |i: usize| b.column(i).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            rows.push((c(0).value(r), c(1).value(r), c(2).value(r), c(3).value(r)));
        }
    }
    rows.sort();
    rows
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    #[test]
    fn window_process_function_sees_every_row_of_its_key(batches in batches(), sliding in any::<bool>()) {
        let (assigner, size, slide) = if sliding {
            (WindowAssigner::Sliding { size: 200, slide: 100, offset: 0 }, 200, 100)
        } else {
            (WindowAssigner::Tumbling { size: 100, offset: 0 }, 100, 100)
        };
        let mut windows: BTreeMap<(i64, i64), Vec<i64>> = BTreeMap::new();
        for &(k, v, t) in batches.iter().flatten() {
            let mut s = t - t.rem_euclid(slide);
            while s > t - size {
                windows.entry((s, k)).or_default().push(v);
                s -= slide;
            }
        }
        let expected: Vec<(i64, i64, i64, i64)> = windows
            .into_iter()
            .map(|((s, k), mut vs)| {
                vs.sort();
                (s, k, vs.len() as i64, vs[(vs.len() - 1) / 2])
            })
            .collect();
        prop_assert_eq!(run_median(&batches, assigner, 1, RuntimeMode::Streaming), expected.clone());
        prop_assert_eq!(run_median(&batches, assigner, 3, RuntimeMode::Batch), expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn count_windows_group_every_n_rows_of_a_key(
        batches in prop::collection::vec(prop::collection::vec((0i64..4, -9i64..9), 0..30), 1..6),
        size in 1u64..5,
    ) {
        let events: Vec<Vec<Event>> = batches
            .iter()
            .map(|b| b.iter().map(|&(k, v)| (k, v, 0)).collect())
            .collect();
        // Reference: per key, arrival order, full groups of `size` only.
        let mut per_key: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for &(k, v, _) in events.iter().flatten() {
            per_key.entry(k).or_default().push(v);
        }
        let mut expected: Vec<(i64, i64, i64, i64)> = per_key
            .iter()
            .flat_map(|(&k, vs)| {
                vs.chunks_exact(size as usize)
                    .map(move |c| (k, c.len() as i64, c.iter().sum(), *c.iter().max().unwrap()))
            })
            .collect();
        expected.sort();

        let env = weir_worker::local_environment().unwrap();
        let out = CollectHandle::new();
        let source = SourceSpec::from(MemorySourceSpec::new(
            event_schema(),
            events.iter().map(|b| event_batch(b)).collect(),
        ));
        env.from_source(source, WatermarkStrategy::no_watermarks(), "events")
            .unwrap()
            .key_by(&["key"])
            .unwrap()
            .count_window(size)
            .aggregate(vec![
                AggregateSpec::count_star(),
                AggregateSpec::sum("value"),
                AggregateSpec::max("value"),
            ])
            .unwrap()
            .set_parallelism(2)
            .unwrap()
            .sink_to(SinkSpec::from(out.clone()), "out")
            .unwrap();
        env.execute("count").unwrap();
        let mut got = Vec::new();
        for b in out.batches() {
            let c = |i: usize| b.column(i).as_primitive::<Int64Type>();
            for r in 0..b.num_rows() {
                got.push((c(0).value(r), c(1).value(r), c(2).value(r), c(3).value(r)));
            }
        }
        got.sort();
        prop_assert_eq!(got, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    #[test]
    fn session_window_process_function_sees_each_session(batches in batches(), gap in prop::sample::select(vec![5i64, 20, 60])) {
        // Sessions per key over all its timestamps (no record is late here).
        let mut per_key: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
        for &(k, v, t) in batches.iter().flatten() {
            per_key.entry(k).or_default().push((t, v));
        }
        let mut expected = Vec::new();
        for (k, mut rows) in per_key {
            rows.sort();
            let mut sessions: Vec<(i64, i64, Vec<i64>)> = Vec::new();
            for (t, v) in rows {
                match sessions.last_mut() {
                    Some(s) if t <= s.1 => {
                        s.1 = s.1.max(t + gap);
                        s.2.push(v);
                    }
                    _ => sessions.push((t, t + gap, vec![v])),
                }
            }
            for (start, _, mut vs) in sessions {
                vs.sort();
                expected.push((start, k, vs.len() as i64, vs[(vs.len() - 1) / 2]));
            }
        }
        expected.sort();
        let sessions = WindowAssigner::Session { gap };
        prop_assert_eq!(run_median(&batches, sessions, 1, RuntimeMode::Streaming), expected.clone());
        prop_assert_eq!(run_median(&batches, sessions, 2, RuntimeMode::Batch), expected);
    }
}
