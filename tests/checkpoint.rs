//! Exactly-once recovery in the embedded runtime: a job that fails midway
//! restarts from its latest checkpoint and its committed output equals the
//! failure-free run, row for row.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use weir_core::spec::{AggregateSpec, SinkSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};
use weir_tests::sorted_rows;

const EVENTS: u64 = 240_000;

/// generator (rate-limited) -> [fail once after `fail_after` rows] ->
/// key_by -> 1 s tumbling count+sum -> Parquet in `out`.
fn run(
    out: &Path,
    checkpoints: Option<(&Path, u64)>,
    fail_after: Option<u64>,
) -> weir_core::graph::JobResult {
    run_with(out, checkpoints, fail_after, |_| {}).unwrap()
}

/// The newest committed checkpoint folder under `dir` (one run folder).
fn newest_checkpoint(dir: &Path) -> Option<std::path::PathBuf> {
    let run = std::fs::read_dir(dir).ok()?.next()?.ok()?.path();
    std::fs::read_dir(run)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("_metadata").exists())
        .max_by_key(|p| {
            p.file_name()
                .and_then(|n| n.to_str()?.strip_prefix("chk-")?.parse::<u64>().ok())
        })
}

/// As [`run`]; `at_failure` runs (with the checkpoint folder) just before
/// the injected failure. Returns the job's outcome.
fn run_with_hook(
    out: &Path,
    checkpoints: Option<(&Path, u64)>,
    hook: impl Fn(u64) + Send + Sync + 'static,
) -> weir_core::graph::JobResult {
    build_and_run(out, checkpoints, None, |_| {}, hook).unwrap()
}

fn run_with(
    out: &Path,
    checkpoints: Option<(&Path, u64)>,
    fail_after: Option<u64>,
    at_failure: impl Fn(&Path) + Send + Sync + 'static,
) -> weir_core::Result<weir_core::graph::JobResult> {
    build_and_run(out, checkpoints, fail_after, at_failure, |_| {})
}

/// 1 s tumbling windows, or 30 ms sessions when `out`'s name starts with
/// `sessions`.
fn windows_for(out: &Path) -> weir_core::time::WindowAssigner {
    let sessions = out
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("sessions"));
    if sessions {
        weir_core::time::EventTimeSessionWindows::with_gap(Duration::from_millis(30))
    } else {
        TumblingEventTimeWindows::of(Duration::from_secs(1))
    }
}

/// Parquet into `out`, or the Flight sink NAME for `flight:NAME`.
fn sink_for(out: &Path) -> SinkSpec {
    match out.to_str().and_then(|o| o.strip_prefix("flight:")) {
        Some(name) => weir_flight::flight_sink(name),
        None => weir_operators::connectors::parquet_sink(out),
    }
}

/// The job, with an injected failure after `fail_after` rows (calling
/// `at_failure` with the checkpoint folder first) and `hook(rows)` for
/// every source batch.
fn build_and_run(
    out: &Path,
    checkpoints: Option<(&Path, u64)>,
    fail_after: Option<u64>,
    at_failure: impl Fn(&Path) + Send + Sync + 'static,
    hook: impl Fn(u64) + Send + Sync + 'static,
) -> weir_core::Result<weir_core::graph::JobResult> {
    let chk_dir = checkpoints.map(|(d, _)| d.to_path_buf());
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        c.batch_size = 2000;
        c.watermark_interval = Duration::from_millis(50);
        if let Some((dir, interval)) = checkpoints {
            c.checkpoint_interval = Some(Duration::from_millis(interval));
            c.checkpoint_dir = Some(dir.display().to_string());
            c.restart_delay = Duration::from_millis(100);
        }
    });
    failing_events(
        &env,
        events(EVENTS, 500, 20_000, 200, 3).rate(120_000),
        Duration::from_millis(200),
        fail_after,
        move || {
            if let Some(dir) = &chk_dir {
                at_failure(dir);
            }
        },
        hook,
    )
    .key_by(&["key"])
    .unwrap()
    .window(windows_for(out))
    .aggregate(vec![
        AggregateSpec::count_star(),
        AggregateSpec::sum("amount"),
    ])
    .unwrap()
    .sink_to(sink_for(out), "out")
    .unwrap();
    env.execute("checkpointed windows")
}

/// Generated (key, amount, ts) events whose batches pass `FailOnce`: it
/// calls `hook(rows)` for each and fails once when `fail_after` rows have
/// passed (calling `at_failure` first).
fn failing_events(
    env: &weir_core::StreamExecutionEnvironment,
    generator: GeneratorSpec,
    out_of_orderness: Duration,
    fail_after: Option<u64>,
    at_failure: impl Fn() + Send + Sync + 'static,
    hook: impl Fn(u64) + Send + Sync + 'static,
) -> weir_core::DataStream {
    let stream = env
        .from_source(
            SourceSpec::from(generator),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", out_of_orderness),
            "events",
        )
        .unwrap();
    let schema = Arc::clone(stream.schema());
    let seen = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    stream
        .map_batches("FailOnce", schema, move |b| {
            hook(b.num_rows() as u64);
            let n = seen.fetch_add(b.num_rows() as u64, Ordering::SeqCst);
            if fail_after.is_some_and(|f| n >= f) && !failed.swap(true, Ordering::SeqCst) {
                at_failure();
                return Err(weir_core::WeirError::Execution("injected failure".into()));
            }
            Ok(b)
        })
        .unwrap()
}

