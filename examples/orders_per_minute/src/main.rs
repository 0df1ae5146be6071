//! Orders per minute: the job Weir's design starts from.
//!
//! ```text
//! orders (generator, or --input FILE.parquet|FILE.csv)
//!   -> ParseOrder (amount_cents -> amount)
//!   -> key_by(user_id)
//!   -> 1-minute tumbling event-time window: count, sum(amount)
//!   -> sink (in-memory sample by default, Parquet with --output DIR)
//! ```
//!
//! Runs on the embedded local runtime. `--help` lists the options.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion_expr::{cast, col, lit};
use mimalloc::MiMalloc;
use weir_core::Result;
use weir_core::config::RuntimeMode;
use weir_core::spec::{AggregateSpec, ColumnGen, CollectHandle, GeneratorSpec, SinkSpec};
use weir_core::time::{TumblingEventTimeWindows, WatermarkStrategy};
use weir_operators::sources::{CsvOptions, csv_source, parquet_source};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

const USAGE: &str = "orders_per_minute [--events N] [--parallelism P] [--batch] [--input FILE|DIR] [--output DIR] [--explain]

  --events N       generated orders (default 10000000)
  --parallelism P  subtasks per operator (default 2)
  --batch          batch runtime mode (same results)
  --input PATH     read orders from Parquet or CSV (columns order_id, user_id,
                   amount_cents, order_time) instead of generating them
  --output DIR     write the per-minute counts as Parquet into DIR
  --explain        print the stream, job and execution graphs and exit";

struct Args {
    events: u64,
    parallelism: usize,
    batch: bool,
    input: Option<String>,
    output: Option<String>,
    explain: bool,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = Args {
        events: 10_000_000,
        parallelism: 2,
        batch: false,
        input: None,
        output: None,
        explain: false,
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
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument '{other}'\n\n{USAGE}")),
        }
    }
    Ok(args)
}

fn orders_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Int64, false),
        Field::new("user_id", DataType::Int64, false),
        Field::new("amount_cents", DataType::Int64, false),
        Field::new(
            "order_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

fn run(args: &Args) -> Result<()> {
    let env = weir_worker::local_environment()?;
    env.set_parallelism(args.parallelism);
    if args.batch {
        env.set_runtime_mode(RuntimeMode::Batch);
    }
    let source = match &args.input {
        Some(path) if path.ends_with(".csv") => csv_source(
            &[path],
            CsvOptions {
                schema: Some(orders_schema()),
                ..Default::default()
            },
        )?,
        Some(path) => parquet_source(&[path], None)?,
        None => weir_core::spec::SourceSpec::Generator(
            GeneratorSpec::new(Some(args.events))
                .column("order_id", ColumnGen::Sequence)
                .column("user_id", ColumnGen::Key { cardinality: 10_000 })
                .column("amount_cents", ColumnGen::UniformInt { min: 100, max: 50_000 })
                .column(
                    "order_time",
                    ColumnGen::EventTime {
                        start_ms: 1_767_225_600_000, // 2026-01-01T00:00:00Z
                        events_per_second: 50_000,
                        max_out_of_orderness_ms: 2_000,
                    },
                ),
        ),
    };
    let (sink, collected) = match &args.output {
        Some(dir) => (SinkSpec::Parquet { dir: dir.into() }, None),
        None => {
            let handle = CollectHandle::new();
            (SinkSpec::Collect(handle.clone()), Some(handle))
        }
    };
    env.from_source(
        source,
        WatermarkStrategy::for_bounded_out_of_orderness("order_time", Duration::from_secs(5)),
        "orders",
    )?
    .project(vec![
        col("order_id"),
        col("user_id"),
        (cast(col("amount_cents"), DataType::Float64) / lit(100.0)).alias("amount"),
        col("order_time"),
    ])?
    .name("ParseOrder")?
    .key_by(&["user_id"])?
    .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
    .aggregate(vec![
        AggregateSpec::count_star().alias("orders"),
        AggregateSpec::sum("amount").alias("revenue"),
    ])?
    .sink_to(sink, "orders_per_minute")?;

    if args.explain {
        println!("{}", env.explain("orders-per-minute")?);
        return Ok(());
    }
    let result = env.execute("orders-per-minute")?;
    let secs = result.duration.as_secs_f64();
    let events = result.records_out("Source: orders");
    let rows = result.records_in("Sink: orders_per_minute");
    println!("job          orders-per-minute (parallelism {})", args.parallelism);
    println!("events in    {events}");
    println!("windows      {} fired (per subtask)", result.counter("windows_fired"));
    println!("rows out     {rows} (user, minute) counts");
    println!("late dropped {}", result.counter("num_late_records_dropped"));
    println!("elapsed      {secs:.3} s");
    println!("throughput   {:.2} M events/s", events as f64 / secs / 1e6);
    if let Some(handle) = collected {
        let batches = handle.batches();
        if let Some(first) = batches.first() {
            println!("\nsample of the output:");
            let sample = first.slice(0, first.num_rows().min(5));
            println!("{}", arrow::util::pretty::pretty_format_batches(&[sample])?);
        }
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
