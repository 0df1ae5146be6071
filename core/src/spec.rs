//! Descriptions of sources, operators and sinks.
//!
//! These are data: the job graph holds them, the runtime (`weir-operators`)
//! turns them into running operators. Specs that need to look at files (the
//! schema of a Parquet or CSV source) are built by helpers in
//! `weir-operators`, so this crate stays free of I/O.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion_expr::AggregateUDF;
use datafusion_expr::type_coercion::functions::fields_with_udf;
use datafusion_functions_aggregate::{
    average::avg_udaf, count::count_udaf, first_last, min_max, sum::sum_udaf,
};
use datafusion_physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError};
use crate::time::{WindowAssigner, column_list};

/// How a generated column's values are derived from the event index `n`.
/// Every value is a pure function of `(seed, n)`, so splitting the sequence
/// across subtasks or replaying it yields the same events.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ColumnGen {
    /// `Int64`: the event index `n` itself.
    Sequence,
    /// `Int64`: uniform in `[min, max]`.
    UniformInt {
        /// Smallest value.
        min: i64,
        /// Largest value (inclusive).
        max: i64,
    },
    /// `Float64`: uniform in `[min, max)`.
    UniformFloat {
        /// Smallest value.
        min: f64,
        /// Upper bound (exclusive).
        max: f64,
    },
    /// `Int64`: a key uniform in `[0, cardinality)`.
    Key {
        /// Number of distinct keys.
        cardinality: u64,
    },
    /// `Timestamp(Millisecond)`: `start + n * 1000 / events_per_second`, moved
    /// back by a pseudo-random delay in `[0, max_out_of_orderness]` ms.
    EventTime {
        /// Event time of event 0, ms since the epoch.
        start_ms: i64,
        /// How fast event time advances relative to the event index.
        events_per_second: u64,
        /// Largest delay applied to an event, in ms.
        max_out_of_orderness_ms: i64,
    },
    /// `Utf8`: one of the given strings, chosen uniformly.
    Choice(Vec<String>),
    /// `Utf8`: a pseudo-random string of `length` letters and digits.
    RandomString {
        /// Characters per value.
        length: usize,
    },
}

impl ColumnGen {
    /// Arrow type of the generated column.
    pub fn data_type(&self) -> DataType {
        match self {
            ColumnGen::Sequence | ColumnGen::UniformInt { .. } | ColumnGen::Key { .. } => {
                DataType::Int64
            }
            ColumnGen::UniformFloat { .. } => DataType::Float64,
            ColumnGen::EventTime { .. } => DataType::Timestamp(TimeUnit::Millisecond, None),
            ColumnGen::Choice(_) | ColumnGen::RandomString { .. } => DataType::Utf8,
        }
    }
}

/// A deterministic data generator (Flink's `datagen`/sequence source).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GeneratorSpec {
    /// Total events; `None` is unbounded.
    pub num_events: Option<u64>,
    /// Events per second over all subtasks; `None` is as fast as possible.
    pub rate: Option<u64>,
    /// Seed of every pseudo-random column.
    pub seed: u64,
    /// Generated columns, in order.
    pub columns: Vec<(String, ColumnGen)>,
    /// Generate the Nexmark benchmark's events instead of `columns`.
    #[serde(default)]
    pub nexmark: Option<crate::nexmark::NexmarkConfig>,
}

impl GeneratorSpec {
    /// An empty generator of `num_events` events (add columns with [`Self::column`]).
    pub fn new(num_events: Option<u64>) -> Self {
        Self {
            num_events,
            rate: None,
            seed: 0,
            columns: vec![],
            nexmark: None,
        }
    }

    /// A generator of Nexmark events (Person, Auction, Bid).
    pub fn nexmark(config: crate::nexmark::NexmarkConfig) -> Self {
        Self {
            num_events: config.events,
            rate: config.rate,
            seed: 0,
            columns: vec![],
            nexmark: Some(config),
        }
    }

    /// Add a generated column.
    pub fn column(mut self, name: impl Into<String>, generator: ColumnGen) -> Self {
        self.columns.push((name.into(), generator));
        self
    }

    /// Limit the generation rate (events per second, all subtasks together).
    pub fn rate(mut self, events_per_second: u64) -> Self {
        self.rate = Some(events_per_second);
        self
    }

