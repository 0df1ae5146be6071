//! `fraud_detection [EVENTS] [PARALLELISM]`: run the detector over generated
//! transactions on the embedded runtime and print the alerts.

use std::process::ExitCode;

use fraud_detection::{build_job, generated_transactions};
use mimalloc::MiMalloc;
use weir_core::spec::{CollectHandle, SinkSpec};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn run(events: u64, parallelism: usize) -> weir_core::Result<()> {
    let env = weir_worker::local_environment()?;
    env.set_parallelism(parallelism);
    let alerts = CollectHandle::new();
    build_job(
        &env,
        generated_transactions(events, 1_000).into(),
        SinkSpec::from(alerts.clone()),
    )?;
    let result = env.execute("fraud-detection")?;
    let secs = result.duration.as_secs_f64();
    println!(
        "transactions {}",
        result.records_out("Source: transactions")
    );
    println!("alerts       {}", alerts.num_rows());
    println!("timers fired {}", result.counter("timers_fired"));
    println!(
        "elapsed      {secs:.3} s ({:.2} M events/s)",
        events as f64 / secs / 1e6
    );
    if let Some(first) = alerts.batches().first() {
        let sample = first.slice(0, first.num_rows().min(5));
        println!("{}", arrow::util::pretty::pretty_format_batches(&[sample])?);
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let parse = |v: Option<String>, default: u64| v.map_or(Ok(default), |s| s.parse::<u64>());
    let (events, parallelism) = match (parse(args.next(), 5_000_000), parse(args.next(), 2)) {
        (Ok(e), Ok(p)) if p > 0 => (e, p as usize),
        _ => {
            eprintln!("usage: fraud_detection [EVENTS] [PARALLELISM]");
            return ExitCode::from(2);
        }
    };
    match run(events, parallelism) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
