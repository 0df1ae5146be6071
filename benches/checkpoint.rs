//! Checkpoints of large keyed window state.
//!
//! ```text
//! cargo bench -p weir-benches --bench checkpoint
//! ```
//!
//! generator -> key_by -> 1 h tumbling count + sum -> blackhole, with K
//! distinct keys (1 M and 10 M; `WEIR_BENCH_KEYS=1000000` picks one), each
//! key seen three times, the source rate-limited so the job runs about 6 s
//! and checkpoints every second while its window state grows to every key.
//! Prints each checkpoint's duration (trigger to committed `_metadata`) and
//! size, then the run's throughput with and without checkpoints.
//!
//! Then full against incremental checkpoints of state that mostly stays put:
//! 1 min tumbling windows kept an hour for late data (allowed lateness), 1 M
//! keys a minute over 8 minutes of event time — each checkpoint, only the
//! current minute's pane changes. Prints the bytes each checkpoint wrote.
//! `WEIR_BENCH_SKIP_FULL=1` runs only this part.

use std::time::{Duration, Instant};

use mimalloc::MiMalloc;
use weir_core::spec::{AggregateSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_operators::connectors::{ColumnGen, GeneratorSpec};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// The bench job's shape: `events` rows over `keys` keys, event time
/// advancing `per_second` events a second, read in about `seconds`.
struct Shape {
    keys: u64,
    events: u64,
    per_second: u64,
    seconds: u64,
    window: Duration,
    lateness: Duration,
}

/// generator -> key_by -> tumbling count + sum -> blackhole, configured by
/// `configure`.
fn run_job(
    shape: Shape,
    configure: impl Fn(&mut weir_core::WeirConfig),
) -> weir_core::graph::JobResult {
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(configure);
    let generator = GeneratorSpec::new(Some(shape.events))
        .column("key", ColumnGen::Sequence)
        .column("amount", ColumnGen::UniformInt { min: 1, max: 100 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_700_000_000_000,
                events_per_second: shape.per_second,
                max_out_of_orderness_ms: 0,
            },
        )
        .rate(shape.events / shape.seconds);
    env.from_source(
        SourceSpec::from(generator),
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::ZERO),
        "events",
    )
    .unwrap()
    .project(vec![
        (datafusion_expr::col("key") % datafusion_expr::lit(shape.keys as i64)).alias("key"),
        datafusion_expr::col("amount"),
        datafusion_expr::col("ts"),
    ])
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(TumblingEventTimeWindows::of(shape.window))
    .allowed_lateness(shape.lateness)
    .aggregate(vec![
        AggregateSpec::count_star(),
        AggregateSpec::sum("amount"),
    ])
    .unwrap()
    .sink_to(weir_operators::connectors::blackhole(), "blackhole")
    .unwrap();
    env.execute("checkpoint bench").unwrap()
}

/// `keys` keys, each seen three times in about 6 s, in one 1 h window.
fn run(keys: u64, checkpoints: bool, dir: &std::path::Path) -> weir_core::graph::JobResult {
    let shape = Shape {
        keys,
        events: keys * 3,
        per_second: 1_000_000,
        seconds: 6,
        window: Duration::from_secs(3600),
        lateness: Duration::ZERO,
    };
    run_job(shape, |c| {
        if checkpoints {
            c.checkpoint_interval = Some(Duration::from_secs(1));
            c.checkpoint_dir = Some(dir.display().to_string());
        }
    })
}

/// 8 minutes of event time, each minute's pane holding `keys` keys, windows
/// kept an hour after they fire; checkpoints every second.
fn run_retained_panes(
    keys: u64,
    incremental: bool,
    dir: &std::path::Path,
) -> weir_core::graph::JobResult {
    let shape = Shape {
        keys,
        events: keys * 8,
        per_second: keys / 60,
        seconds: 12,
        window: Duration::from_secs(60),
        lateness: Duration::from_secs(3600),
    };
    run_job(shape, |c| {
        c.checkpoint_interval = Some(Duration::from_secs(1));
        c.checkpoint_dir = Some(dir.display().to_string());
        c.checkpoint_incremental = incremental;
    })
}

fn main() {
    let sizes: Vec<u64> = match std::env::var("WEIR_BENCH_KEYS") {
        Ok(k) => vec![k.parse().expect("WEIR_BENCH_KEYS is a number")],
        Err(_) if std::env::var_os("WEIR_BENCH_SKIP_FULL").is_some() => vec![],
        Err(_) => vec![1_000_000, 10_000_000],
    };
    let dir = std::env::temp_dir().join("weir-checkpoint-bench");
    for keys in sizes {
        let _ = std::fs::remove_dir_all(&dir);
        let started = Instant::now();
        let plain = run(keys, false, &dir);
        let plain_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let checkpointed = run(keys, true, &dir);
        let checkpointed_s = started.elapsed().as_secs_f64();
        println!("{keys} keys, {} events, parallelism 2", keys * 3);
        for (id, took, bytes) in &checkpointed.checkpoint_sizes {
            println!(
                "  checkpoint {id}: {:>7.0} ms  {:>8.1} MiB",
                took.as_secs_f64() * 1e3,
                *bytes as f64 / (1 << 20) as f64
            );
        }
        println!(
            "  run without checkpoints {plain_s:.2} s, with checkpoints every 1 s {checkpointed_s:.2} s \
             ({} tasks; the source is rate-limited to ~6 s)",
            plain.tasks.len()
        );
    }
    let keys = 1_000_000;
    println!("retained panes: {keys} keys a minute, 8 minutes, 1 min windows kept 1 h");
    for incremental in [false, true] {
        let _ = std::fs::remove_dir_all(&dir);
        let result = run_retained_panes(keys, incremental, &dir);
        let written: Vec<String> = result
            .checkpoint_sizes
            .iter()
            .map(|(_, took, bytes)| {
                format!(
                    "{:.1} MiB/{:.0} ms",
                    *bytes as f64 / (1 << 20) as f64,
                    took.as_secs_f64() * 1e3
                )
            })
            .collect();
        let total: u64 = result.checkpoint_sizes.iter().map(|(_, _, b)| b).sum();
        println!(
            "  {}: {} MiB written in {} checkpoints: {}",
            if incremental {
                "incremental"
            } else {
                "full       "
            },
            total >> 20,
            written.len(),
            written.join(", ")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
