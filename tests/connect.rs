//! Connected streams: a co-process function with shared keyed state and
//! timers, and the broadcast state pattern.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use weir_core::Result;
use weir_core::process::{CoProcessFunction, FiredTimers, KeyId, ProcessContext, ValueState};
use weir_core::spec::{CollectHandle, MemorySourceSpec, SinkSpec, SourceSpec};
use weir_core::time::WatermarkStrategy;
use weir_tests::{event_batch, event_schema};

type Event = (i64, i64, i64);

fn three_ints(names: [&str; 3]) -> SchemaRef {
    Arc::new(Schema::new(
        names
            .map(|n| Field::new(n, DataType::Int64, false))
            .to_vec(),
    ))
}

/// Emits (key, a, b) at the end of event time, from per-key state updated
/// by both inputs.
struct BothSides {
    schema: SchemaRef,
    first: ValueState<i64>,
    second: ValueState<i64>,
    broadcast_factor: Option<i64>,
    seen: ValueState<bool>,
}

impl BothSides {
    fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            first: ValueState::default(),
            second: ValueState::default(),
            broadcast_factor: None,
            seen: ValueState::default(),
        }
    }

    fn touch(&mut self, key: KeyId, ctx: &mut ProcessContext) {
        if self.seen.get(key).is_none() {
            self.seen.set(key, true);
            ctx.timers.register_event_time_timer(key, i64::MAX);
        }
    }
}

impl CoProcessFunction for BothSides {
    fn process_batch1(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext) -> Result<()> {
        let values = batch.column(1).as_primitive::<Int64Type>();
        for (row, &k) in ctx.key_ids().to_vec().iter().enumerate() {
            let sum = self.first.get(k).copied().unwrap_or(0);
            self.first.set(k, sum + values.value(row));
            self.touch(k, ctx);
        }
        Ok(())
    }

    fn process_batch2(&mut self, batch: &RecordBatch, ctx: &mut ProcessContext) -> Result<()> {
        if ctx.key_ids().is_empty() {
            // Broadcast input: the factor, the same on every subtask.
            self.broadcast_factor = Some(batch.column(1).as_primitive::<Int64Type>().value(0));
            return Ok(());
        }
        for &k in &ctx.key_ids().to_vec() {
            let n = self.second.get(k).copied().unwrap_or(0);
            self.second.set(k, n + 1);
            self.touch(k, ctx);
        }
        Ok(())
    }

    fn on_timers(&mut self, timers: &FiredTimers, ctx: &mut ProcessContext) -> Result<()> {
        let keys: Vec<KeyId> = timers.timers.iter().map(|t| t.1).collect();
        let key_values = ctx.key_values(&keys)?;
        let factor = self.broadcast_factor.unwrap_or(1);
        let a: Vec<i64> = keys
            .iter()
            .map(|&k| self.first.get(k).copied().unwrap_or(0) * factor)
            .collect();
        let b: Vec<i64> = keys
            .iter()
            .map(|&k| self.second.get(k).copied().unwrap_or(0))
            .collect();
        ctx.emit(RecordBatch::try_new(
            Arc::clone(&self.schema),
            vec![
                Arc::clone(&key_values[0]),
                Arc::new(Int64Array::from(a)),
                Arc::new(Int64Array::from(b)),
            ],
        )?);
        Ok(())
    }
}

fn source(batches: &[Vec<Event>]) -> SourceSpec {
    SourceSpec::from(MemorySourceSpec::new(
        event_schema(),
        batches.iter().map(|b| event_batch(b)).collect(),
    ))
}

fn rows(out: &CollectHandle) -> BTreeMap<i64, (i64, i64)> {
    let mut m = BTreeMap::new();
    for b in out.batches() {
        let c = |i: usize| b.column(i).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            assert!(
                m.insert(c(0).value(r), (c(1).value(r), c(2).value(r)))
                    .is_none(),
                "one row per key"
            );
        }
    }
    m
}

fn events(n: i64, keys: i64) -> Vec<Vec<Event>> {
    (0..n)
        .map(|i| (i % keys, i, i * 10))
        .collect::<Vec<_>>()
        .chunks(7)
        .map(<[Event]>::to_vec)
        .collect()
}

#[test]
fn connected_keyed_streams_share_state_per_key() {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let strategy =
        || WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(5));
    let a = env
        .from_source(source(&events(300, 11)), strategy(), "a")
        .unwrap()
        .key_by(&["key"])
        .unwrap();
    let b = env
        .from_source(source(&events(200, 13)), strategy(), "b")
        .unwrap()
        .key_by(&["key"])
        .unwrap();
    let schema = three_ints(["key", "sum_a", "count_b"]);
    let out = CollectHandle::new();
    let s = Arc::clone(&schema);
    a.connect(&b)
        .unwrap()
        .process("BothSides", schema, vec![], move || {
            Box::new(BothSides::new(Arc::clone(&s)))
        })
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
    env.execute("connect").unwrap();
    let mut expected: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for (k, v, _) in events(300, 11).into_iter().flatten() {
        expected.entry(k).or_default().0 += v;
    }
    for (k, _, _) in events(200, 13).into_iter().flatten() {
        expected.entry(k).or_default().1 += 1;
    }
    assert_eq!(rows(&out), expected);
}

#[test]
fn broadcast_input_reaches_every_subtask() {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(3);
    let strategy =
        || WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(5));
    let keyed = env
        .from_source(source(&events(300, 17)), strategy(), "events")
        .unwrap()
        .key_by(&["key"])
        .unwrap();
    let factor = env
        .from_source(source(&[vec![(0, 10, 0)]]), strategy(), "factor")
        .unwrap()
        .set_parallelism(1)
        .unwrap();
    let schema = three_ints(["key", "scaled_sum", "unused"]);
    let out = CollectHandle::new();
    let s = Arc::clone(&schema);
    keyed
        .connect_broadcast(&factor)
        .process("Scale", schema, vec![], move || {
            Box::new(BothSides::new(Arc::clone(&s)))
        })
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
    assert!(env.explain("b").unwrap().contains("BROADCAST"));
    env.execute("broadcast").unwrap();
    let mut expected: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for (k, v, _) in events(300, 17).into_iter().flatten() {
        expected.entry(k).or_default().0 += v * 10;
    }
    assert_eq!(
        rows(&out),
        expected,
        "every subtask applied the broadcast factor"
    );
}
