//! Partitioners, unions, file sinks, rate limiting and failure reporting on
//! the local runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use datafusion_expr::{col, lit};
use weir_core::WeirError;
use weir_core::spec::{CollectHandle, SinkSpec, SourceSpec};
use weir_core::time::WatermarkStrategy;
use weir_operators::connectors::{ColumnGen, GeneratorSpec};
use weir_operators::sources::{CsvOptions, csv_source};
use weir_tests::sorted_rows;

fn numbers(n: u64) -> SourceSpec {
    SourceSpec::from(
        GeneratorSpec::new(Some(n))
            .column("n", ColumnGen::Sequence)
            .column("k", ColumnGen::Key { cardinality: 10 }),
    )
}

fn values(batches: &[RecordBatch]) -> Vec<i64> {
    let mut v: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    v.sort();
    v
}

#[test]
fn union_rebalance_and_broadcast_deliver_every_row() {
    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| c.batch_size = 100);
    let none = WatermarkStrategy::no_watermarks;
    let a = env.from_source(numbers(1000), none(), "a").unwrap();
    let b = env
        .from_source(numbers(500), none(), "b")
        .unwrap()
        .set_parallelism(2)
        .unwrap();
    let unioned = a.union(std::slice::from_ref(&b)).unwrap();
    let rebalanced = CollectHandle::new();
    unioned
        .rebalance()
        .filter(col("n").gt_eq(lit(0)))
        .unwrap()
        .name("Rebalanced")
        .unwrap()
        .set_parallelism(3)
        .unwrap()
        .sink_to(SinkSpec::from(rebalanced.clone()), "rebalanced")
        .unwrap();
    let broadcast = CollectHandle::new();
    a.broadcast()
        .filter(col("n").lt(lit(10)))
        .unwrap()
        .set_parallelism(3)
        .unwrap()
        .sink_to(SinkSpec::from(broadcast.clone()), "broadcast")
        .unwrap();
    let result = env.execute("partitioners").unwrap();

    let mut expected: Vec<i64> = (0..1000).chain(0..500).collect();
    expected.sort();
    assert_eq!(values(&rebalanced.batches()), expected);
    // Rebalance spread the batches over all three subtasks.
    let per_subtask: Vec<u64> = result
        .tasks
        .iter()
        .flat_map(|t| &t.operators)
        .filter(|o| o.name == "Rebalanced")
        .map(|o| o.records_in)
        .collect();
    assert_eq!(per_subtask.len(), 3);
    assert!(per_subtask.iter().all(|&r| r > 0), "{per_subtask:?}");
    // Broadcast: every subtask saw every row.
    let mut triple: Vec<i64> = (0..10).flat_map(|n| [n, n, n]).collect();
    triple.sort();
    assert_eq!(values(&broadcast.batches()), triple);
}

#[test]
fn generator_content_does_not_depend_on_parallelism_or_batch_size() {
    let run = |p: usize, batch: usize| {
        let env = weir_worker::local_environment().unwrap();
        env.set_parallelism(p);
        env.configure(|c| c.batch_size = batch);
        let out = CollectHandle::new();
        let spec = GeneratorSpec::new(Some(10_000))
            .column("n", ColumnGen::Sequence)
            .column("k", ColumnGen::Key { cardinality: 77 })
            .column(
                "f",
                ColumnGen::UniformFloat {
                    min: -1.0,
                    max: 1.0,
                },
            )
            .column("c", ColumnGen::Choice(vec!["x".into(), "y".into()]))
            .seed(7);
        env.from_source(
            SourceSpec::from(spec),
            WatermarkStrategy::no_watermarks(),
            "g",
        )
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
        env.execute("gen").unwrap();
        sorted_rows(&out.batches())
    };
    let one = run(1, 8192);
    assert_eq!(one.len(), 10_000);
    assert_eq!(one, run(3, 333));
}

#[test]
fn rate_limited_generator_does_not_outrun_its_rate() {
    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| c.batch_linger = Duration::from_millis(2));
    let spec = GeneratorSpec::new(Some(20_000))
        .column("n", ColumnGen::Sequence)
        .rate(100_000);
    let out = CollectHandle::new();
    env.from_source(
        SourceSpec::from(spec),
        WatermarkStrategy::no_watermarks(),
        "g",
    )
    .unwrap()
    .sink_to(SinkSpec::from(out.clone()), "out")
    .unwrap();
    let started = Instant::now();
    env.execute("rate").unwrap();
    // 20,000 events at 100,000/s cannot finish in less than ~0.2 s.
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.num_rows(), 20_000);
    // Linger cuts partial batches: far more than the 3 full batches of 8192.
    assert!(out.batches().len() > 10, "{} batches", out.batches().len());
}