/// Generated events: `rows` over `keys` keys, event time advancing
/// `per_second` events per second, up to `ooo` late.
fn events(rows: u64, keys: u64, per_second: u64, ooo: i64, seed: u64) -> GeneratorSpec {
    GeneratorSpec::new(Some(rows))
        .column("key", ColumnGen::Key { cardinality: keys })
        .column("amount", ColumnGen::UniformInt { min: 1, max: 100 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_700_000_000_000,
                events_per_second: per_second,
                max_out_of_orderness_ms: ooo,
            },
        )
        .seed(seed)
}

/// Compare without printing thousands of rows.
fn assert_same(got: Vec<String>, want: &[String], what: &str) {
    if got == want {
        return;
    }
    let missing: Vec<_> = want.iter().filter(|r| !got.contains(r)).take(3).collect();
    let extra: Vec<_> = got.iter().filter(|r| !want.contains(r)).take(3).collect();
    panic!(
        "{what}: {} rows, expected {}; missing e.g. {missing:?}; unexpected e.g. {extra:?}",
        got.len(),
        want.len()
    );
}

fn committed(dir: &Path) -> Vec<RecordBatch> {
    let mut batches = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        assert!(!name.ends_with(".inprogress"), "left behind: {name}");
        if name.ends_with(".parquet") {
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
                    .unwrap()
                    .build()
                    .unwrap();
            batches.extend(reader.map(Result::unwrap));
        }
    }
    batches
}

#[test]
fn a_failed_job_resumes_from_its_checkpoint_with_exactly_once_output() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    run(&plain, None, None);
    let expected = sorted_rows(&committed(&plain));
    assert!(expected.len() > 1000, "{} rows", expected.len());

    // With checkpoints, no failure: the same rows.
    let clean = tmp.path().join("clean");
    let result = run(&clean, Some((&tmp.path().join("chk-clean"), 200)), None);
    assert!(
        result.checkpoints.len() >= 2,
        "checkpoints {:?}",
        result.checkpoints
    );
    assert_same(
        sorted_rows(&committed(&clean)),
        &expected,
        "checkpointed run",
    );

    // A failure after about two thirds of the input.
    let recovered = tmp.path().join("recovered");
    let result = run(
        &recovered,
        Some((&tmp.path().join("chk-recovered"), 200)),
        Some(EVENTS * 2 / 3),
    );
    assert_eq!(result.restarts.len(), 1, "{:?}", result.restarts);
    assert!(
        result.restarts[0].contains("injected failure")
            && result.restarts[0].contains("restarted from checkpoint"),
        "a checkpoint had completed before the failure: {:?} (checkpoints {:?})",
        result.restarts,
        result.checkpoints
    );
    assert_same(
        sorted_rows(&committed(&recovered)),
        &expected,
        "recovered run",
    );
}

#[test]
fn damaged_checkpoints_fail_the_restart_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, Damage); 3] = [
        ("missing", |chk| {
            let file = state_file(chk);
            std::fs::remove_file(&file).unwrap();
            file.file_name().unwrap().to_string_lossy().to_string()
        }),
        ("truncated", |chk| {
            let file = state_file(chk);
            let data = std::fs::read(&file).unwrap();
            std::fs::write(&file, &data[..data.len() / 2]).unwrap();
            file.file_name().unwrap().to_string_lossy().to_string()
        }),
        ("corrupt manifest", |chk| {
            std::fs::write(chk.join("_metadata"), "{ not a manifest").unwrap();
            "_metadata".to_string()
        }),
    ];
    for (what, damage) in cases {
        let chk = tmp.path().join(format!("chk-{}", what.replace(' ', "-")));
        let named = Arc::new(std::sync::Mutex::new(String::new()));
        let seen = Arc::clone(&named);
        let err = run_with(
            &tmp.path().join(format!("out-{}", what.replace(' ', "-"))),
            Some((&chk, 200)),
            Some(EVENTS * 2 / 3),
            move |dir| {
                let newest =
                    newest_checkpoint(dir).expect("a checkpoint completed before the failure");
                *seen.lock().unwrap() = damage(&newest);
            },
        )
        .expect_err("a damaged checkpoint must fail the restart");
        let message = err.to_string();
        let file = named.lock().unwrap().clone();
        assert!(
            message.contains(&file),
            "{what}: the error names {file}: {message}"
        );
    }
}

/// Damages a checkpoint folder; returns the name of the file it damaged.
type Damage = fn(&Path) -> String;

/// A window state file of checkpoint folder `chk`.
fn state_file(chk: &Path) -> std::path::PathBuf {
    for op in std::fs::read_dir(chk).unwrap() {
        let op = op.unwrap().path();
        if op.is_dir() {
            for f in std::fs::read_dir(&op).unwrap() {
                let f = f.unwrap().path();
                if f.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("panes-")
                {
                    return f;
                }
            }
        }
    }
    panic!("no window state in {}", chk.display());
}