    /// Set the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The schema of generated batches.
    pub fn schema(&self) -> SchemaRef {
        if self.nexmark.is_some() {
            return crate::nexmark::schema();
        }
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|(n, g)| Field::new(n, g.data_type(), false))
                .collect::<Vec<_>>(),
        ))
    }

    fn validate(&self) -> Result<()> {
        if let Some(n) = &self.nexmark {
            return n.validate();
        }
        if self.columns.is_empty() {
            return Err(WeirError::plan("generator source has no columns"));
        }
        for (name, g) in &self.columns {
            let bad = match g {
                ColumnGen::UniformInt { min, max } => min > max,
                ColumnGen::UniformFloat { min, max } => {
                    min.partial_cmp(max) != Some(std::cmp::Ordering::Less)
                }
                ColumnGen::Key { cardinality } => *cardinality == 0,
                ColumnGen::EventTime {
                    events_per_second,
                    max_out_of_orderness_ms,
                    ..
                } => *events_per_second == 0 || *max_out_of_orderness_ms < 0,
                ColumnGen::Choice(c) => c.is_empty(),
                ColumnGen::Sequence => false,
                ColumnGen::RandomString { length } => *length > 1 << 20,
            };
            if bad {
                return Err(WeirError::plan(format!(
                    "generator column '{name}' has an invalid definition: {g:?}"
                )));
            }
        }
        if self.rate == Some(0) {
            return Err(WeirError::plan("generator rate must be positive"));
        }
        Ok(())
    }
}

/// A bounded source reading Parquet files; built by
/// `weir_operators::sources::parquet_source`, which reads the footers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ParquetSourceSpec {
    /// The files, in a fixed order; their row groups are the splits.
    pub files: Vec<PathBuf>,
    /// Row-group count of each file (same order as `files`).
    pub row_groups: Vec<usize>,
    /// Schema of the files (before projection).
    pub file_schema: SchemaRef,
    /// Columns to read (projection pushdown); `None` reads all.
    pub projection: Option<Vec<usize>>,
}

/// A bounded source reading CSV files; built by
/// `weir_operators::sources::csv_source`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CsvSourceSpec {
    /// The files; each file is one split.
    pub files: Vec<PathBuf>,
    /// Schema of the rows.
    pub schema: SchemaRef,
    /// Whether the first line is a header.
    pub has_header: bool,
    /// Field delimiter.
    pub delimiter: u8,
}

/// A source over batches held in memory (Flink's `fromData`); batch `k`
/// goes to subtask `k mod parallelism`, in order.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemorySourceSpec {
    /// Schema of every batch.
    pub schema: SchemaRef,
    /// The batches.
    #[serde(with = "crate::wire::batches")]
    pub batches: Vec<RecordBatch>,
    /// Whether the source ends after the batches (true), or stays open
    /// without new data like a quiet message-queue partition (false).
    pub bounded: bool,
}

impl MemorySourceSpec {
    /// A bounded source over `batches` (which must share `schema`).
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self {
            schema,
            batches,
            bounded: true,
        }
    }

    /// Stay open after the batches are replayed.
    pub fn unbounded(mut self) -> Self {
        self.bounded = false;
        self
    }
}

/// A source of a job.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum SourceSpec {
    /// Batches held in memory.
    Memory(MemorySourceSpec),
    /// Deterministic generator.
    Generator(GeneratorSpec),
    /// Parquet files.
    Parquet(ParquetSourceSpec),
    /// CSV files.
    Csv(CsvSourceSpec),
    /// Another source whose batches get computed columns before event time
    /// is read from them (SQL's computed columns: a rowtime may be one).
    Computed(ComputedSourceSpec),
}

/// A source followed by a projection that runs inside the source task,
/// before watermarks are derived.
#[derive(Clone)]
pub struct ComputedSourceSpec {
    /// The source read.
    pub inner: Box<SourceSpec>,
    /// Output columns, planned against the inner source's schema.
    pub exprs: Vec<(Arc<dyn PhysicalExpr>, String)>,
}