#[test]
fn csv_sink_round_trips_through_csv_source() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("csv");
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.from_source(numbers(5000), WatermarkStrategy::no_watermarks(), "g")
        .unwrap()
        .sink_to(weir_operators::connectors::csv_sink(out_dir.clone()), "csv")
        .unwrap();
    env.execute("csv-out").unwrap();

    let env = weir_worker::local_environment().unwrap();
    let out = CollectHandle::new();
    env.from_source(
        csv_source(&[&out_dir], CsvOptions::default()).unwrap(),
        WatermarkStrategy::no_watermarks(),
        "csv",
    )
    .unwrap()
    .sink_to(SinkSpec::from(out.clone()), "out")
    .unwrap();
    env.execute("csv-in").unwrap();
    assert_eq!(values(&out.batches()), (0..5000).collect::<Vec<i64>>());
}

#[test]
fn a_failing_function_fails_the_job_with_task_and_cause() {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let s = env
        .from_source(numbers(1_000_000), WatermarkStrategy::no_watermarks(), "g")
        .unwrap();
    let schema = Arc::clone(s.schema());
    s.map_batches("Explode", schema, |b| {
        let n = b.column(0).as_primitive::<Int64Type>();
        if n.values().contains(&123_456) {
            return Err(WeirError::bad_input("record 123456", "value not accepted"));
        }
        Ok(b)
    })
    .unwrap()
    .sink_to(weir_operators::connectors::blackhole(), "out")
    .unwrap();
    let err = env.execute("fails").unwrap_err().to_string();
    assert!(err.contains("Explode"), "{err}");
    assert!(err.contains("value not accepted"), "{err}");

    // A panicking function is reported as a failure too, not a crash.
    let env = weir_worker::local_environment().unwrap();
    let s = env
        .from_source(numbers(10), WatermarkStrategy::no_watermarks(), "g")
        .unwrap();
    let schema = Arc::clone(s.schema());
    s.map_batches("Panics", schema, |_| panic!("user bug"))
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "out")
        .unwrap();
    let err = env.execute("panics").unwrap_err().to_string();
    assert!(err.contains("user bug"), "{err}");
}

#[test]
fn plan_errors_are_raised_before_running() {
    let env = weir_worker::local_environment().unwrap();
    let s = env
        .from_source(numbers(10), WatermarkStrategy::no_watermarks(), "g")
        .unwrap();
    let err = s.key_by(&["missing"]).err().unwrap().to_string();
    assert!(
        err.contains("'missing' not found") && err.contains("Source: g"),
        "{err}"
    );
    let err = s.filter(col("n") + lit(1)).err().unwrap().to_string();
    assert!(err.contains("expected Boolean"), "{err}");
    let err = s
        .key_by(&["k"])
        .unwrap()
        .window(weir_core::time::TumblingEventTimeWindows::of(
            Duration::from_secs(1),
        ))
        .aggregate(vec![weir_core::spec::AggregateSpec::count_star()])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("without event time"), "{err}");
    // No sink: nothing to run.
    let err = env.execute("no-sink").unwrap_err().to_string();
    assert!(err.contains("no sink"), "{err}");
}

#[test]
fn side_outputs_are_edges_and_do_not_break_chains() {
    use weir_core::time::TumblingEventTimeWindows;
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    let spec = GeneratorSpec::new(Some(10))
        .column("k", ColumnGen::Key { cardinality: 3 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 0,
                events_per_second: 10,
                max_out_of_orderness_ms: 0,
            },
        );
    let windowed = env
        .from_source(
            SourceSpec::from(spec),
            WatermarkStrategy::for_monotonous_timestamps("ts"),
            "g",
        )
        .unwrap()
        .key_by(&["k"])
        .unwrap()
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .side_output_late_data("late")
        .aggregate(vec![weir_core::spec::AggregateSpec::count_star()])
        .unwrap();
    windowed
        .sink_to(weir_operators::connectors::blackhole(), "main")
        .unwrap();
    let err = windowed.side_output("other").err().unwrap().to_string();
    assert!(
        err.contains("no side output 'other'") && err.contains("late"),
        "{err}"
    );
    let late = windowed.side_output("late").unwrap();
    assert_eq!(
        late.rowtime(),
        Some("ts"),
        "late records keep their event time"
    );
    late.sink_to(weir_operators::connectors::blackhole(), "late")
        .unwrap();

    let job = env.job_graph("side").unwrap();
    let names: Vec<&str> = job.vertices.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        names[1].starts_with("Window(") && names[1].ends_with("-> Sink: main"),
        "{names:?}"
    );
    assert_eq!(names[2], "Sink: late");
    let side = job.edges.iter().find(|e| e.target == 2).unwrap();
    assert_eq!(side.tag.as_deref(), Some("late"));
    assert!(
        env.explain("side")
            .unwrap()
            .contains("(side output 'late')")
    );
    env.execute("side").unwrap();
}

