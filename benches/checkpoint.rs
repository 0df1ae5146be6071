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

use std::time::{Duration, Instant};

use mimalloc::MiMalloc;
use weir_core::spec::{AggregateSpec, ColumnGen, GeneratorSpec, SinkSpec, SourceSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn run(keys: u64, checkpoints: bool, dir: &std::path::Path) -> weir_core::graph::JobResult {
    let events = keys * 3;
    let env = weir_worker::local_environment().unwrap();
    env.set_parallelism(2);
    env.configure(|c| {
        if checkpoints {
            c.checkpoint_interval = Some(Duration::from_secs(1));
            c.checkpoint_dir = Some(dir.display().to_string());
        }
    });
    let generator = GeneratorSpec::new(Some(events))
        .column("key", ColumnGen::Sequence)
        .column("amount", ColumnGen::UniformInt { min: 1, max: 100 })
        .column(
            "ts",
            ColumnGen::EventTime {
                start_ms: 1_700_000_000_000,
                events_per_second: 1_000_000,
                max_out_of_orderness_ms: 0,
            },
        )
        .rate(events / 6);
    env.from_source(
        SourceSpec::Generator(generator),
        WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::ZERO),
        "events",
    )
    .unwrap()
    .project(vec![
        (datafusion_expr::col("key") % datafusion_expr::lit(keys as i64)).alias("key"),
        datafusion_expr::col("amount"),
        datafusion_expr::col("ts"),
    ])
    .unwrap()
    .key_by(&["key"])
    .unwrap()
    .window(TumblingEventTimeWindows::of(Duration::from_secs(3600)))
    .aggregate(vec![
        AggregateSpec::count_star(),
        AggregateSpec::sum("amount"),
    ])
    .unwrap()
    .sink_to(SinkSpec::Blackhole, "blackhole")
    .unwrap();
    env.execute("checkpoint bench").unwrap()
}

fn main() {
    let sizes: Vec<u64> = match std::env::var("WEIR_BENCH_KEYS") {
        Ok(k) => vec![k.parse().expect("WEIR_BENCH_KEYS is a number")],
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
    let _ = std::fs::remove_dir_all(&dir);
}