#[test]
fn a_storage_failure_declines_checkpoints_and_the_job_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    run(&plain, None, None);
    let expected = sorted_rows(&committed(&plain));

    // From a third to two thirds of the input the checkpoint folder is a
    // plain file: every write fails.
    let chk = tmp.path().join("chk");
    let seen = Arc::new(AtomicU64::new(0));
    let chk_for_fn = chk.clone();
    let break_storage = move |rows: u64| {
        let n = seen.fetch_add(rows, Ordering::SeqCst) + rows;
        let Some(run) = std::fs::read_dir(&chk_for_fn)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path())
        else {
            return;
        };
        let aside = chk_for_fn.with_extension("aside");
        if (EVENTS / 3..EVENTS * 2 / 3).contains(&n) && !aside.exists() && run.is_dir() {
            std::fs::rename(&run, &aside).unwrap();
            std::fs::write(&run, "not a folder").unwrap();
        } else if n >= EVENTS * 2 / 3 && aside.exists() {
            std::fs::remove_file(&run).unwrap();
            std::fs::rename(&aside, &run).unwrap();
        }
    };
    let out = tmp.path().join("out");
    let result = run_observing(&out, &chk, break_storage);
    assert!(
        !result.checkpoints_declined.is_empty(),
        "checkpoints were declined while the storage was broken (completed {:?})",
        result.checkpoints
    );
    assert!(result.checkpoints.len() >= 2, "{:?}", result.checkpoints);
    assert!(result.restarts.is_empty(), "{:?}", result.restarts);
    assert_same(
        sorted_rows(&committed(&out)),
        &expected,
        "run with storage failures",
    );
}

/// The checkpointed job with `observe(rows)` called for every source batch.
fn run_observing(
    out: &Path,
    chk: &Path,
    observe: impl Fn(u64) + Send + Sync + 'static,
) -> weir_core::graph::JobResult {
    let observe = Arc::new(observe);
    run_with_hook(out, Some((chk, 150)), move |b| observe(b))
}

/// A real S3-compatible server (`moto_server`, installed from PyPI by
/// `scripts/test.sh`, which passes its path in `WEIR_TEST_MOTO_SERVER`) on
/// loopback: checkpoints go to `s3://`, a failure restores through it, and
/// the output is exactly once.
#[test]
fn checkpoints_in_s3_restore_through_a_real_s3_server() {
    let _server = weir_tests::S3Server::start("weir-checkpoints");
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    run(&plain, None, None);
    let expected = sorted_rows(&committed(&plain));

    let out = tmp.path().join("recovered");
    let result = build_and_run_url(&out, "s3://weir-checkpoints/jobs", EVENTS * 2 / 3);
    assert_eq!(result.restarts.len(), 1, "{:?}", result.restarts);
    assert!(
        result.restarts[0].contains("restarted from checkpoint"),
        "{:?}",
        result.restarts
    );
    assert_same(
        sorted_rows(&committed(&out)),
        &expected,
        "recovered through S3",
    );
}

/// The failing job with checkpoints at `url` (not a local path).
fn build_and_run_url(out: &Path, url: &str, fail_after: u64) -> weir_core::graph::JobResult {
    build_and_run(
        out,
        Some((Path::new(url), 200)),
        Some(fail_after),
        |_| {},
        |_| {},
    )
    .unwrap()
}

#[test]
fn a_read_committed_flight_sink_shows_each_row_once_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    run(&plain, None, None);
    let expected = sorted_rows(&committed(&plain));

    // Checkpoints far enough apart that windows fire between the last one
    // and the failure: a read-uncommitted sink would show those twice.
    let result = run_with(
        Path::new("flight:committed-after-restart"),
        Some((&tmp.path().join("chk"), 500)),
        Some(EVENTS * 2 / 3),
        |_| {},
    )
    .unwrap();
    assert_eq!(result.restarts.len(), 1, "{:?}", result.restarts);
    let sink = weir_flight::sinkhub::SinkHub::global()
        .by_name("committed-after-restart")
        .unwrap();
    let (batches, _) = sink.read_from(None).unwrap();
    assert_same(
        sorted_rows(&batches),
        &expected,
        "Flight sink after a restart",
    );
}

/// generator -> [fail once] -> key_by -> slow operator (back-pressure) ->
/// key_by -> 1 s tumbling count+sum -> Parquet.
/// How a back-pressured run checkpoints.
#[derive(Clone, Copy)]
enum Alignment {
    Aligned,
    Unaligned,
    /// Aligned, turning unaligned after 50 ms of alignment.
    Timeout,
    /// Barriers tracked, never blocking a channel.
    AtLeastOnce,
}

fn backpressured(
    out: &Path,
    checkpoints: Option<(&Path, Alignment)>,
    fail_after: Option<u64>,
) -> weir_core::graph::JobResult {
    const ROWS: u64 = 60_000;
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        c.batch_size = 500;
        // Deep queues in front of the slow operator: an aligned barrier
        // waits for all of them to drain.
        c.channel_capacity = 12;
        c.watermark_interval = Duration::from_millis(50);
        if let Some((dir, alignment)) = checkpoints {
            c.checkpoint_interval = Some(Duration::from_millis(300));
            c.checkpoint_dir = Some(dir.display().to_string());
            c.checkpoint_unaligned = matches!(alignment, Alignment::Unaligned);
            if matches!(alignment, Alignment::AtLeastOnce) {
                c.checkpoint_mode = weir_core::config::CheckpointingMode::AtLeastOnce;
            }
            if matches!(alignment, Alignment::Timeout) {
                c.checkpoint_aligned_timeout = Some(Duration::from_millis(50));
            }
            c.restart_delay = Duration::from_millis(100);
        }
    });
    let stream = failing_events(
        &env,
        events(ROWS, 200, 10_000, 100, 11),
        Duration::from_millis(100),
        fail_after,
        || {},
        |_| {},
    );
    let schema = Arc::clone(stream.schema());
    stream
        .key_by(&["key"])
        .unwrap()
        .as_stream()
        .map_batches("Slow", schema, |b| {
            std::thread::sleep(Duration::from_millis(40));
            Ok(b)
        })
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate(vec![
            AggregateSpec::count_star(),
            AggregateSpec::sum("amount"),
        ])
        .unwrap()
        .sink_to(weir_operators::connectors::parquet_sink(out), "out")
        .unwrap();
    env.execute("back-pressured").unwrap()
}

