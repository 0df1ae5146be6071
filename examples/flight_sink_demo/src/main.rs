//! A job whose output Flight clients read while it runs.
//!
//! A rate-limited generator emits `n = 0..rows` into the Flight sink
//! `numbers`. The binary prints `endpoint <addr>` as soon as the sink is
//! served, `finished <rows>` when the job ends, and keeps serving the
//! finished sink until its standard input closes, so late clients still read
//! every row.
//!
//! ```text
//! cargo run -p flight_sink_demo -- [rows] [rows-per-second]
//! ```
//!
//! `WEIR_SINK_TOKEN` makes clients authenticate; `WEIR_SINK_BIND` moves
//! the endpoint (a non-loopback address needs the token).

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use weir_core::spec::SourceSpec;
use weir_core::time::WatermarkStrategy;
use weir_operators::connectors::{ColumnGen, GeneratorSpec};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn arg(args: &[String], i: usize, default: u64, what: &str) -> Result<u64, String> {
    match args.get(i) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("{what} must be a whole number, got {v:?}")),
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rows = arg(&args, 0, 40_000, "rows")?;
    let rate = arg(&args, 1, 20_000, "rows-per-second")?;
    let env = weir_worker::local_environment().map_err(|e| e.to_string())?;
    let spec = GeneratorSpec::new(Some(rows))
        .column("n", ColumnGen::Sequence)
        .rate(rate);
    env.from_source(
        SourceSpec::from(spec),
        WatermarkStrategy::no_watermarks(),
        "numbers-source",
    )
    .and_then(|s| s.sink_to(weir_flight::flight_sink("numbers"), "numbers"))
    .map_err(|e| e.to_string())?;
    let job = env
        .execute_async("flight-sink-demo")
        .map_err(|e| e.to_string())?;
    let addr = job.sink_endpoint().ok_or("the job serves no Flight sink")?;
    let mut out = std::io::stdout();
    let say = |out: &mut std::io::Stdout, line: String| {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    say(&mut out, format!("endpoint {addr}"));
    while !job.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    say(&mut out, format!("finished {rows}"));
    // Serve the finished sink until the reader is done.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    job.wait().map(|_| ()).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flight_sink_demo: {e}");
            ExitCode::FAILURE
        }
    }
}