/// Emits one row per key 50 ms (wall clock) after the key was first seen.
#[derive(Default)]
struct Delayed {
    seen: weir_core::process::ValueState<bool>,
}

impl weir_core::process::KeyedProcessFunction for Delayed {
    fn process_batch(
        &mut self,
        _batch: &arrow::record_batch::RecordBatch,
        ctx: &mut weir_core::process::ProcessContext,
    ) -> weir_core::Result<()> {
        let now = ctx.current_processing_time();
        for &k in &ctx.key_ids().to_vec() {
            if self.seen.get(k).is_none() {
                self.seen.set(k, true);
                ctx.timers.register_processing_time_timer(k, now + 50);
            }
        }
        Ok(())
    }

    fn on_timers(
        &mut self,
        timers: &weir_core::process::FiredTimers,
        ctx: &mut weir_core::process::ProcessContext,
    ) -> weir_core::Result<()> {
        assert_eq!(
            timers.domain,
            weir_core::process::TimeDomain::ProcessingTime
        );
        let keys: Vec<u32> = timers.timers.iter().map(|t| t.1).collect();
        let columns = ctx.key_values(&keys)?;
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, false),
        ]));
        ctx.emit(arrow::record_batch::RecordBatch::try_new(schema, columns)?);
        Ok(())
    }
}

#[test]
fn processing_time_timers_fire_while_input_is_quiet() {
    use weir_core::spec::MemorySourceSpec;
    let env = weir_worker::local_environment().unwrap();
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, false),
    ]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(arrow::array::Int64Array::from(vec![7, 8, 7]))],
    )
    .unwrap();
    let source =
        SourceSpec::from(MemorySourceSpec::new(Arc::clone(&schema), vec![batch]).unbounded());
    let out = CollectHandle::new();
    env.from_source(source, WatermarkStrategy::no_watermarks(), "quiet")
        .unwrap()
        .key_by(&["k"])
        .unwrap()
        .process("Delayed", schema, vec![], || Box::new(Delayed::default()))
        .unwrap()
        .set_parallelism(2)
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
    let job = env.execute_async("timers").unwrap();
    let started = Instant::now();
    while out.num_rows() < 2 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(40),
        "timers wait for the clock"
    );
    job.cancel();
    let _ = job.wait();
    assert_eq!(values(&out.batches()), vec![7, 8]);
}

/// Watermark = the largest timestamp seen (no "- 1"): a custom generator.
struct Eager(i64);

impl weir_core::time::WatermarkGenerator for Eager {
    fn on_timestamps(&mut self, timestamps: &[i64]) {
        self.0 = timestamps.iter().copied().fold(self.0, i64::max);
    }
    fn current_watermark(&self) -> Option<weir_core::Watermark> {
        (self.0 != i64::MIN).then_some(weir_core::Watermark(self.0))
    }
}

#[test]
fn custom_watermark_generators_drive_event_time() {
    use weir_core::spec::{AggregateSpec, MemorySourceSpec};
    use weir_core::time::TumblingEventTimeWindows;
    use weir_tests::{event_batch, event_schema};
    let late_drops = |strategy: WatermarkStrategy| {
        let env = weir_worker::local_environment().unwrap();
        env.configure(|c| c.watermark_interval = Duration::ZERO);
        let batches = vec![event_batch(&[(1, 1, 999)]), event_batch(&[(1, 1, 500)])];
        env.from_source(
            SourceSpec::from(MemorySourceSpec::new(event_schema(), batches)),
            strategy,
            "events",
        )
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate(vec![AggregateSpec::count_star()])
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "out")
        .unwrap();
        env.execute("custom")
            .unwrap()
            .counter("num_late_records_dropped")
    };
    // Monotonous: watermark 998 keeps [0, 1000) open for the record at 500.
    assert_eq!(
        late_drops(WatermarkStrategy::for_monotonous_timestamps("ts")),
        0
    );
    // The eager generator's 999 fires it first, so 500 arrives late.
    let eager = WatermarkStrategy::for_generator("ts", || Box::new(Eager(i64::MIN)));
    assert_eq!(late_drops(eager), 1);
}

