//! What live metrics cost: the quick-start job and Nexmark q0 and q5, each
//! run with live metrics on and off (`WeirConfig::live_metrics`), the two
//! interleaved `ROUNDS` times in one process so machine noise falls on
//! both alike. Prints events per CPU-second (events/s per core) of each
//! run, the median of each setting, and their ratio.
//!
//! ```text
//! taskset -c 0 cargo bench -p weir-benches --bench metrics_cost
//! ```
//!
//! `WEIR_BENCH_EVENTS` (default 10,000,000) sets the events per run,
//! `WEIR_BENCH_ROUNDS` (default 3) the rounds. The quick-start job prints
//! its windows: run with `> /dev/null` to keep the terminal out of it.

use mimalloc::MiMalloc;

#[path = "cpu.rs"]
mod cpu;
use cpu::cpu_seconds;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// Events per CPU-second of one run of `script` (`events` events).
fn run(script: &str, events: u64, live_metrics: bool) -> f64 {
    let mut session = weir_sql::SqlSession::new();
    session.execute_script(script).expect("plan");
    let env = weir_worker::local_environment().expect("environment");
    env.configure(|c| c.live_metrics = live_metrics);
    session.build(&env).expect("build");
    let before = cpu_seconds();
    env.execute("metrics cost").expect("run");
    events as f64 / (cpu_seconds() - before)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let var = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let events = var("WEIR_BENCH_EVENTS", 10_000_000);
    let rounds = var("WEIR_BENCH_ROUNDS", 3);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let read = |p: &str| std::fs::read_to_string(format!("{root}/{p}")).expect(p);
    let quick = read("examples/sql/orders_per_minute.sql")
        .replace("'10000000'", &format!("'{events}'"))
        .replace("'print'", "'blackhole'");
    let ddl = read("sql/nexmark/ddl.sql")
        .replace("${TPS}", "10000000")
        .replace("${EVENTS_NUM}", &events.to_string());
    let nexmark = |q: &str| {
        format!(
            "SET 'parallelism.default' = '1';\n{ddl}\n{}",
            read(&format!("sql/nexmark/{q}.sql"))
        )
    };
    let jobs = [
        ("quick start", quick),
        ("nexmark q0", nexmark("q0")),
        ("nexmark q5", nexmark("q5")),
    ];
    eprintln!(
        "live metrics on/off, {events} events a run, {rounds} rounds, events/s per core \
         (machine: {} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for (name, script) in &jobs {
        let (mut on, mut off) = (vec![], vec![]);
        for _ in 0..rounds {
            on.push(run(script, events, true));
            off.push(run(script, events, false));
        }
        let (on_m, off_m) = (median(on.clone()), median(off.clone()));
        eprintln!(
            "{name:<12} on {:>6.2} M/s  off {:>6.2} M/s  on/off {:.3}   (runs on {:?}, off {:?})",
            on_m / 1e6,
            off_m / 1e6,
            on_m / off_m,
            on.iter()
                .map(|x| (x / 1e4).round() / 1e2)
                .collect::<Vec<_>>(),
            off.iter()
                .map(|x| (x / 1e4).round() / 1e2)
                .collect::<Vec<_>>(),
        );
    }
}