fn median_ms(result: &weir_core::graph::JobResult) -> u128 {
    let mut d: Vec<u128> = result
        .checkpoint_sizes
        .iter()
        .map(|(_, t, _)| t.as_millis())
        .collect();
    d.sort_unstable();
    d.get(d.len() / 2).copied().unwrap_or(0)
}

#[test]
fn aligned_unaligned_and_timed_out_checkpoints_under_back_pressure_restore_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    backpressured(&plain, None, None);
    let expected = sorted_rows(&committed(&plain));

    let mut medians = Vec::new();
    for (name, alignment) in [
        ("aligned", Alignment::Aligned),
        ("unaligned", Alignment::Unaligned),
        ("aligned with a 50 ms alignment timeout", Alignment::Timeout),
    ] {
        let out = tmp.path().join(name.replace(' ', "-"));
        let chk = tmp.path().join(format!("chk-{}", name.replace(' ', "-")));
        let r = backpressured(&out, Some((&chk, alignment)), Some(40_000));
        assert_eq!(r.restarts.len(), 1, "{name}: {:?}", r.restarts);
        assert!(
            r.restarts[0].contains("restarted from checkpoint"),
            "{name}: {:?} (checkpoints {:?})",
            r.restarts,
            r.checkpoint_sizes
        );
        assert_same(sorted_rows(&committed(&out)), &expected, name);
        medians.push((name, median_ms(&r)));
    }
    // Durations are printed, not asserted: timings flake on a shared
    // machine.
    eprintln!("median checkpoint durations: {medians:?}");
}

#[test]
fn too_many_failed_checkpoints_fail_the_job_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let env = weir_worker::local_environment().unwrap();
    env.configure(|c| {
        c.checkpoint_interval = Some(Duration::from_millis(100));
        c.checkpoint_dir = Some(tmp.path().display().to_string());
        c.checkpoint_tolerable_failures = Some(2);
        c.restart_strategy = weir_core::RestartStrategy::None;
    });
    // A process function that does not write its state declines every
    // checkpoint.
    struct Forgetful;
    impl weir_core::process::KeyedProcessFunction for Forgetful {
        fn process_batch(
            &mut self,
            _batch: &RecordBatch,
            _ctx: &mut weir_core::process::ProcessContext,
        ) -> weir_core::Result<()> {
            Ok(())
        }
    }
    let stream = env
        .from_source(
            SourceSpec::from(
                GeneratorSpec::new(None)
                    .column("key", ColumnGen::Key { cardinality: 10 })
                    .column(
                        "ts",
                        ColumnGen::EventTime {
                            start_ms: 0,
                            events_per_second: 1000,
                            max_out_of_orderness_ms: 0,
                        },
                    )
                    .rate(10_000),
            ),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::ZERO),
            "events",
        )
        .unwrap();
    let schema = Arc::clone(stream.schema());
    stream
        .key_by(&["key"])
        .unwrap()
        .process("forgetful", schema, vec![], || Box::new(Forgetful))
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "out")
        .unwrap();
    let err = env.execute("declining").unwrap_err().to_string();
    assert!(
        err.contains("3 checkpoints failed in a row (tolerable: 2)")
            && err.contains("does not snapshot its state"),
        "{err}"
    );
}

#[test]
fn session_windows_resume_from_a_checkpoint_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("sessions-plain");
    run(&plain, None, None);
    let expected = sorted_rows(&committed(&plain));
    assert!(expected.len() > 1000, "{} sessions", expected.len());
    let recovered = tmp.path().join("sessions-recovered");
    let result = run(
        &recovered,
        Some((&tmp.path().join("chk"), 200)),
        Some(EVENTS * 2 / 3),
    );
    assert_eq!(result.restarts.len(), 1, "{:?}", result.restarts);
    assert!(
        result.restarts[0].contains("restarted from checkpoint"),
        "{:?} (declined {:?})",
        result.restarts,
        result.checkpoints_declined
    );
    assert_same(
        sorted_rows(&committed(&recovered)),
        &expected,
        "sessions after a restart",
    );
}

/// Counts records in checkpointed state (Flink's `StateCheckpointedITCase`
/// idea): per key in a `ValueState`, per subtask in operator list state;
/// an event-time timer registered when a key is first seen emits
/// `(stage, key, count)` at the end of input, and the first timer batch
/// also emits the subtask's total as key -1. `pass_through` re-emits the
/// input and sends the counts to side output `counts`.
struct Counting {
    stage: i64,
    pass_through: bool,
    per_key: weir_core::process::ValueState<i64>,
    seen: u64,
}

fn counts_schema() -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    Arc::new(Schema::new(vec![
        Field::new("stage", DataType::Int64, false),
        Field::new("key", DataType::Int64, false),
        Field::new("count", DataType::Int64, false),
    ]))
}

