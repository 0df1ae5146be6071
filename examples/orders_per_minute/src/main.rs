//! `orders_per_minute`: runs the seed job on the embedded local runtime and
//! prints a summary. `--help` lists the options.

use std::path::Path;
use std::process::ExitCode;

use mimalloc::MiMalloc;
use orders_per_minute::{build_job, file_orders, generated_orders};
use weir_core::Result;
use weir_core::config::RuntimeMode;
use weir_core::spec::{CollectHandle, SinkSpec};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

const USAGE: &str = "orders_per_minute [--events N] [--parallelism P] [--batch] [--input PATH] [--output DIR] [--explain]

  --events N       generated orders (default 10000000)
  --parallelism P  subtasks per operator (default 2)
  --batch          batch runtime mode (same results)
  --input PATH     read orders from a Parquet or .csv file or directory
                   (columns order_id, user_id, amount_cents, order_time)
  --output DIR     write the per-minute counts as Parquet into DIR
  --explain        print the stream, job and execution graphs and exit
  --emit-job FILE  write the job graph as JSON for `weir submit` / `weir run`
                   and exit (needs --output: rows collected in this process
                   cannot be shipped)";

struct Args {
    events: u64,
    parallelism: usize,
    batch: bool,
    input: Option<String>,
    output: Option<String>,
    explain: bool,
    emit_job: Option<String>,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = Args {
        events: 10_000_000,
        parallelism: 2,
        batch: false,
        input: None,
        output: None,
        explain: false,
        emit_job: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--events" => {
                args.events = value("--events")?
                    .parse()
                    .map_err(|e| format!("--events: {e}"))?
            }
            "--parallelism" => {
                args.parallelism = value("--parallelism")?
                    .parse()
                    .map_err(|e| format!("--parallelism: {e}"))?
            }
            "--batch" => args.batch = true,
            "--input" => args.input = Some(value("--input")?),
            "--output" => args.output = Some(value("--output")?),
            "--explain" => args.explain = true,
            "--emit-job" => args.emit_job = Some(value("--emit-job")?),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument '{other}'\n\n{USAGE}")),
        }
    }
    Ok(args)
}

fn run(args: &Args) -> Result<()> {
    let env = weir_worker::local_environment()?;
    env.set_parallelism(args.parallelism);
    if args.batch {
        env.set_runtime_mode(RuntimeMode::Batch);
    }
    let source = match &args.input {
        Some(path) => file_orders(Path::new(path))?,
        None => generated_orders(args.events),
    };
    let (sink, collected) = match &args.output {
        Some(dir) => (weir_operators::connectors::parquet_sink(dir), None),
        None => {
            let handle = CollectHandle::new();
            (SinkSpec::from(handle.clone()), Some(handle))
        }
    };
    build_job(&env, source, sink)?;
    if let Some(path) = &args.emit_job {
        let json = env.job_graph("orders-per-minute")?.to_json()?;
        std::fs::write(path, json).map_err(|e| weir_core::WeirError::io(path.clone(), e))?;
        println!("job graph written to {path}");
        return Ok(());
    }
    if args.explain {
        println!("{}", env.explain("orders-per-minute")?);
        return Ok(());
    }
    let result = env.execute("orders-per-minute")?;
    let secs = result.duration.as_secs_f64();
    let events = result.records_out("Source: orders");
    let rows = result.records_in("Sink: orders_per_minute");
    println!(
        "job          orders-per-minute (parallelism {}, {} mode)",
        args.parallelism,
        if args.batch { "batch" } else { "streaming" }
    );
    println!("events in    {events}");
    println!(
        "windows      {} fired (summed over subtasks)",
        result.counter("windows_fired")
    );
    println!("rows out     {rows} (user, minute) counts");
    println!(
        "late dropped {}",
        result.counter("num_late_records_dropped")
    );
    println!("elapsed      {secs:.3} s");
    println!("throughput   {:.2} M events/s", events as f64 / secs / 1e6);
    if let Some(handle) = collected
        && let Some(first) = handle.batches().first()
    {
        println!("\nsample of the output:");
        let sample = first.slice(0, first.num_rows().min(5));
        println!("{}", arrow::util::pretty::pretty_format_batches(&[sample])?);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