impl ComputedSourceSpec {
    /// Schema of the projected batches.
    pub fn schema(&self) -> Result<SchemaRef> {
        let input = self.inner.schema();
        let fields = self
            .exprs
            .iter()
            .map(|(e, n)| Ok(Field::new(n, e.data_type(&input)?, e.nullable(&input)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Schema::new(fields)))
    }
}

impl fmt::Debug for ComputedSourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cols: Vec<String> = self
            .exprs
            .iter()
            .map(|(e, n)| format!("{e} AS {n}"))
            .collect();
        write!(f, "Computed({:?}, [{}])", self.inner, cols.join(", "))
    }
}

impl PartialEq for ComputedSourceSpec {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && format!("{self:?}") == format!("{other:?}")
    }
}

impl SourceSpec {
    /// Schema of the batches this source emits.
    pub fn schema(&self) -> SchemaRef {
        match self {
            SourceSpec::Generator(g) => g.schema(),
            // A projection out of range (refused by `validate`) projects
            // nothing rather than panicking in whoever asks first.
            SourceSpec::Parquet(p) => match &p.projection {
                Some(proj) => p
                    .file_schema
                    .project(proj)
                    .map(Arc::new)
                    .unwrap_or_else(|_| Arc::new(Schema::empty())),
                None => Arc::clone(&p.file_schema),
            },
            SourceSpec::Csv(c) => Arc::clone(&c.schema),
            SourceSpec::Memory(m) => Arc::clone(&m.schema),
            SourceSpec::Computed(c) => c.schema().unwrap_or_else(|_| Arc::new(Schema::empty())),
        }
    }

    /// Whether the source ends by itself.
    pub fn is_bounded(&self) -> bool {
        match self {
            SourceSpec::Generator(g) => g.num_events.is_some(),
            SourceSpec::Parquet(_) | SourceSpec::Csv(_) => true,
            SourceSpec::Memory(m) => m.bounded,
            SourceSpec::Computed(c) => c.inner.is_bounded(),
        }
    }