impl weir_core::process::KeyedProcessFunction for Counting {
    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut weir_core::process::ProcessContext,
    ) -> weir_core::Result<()> {
        let ids = ctx.key_ids().to_vec();
        for k in ids {
            let n = self.per_key.get(k).copied().unwrap_or(0);
            if n == 0 {
                // Only once per key: restored keys rely on restored timers.
                ctx.timers.register_event_time_timer(k, i64::MAX);
            }
            self.per_key.set(k, n + 1);
        }
        self.seen += batch.num_rows() as u64;
        if self.pass_through {
            ctx.emit(batch.clone());
        }
        Ok(())
    }

    fn on_timers(
        &mut self,
        timers: &weir_core::process::FiredTimers,
        ctx: &mut weir_core::process::ProcessContext,
    ) -> weir_core::Result<()> {
        use arrow::array::{ArrayRef, Int64Array};
        let keys: Vec<_> = timers.timers.iter().map(|t| t.1).collect();
        let mut key_col: Vec<i64> = ctx.key_values(&keys)?[0]
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec();
        let mut counts: Vec<i64> = keys
            .iter()
            .map(|&k| self.per_key.get(k).copied().unwrap_or(0))
            .collect();
        key_col.push(-1);
        counts.push(std::mem::take(&mut self.seen) as i64);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![self.stage; counts.len()])),
            Arc::new(Int64Array::from(key_col)),
            Arc::new(Int64Array::from(counts)),
        ];
        let batch = RecordBatch::try_new(counts_schema(), columns)?;
        if self.pass_through {
            ctx.emit_side("counts", batch);
        } else {
            ctx.emit(batch);
        }
        Ok(())
    }

    fn snapshot_state(&self, state: &mut weir_core::process::StateWriter) -> weir_core::Result<()> {
        state.value("per_key", &self.per_key)?;
        state.operator_list("seen", &[self.seen])
    }

    fn restore_state(
        &mut self,
        state: &mut weir_core::process::StateReader,
    ) -> weir_core::Result<()> {
        state.value("per_key", &mut self.per_key)?;
        self.seen = state.operator_list::<u64>("seen")?.iter().sum();
        Ok(())
    }
}

/// events -> [fail once] -> key_by(key) Counting(1, pass-through) ->
/// key_by(amount) Counting(2); both stages' counts -> Parquet in `out`.
fn counting_job(
    out: &Path,
    parallelism: usize,
    checkpoints: Option<&Path>,
    fail_after: Option<u64>,
    configure: impl Fn(&mut weir_core::config::WeirConfig),
    at_failure: impl Fn() + Send + Sync + 'static,
) -> weir_core::Result<weir_core::graph::JobResult> {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(parallelism);
    env.configure(|c| {
        c.batch_size = 2000;
        c.watermark_interval = Duration::from_millis(50);
        if let Some(dir) = checkpoints {
            c.checkpoint_interval = Some(Duration::from_millis(150));
            c.checkpoint_dir = Some(dir.display().to_string());
            c.restart_delay = Duration::from_millis(100);
        }
        configure(c);
    });
    let events = failing_events(
        &env,
        events(EVENTS, 500, 20_000, 200, 5).rate(120_000),
        Duration::from_millis(200),
        fail_after,
        at_failure,
        |_| {},
    );
    let schema = Arc::clone(events.schema());
    let first = events
        .key_by(&["key"])?
        .process(
            "count by key",
            schema,
            vec![("counts".into(), counts_schema())],
            || {
                Box::new(Counting {
                    stage: 1,
                    pass_through: true,
                    per_key: Default::default(),
                    seen: 0,
                })
            },
        )?
        .uid("count-by-key")?;
    let second = first
        .key_by(&["amount"])?
        .process("count by amount", counts_schema(), vec![], || {
            Box::new(Counting {
                stage: 2,
                pass_through: false,
                per_key: Default::default(),
                seen: 0,
            })
        })?
        .uid("count-by-amount")?;
    first
        .side_output("counts")?
        .union(&[second])?
        .sink_to(weir_operators::connectors::parquet_sink(out), "out")?;
    env.execute("counting")
}

/// Per stage: the sum of the per-key counts and of the subtask totals.
fn stage_totals(rows: &[RecordBatch]) -> [(i64, i64); 2] {
    use arrow::array::Int64Array;
    let mut totals = [(0, 0); 2];
    for b in rows {
        let col = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
        for r in 0..b.num_rows() {
            let t = &mut totals[col(0).value(r) as usize - 1];
            if col(1).value(r) == -1 {
                t.1 += col(2).value(r);
            } else {
                t.0 += col(2).value(r);
            }
        }
    }
    totals
}

#[test]
fn process_function_state_counts_every_record_exactly_once_after_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    counting_job(&plain, 2, None, None, |_| {}, || {}).unwrap();
    let expected = sorted_rows(&committed(&plain));
    let all = EVENTS as i64;
    assert_eq!(
        stage_totals(&committed(&plain)),
        [(all, all), (all, all)],
        "the failure-free run counts every record"
    );

    let recovered = tmp.path().join("recovered");
    let result = counting_job(
        &recovered,
        2,
        Some(&tmp.path().join("chk")),
        Some(EVENTS * 2 / 3),
        |_| {},
        || {},
    )
    .unwrap();
    assert_eq!(result.restarts.len(), 1, "{:?}", result.restarts);
    assert!(
        result.restarts[0].contains("restarted from checkpoint"),
        "{:?} (declined {:?})",
        result.restarts,
        result.checkpoints_declined
    );
    let rows = committed(&recovered);
    // Counts held in keyed and operator state: every operator saw every
    // record exactly once across the failure.
    assert_eq!(stage_totals(&rows), [(all, all), (all, all)]);
    assert_same(sorted_rows(&rows), &expected, "counts after a restart");
}