#[test]
fn processing_time_windows_fire_by_the_clock() {
    use arrow::datatypes::TimestampMillisecondType;
    use weir_core::spec::{AggregateSpec, MemorySourceSpec};
    use weir_core::time::TumblingProcessingTimeWindows;
    use weir_tests::{event_batch, event_schema};
    let run = |bounded: bool| {
        let env = weir_worker::local_environment().unwrap();
        let events: Vec<(i64, i64, i64)> = (0..1000).map(|i| (i % 4, 1, 0)).collect();
        let mut spec = MemorySourceSpec::new(event_schema(), vec![event_batch(&events)]);
        if !bounded {
            spec = spec.unbounded();
        }
        let out = CollectHandle::new();
        env.from_source(
            SourceSpec::from(spec),
            WatermarkStrategy::no_watermarks(),
            "events",
        )
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(TumblingProcessingTimeWindows::of(Duration::from_millis(
            100,
        )))
        .aggregate(vec![AggregateSpec::count_star()])
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
        let job = env.execute_async("processing-time").unwrap();
        if bounded {
            job.wait().unwrap();
        } else {
            // No watermark ever comes: only the clock can fire the window.
            let started = Instant::now();
            while out.num_rows() < 4 && started.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(5));
            }
            job.cancel();
            let _ = job.wait();
        }
        let mut total = 0;
        for b in out.batches() {
            let (s, e) = (
                b.column(0).as_primitive::<TimestampMillisecondType>(),
                b.column(1).as_primitive::<TimestampMillisecondType>(),
            );
            for r in 0..b.num_rows() {
                assert_eq!(e.value(r) - s.value(r), 100);
                assert_eq!(s.value(r) % 100, 0);
            }
            total += b
                .column(3)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .sum::<i64>();
        }
        total
    };
    assert_eq!(run(false), 1000, "fired by the clock while the job runs");
    assert_eq!(run(true), 1000, "fired at the end of input");
}

/// Remembers keys for 50 ms; counts what the background cleanup frees.
struct Forgetful {
    seen: weir_core::process::ValueState<bool>,
    freed: Arc<std::sync::atomic::AtomicUsize>,
}

impl weir_core::process::KeyedProcessFunction for Forgetful {
    fn process_batch(
        &mut self,
        _batch: &arrow::record_batch::RecordBatch,
        ctx: &mut weir_core::process::ProcessContext,
    ) -> weir_core::Result<()> {
        for &k in ctx.key_ids() {
            self.seen.set(k, true);
        }
        Ok(())
    }

    fn cleanup(&mut self, now_ms: i64) {
        let n = self.seen.expire(now_ms);
        self.freed.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn ttl_state_is_freed_by_background_cleanup() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use weir_core::spec::MemorySourceSpec;
    let env = weir_worker::local_environment().unwrap();
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, false),
    ]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    let freed = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&freed);
    env.from_source(
        SourceSpec::from(MemorySourceSpec::new(Arc::clone(&schema), vec![batch]).unbounded()),
        WatermarkStrategy::no_watermarks(),
        "keys",
    )
    .unwrap()
    .key_by(&["k"])
    .unwrap()
    .process("Forgetful", schema, vec![], move || {
        Box::new(Forgetful {
            seen: weir_core::process::ValueState::with_ttl(Duration::from_millis(50)),
            freed: Arc::clone(&f),
        })
    })
    .unwrap()
    .sink_to(weir_operators::connectors::blackhole(), "out")
    .unwrap();
    let job = env.execute_async("ttl").unwrap();
    let started = Instant::now();
    while freed.load(Ordering::SeqCst) < 3 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    job.cancel();
    let _ = job.wait();
    assert_eq!(
        freed.load(Ordering::SeqCst),
        3,
        "all three keys expired and were freed"
    );
}

