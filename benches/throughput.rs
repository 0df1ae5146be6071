//! End-to-end throughput of in-process pipelines.
//!
//! ```text
//! cargo bench -p weir-benches --bench throughput
//! taskset -c 0 cargo bench -p weir-benches --bench throughput   # one core
//! ```
//!
//! (a) generator -> filter -> project -> blackhole
//! (b) generator -> key_by -> 10 s tumbling window count + sum over 1,000 keys -> blackhole
//! (d) sliding 10 s / 2 s, (e) cumulating 2 s / 10 s, (f) 50 ms sessions
//!     over 100,000 keys — all with count + sum
//! (g) interval join of two generators on key within [0, 50 ms]
//! (h) pipeline (b) at parallelism 2 with its exchange in memory and over
//!     Arrow Flight on loopback (24 bytes per event cross the exchange)
//! (c) the same window in batch mode over Parquet files (written once by Weir
//!     into `target/weir-bench/events`; `benches/peers/run.sh` runs DuckDB and
//!     DataFusion on the same files)
//!
//! Prints events/s (wall clock) and events per CPU-second of the process
//! (user + system time from /proc/self/stat), i.e. events/s per core.
//! `WEIR_BENCH_EVENTS` sets the events per run (default 200,000,000);
//! `WEIR_BENCH_ONLY=(h)` runs only the pipelines whose name contains `(h)`.

use std::time::Duration;

use datafusion_expr::{col, lit};
use mimalloc::MiMalloc;
use weir_core::api::StreamExecutionEnvironment;
use weir_core::config::RuntimeMode;
use weir_core::spec::{AggregateSpec, SourceSpec};
use weir_core::time::{
    CumulativeEventTimeWindows, EventTimeSessionWindows, SlidingEventTimeWindows,
    TumblingEventTimeWindows, WatermarkStrategy, WindowAssigner,
};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};

#[path = "cpu.rs"]
mod cpu;
use cpu::cpu_seconds;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn generator(events: u64) -> GeneratorSpec {
    GeneratorSpec::new(Some(events))
        .column("key", ColumnGen::Key { cardinality: 1_000 })
        .column(
            "price",
            ColumnGen::UniformInt {
                min: 1,
                max: 10_000,
            },
        )
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 0,
                events_per_second: 1_000_000,
                max_out_of_orderness_ms: 0,
            },
        )
}

fn env(parallelism: usize) -> StreamExecutionEnvironment {
    let env = weir_worker::local_environment().expect("config");
    env.set_parallelism(parallelism);
    env
}

fn stateless(events: u64, parallelism: usize) -> StreamExecutionEnvironment {
    let env = env(parallelism);
    env.from_source(generator(events), WatermarkStrategy::no_watermarks(), "gen")
        .unwrap()
        .filter(col("price").gt(lit(5_000)))
        .unwrap()
        .project(vec![col("key"), (col("price") * lit(2)).alias("price2")])
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "blackhole")
        .unwrap();
    env
}

/// source -> key_by(key) -> window -> count + sum(price) -> blackhole.
fn window_job(
    source: impl Into<SourceSpec>,
    assigner: WindowAssigner,
    parallelism: usize,
    mode: RuntimeMode,
) -> StreamExecutionEnvironment {
    let env = env(parallelism);
    env.set_runtime_mode(mode);
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(100)),
        "gen",
    )
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(assigner)
    .aggregate(vec![
        AggregateSpec::count_star().alias("cnt"),
        AggregateSpec::sum("price").alias("total"),
    ])
    .unwrap()
    .sink_to(weir_operators::connectors::blackhole(), "blackhole")
    .unwrap();
    env
}

/// Like [`generator`] with `keys` distinct keys.
fn keyed_generator(events: u64, keys: u64) -> GeneratorSpec {
    let mut g = generator(events);
    g.columns[0].1 = ColumnGen::Key { cardinality: keys };
    g
}

/// Two generators of `events / 2` each -> interval join on key within
/// [0, 50 ms] -> blackhole.
fn interval_join_job(events: u64) -> StreamExecutionEnvironment {
    let env = env(1);
    let side = |seed: u64, name: &str| {
        let g = keyed_generator(events / 2, 100_000);
        env.from_source(
            g.seed(seed),
            WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_millis(100)),
            name,
        )
        .unwrap()
        .key_by(&["key"])
        .unwrap()
    };
    let (left, right) = (side(1, "gen"), side(2, "gen-right"));
    left.interval_join(&right)
        .between(0, 50)
        .unwrap()
        .sink_to(weir_operators::connectors::blackhole(), "blackhole")
        .unwrap();
    env
}