#[test]
fn process_function_state_rescales_from_a_retained_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    counting_job(&plain, 2, None, None, |_| {}, || {}).unwrap();
    let per_key = |rows: &[RecordBatch]| -> Vec<String> {
        // Subtask totals differ with the parallelism; per-key counts do not.
        sorted_rows(rows)
            .into_iter()
            .filter(|r| !r.contains("-1"))
            .collect()
    };
    let expected = per_key(&committed(&plain));

    // Fail at p = 2 with no restarts: the job stops, its checkpoints stay.
    let chk = tmp.path().join("chk");
    let first = tmp.path().join("first");
    let err = counting_job(
        &first,
        2,
        Some(&chk),
        Some(EVENTS / 2),
        |c| c.restart_strategy = weir_core::config::RestartStrategy::None,
        || {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    let run = std::fs::read_dir(&chk)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(newest_checkpoint(&chk).is_some(), "no checkpoint completed");

    // Resume at p = 3 from it: the committed output of both runs together
    // is the uninterrupted run's.
    let second = tmp.path().join("second");
    counting_job(
        &second,
        3,
        None,
        None,
        |c| c.restore_from = Some(run.display().to_string()),
        || {},
    )
    .unwrap();
    let mut rows = committed(&first);
    rows.extend(committed(&second));
    let all = EVENTS as i64;
    assert_eq!(stage_totals(&rows), [(all, all), (all, all)]);
    assert_same(per_key(&rows), &expected, "counts after rescaling 2 -> 3");
}

#[test]
fn at_least_once_checkpoints_lose_nothing_across_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    backpressured(&plain, None, None);
    let out = tmp.path().join("at-least-once");
    let r = backpressured(
        &out,
        Some((&tmp.path().join("chk"), Alignment::AtLeastOnce)),
        Some(40_000),
    );
    assert_eq!(r.restarts.len(), 1, "{:?}", r.restarts);
    assert!(
        r.restarts[0].contains("restarted from checkpoint"),
        "{:?}",
        r.restarts
    );
    // Every window of every key, with at least the exact count and sum
    // (records after a barrier on a channel not blocked may count twice).
    let split = |rows: Vec<String>| -> std::collections::BTreeMap<String, (i64, i64)> {
        rows.iter()
            .map(|r| {
                let f: Vec<&str> = r.split('|').collect();
                (
                    f[..3].join("|"),
                    (f[3].parse().unwrap(), f[4].parse().unwrap()),
                )
            })
            .collect()
    };
    let want = split(sorted_rows(&committed(&plain)));
    let got = split(sorted_rows(&committed(&out)));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "the same windows and keys"
    );
    let mut twice = 0;
    for (k, (count, sum)) in &want {
        let (c, s) = got[k];
        assert!(c >= *count && s >= *sum, "{k}: {c}/{s} < {count}/{sum}");
        twice += c - count;
    }
    eprintln!(
        "at-least-once: {twice} records counted twice; checkpoints {:?}",
        r.checkpoint_sizes
    );
}

#[test]
fn incremental_checkpoints_reuse_unchanged_chunks_and_restore_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    counting_job(&plain, 2, None, None, |_| {}, || {}).unwrap();
    let expected = sorted_rows(&committed(&plain));

    let chk = tmp.path().join("chk");
    let out = tmp.path().join("incremental");
    let result = counting_job(
        &out,
        2,
        Some(&chk),
        Some(EVENTS * 2 / 3),
        |c| c.checkpoint_incremental = true,
        || {},
    )
    .unwrap();
    assert_eq!(result.restarts.len(), 1, "{:?}", result.restarts);
    assert!(
        result.restarts[0].contains("restarted from checkpoint"),
        "{:?}",
        result.restarts
    );
    assert_same(sorted_rows(&committed(&out)), &expected, "incremental");

    // The newest manifest refers to chunks earlier checkpoints wrote (the
    // timers of keys seen long ago do not change), and every shared file
    // on disk is named by a retained checkpoint.
    let run = std::fs::read_dir(&chk)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let newest = newest_checkpoint(&chk).unwrap();
    let id: u64 = newest.file_name().unwrap().to_str().unwrap()[4..]
        .parse()
        .unwrap();
    let mut referenced = std::collections::BTreeSet::new();
    let mut reused = 0;
    for entry in std::fs::read_dir(&run).unwrap() {
        let m = entry.unwrap().path().join("_metadata");
        let Ok(text) = std::fs::read_to_string(&m) else {
            continue;
        };
        let manifest: weir_core::checkpoint::Manifest = serde_json::from_str(&text).unwrap();
        for t in manifest.tables() {
            if t.shared.is_some() {
                referenced.insert(t.path.clone());
                if manifest.checkpoint_id == id && !t.path.ends_with(&format!("-c{id}.parquet")) {
                    reused += 1;
                }
            }
        }
    }
    assert!(reused > 0, "checkpoint {id} reuses no chunk");
    let mut on_disk = std::collections::BTreeSet::new();
    let mut stack = vec![run.join("shared")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                on_disk.insert(p.strip_prefix(&run).unwrap().display().to_string());
            }
        }
    }
    assert_eq!(
        on_disk, referenced,
        "shared files are exactly those retained checkpoints name"
    );
    eprintln!(
        "checkpoint {id} reuses {reused} chunks; written bytes per checkpoint {:?}",
        result
            .checkpoint_sizes
            .iter()
            .map(|(_, _, b)| b)
            .collect::<Vec<_>>()
    );
}

