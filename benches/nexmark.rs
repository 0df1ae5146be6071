//! Nexmark throughput per core: each query of `sql/nexmark` on the
//! `nexmark` connector (events at full speed), run embedded at parallelism
//! 1 (one core for the operators; the source shares it) into its blackhole
//! sink. Prints events/s per core for each query.
//!
//!     cargo bench -p weir-benches --bench nexmark [-- EVENTS [q0 q1 …]]
//!
//! Defaults: 10,000,000 events; q0 q1 q2 q5 q7 q8.

use std::time::Instant;

use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let events: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let mut queries: Vec<String> = args
        .iter()
        .filter(|a| a.starts_with('q'))
        .cloned()
        .collect();
    if queries.is_empty() {
        queries = ["q0", "q1", "q2", "q5", "q7", "q8"]
            .map(String::from)
            .to_vec();
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../sql/nexmark");
    let ddl = std::fs::read_to_string(format!("{dir}/ddl.sql"))
        .expect("sql/nexmark/ddl.sql")
        .replace("${TPS}", "10000000")
        .replace("${EVENTS_NUM}", &events.to_string());
    println!(
        "Nexmark, {events} events, parallelism 1, events/s per core (machine: {} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for q in &queries {
        let text = std::fs::read_to_string(format!("{dir}/{q}.sql")).expect("query file");
        let script = format!("SET 'parallelism.default' = '1';\n{ddl}\n{text}");
        let mut session = weir_sql::SqlSession::new();
        if let Err(e) = session.execute_script(&script) {
            println!("{q}: cannot plan: {e}");
            continue;
        }
        let env = weir_worker::local_environment().expect("environment");
        session.build(&env).expect("build");
        let started = Instant::now();
        let result = env.execute(q);
        let secs = started.elapsed().as_secs_f64();
        match result {
            Ok(_) => println!(
                "{q}: {:>6.2} M events/s per core ({secs:.2} s)",
                events as f64 / secs / 1e6
            ),
            Err(e) => println!("{q}: failed: {e}"),
        }
    }
}