    /// Check the spec before the job runs.
    pub fn validate(&self) -> Result<()> {
        match self {
            SourceSpec::Generator(g) => g.validate(),
            SourceSpec::Computed(c) => {
                c.inner.validate()?;
                c.schema().map(|_| ())
            }
            SourceSpec::Parquet(p) if p.files.is_empty() => {
                Err(WeirError::plan("Parquet source has no files"))
            }
            SourceSpec::Parquet(p) if p.row_groups.len() != p.files.len() => {
                Err(WeirError::plan(format!(
                    "Parquet source lists {} files but row-group counts for {}",
                    p.files.len(),
                    p.row_groups.len()
                )))
            }
            SourceSpec::Parquet(p)
                if p.projection.as_ref().is_some_and(|proj| {
                    proj.iter().any(|&i| i >= p.file_schema.fields().len())
                }) =>
            {
                Err(WeirError::plan(format!(
                    "Parquet source projects columns {:?} of a {}-column file schema",
                    p.projection.as_deref().unwrap_or_default(),
                    p.file_schema.fields().len()
                )))
            }
            SourceSpec::Csv(c) if c.files.is_empty() => {
                Err(WeirError::plan("CSV source has no files"))
            }
            SourceSpec::Memory(m) => match m
                .batches
                .iter()
                .find(|b| b.schema().fields() != m.schema.fields())
            {
                Some(b) => Err(WeirError::plan(format!(
                    "memory source batch has columns [{}], expected [{}]",
                    column_list(&b.schema()),
                    column_list(&m.schema)
                ))),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Short description for plans.
    pub fn describe(&self) -> String {
        match self {
            SourceSpec::Generator(g) => {
                let what = if g.nexmark.is_some() {
                    "nexmark"
                } else {
                    "generator"
                };
                match g.num_events {
                    Some(n) => format!("{what}({n} events)"),
                    None => format!("{what}(unbounded)"),
                }
            }
            SourceSpec::Parquet(p) => format!("parquet({})", describe_files(&p.files)),
            SourceSpec::Csv(c) => format!("csv({})", describe_files(&c.files)),
            SourceSpec::Memory(m) => format!("memory({} batches)", m.batches.len()),
            SourceSpec::Computed(c) => c.inner.describe(),
        }
    }
}

fn describe_files(files: &[PathBuf]) -> String {
    let shown: Vec<String> = files
        .iter()
        .take(3)
        .map(|f| f.display().to_string())
        .collect();
    if files.len() > 3 {
        format!("{}, … {} files", shown.join(", "), files.len())
    } else {
        shown.join(", ")
    }
}

/// Handle to the batches collected by a [`SinkSpec::Collect`] sink.
#[derive(Debug, Clone, Default)]
pub struct CollectHandle {
    batches: Arc<Mutex<Vec<RecordBatch>>>,
}

impl CollectHandle {
    /// A new, empty handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a batch (called by the sink).
    pub fn push(&self, batch: RecordBatch) {
        self.batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(batch);
    }

    /// Everything collected so far.
    pub fn batches(&self) -> Vec<RecordBatch> {
        self.batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Total collected rows.
    pub fn num_rows(&self) -> usize {
        self.batches().iter().map(|b| b.num_rows()).sum()
    }
}

/// A sink of a job.
#[derive(Debug, Clone)]
pub enum SinkSpec {
    /// Parquet files written into `dir`, one file per subtask
    /// (`part-<subtask>.parquet`), made visible by an atomic rename on finish.
    Parquet {
        /// Output directory (created if missing).
        dir: PathBuf,
    },
    /// CSV files with a header row, one per subtask, as for Parquet.
    Csv {
        /// Output directory (created if missing).
        dir: PathBuf,
    },
    /// Print rows to standard output, prefixed by the subtask number.
    Print,
    /// Discard everything (counts rows).
    Blackhole,
    /// Discard rows, taking at most `rows_per_second` per subtask: a
    /// stand-in for a slow external system in load tests and back-pressure
    /// drills.
    Throttled {
        /// Rows per second each sink subtask accepts.
        rows_per_second: u64,
    },
    /// Keep batches in memory, readable through the handle (tests, notebooks).
    Collect(CollectHandle),
    /// Serve the output to Arrow Flight clients (pyarrow, the Rust
    /// `FlightClient`): listed by `list_flights`, read by `do_get` with the
    /// sink's opaque ticket, from the start even when connecting late (within
    /// the job's `sink_retention`).
    Flight {
        /// Name clients see (unique within the process).
        name: String,
    },
}

impl SinkSpec {
    /// Short description for plans.
    pub fn describe(&self) -> String {
        match self {
            SinkSpec::Parquet { dir } => format!("parquet({})", dir.display()),
            SinkSpec::Csv { dir } => format!("csv({})", dir.display()),
            SinkSpec::Print => "print".into(),
            SinkSpec::Blackhole => "blackhole".into(),
            SinkSpec::Throttled { rows_per_second } => {
                format!("throttled({rows_per_second} rows/s)")
            }
            SinkSpec::Collect(_) => "collect".into(),
            SinkSpec::Flight { name } => format!("flight({name})"),
        }
    }
}

/// The aggregate functions of windows.
#[derive(Debug, Clone)]
pub enum AggregateFunction {
    /// Number of rows (with a column: non-null values). BIGINT.
    Count,
    /// Number of distinct non-null values. BIGINT.
    CountDistinct,
    /// Sum; integer sums are BIGINT / UBIGINT, float sums DOUBLE.
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Average as DOUBLE. Flink SQL's `AVG(BIGINT)` is BIGINT; the SQL layer
    /// casts, the DataStream API returns the exact average.
    Avg,
    /// The value of the row with the smallest event time.
    FirstValue,
    /// The value of the row with the largest event time.
    LastValue,
    /// A user-defined aggregate: any DataFusion `AggregateUDF`, whose
    /// accumulators work on Arrow arrays (update a batch, merge states,
    /// evaluate; state as arrays).
    Udf(Arc<AggregateUDF>),
}

impl PartialEq for AggregateFunction {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Udf(a), Self::Udf(b)) => a.name() == b.name(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Eq for AggregateFunction {}

impl AggregateFunction {
    /// The DataFusion aggregate implementing this function.
    pub fn udaf(&self) -> Arc<AggregateUDF> {
        match self {
            AggregateFunction::Count | AggregateFunction::CountDistinct => count_udaf(),
            AggregateFunction::Sum => sum_udaf(),
            AggregateFunction::Min => min_max::min_udaf(),
            AggregateFunction::Max => min_max::max_udaf(),
            AggregateFunction::Avg => avg_udaf(),
            AggregateFunction::FirstValue => first_last::first_value_udaf(),
            AggregateFunction::LastValue => first_last::last_value_udaf(),
            AggregateFunction::Udf(u) => Arc::clone(u),
        }
    }

    /// Whether the function counts distinct values.
    pub fn is_distinct(&self) -> bool {
        matches!(self, AggregateFunction::CountDistinct)
    }

    /// Whether the function is ordered by event time.
    pub fn is_ordered(&self) -> bool {
        matches!(
            self,
            AggregateFunction::FirstValue | AggregateFunction::LastValue
        )
    }

    pub(crate) fn name(&self) -> String {
        match self {
            AggregateFunction::Count => "count".into(),
            AggregateFunction::CountDistinct => "count_distinct".into(),
            AggregateFunction::Sum => "sum".into(),
            AggregateFunction::Min => "min".into(),
            AggregateFunction::Max => "max".into(),
            AggregateFunction::Avg => "avg".into(),
            AggregateFunction::FirstValue => "first_value".into(),
            AggregateFunction::LastValue => "last_value".into(),
            AggregateFunction::Udf(u) => u.name().to_string(),
        }
    }
}

/// One aggregate of a window: function, input column and output name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AggregateSpec {
    /// The function.
    pub function: AggregateFunction,
    /// The input column; `None` only for `count(*)`.
    pub column: Option<String>,
    /// Output column name.
    pub alias: String,
}

impl AggregateSpec {
    /// A user-defined aggregate over `column`.
    pub fn udf(function: Arc<AggregateUDF>, column: &str) -> Self {
        Self::new(AggregateFunction::Udf(function), Some(column))
    }
    /// `COUNT(DISTINCT column)`.
    pub fn count_distinct(column: &str) -> Self {
        Self::new(AggregateFunction::CountDistinct, Some(column))
    }
    /// `FIRST_VALUE(column)` by event time.
    pub fn first_value(column: &str) -> Self {
        Self::new(AggregateFunction::FirstValue, Some(column))
    }
    /// `LAST_VALUE(column)` by event time.
    pub fn last_value(column: &str) -> Self {
        Self::new(AggregateFunction::LastValue, Some(column))
    }

    fn new(function: AggregateFunction, column: Option<&str>) -> Self {
        let alias = match column {
            Some(c) => format!("{}_{c}", function.name()),
            None => function.name().to_string(),
        };
        Self {
            function,
            column: column.map(str::to_string),
            alias,
        }
    }

    /// `COUNT(*)`.
    pub fn count_star() -> Self {
        Self::new(AggregateFunction::Count, None)
    }
    /// `COUNT(column)`: non-null values.
    pub fn count(column: &str) -> Self {
        Self::new(AggregateFunction::Count, Some(column))
    }
    /// `SUM(column)`.
    pub fn sum(column: &str) -> Self {
        Self::new(AggregateFunction::Sum, Some(column))
    }
    /// `MIN(column)`.
    pub fn min(column: &str) -> Self {
        Self::new(AggregateFunction::Min, Some(column))
    }
    /// `MAX(column)`.
    pub fn max(column: &str) -> Self {
        Self::new(AggregateFunction::Max, Some(column))
    }
    /// `AVG(column)` as DOUBLE.
    pub fn avg(column: &str) -> Self {
        Self::new(AggregateFunction::Avg, Some(column))
    }
    /// Rename the output column.
    pub fn alias(mut self, alias: impl Into<String>) -> Self {
        self.alias = alias.into();
        self
    }

    /// The argument field after the function's type coercion (e.g. `AVG`
    /// of an integer column reads it as DOUBLE), as DataFusion's planner
    /// would coerce it. Rejects unknown columns and unsupported types.
    pub fn argument_field(&self, input: &Schema) -> Result<FieldRef> {
        let arg_field: FieldRef = match &self.column {
            Some(c) => {
                let idx = input.index_of(c).map_err(|_| {
                    WeirError::plan(format!(
                        "aggregate {}({c}): column '{c}' not found; available columns: {}",
                        self.function.name(),
                        column_list(input)
                    ))
                })?;
                Arc::new(input.field(idx).clone())
            }
            None => Arc::new(Field::new("1", DataType::Int64, false)),
        };
        let udaf = self.function.udaf();
        let coerced = fields_with_udf(&[arg_field], udaf.as_ref())
            .map_err(|e| WeirError::plan(format!("aggregate {self}: {e}")))?;
        Ok(Arc::clone(&coerced[0]))
    }

    /// The output field given the input schema.
    pub fn output_field(&self, input: &Schema) -> Result<FieldRef> {
        let arg = self.argument_field(input)?;
        let field = self
            .function
            .udaf()
            .return_field(&[arg])
            .map_err(|e| WeirError::plan(format!("aggregate {self}: {e}")))?;
        Ok(Arc::new(
            field.as_ref().clone().with_name(self.alias.clone()),
        ))
    }
}

impl fmt::Display for AggregateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({})",
            self.function.name(),
            self.column.as_deref().unwrap_or("*")
        )
    }
}

/// A keyed window aggregation.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WindowAggregateSpec {
    /// Key column names.
    pub keys: Vec<String>,
    /// Event-time column of the input (`None` for processing-time windows).
    pub rowtime: Option<String>,
    /// Whether windows follow the wall clock instead of event time.
    pub processing_time: bool,
    /// Early firings besides the window end.
    pub trigger: crate::time::Trigger,
    /// Whether a firing clears the window (results become deltas).
    pub purge: bool,
    /// The window assigner.
    pub assigner: WindowAssigner,
    /// Aggregates, in output order.
    pub aggregates: Vec<AggregateSpec>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// How long after a window fired late records still update it (ms).
    /// When positive, the output has a final `is_update` column that is true
    /// for results re-emitted because of late records.
    pub allowed_lateness: i64,
    /// Side output receiving records too late for every window; `None`
    /// drops and counts them.
    pub late_data_tag: Option<String>,
}