/// `files` files of `groups` row groups of 5,000 (key, amount, ts) rows,
/// as Parquet or CSV (with a header), in `dir`.
fn write_inputs(dir: &Path, files: usize, groups: usize, csv: bool) {
    use arrow::array::{Int64Array, TimestampMillisecondArray};
    std::fs::create_dir_all(dir).unwrap();
    let mut n = 0i64;
    for f in 0..files {
        let batches: Vec<RecordBatch> = (0..groups)
            .map(|_| {
                let rows = 5_000;
                let ids: Vec<i64> = (n..n + rows).collect();
                n += rows;
                RecordBatch::try_from_iter([
                    (
                        "key",
                        Arc::new(Int64Array::from_iter_values(
                            ids.iter().map(|i| i * 7 % 300),
                        )) as arrow::array::ArrayRef,
                    ),
                    (
                        "amount",
                        Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| i % 97))),
                    ),
                    (
                        "ts",
                        Arc::new(TimestampMillisecondArray::from_iter_values(
                            ids.iter().map(|i| 1_700_000_000_000 + i / 20),
                        )),
                    ),
                ])
                .unwrap()
            })
            .collect();
        let path = dir.join(format!("part-{f}.{}", if csv { "csv" } else { "parquet" }));
        let file = std::fs::File::create(&path).unwrap();
        if csv {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(file);
            for b in &batches {
                w.write(b).unwrap();
            }
        } else {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(5_000))
                .build();
            let mut w =
                parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), Some(props))
                    .unwrap();
            for b in &batches {
                w.write(b).unwrap();
            }
            w.close().unwrap();
        }
    }
}

/// file source -> [slow, fail once] -> key_by -> 1 s tumbling count+sum ->
/// Parquet in `out`.
fn file_source_job(
    source: SourceSpec,
    out: &Path,
    checkpoints: Option<&Path>,
    fail_after: Option<u64>,
) -> weir_core::graph::JobResult {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        c.batch_size = 1000;
        c.watermark_interval = Duration::from_millis(20);
        if let Some(dir) = checkpoints {
            c.checkpoint_interval = Some(Duration::from_millis(100));
            c.checkpoint_dir = Some(dir.display().to_string());
            c.restart_delay = Duration::from_millis(100);
        }
    });
    let stream = env
        .from_source(
            source,
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(100)),
            "files",
        )
        .unwrap();
    let schema = Arc::clone(stream.schema());
    let seen = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    stream
        .map_batches("SlowFailOnce", schema, move |b| {
            // Slow enough for checkpoints to land while files are read.
            std::thread::sleep(Duration::from_millis(15));
            let n = seen.fetch_add(b.num_rows() as u64, Ordering::SeqCst);
            if fail_after.is_some_and(|f| n >= f) && !failed.swap(true, Ordering::SeqCst) {
                return Err(weir_core::WeirError::Execution("injected failure".into()));
            }
            Ok(b)
        })
        .unwrap()
        .key_by(&["key"])
        .unwrap()
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .aggregate(vec![
            AggregateSpec::count_star(),
            AggregateSpec::sum("amount"),
        ])
        .unwrap()
        .sink_to(weir_operators::connectors::parquet_sink(out), "out")
        .unwrap();
    env.execute("file source").unwrap()
}

#[test]
fn parquet_and_csv_sources_resume_mid_file_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    for csv in [false, true] {
        let kind = if csv { "csv" } else { "parquet" };
        let input = tmp.path().join(format!("in-{kind}"));
        // 3 files x 4 row groups of 5,000 rows: 60,000 rows in 12 splits.
        write_inputs(&input, 3, 4, csv);
        let source = || {
            if csv {
                let options = weir_operators::sources::CsvOptions {
                    has_header: true,
                    ..Default::default()
                };
                weir_operators::sources::csv_source(&[&input], options).unwrap()
            } else {
                weir_operators::sources::parquet_source(&[&input], None).unwrap()
            }
        };
        let plain = tmp.path().join(format!("{kind}-plain"));
        file_source_job(source(), &plain, None, None);
        let expected = sorted_rows(&committed(&plain));
        let recovered = tmp.path().join(format!("{kind}-recovered"));
        let result = file_source_job(
            source(),
            &recovered,
            Some(&tmp.path().join(format!("{kind}-chk"))),
            Some(40_000),
        );
        assert_eq!(result.restarts.len(), 1, "{kind}: {:?}", result.restarts);
        assert!(
            result.restarts[0].contains("restarted from checkpoint"),
            "{kind}: {:?} (declined {:?})",
            result.restarts,
            result.checkpoints_declined
        );
        assert_same(sorted_rows(&committed(&recovered)), &expected, kind);
    }
}

