//! Descriptions of sources, operators and sinks.
//!
//! These are data: the job graph holds them, the runtime (`weir-operators`)
//! turns them into running operators. Sources and sinks are connectors
//! ([`crate::connector`]), planned by the factories of `weir-operators`, so
//! this crate knows no connector and stays free of I/O.

use std::fmt;
use std::sync::{Arc, Mutex};

use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_expr::AggregateUDF;
use datafusion_expr::type_coercion::functions::fields_with_udf;
use datafusion_functions_aggregate::{
    average::avg_udaf, count::count_udaf, first_last, min_max, sum::sum_udaf,
};
use datafusion_physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError};
use crate::time::{WindowAssigner, column_list};

pub use crate::connector::{ConnectorSource, SinkSpec};
pub use crate::join_spec::{JoinKind, RegularJoinSpec, TemporalJoinSpec};
pub use crate::match_spec::MatchRecognizeSpec;
pub use crate::over_spec::{OverAggregateSpec, OverFrame};

/// Batches held in memory, carried by the job: an in-memory source (Flink's
/// `fromData`; batch `k` goes to subtask `k mod parallelism`, in order) or a
/// lookup join's table.
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

/// A source of a job: a connector's, or one with computed columns.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceSpec {
    /// Read through a connector (see [`crate::connector`]).
    Connector(ConnectorSource),
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
            SourceSpec::Connector(c) => Arc::clone(&c.schema),
            SourceSpec::Computed(c) => c.schema().unwrap_or_else(|_| Arc::new(Schema::empty())),
        }
    }

    /// Whether the source ends by itself.
    pub fn is_bounded(&self) -> bool {
        match self {
            SourceSpec::Connector(c) => c.bounded,
            SourceSpec::Computed(c) => c.inner.is_bounded(),
        }
    }

    /// What the source's rows carry, as its connector declared it.
    pub fn changelog_mode(&self) -> ChangelogMode {
        self.connector().changelog.clone()
    }

    /// The connector source this reads through.
    pub fn connector(&self) -> &ConnectorSource {
        match self {
            SourceSpec::Connector(c) => c,
            SourceSpec::Computed(c) => c.inner.connector(),
        }
    }

    /// Check the spec before the job runs (the connector's options are
    /// checked by its factory when the job is planned or submitted).
    pub fn validate(&self) -> Result<()> {
        match self {
            SourceSpec::Computed(c) => {
                c.inner.validate()?;
                c.schema().map(|_| ())
            }
            SourceSpec::Connector(c) => match c
                .batches
                .iter()
                .find(|b| b.schema().fields() != c.schema.fields())
            {
                Some(b) => Err(WeirError::plan(format!(
                    "{} source batch has columns [{}], expected [{}]",
                    c.connector,
                    column_list(&b.schema()),
                    column_list(&c.schema)
                ))),
                None => Ok(()),
            },
        }
    }

    /// Short description for plans.
    pub fn describe(&self) -> String {
        match self {
            SourceSpec::Connector(c) => c.display.clone(),
            SourceSpec::Computed(c) => c.inner.describe(),
        }
    }
}

impl From<ConnectorSource> for SourceSpec {
    fn from(c: ConnectorSource) -> Self {
        SourceSpec::Connector(c)
    }
}

impl From<MemorySourceSpec> for SourceSpec {
    /// The `memory` connector over the batches (Flink's `fromData`).
    fn from(m: MemorySourceSpec) -> Self {
        let display = format!("memory({} batches)", m.batches.len());
        // Batches ending with the row kind are a changelog (Flink's
        // `fromChangelogStream`).
        let mode = if is_changelog_schema(&m.schema) {
            ChangelogMode::Retract
        } else {
            ChangelogMode::Append
        };
        let mut c = ConnectorSource::new("memory", m.schema, m.bounded, serde_json::Value::Null)
            .with_display(display)
            .with_changelog(mode);
        c.batches = m.batches;
        SourceSpec::Connector(c)
    }
}