/// The column of a changelog stream saying what each row does: `+I`
/// (insert), `-U` (retract the row before an update), `+U` (the row after
/// an update), `-D` (delete) — Flink's `RowKind`.
pub const CHANGELOG_COLUMN: &str = "_op";

/// A keyed aggregation over an unbounded input (SQL's `GROUP BY` without a
/// window): per key, the aggregates of every row so far.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GroupAggregateSpec {
    /// Key column names.
    pub keys: Vec<String>,
    /// Aggregates, in output order.
    pub aggregates: Vec<AggregateSpec>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Streaming: after each batch, emit the changed keys as a changelog
    /// (`+I` for a new key, `-U`/`+U` for a changed one; a final
    /// [`CHANGELOG_COLUMN`]). Batch: emit each key's final row once, at
    /// the end of the input.
    pub changelog: bool,
    /// The input is itself a changelog (its last column `_op`): `-U`/`-D`
    /// rows are taken back out. Only COUNT and SUM can do that; a key whose
    /// rows are all retracted is deleted (`-D`).
    #[serde(default)]
    pub retractions: bool,
}

/// The first rows per key by an ordering (SQL's `ROW_NUMBER() OVER
/// (PARTITION BY … ORDER BY …) <= N`: Top-N, and deduplication when N = 1).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TopNSpec {
    /// Key (partition) columns.
    pub keys: Vec<String>,
    /// Ordering: column, descending, nulls first. Ties keep arrival order
    /// (the earlier row ranks first) …
    pub order: Vec<(String, bool, bool)>,
    /// … unless this is set: the later row ranks first (Flink's
    /// deduplication keeping the last row by time).
    #[serde(default)]
    pub later_wins_ties: bool,
    /// Rows kept per key.
    pub limit: usize,
    /// Name of the row-number column appended to the output, if any.
    pub row_number: Option<String>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Streaming: a changelog of the kept rows as they change (a final
    /// [`CHANGELOG_COLUMN`]). Batch: the final rows, once, at the end.
    pub changelog: bool,
}