/// Two generated inputs (the left through `FailOnce`) into `operator`:
/// an interval join, a tumbling or session window join, or a tumbling or
/// session window process function; output as Parquet in `out`.
fn buffering_job(
    operator: &str,
    out: &Path,
    checkpoints: Option<&Path>,
    fail_after: Option<u64>,
) -> weir_core::graph::JobResult {
    const ROWS: u64 = 20_000;
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        c.batch_size = 500;
        c.watermark_interval = Duration::from_millis(20);
        if let Some(dir) = checkpoints {
            c.checkpoint_interval = Some(Duration::from_millis(150));
            c.checkpoint_dir = Some(dir.display().to_string());
            c.restart_delay = Duration::from_millis(100);
        }
    });
    let ooo = Duration::from_millis(50);
    let left = failing_events(
        &env,
        events(ROWS, 1000, 20_000, 50, 21).rate(10_000),
        ooo,
        fail_after,
        || {},
        |_| {},
    )
    .key_by(&["key"])
    .unwrap();
    let right = env
        .from_source(
            SourceSpec::from(events(ROWS, 1000, 20_000, 50, 22).rate(10_000)),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", ooo),
            "right",
        )
        .unwrap()
        .key_by(&["key"])
        .unwrap();
    let session = || weir_core::time::EventTimeSessionWindows::with_gap(Duration::from_millis(40));
    let tumbling = || TumblingEventTimeWindows::of(Duration::from_millis(100));
    let count_rows = |window: (i64, i64), rows: &RecordBatch, keys: &[std::ops::Range<usize>]| {
        use arrow::array::{AsArray, Int64Array};
        let key = rows.column(0).as_primitive::<arrow::datatypes::Int64Type>();
        let n = keys.len();
        Ok(vec![RecordBatch::try_from_iter([
            (
                "start",
                Arc::new(Int64Array::from(vec![window.0; n])) as arrow::array::ArrayRef,
            ),
            ("end", Arc::new(Int64Array::from(vec![window.1; n]))),
            (
                "key",
                Arc::new(Int64Array::from_iter_values(
                    keys.iter().map(|r| key.value(r.start)),
                )),
            ),
            (
                "rows",
                Arc::new(Int64Array::from_iter_values(
                    keys.iter().map(|r| r.len() as i64),
                )),
            ),
        ])?])
    };
    let counts_schema = Arc::new(arrow::datatypes::Schema::new(
        ["start", "end", "key", "rows"]
            .map(|n| arrow::datatypes::Field::new(n, arrow::datatypes::DataType::Int64, false))
            .to_vec(),
    ));
    let stream = match operator {
        "interval join" => left.interval_join(&right).between(-15, 15).unwrap(),
        "window join" => left.window_join(&right, tumbling()).unwrap(),
        "session join" => left.window_join(&right, session()).unwrap(),
        "window process" => left
            .window(tumbling())
            .process("count rows", counts_schema, count_rows)
            .unwrap(),
        "session process" => left
            .window(session())
            .process("count rows", counts_schema, count_rows)
            .unwrap(),
        other => panic!("{other}"),
    };
    stream
        .sink_to(weir_operators::connectors::parquet_sink(out), "out")
        .unwrap();
    env.execute(operator).unwrap()
}

#[test]
fn joins_and_window_functions_resume_from_checkpoints_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    for operator in [
        "interval join",
        "window join",
        "session join",
        "window process",
        "session process",
    ] {
        let dir = tmp.path().join(operator.replace(' ', "-"));
        let plain = dir.join("plain");
        buffering_job(operator, &plain, None, None);
        let expected = sorted_rows(&committed(&plain));
        assert!(expected.len() > 100, "{operator}: {} rows", expected.len());
        let recovered = dir.join("recovered");
        let result = buffering_job(operator, &recovered, Some(&dir.join("chk")), Some(13_000));
        assert_eq!(
            result.restarts.len(),
            1,
            "{operator}: {:?}",
            result.restarts
        );
        assert!(
            result.restarts[0].contains("restarted from checkpoint"),
            "{operator}: {:?} (declined {:?})",
            result.restarts,
            result.checkpoints_declined
        );
        assert_same(sorted_rows(&committed(&recovered)), &expected, operator);
        eprintln!("{operator}: {} rows exactly once", expected.len());
    }
}

/// Count windows — or, with `trigger`, 1 s tumbling windows firing every
/// 7 records of a key — at parallelism 1 (rows of a key in one arrival
/// order).
fn count_window_job(
    out: &Path,
    checkpoints: Option<&Path>,
    fail_after: Option<u64>,
    trigger: bool,
) -> weir_core::graph::JobResult {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(1);
    env.configure(|c| {
        c.batch_size = 500;
        if let Some(dir) = checkpoints {
            c.checkpoint_interval = Some(Duration::from_millis(150));
            c.checkpoint_dir = Some(dir.display().to_string());
            c.restart_delay = Duration::from_millis(100);
        }
    });
    let keyed = failing_events(
        &env,
        events(30_000, 700, 20_000, 50, 31).rate(15_000),
        Duration::from_millis(50),
        fail_after,
        || {},
        |_| {},
    )
    .key_by(&["key"])
    .unwrap();
    let windows = if trigger {
        keyed
            .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
            .trigger(weir_core::time::Trigger::Count { count: 7 })
    } else {
        keyed.count_window(7)
    };
    windows
        .aggregate(vec![
            AggregateSpec::count_star(),
            AggregateSpec::sum("amount"),
        ])
        .unwrap()
        .sink_to(weir_operators::connectors::parquet_sink(out), "out")
        .unwrap();
    env.execute("count windows").unwrap()
}

#[test]
fn count_windows_and_count_triggers_resume_from_a_checkpoint_exactly_once() {
    for trigger in [false, true] {
        count_windows_resume(trigger);
    }
}

fn count_windows_resume(trigger: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    count_window_job(&plain, None, None, trigger);
    let expected = sorted_rows(&committed(&plain));
    assert!(expected.len() > 1000, "{} windows", expected.len());
    let recovered = tmp.path().join("recovered");
    let result = count_window_job(
        &recovered,
        Some(&tmp.path().join("chk")),
        Some(20_000),
        trigger,
    );
    assert_eq!(result.restarts.len(), 1, "{:?}", result.restarts);
    assert!(
        result.restarts[0].contains("restarted from checkpoint"),
        "{:?} (declined {:?})",
        result.restarts,
        result.checkpoints_declined
    );
    assert_same(
        sorted_rows(&committed(&recovered)),
        &expected,
        "count windows",
    );
}