impl From<ComputedSourceSpec> for SourceSpec {
    fn from(c: ComputedSourceSpec) -> Self {
        SourceSpec::Computed(c)
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

impl From<CollectHandle> for SinkSpec {
    /// The `collect` connector: rows kept in this process, readable through
    /// the handle (the job can then only run here).
    fn from(handle: CollectHandle) -> Self {
        SinkSpec::new("collect", serde_json::Value::Null).with_local(Arc::new(handle))
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
    /// SQL's `FILTER (WHERE …)`: a BOOLEAN input column; only the rows
    /// where it is true reach the aggregate (false and NULL are skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
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
            filter: None,
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
    /// Only the rows where the BOOLEAN column `column` is true
    /// (`FILTER (WHERE …)`).
    pub fn filter(mut self, column: impl Into<String>) -> Self {
        self.filter = Some(column.into());
        self
    }

    /// The index of the FILTER column in `input`, checked to be BOOLEAN.
    pub fn filter_index(&self, input: &Schema) -> Result<Option<usize>> {
        let Some(c) = &self.filter else {
            return Ok(None);
        };
        let idx = input.index_of(c).map_err(|_| {
            WeirError::plan(format!(
                "aggregate {self}: FILTER column '{c}' not found; available columns: {}",
                column_list(input)
            ))
        })?;
        let t = input.field(idx).data_type();
        if *t != DataType::Boolean {
            return Err(WeirError::plan(format!(
                "aggregate {self}: FILTER column '{c}' is {t}, not BOOLEAN"
            )));
        }
        Ok(Some(idx))
    }

    /// The argument field after the function's type coercion (e.g. `AVG`
    /// of an integer column reads it as DOUBLE), as DataFusion's planner
    /// would coerce it. Rejects unknown columns and unsupported types.
    pub fn argument_field(&self, input: &Schema) -> Result<FieldRef> {
        self.filter_index(input)?;
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

    /// Whether a two-phase plan can split this aggregate into a local
    /// and a global phase: its intermediate state merges, and the result
    /// does not depend on the order rows come in.
    pub fn splits_into_phases(&self) -> bool {
        matches!(
            self.function,
            AggregateFunction::Count
                | AggregateFunction::Sum
                | AggregateFunction::Min
                | AggregateFunction::Max
                | AggregateFunction::Avg
        )
    }

    /// The intermediate state fields of this aggregate over `input`.
    pub fn state_fields(&self, input: &Schema) -> Result<Vec<FieldRef>> {
        let arg = self.argument_field(input)?;
        let output = self.output_field(input)?;
        self.function
            .udaf()
            .state_fields(datafusion_expr::function::StateFieldsArgs {
                name: &self.alias,
                input_fields: &[arg],
                return_field: output,
                ordering_fields: &[],
                is_distinct: self.function.is_distinct(),
            })
            .map_err(|e| WeirError::plan(format!("aggregate {self}: {e}")))
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
        )?;
        match &self.filter {
            Some(c) => write!(f, " FILTER ({c})"),
            None => Ok(()),
        }
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

pub use crate::changelog::{
    ChangelogMode, ROW_KIND_COLUMN, RowKind, is_changelog_schema, row_kind_field,
};

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
    /// [`ROW_KIND_COLUMN`]). Batch: emit each key's final row once, at
    /// the end of the input.
    pub changelog: bool,
    /// The input is itself a changelog (it ends with the row kind):
    /// `-U`/`-D` rows are taken back out. Only COUNT and SUM can do that; a
    /// key whose rows are all retracted is deleted (`-D`).
    #[serde(default)]
    pub retractions: bool,
    /// Streaming into an upsert consumer keyed by [`Self::keys`]: a changed
    /// key emits only its new row (`+U`, no `-U`), Flink's upsert mode.
    #[serde(default)]
    pub upsert: bool,
    /// One phase, or which half of a two-phase aggregation this is.
    #[serde(default)]
    pub phase: AggregatePhase,
}

/// Where a group aggregation stands in a two-phase plan (Flink's local and
/// global aggregates; DataFusion's partial and final): a local phase, at
/// the input's parallelism and before the hash exchange, aggregates what
/// its subtask reads into intermediate states; the global phase, keyed,
/// merges them. Batch mode over an insert-only input only.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AggregatePhase {
    /// Rows in, results out.
    #[default]
    Single,
    /// Rows in; out, at the end of the input (or sooner, to bound its
    /// memory), the key columns then every aggregate's intermediate state
    /// ([`GroupAggregateSpec::partial_schema`]). A key may come out more
    /// than once.
    Local,
    /// Merges what a [`AggregatePhase::Local`] phase over `rows` emits
    /// (the spec's `input_schema`) into results. The aggregates' columns
    /// name columns of `rows`.
    Global {
        /// The schema of the rows the local phase read.
        rows: SchemaRef,
    },
}

impl GroupAggregateSpec {
    /// The schema of the rows the aggregates read (the local phase's input
    /// for a global phase).
    pub fn rows_schema(&self) -> &SchemaRef {
        match &self.phase {
            AggregatePhase::Global { rows } => rows,
            _ => &self.input_schema,
        }
    }

    /// What a local phase over `input` emits: the key columns, then every
    /// aggregate's intermediate state columns, named `a{i}_{state}`
    /// (nullable), as DataFusion's accumulators give them.
    pub fn partial_schema(
        keys: &[String],
        aggregates: &[AggregateSpec],
        input: &Schema,
    ) -> Result<SchemaRef> {
        let mut fields = Vec::new();
        for k in keys {
            fields.push(input.field_with_name(k)?.clone());
        }
        for (i, a) in aggregates.iter().enumerate() {
            for f in a.state_fields(input)? {
                let name = format!("a{i}_{}", f.name());
                fields.push(f.as_ref().clone().with_name(name).with_nullable(true));
            }
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// What the output carries: append-only in batch mode, else updates,
    /// retracting or upserting by the group keys.
    pub fn changelog_mode(&self) -> ChangelogMode {
        match (self.changelog, self.upsert) {
            (false, _) => ChangelogMode::Append,
            (true, false) => ChangelogMode::Retract,
            (true, true) => ChangelogMode::Upsert {
                key: self.keys.clone(),
            },
        }
    }
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
    /// [`ROW_KIND_COLUMN`]). Batch: the final rows, once, at the end.
    pub changelog: bool,
    /// Rows that are final once the watermark passes a time (an
    /// append-only result), else `None`.
    #[serde(default)]
    pub final_rows: Option<FinalRows>,
    /// Upsert mode, by these columns (one of [`Self::upsert_keys`]): a
    /// rank whose row changed emits its new row as `+U` without the old
    /// one's `-U`, as Flink's rank and deduplicate functions do when
    /// nothing downstream needs update-before rows.
    #[serde(default)]
    pub upsert: Option<Vec<String>>,
}

impl TopNSpec {
    /// The column sets that identify an output row of the changelog: the
    /// keys and the row number, and the keys alone when one row is kept
    /// (deduplication). None without either: the same row may be kept
    /// twice.
    pub fn upsert_keys(&self) -> Vec<Vec<String>> {
        if !self.changelog || self.final_rows.is_some() {
            return vec![];
        }
        let mut keys = vec![];
        if let Some(n) = &self.row_number {
            keys.push(self.keys.iter().chain([n]).cloned().collect());
        }
        if self.limit == 1 {
            keys.push(self.keys.clone());
        }
        keys
    }
}

/// When a [`TopNSpec`]'s kept rows are final: emitted once, append-only,
/// and rows arriving after that for the same key are dropped.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum FinalRows {
    /// Window Top-N: the key column holding each window's end; a window's
    /// rows leave when the watermark passes `window_end - 1`, and later
    /// rows of it are late.
    WindowEnd(String),
    /// Deduplication keeping the first row by this rowtime column: a key's
    /// earliest row leaves when the watermark reaches its rowtime; rows
    /// behind the watermark are late, and a key emitted stays emitted.
    FirstByRowtime(String),
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
    /// A regular join of two inputs, either of which may be a changelog.
    RegularJoin(RegularJoinSpec),
    /// Aggregates over each row's frame among the rows of its partition.
    OverAggregate(OverAggregateSpec),
    /// A join with a table held in memory.
    LookupJoin(LookupJoinSpec),
    /// An event-time join with the versions of a versioned table.
    TemporalJoin(TemporalJoinSpec),
    /// Each row with the rows a table function makes of it.
    Lateral(crate::table_function::LateralSpec),
    /// Rows repeated per window, with its bounds.
    WindowAssign(WindowAssignSpec),
    /// Row pattern recognition per partition (`MATCH_RECOGNIZE`).
    MatchRecognize(MatchRecognizeSpec),
    /// Batch mode: the whole input in order, or a slice of it.
    Sort(SortSpec),
}

/// Batch mode's `ORDER BY … LIMIT … OFFSET`: every row of the input in
/// `order` (column, descending, nulls first) once the input has ended, or
/// only the `fetch` rows after the first `offset`. With no ordering, the
/// rows come in the order they arrived (a `LIMIT` on its own). One subtask
/// sorts everything (a global sort, as Flink's batch planner runs it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SortSpec {
    /// Sort columns: name, descending, nulls first.
    pub order: Vec<(String, bool, bool)>,
    /// Rows to skip at the front.
    pub offset: usize,
    /// Rows to keep after them (all when `None`).
    pub fetch: Option<usize>,
    /// Schema of the input (and the output).
    pub input_schema: SchemaRef,
}

impl SortSpec {
    /// The rows the output can hold: offset plus fetch.
    pub fn limit(&self) -> Option<usize> {
        self.fetch.map(|f| f.saturating_add(self.offset))
    }
}

impl fmt::Display for SortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order: Vec<String> = self
            .order
            .iter()
            .map(|(c, desc, nulls_first)| {
                format!(
                    "{c} {}{}",
                    if *desc { "DESC" } else { "ASC" },
                    if *nulls_first { " NULLS FIRST" } else { "" }
                )
            })
            .collect();
        write!(f, "Sort(order [{}]", order.join(", "))?;
        if self.offset > 0 {
            write!(f, ", offset {}", self.offset)?;
        }
        if let Some(n) = self.fetch {
            write!(f, ", fetch {n}")?;
        }
        write!(f, ")")
    }
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
    /// What the output carries, given the inputs' modes: append-only,
    /// retracting or upserting, as each operator declares it. Stateless
    /// operators pass their input's mode on; user functions (which cannot
    /// declare) keep it when their output keeps the row kind.
    pub fn changelog_mode(&self, inputs: &[ChangelogMode], output: &Schema) -> ChangelogMode {
        let input = ChangelogMode::merge(inputs);
        match self {
            OperatorSpec::Filter { .. }
            | OperatorSpec::Project { .. }
            | OperatorSpec::Lateral(_) => input,
            OperatorSpec::MapBatches(_) | OperatorSpec::KeyedProcess(_) => {
                match (is_changelog_schema(output), input) {
                    (false, _) => ChangelogMode::Append,
                    (true, ChangelogMode::Append) => ChangelogMode::Retract,
                    (true, m) => m,
                }
            }
            OperatorSpec::GroupAggregate(g) => g.changelog_mode(),
            OperatorSpec::TopN(t) if t.changelog => match &t.upsert {
                Some(key) => ChangelogMode::Upsert { key: key.clone() },
                None => ChangelogMode::Retract,
            },
            OperatorSpec::RegularJoin(j) if j.updating() => ChangelogMode::Retract,
            OperatorSpec::TopN(_)
            | OperatorSpec::RegularJoin(_)
            | OperatorSpec::WindowAggregate(_)
            | OperatorSpec::IntervalJoin(_)
            | OperatorSpec::WindowJoin(_)
            | OperatorSpec::WindowProcess(_)
            | OperatorSpec::OverAggregate(_)
            | OperatorSpec::LookupJoin(_)
            | OperatorSpec::TemporalJoin(_)
            | OperatorSpec::WindowAssign(_)
            | OperatorSpec::MatchRecognize(_)
            | OperatorSpec::Sort(_) => ChangelogMode::Append,
        }
    }

    /// Number of inputs the operator reads.
    pub fn input_count(&self) -> usize {
        match self {
            OperatorSpec::IntervalJoin(_)
            | OperatorSpec::WindowJoin(_)
            | OperatorSpec::RegularJoin(_)
            | OperatorSpec::TemporalJoin(_) => 2,
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
    /// Outer sides: their rows that found no partner by the time the
    /// watermark passed their last possible match are emitted with NULLs
    /// for the other side (Flink's outer interval join).
    #[serde(default)]
    pub kind: JoinKind,
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
                "{}GroupAggregate(keys [{}], [{}])",
                match g.phase {
                    AggregatePhase::Single => "",
                    AggregatePhase::Local => "Local",
                    AggregatePhase::Global { .. } => "Global",
                },
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
            OperatorSpec::RegularJoin(j) => write!(f, "{j:?}"),
            OperatorSpec::TemporalJoin(j) => write!(f, "{j:?}"),
            OperatorSpec::Lateral(l) => write!(f, "{l:?}"),
            OperatorSpec::MatchRecognize(m) => write!(f, "{m}"),
            OperatorSpec::Sort(s) => write!(f, "{s}"),
            OperatorSpec::OverAggregate(o) => write!(
                f,
                "OverAggregate(partition [{}], order {}, {}, [{}])",
                o.keys.join(", "),
                o.rowtime.as_deref().unwrap_or("PROCTIME"),
                o.frame,
                o.aggregates
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
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
                "IntervalJoin({}keys [{}] = [{}], between {} and {} ms)",
                if j.kind == JoinKind::Inner {
                    String::new()
                } else {
                    format!("{}, ", j.kind.sql())
                },
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