/// A lookup join: each row of the stream joined with the rows of a bounded
/// table held in memory whose keys are equal (an inner join, Flink's
/// `JOIN t FOR SYSTEM_TIME AS OF s.proc_time`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LookupJoinSpec {
    /// Key columns of the stream.
    pub keys: Vec<String>,
    /// Key columns of the table (same types, same order).
    pub table_keys: Vec<String>,
    /// The table's schema.
    pub table_schema: SchemaRef,
    /// The table's rows.
    #[serde(with = "crate::wire::batches")]
    pub table: Vec<RecordBatch>,
    /// Schema of the stream.
    pub input_schema: SchemaRef,
}

/// Window table function rows: each row once per window it falls in (by
/// its event time), with `window_start`, `window_end` and `window_time`
/// appended — SQL's `TUMBLE`/`HOP`/`CUMULATE` outside an aggregation.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WindowAssignSpec {
    /// Tumbling, sliding or cumulating windows.
    pub assigner: WindowAssigner,
    /// The event-time column.
    pub time_column: String,
    /// Schema of the input.
    pub input_schema: SchemaRef,
}

/// A function applied to whole batches (application mode only: it cannot be
/// shipped to a remote cluster). It may return any number of batches, all with
/// the declared output schema.
pub type BatchFn = Arc<dyn Fn(RecordBatch) -> Result<Vec<RecordBatch>> + Send + Sync>;