#[test]
fn window_definitions_are_validated_when_the_job_is_built() {
    use weir_core::spec::AggregateSpec;
    use weir_core::time::{
        EventTimeSessionWindows, SlidingEventTimeWindows, Trigger, TumblingEventTimeWindows,
    };
    let env = weir_worker::local_environment().unwrap();
    let spec = GeneratorSpec::new(Some(10))
        .column("k", ColumnGen::Key { cardinality: 3 })
        .column("s", ColumnGen::Choice(vec!["a".into()]))
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 0,
                events_per_second: 10,
                max_out_of_orderness_ms: 0,
            },
        );
    let keyed = env
        .from_source(
            SourceSpec::from(spec),
            WatermarkStrategy::for_monotonous_timestamps("ts"),
            "g",
        )
        .unwrap()
        .key_by(&["k"])
        .unwrap();
    let secs = Duration::from_secs;
    let count = || vec![AggregateSpec::count_star()];
    let err = |r: weir_core::Result<weir_core::DataStream>| r.err().unwrap().to_string();
    assert!(
        err(keyed
            .window(TumblingEventTimeWindows::of(secs(0)))
            .aggregate(count()))
        .contains("must be positive")
    );
    assert!(
        err(keyed
            .window(SlidingEventTimeWindows::of(secs(1), secs(2)))
            .aggregate(count()))
        .contains("larger than its size")
    );
    let purge_alone = keyed
        .window(TumblingEventTimeWindows::of(secs(1)))
        .purge_on_fire();
    assert!(err(purge_alone.aggregate(count())).contains("needs a continuous or count trigger"));
    let on_sessions = keyed
        .window(EventTimeSessionWindows::with_gap(secs(1)))
        .trigger(Trigger::continuous_event_time(secs(1)));
    assert!(err(on_sessions.aggregate(count())).contains("tumbling, sliding and cumulating"));
    assert!(
        err(keyed
            .window(TumblingEventTimeWindows::of(secs(1)))
            .aggregate(vec![AggregateSpec::sum("s")]))
        .contains("sum(s)")
    );
    // The event-time column must hold milliseconds.
    let bad_ts =
        GeneratorSpec::new(Some(1)).column("ts", ColumnGen::UniformFloat { min: 0.0, max: 1.0 });
    let e = env
        .from_source(
            SourceSpec::from(bad_ts),
            WatermarkStrategy::for_monotonous_timestamps("ts"),
            "f",
        )
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("has type Float64; expected Timestamp(Millisecond) or Int64"),
        "{e}"
    );
}

#[test]
fn flight_exchange_gives_the_same_results_as_local_queues() {
    use weir_core::ExchangeMode;
    use weir_core::spec::AggregateSpec;
    use weir_core::time::SlidingEventTimeWindows;
    let run = |exchange: ExchangeMode| {
        let env = weir_worker::local_environment().unwrap();
        env.set_parallelism(2);
        env.configure(|c| {
            c.exchange = exchange;
            c.batch_size = 1000;
        });
        let spec = GeneratorSpec::new(Some(60_000))
            .column("k", ColumnGen::Key { cardinality: 50 })
            .column("v", ColumnGen::UniformInt { min: 0, max: 100 })
            .column(
                "ts",
                ColumnGen::EventTime {
                    start_ms: 0,
                    events_per_second: 10_000,
                    max_out_of_orderness_ms: 200,
                },
            );
        let out = CollectHandle::new();
        env.from_source(
            SourceSpec::from(spec),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(300)),
            "events",
        )
        .unwrap()
        .key_by(&["k"])
        .unwrap()
        .window(SlidingEventTimeWindows::of(
            Duration::from_secs(2),
            Duration::from_secs(1),
        ))
        .aggregate(vec![AggregateSpec::count_star(), AggregateSpec::sum("v")])
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
        let result = env.execute("exchange").unwrap();
        assert_eq!(result.counter("num_late_records_dropped"), 0);
        sorted_rows(&out.batches())
    };
    let local = run(ExchangeMode::Local);
    assert!(local.len() > 100);
    assert_eq!(run(ExchangeMode::Flight), local);
}

#[test]
fn processing_time_sessions_close_after_a_quiet_gap() {
    use weir_core::spec::{AggregateSpec, MemorySourceSpec};
    use weir_core::time::ProcessingTimeSessionWindows;
    use weir_tests::{event_batch, event_schema};
    let env = weir_worker::local_environment().unwrap();
    let events: Vec<(i64, i64, i64)> = (0..300).map(|i| (i % 3, 1, 0)).collect();
    let source = SourceSpec::from(
        MemorySourceSpec::new(event_schema(), vec![event_batch(&events)]).unbounded(),
    );
    let out = CollectHandle::new();
    env.from_source(source, WatermarkStrategy::no_watermarks(), "events")
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(ProcessingTimeSessionWindows::with_gap(
            Duration::from_millis(50),
        ))
        .aggregate(vec![AggregateSpec::count_star()])
        .unwrap()
        .sink_to(SinkSpec::from(out.clone()), "out")
        .unwrap();
    let job = env.execute_async("sessions").unwrap();
    let started = Instant::now();
    while out.num_rows() < 3 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(40),
        "the gap must pass first"
    );
    job.cancel();
    let _ = job.wait();
    let counts: Vec<i64> = out
        .batches()
        .iter()
        .flat_map(|b| b.column(3).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(
        counts,
        vec![100, 100, 100],
        "one session per key, closed by the clock"
    );
}