/// Write `events` generated events as Parquet into `dir` once (4 files).
fn parquet_events(dir: &std::path::Path, events: u64) -> SourceSpec {
    let marker = dir.join(format!("_complete_{events}"));
    if !marker.exists() {
        let _ = std::fs::remove_dir_all(dir);
        let env = env(4);
        env.from_source(generator(events), WatermarkStrategy::no_watermarks(), "gen")
            .unwrap()
            .sink_to(
                weir_operators::connectors::parquet_sink(dir.to_path_buf()),
                "events",
            )
            .unwrap();
        env.execute("write-bench-data").expect("bench data written");
        std::fs::write(&marker, b"").unwrap();
    }
    weir_operators::sources::parquet_source(&[dir], None).unwrap()
}

fn measure(name: &str, events: u64, parallelism: usize, env: StreamExecutionEnvironment) {
    // WEIR_BENCH_ONLY=<text> runs only the pipelines whose name contains it.
    if let Ok(only) = std::env::var("WEIR_BENCH_ONLY")
        && !name.contains(&only)
    {
        return;
    }
    let cpu0 = cpu_seconds();
    let result = env.execute(name).expect("benchmark job runs");
    let cpu = cpu_seconds() - cpu0;
    let wall = result.duration.as_secs_f64();
    // Every source named gen… counts (the join reads two).
    let seen = result.records_out("Source: gen");
    let rows_out = result.records_in("Sink: blackhole");
    let state = match result.counter("state_bytes_max") {
        0 => String::new(),
        b => format!("  peak window state {:.1} KiB", b as f64 / 1024.0),
    };
    assert_eq!(seen, events, "every event generated");
    println!(
        "{name:<44} p={parallelism}  {events:>11} events  {wall:>7.3} s  {:>7.1} M events/s  {:>7.1} M events/s per core (cpu {cpu:.2} s)  rows out {rows_out}{state}",
        seen as f64 / wall / 1e6,
        seen as f64 / cpu.max(0.01) / 1e6,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let events: u64 = std::env::var("WEIR_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000_000);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("weir throughput, {events} events per run, {cores} cores available");
    let secs = Duration::from_secs;
    let tumble = TumblingEventTimeWindows::of(secs(10));
    let streaming = RuntimeMode::Streaming;
    for p in [1, 2] {
        measure(
            "(a) generator>filter>project>blackhole",
            events,
            p,
            stateless(events, p),
        );
        measure(
            "(b) generator>key_by>tumble(10s) count+sum",
            events,
            p,
            window_job(generator(events), tumble, p, streaming),
        );
    }
    measure(
        "(b') same, a tenth of the events (state size)",
        events / 10,
        1,
        window_job(generator(events / 10), tumble, 1, streaming),
    );
    measure(
        "(d) generator>key_by>hop(10s, 2s) count+sum",
        events,
        1,
        window_job(
            generator(events),
            SlidingEventTimeWindows::of(secs(10), secs(2)),
            1,
            streaming,
        ),
    );
    measure(
        "(e) generator>key_by>cumulate(2s, 10s) count+sum",
        events,
        1,
        window_job(
            generator(events),
            CumulativeEventTimeWindows::of(secs(2), secs(10)),
            1,
            streaming,
        ),
    );
    let session_events = events / 4;
    measure(
        "(f) generator>key_by>session(50ms), 100k keys",
        session_events,
        1,
        window_job(
            keyed_generator(session_events, 100_000),
            EventTimeSessionWindows::with_gap(Duration::from_millis(50)),
            1,
            streaming,
        ),
    );
    measure(
        "(g) two generators>interval join [0, 50ms], 100k keys",
        events / 4,
        1,
        interval_join_job(events / 4),
    );
    // (h): the same keyed window with its hash exchange over Arrow Flight on
    // loopback instead of in-memory queues.
    let flight = window_job(generator(events / 4), tumble, 2, streaming);
    flight.configure(|c| c.exchange = weir_core::ExchangeMode::Flight);
    let local = window_job(generator(events / 4), tumble, 2, streaming);
    measure("(h) (b) at p=2, exchange in memory", events / 4, 2, local);
    measure(
        "(h) (b) at p=2, exchange over Flight",
        events / 4,
        2,
        flight,
    );
    let parquet_events_n: u64 = std::env::var("WEIR_BENCH_PARQUET_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000_000);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/weir-bench/events");
    let source = parquet_events(&dir, parquet_events_n);
    measure(
        "(c) parquet>key_by>tumble(10s) count+sum, batch",
        parquet_events_n,
        1,
        window_job(source, tumble, 1, RuntimeMode::Batch),
    );
}