/// A single-input operator.
#[derive(Clone)]
pub enum OperatorSpec {
    /// Keep rows where the predicate is true.
    Filter {
        /// The predicate (Boolean).
        predicate: Arc<dyn PhysicalExpr>,
        /// The schema it was planned against.
        input_schema: SchemaRef,
    },
    /// Compute output columns from expressions.
    Project {
        /// Expressions and output names.
        exprs: Vec<(Arc<dyn PhysicalExpr>, String)>,
        /// The schema they were planned against.
        input_schema: SchemaRef,
    },
    /// A user function over whole batches.
    MapBatches(BatchFn),
    /// A keyed window aggregation.
    WindowAggregate(WindowAggregateSpec),
    /// A keyed interval join of two inputs.
    IntervalJoin(IntervalJoinSpec),
    /// A keyed process function with state and timers.
    KeyedProcess(KeyedProcessSpec),
    /// A keyed window join of two inputs.
    WindowJoin(WindowJoinSpec),
    /// A full-window function over the rows of each fired window.
    WindowProcess(WindowProcessSpec),
    /// An updating aggregation per key.
    GroupAggregate(GroupAggregateSpec),
    /// The first rows per key.
    TopN(TopNSpec),
    /// A join with a table held in memory.
    LookupJoin(LookupJoinSpec),
    /// Rows repeated per window, with its bounds.
    WindowAssign(WindowAssignSpec),
}

/// A keyed window whose rows are all handed to a function when it fires.
#[derive(Clone)]
pub struct WindowProcessSpec {
    /// Key columns.
    pub keys: Vec<String>,
    /// Event-time column of the input.
    pub rowtime: String,
    /// Tumbling, sliding or cumulating windows.
    pub assigner: WindowAssigner,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// The function.
    pub function: Arc<dyn crate::process::ProcessWindowFunction>,
    /// Side output for records too late for every window.
    pub late_data_tag: Option<String>,
}

impl fmt::Debug for WindowProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "WindowProcess({}, keys [{}])",
            self.assigner.describe(),
            self.keys.join(", ")
        )
    }
}

/// A keyed window join: rows of both inputs with equal keys in the same
/// window pair up (an inner join per window).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WindowJoinSpec {
    /// Key columns of the left input.
    pub left_keys: Vec<String>,
    /// Key columns of the right input (same types, same order).
    pub right_keys: Vec<String>,
    /// Event-time column of the left input.
    pub left_rowtime: String,
    /// Event-time column of the right input.
    pub right_rowtime: String,
    /// Tumbling, sliding or cumulating windows.
    pub assigner: WindowAssigner,
    /// Schema of the left input.
    pub left_schema: SchemaRef,
    /// Schema of the right input.
    pub right_schema: SchemaRef,
}

/// Creates the process function of each subtask (application mode only).
#[derive(Clone)]
pub enum ProcessFactory {
    /// One keyed input.
    Keyed(Arc<dyn Fn() -> Box<dyn crate::process::KeyedProcessFunction> + Send + Sync>),
    /// Two connected inputs.
    Co(Arc<dyn Fn() -> Box<dyn crate::process::CoProcessFunction> + Send + Sync>),
}

/// The second input of a connected process function.
#[derive(Debug, Clone)]
pub struct SecondInput {
    /// Key columns; `None` for a broadcast input.
    pub keys: Option<Vec<String>>,
    /// Schema of the second input.
    pub schema: SchemaRef,
}

/// A keyed process function, over one input or two connected ones.
#[derive(Clone)]
pub struct KeyedProcessSpec {
    /// Key columns of the (first) input.
    pub keys: Vec<String>,
    /// Schema of the (first) input.
    pub input_schema: SchemaRef,
    /// The second input, for connected streams.
    pub second: Option<SecondInput>,
    /// Makes the function of each subtask.
    pub factory: ProcessFactory,
}

impl fmt::Debug for KeyedProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyedProcess(keys [{}])", self.keys.join(", "))
    }
}

impl OperatorSpec {
    /// Number of inputs the operator reads.
    pub fn input_count(&self) -> usize {
        match self {
            OperatorSpec::IntervalJoin(_) | OperatorSpec::WindowJoin(_) => 2,
            OperatorSpec::KeyedProcess(p) if p.second.is_some() => 2,
            _ => 1,
        }
    }
}

/// A keyed interval join: a left row `l` and a right row `r` with equal keys
/// join when `l.ts + lower <= r.ts <= l.ts + upper` (bounds inclusive).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct IntervalJoinSpec {
    /// Key columns of the left input.
    pub left_keys: Vec<String>,
    /// Key columns of the right input (same types, same order).
    pub right_keys: Vec<String>,
    /// Event-time column of the left input.
    pub left_rowtime: String,
    /// Event-time column of the right input.
    pub right_rowtime: String,
    /// Lower bound in ms (may be negative).
    pub lower: i64,
    /// Upper bound in ms.
    pub upper: i64,
    /// Schema of the left input.
    pub left_schema: SchemaRef,
    /// Schema of the right input.
    pub right_schema: SchemaRef,
}

impl fmt::Debug for OperatorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OperatorSpec::Filter { predicate, .. } => write!(f, "Filter({predicate})"),
            OperatorSpec::Project { exprs, .. } => {
                let parts: Vec<_> = exprs.iter().map(|(e, n)| format!("{e} AS {n}")).collect();
                write!(f, "Project({})", parts.join(", "))
            }
            OperatorSpec::MapBatches(_) => write!(f, "MapBatches(<fn>)"),
            OperatorSpec::GroupAggregate(g) => write!(
                f,
                "GroupAggregate(keys [{}], [{}])",
                g.keys.join(", "),
                g.aggregates
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            OperatorSpec::TopN(t) => write!(
                f,
                "TopN(keys [{}], order [{}], limit {})",
                t.keys.join(", "),
                t.order
                    .iter()
                    .map(|(c, desc, _)| format!("{c}{}", if *desc { " DESC" } else { "" }))
                    .collect::<Vec<_>>()
                    .join(", "),
                t.limit
            ),
            OperatorSpec::WindowAssign(w) => {
                write!(
                    f,
                    "WindowAssign({}, {})",
                    w.assigner.describe(),
                    w.time_column
                )
            }
            OperatorSpec::LookupJoin(l) => write!(
                f,
                "LookupJoin(keys [{}] = [{}], {} table rows)",
                l.keys.join(", "),
                l.table_keys.join(", "),
                l.table.iter().map(|b| b.num_rows()).sum::<usize>()
            ),
            OperatorSpec::KeyedProcess(p) => write!(f, "{p:?}"),
            OperatorSpec::WindowProcess(p) => write!(f, "{p:?}"),
            OperatorSpec::WindowJoin(j) => write!(
                f,
                "WindowJoin({}, keys [{}] = [{}])",
                j.assigner.describe(),
                j.left_keys.join(", "),
                j.right_keys.join(", ")
            ),
            OperatorSpec::IntervalJoin(j) => write!(
                f,
                "IntervalJoin(keys [{}] = [{}], between {} and {} ms)",
                j.left_keys.join(", "),
                j.right_keys.join(", "),
                j.lower,
                j.upper
            ),
            OperatorSpec::WindowAggregate(w) => {
                let aggs: Vec<_> = w.aggregates.iter().map(|a| a.to_string()).collect();
                write!(
                    f,
                    "Window({}, keys [{}], {})",
                    w.assigner.describe(),
                    w.keys.join(", "),
                    aggs.join(", ")
                )
            }
        }
    }
}
