//! Streams: the handles user code chains operators on.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_expr::Expr;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::Column;

use super::env::StreamExecutionEnvironment;
use super::expr::plan_expr;
use crate::error::{Result, WeirError};
use crate::graph::{ChainingStrategy, Partitioner, TransformationKind};
use crate::keys::is_hashable_key_type;
use crate::process::{CoProcessFunction, KeyedProcessFunction, ProcessWindowFunction};
use crate::spec::{
    AggregatePhase, AggregateSpec, BatchFn, KeyedProcessSpec, OperatorSpec, ProcessFactory,
    SecondInput, SinkSpec, WindowAggregateSpec, WindowProcessSpec,
};
use crate::time::{Trigger, WindowAssigner, Windows, check_timestamp_column, column_list};

mod batch;
mod joins;
mod lateral;
mod match_recognize;
pub use match_recognize::MatchRecognize;
mod over;
mod upsert;

pub use joins::IntervalJoinBuilder;

/// A stream of record batches with a fixed schema.
///
/// `rowtime` names the event-time column, when the stream has one: set by the
/// source's watermark strategy and kept by operators that keep the column.
#[derive(Clone)]
pub struct DataStream {
    env: StreamExecutionEnvironment,
    id: usize,
    schema: SchemaRef,
    rowtime: Option<String>,
    /// Event-time columns of this operator's side outputs.
    side_rowtimes: Vec<(String, Option<String>)>,
}

impl DataStream {
    pub(crate) fn new(
        env: StreamExecutionEnvironment,
        id: usize,
        schema: SchemaRef,
        rowtime: Option<String>,
    ) -> Self {
        Self {
            env,
            id,
            schema,
            rowtime,
            side_rowtimes: vec![],
        }
    }

    /// The side output `tag` of the operator that produced this stream.
    pub fn side_output(&self, tag: &str) -> Result<DataStream> {
        let t = self.env.transformation(self.id);
        let Some((_, schema)) = t.side_outputs.iter().find(|(n, _)| n == tag) else {
            let known: Vec<&str> = t.side_outputs.iter().map(|(n, _)| n.as_str()).collect();
            return Err(WeirError::plan(format!(
                "'{}' has no side output '{tag}' (declared: [{}])",
                t.name,
                known.join(", ")
            )));
        };
        let rowtime = self
            .side_rowtimes
            .iter()
            .find(|(n, _)| n == tag)
            .and_then(|(_, r)| r.clone());
        Ok(self.derive(
            format!("SideOutput({tag})"),
            TransformationKind::SideOutput(tag.to_string()),
            Arc::clone(schema),
            rowtime,
        ))
    }

    /// The id of the transformation producing this stream (unique within
    /// its environment).
    pub fn id(&self) -> usize {
        self.id
    }

    /// Output schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// What the stream carries (append-only, retracting, upserting), as
    /// the operator producing it declared.
    pub fn changelog_mode(&self) -> crate::spec::ChangelogMode {
        self.env.transformation(self.id).changelog
    }

    /// The event-time column, if any.
    pub fn rowtime(&self) -> Option<&str> {
        self.rowtime.as_deref()
    }

    /// Declare which column carries event time from here on (`None`: none).
    /// Sound only when the column's values respect the watermarks flowing
    /// with the stream, e.g. `window_time` of window results (SQL's rowtime
    /// of a window aggregate), or a column copied from the rowtime.
    pub fn with_rowtime(mut self, column: Option<&str>) -> Result<DataStream> {
        if let Some(c) = column {
            check_timestamp_column(&self.schema, c)?;
        }
        self.rowtime = column.map(str::to_string);
        Ok(self)
    }

    /// The environment this stream belongs to.
    pub fn env(&self) -> &StreamExecutionEnvironment {
        &self.env
    }

    fn derive(
        &self,
        name: String,
        kind: TransformationKind,
        schema: SchemaRef,
        rowtime: Option<String>,
    ) -> DataStream {
        let id = self.env.add(name, kind, vec![self.id], Arc::clone(&schema));
        DataStream::new(self.env.clone(), id, schema, rowtime)
    }

    /// The nodes upstream of this stream that turn appends into updates
    /// (their output is a changelog, no input of theirs is): what an error
    /// about updates in the wrong place names.
    pub fn updates_from(&self) -> Vec<String> {
        let all = self.env.transformations();
        let changelog = |id: usize| all[id].changelog.is_updating();
        let mut stack = vec![self.id];
        let mut seen = std::collections::HashSet::new();
        let mut found = Vec::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) || !changelog(id) {
                continue;
            }
            let t = &all[id];
            if t.inputs.iter().all(|&i| !changelog(i)) {
                found.push(t.name.clone());
            }
            stack.extend(&t.inputs);
        }
        found.sort();
        found.dedup();
        found
    }

    /// The sources this stream reads, for error messages: a missing column
    /// is reported together with the files it was expected in.
    fn origin(&self) -> String {
        let all = self.env.transformations();
        let mut stack = vec![self.id];
        let mut sources = Vec::new();
        while let Some(id) = stack.pop() {
            let t = &all[id];
            if let TransformationKind::Source { spec, .. } = &t.kind {
                sources.push(format!("{} [{}]", t.name, spec.describe()));
            }
            stack.extend(&t.inputs);
        }
        sources.sort();
        sources.dedup();
        sources.join(", ")
    }

    /// Attach the stream's origin to a planning error.
    fn in_context(&self, e: WeirError) -> WeirError {
        match e {
            WeirError::Plan(msg) => {
                WeirError::Plan(format!("{msg} (in the stream from {})", self.origin()))
            }
            other => other,
        }
    }

    fn is_virtual(&self) -> bool {
        self.env.transformation(self.id).is_virtual()
    }

    fn operator_only(&self, what: &str) -> Result<()> {
        if self.is_virtual() {
            return Err(WeirError::plan(format!(
                "{what} applies to an operator, not to a partitioning or union"
            )));
        }
        Ok(())
    }

    /// Keep the rows for which `predicate` is true.
    pub fn filter(&self, predicate: Expr) -> Result<DataStream> {
        let name = format!("Filter({predicate})");
        let expr = plan_expr(&predicate, &self.schema).map_err(|e| self.in_context(e))?;
        self.filter_physical(expr, name)
    }

    /// Keep the rows for which the physical `predicate` is true.
    pub fn filter_physical(
        &self,
        predicate: Arc<dyn PhysicalExpr>,
        name: impl Into<String>,
    ) -> Result<DataStream> {
        let dt = predicate.data_type(&self.schema)?;
        if dt != arrow::datatypes::DataType::Boolean {
            return Err(WeirError::plan(format!(
                "filter predicate `{predicate}` has type {dt}, expected Boolean"
            )));
        }
        Ok(self.derive(
            name.into(),
            TransformationKind::Operator(OperatorSpec::Filter {
                predicate,
                input_schema: Arc::clone(&self.schema),
            }),
            Arc::clone(&self.schema),
            self.rowtime.clone(),
        ))
    }

    /// Compute new columns; each expression's alias (or display form) names
    /// its output column.
    pub fn project(&self, exprs: Vec<Expr>) -> Result<DataStream> {
        let planned = exprs
            .iter()
            .map(|e| {
                let name = match e {
                    Expr::Alias(a) => a.name.clone(),
                    Expr::Column(c) => c.name.clone(),
                    other => other.schema_name().to_string(),
                };
                Ok((
                    plan_expr(e, &self.schema).map_err(|e| self.in_context(e))?,
                    name,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<_> = planned.iter().map(|(_, n)| n.as_str()).collect();
        self.project_physical(planned.clone(), format!("Project({})", names.join(", ")))
    }

    /// Alias of [`Self::project`], as Flink users say it.
    pub fn map(&self, exprs: Vec<Expr>) -> Result<DataStream> {
        self.project(exprs)
    }

    /// Compute new columns from physical expressions.
    pub fn project_physical(
        &self,
        exprs: Vec<(Arc<dyn PhysicalExpr>, String)>,
        name: impl Into<String>,
    ) -> Result<DataStream> {
        let mut fields = Vec::with_capacity(exprs.len());
        let mut rowtime = None;
        for (e, n) in &exprs {
            fields.push(Field::new(
                n,
                e.data_type(&self.schema)?,
                e.nullable(&self.schema)?,
            ));
            if let (Some(rt), Some(c)) = (&self.rowtime, e.downcast_ref::<Column>())
                && c.name() == rt
            {
                rowtime = Some(n.clone());
            }
        }
        let schema = Arc::new(Schema::new(fields));
        Ok(self.derive(
            name.into(),
            TransformationKind::Operator(OperatorSpec::Project {
                exprs,
                input_schema: Arc::clone(&self.schema),
            }),
            schema,
            rowtime,
        ))
    }

    /// Each row once per window of `assigner` (tumbling, sliding or
    /// cumulating) its event time falls in, with `window_start`,
    /// `window_end` and `window_time` (`window_end - 1`, the new rowtime)
    /// appended: SQL's window table functions on their own.
    pub fn assign_windows(&self, assigner: WindowAssigner) -> Result<DataStream> {
        assigner.validate()?;
        if matches!(
            assigner,
            WindowAssigner::Session { .. } | WindowAssigner::Count { .. }
        ) {
            return Err(WeirError::plan(
                "assign_windows takes tumbling, sliding or cumulating windows (sessions are known only when they close)",
            ));
        }
        let time = self
            .rowtime
            .clone()
            .ok_or_else(|| WeirError::plan("assign_windows needs a stream with event time"))?;
        let ts =
            arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None);
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for n in ["window_start", "window_end", "window_time"] {
            if self.schema.index_of(n).is_ok() {
                return Err(WeirError::plan(format!(
                    "assign_windows: the stream already has a column '{n}'"
                )));
            }
            fields.push(Field::new(n, ts.clone(), false));
        }
        let spec = crate::spec::WindowAssignSpec {
            assigner,
            time_column: time,
            input_schema: Arc::clone(&self.schema),
        };
        let name = format!("{:?}", OperatorSpec::WindowAssign(spec.clone()));
        Ok(self.derive(
            name,
            TransformationKind::Operator(OperatorSpec::WindowAssign(spec)),
            Arc::new(Schema::new(fields)),
            Some("window_time".to_string()),
        ))
    }

    /// Join each row with the rows of `table` (bounded, held in memory by
    /// every subtask) whose `table_keys` equal the row's `keys`: an inner
    /// lookup join. Output: the stream's columns, then the table's (a taken
    /// name gets the prefix `right_`).
    pub fn lookup_join(
        &self,
        keys: &[&str],
        table: crate::spec::MemorySourceSpec,
        table_keys: &[&str],
    ) -> Result<DataStream> {
        if keys.is_empty() || keys.len() != table_keys.len() {
            return Err(WeirError::plan(
                "lookup join needs as many table keys as stream keys (at least one)",
            ));
        }
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for (k, t) in keys.iter().zip(table_keys) {
            let a = self.schema.field_with_name(k)?;
            let b = table.schema.field_with_name(t)?;
            if a.data_type() != b.data_type() {
                return Err(WeirError::plan(format!(
                    "lookup join key '{k}' is {} but the table's '{t}' is {}",
                    a.data_type(),
                    b.data_type()
                )));
            }
        }
        for f in table.schema.fields() {
            let taken = fields.iter().any(|x| x.name() == f.name());
            let name = if taken {
                format!("right_{}", f.name())
            } else {
                f.name().clone()
            };
            fields.push(f.as_ref().clone().with_name(name).with_nullable(true));
        }
        let spec = crate::spec::LookupJoinSpec {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            table_keys: table_keys.iter().map(|k| k.to_string()).collect(),
            table_schema: Arc::clone(&table.schema),
            table: table.batches,
            input_schema: Arc::clone(&self.schema),
        };
        let name = format!("{:?}", OperatorSpec::LookupJoin(spec.clone()));
        Ok(self.derive(
            name,
            TransformationKind::Operator(OperatorSpec::LookupJoin(spec)),
            Arc::new(Schema::new(fields)),
            self.rowtime.clone(),
        ))
    }

    /// Apply a Rust function to every batch; it returns a batch with
    /// `output_schema` (any number of rows). Application mode only.
    pub fn map_batches(
        &self,
        name: &str,
        output_schema: SchemaRef,
        f: impl Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync + 'static,
    ) -> Result<DataStream> {
        self.flat_map(name, output_schema, move |b| Ok(vec![f(b)?]))
    }

    /// Apply a Rust function that turns every batch into zero or more batches
    /// with `output_schema`. Application mode only.
    pub fn flat_map(
        &self,
        name: &str,
        output_schema: SchemaRef,
        f: impl Fn(RecordBatch) -> Result<Vec<RecordBatch>> + Send + Sync + 'static,
    ) -> Result<DataStream> {
        let rowtime = self
            .rowtime
            .clone()
            .filter(|rt| check_timestamp_column(&output_schema, rt).is_ok());
        let f: BatchFn = Arc::new(f);
        Ok(self.derive(
            name.to_string(),
            TransformationKind::Operator(OperatorSpec::MapBatches(f)),
            output_schema,
            rowtime,
        ))
    }

    /// Partition by the key columns: equal keys meet in the same subtask.
    pub fn key_by(&self, keys: &[&str]) -> Result<KeyedStream> {
        if keys.is_empty() {
            return Err(WeirError::plan("key_by needs at least one key column"));
        }
        let mut key_indices = Vec::with_capacity(keys.len());
        for k in keys {
            let idx = self.schema.index_of(k).map_err(|_| {
                self.in_context(WeirError::plan(format!(
                    "key_by: key column '{k}' not found; available columns: {}",
                    column_list(&self.schema)
                )))
            })?;
            let dt = self.schema.field(idx).data_type();
            if !is_hashable_key_type(dt) {
                return Err(WeirError::plan(format!(
                    "key_by: column '{k}' has type {dt}, which cannot be a key"
                )));
            }
            key_indices.push(idx);
        }
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let partitioner = Partitioner::Hash {
            keys: keys.clone(),
            key_indices,
        };
        let stream = self.partition(partitioner);
        Ok(KeyedStream { stream, keys })
    }

    fn partition(&self, p: Partitioner) -> DataStream {
        self.derive(
            format!("{p}"),
            TransformationKind::Partition(p),
            Arc::clone(&self.schema),
            self.rowtime.clone(),
        )
    }

    /// Distribute round-robin over the next operator's subtasks.
    pub fn rebalance(&self) -> DataStream {
        self.partition(Partitioner::Rebalance)
    }

    /// Send every batch to every subtask of the next operator.
    pub fn broadcast(&self) -> DataStream {
        self.partition(Partitioner::Broadcast)
    }

    /// Keep subtask `i` feeding subtask `i` (needs equal parallelism).
    pub fn forward(&self) -> DataStream {
        self.partition(Partitioner::Forward)
    }

    /// Window the whole stream, without keys (Flink's `windowAll`): the
    /// aggregation runs in a single subtask and its output has no key columns.
    pub fn window_all(&self, windows: impl Into<Windows>) -> WindowedStream {
        let windows = windows.into();
        WindowedStream {
            keyed: KeyedStream {
                stream: self.clone(),
                keys: vec![],
            },
            assigner: windows.assigner,
            processing_time: windows.processing_time,
            allowed_lateness: Duration::ZERO,
            late_data_tag: None,
            trigger: Trigger::OnWindowEnd,
            purge: false,
        }
    }

    /// Merge this stream with others of the same schema.
    pub fn union(&self, others: &[DataStream]) -> Result<DataStream> {
        for o in others {
            if o.schema.fields() != self.schema.fields() {
                return Err(WeirError::plan(format!(
                    "union of streams with different schemas: [{}] vs [{}]",
                    column_list(&self.schema),
                    column_list(&o.schema)
                )));
            }
        }
        let rowtime = if others.iter().all(|o| o.rowtime == self.rowtime) {
            self.rowtime.clone()
        } else {
            None
        };
        let mut inputs = vec![self.id];
        inputs.extend(others.iter().map(|o| o.id));
        let id = self.env.add(
            "Union".into(),
            TransformationKind::Union,
            inputs,
            Arc::clone(&self.schema),
        );
        Ok(DataStream::new(
            self.env.clone(),
            id,
            Arc::clone(&self.schema),
            rowtime,
        ))
    }

    /// Write the stream to a sink.
    pub fn sink_to(&self, sink: impl Into<SinkSpec>, name: &str) -> Result<DataStreamSink> {
        let sink = sink.into();
        if let Ok(connectors) = self.env.connectors() {
            connectors.check_sink(&sink).map_err(|e| {
                WeirError::plan(format!("sink '{name}' [{}]: {e}", sink.describe()))
            })?;
        }
        let id = self.env.add(
            format!("Sink: {name}"),
            TransformationKind::Sink(sink),
            vec![self.id],
            Arc::clone(&self.schema),
        );
        Ok(DataStreamSink {
            stream: DataStream::new(self.env.clone(), id, Arc::clone(&self.schema), None),
        })
    }

    /// Write the stream to the sink of `connector` with `options` (Flink's
    /// `WITH` options, checked against what the connector declares).
    pub fn sink_to_connector<K: Into<String>, V: Into<String>>(
        &self,
        connector: &str,
        options: impl IntoIterator<Item = (K, V)>,
        name: &str,
    ) -> Result<DataStreamSink> {
        let mut options: crate::connector::Options = options
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        options.insert("connector".into(), connector.to_string());
        let table =
            crate::connector::TableDescriptor::new(name, options, Some(Arc::clone(&self.schema)));
        let sink = self.env.connectors()?.plan_sink(&table)?;
        self.sink_to(sink, name)
    }

    /// Rename the operator that produced this stream.
    pub fn name(self, name: &str) -> Result<Self> {
        self.operator_only("name")?;
        self.env.update(self.id, |t| t.name = name.to_string());
        Ok(self)
    }

    /// Give the operator a stable id (it names its state across versions).
    pub fn uid(self, uid: &str) -> Result<Self> {
        self.operator_only("uid")?;
        self.env.update(self.id, |t| t.uid = Some(uid.to_string()));
        Ok(self)
    }

    /// Set the operator's parallelism.
    pub fn set_parallelism(self, parallelism: usize) -> Result<Self> {
        self.operator_only("set_parallelism")?;
        if parallelism == 0 {
            return Err(WeirError::plan("parallelism must be at least 1"));
        }
        self.env
            .update(self.id, |t| t.parallelism = Some(parallelism));
        Ok(self)
    }

    /// Begin a new chain at this operator.
    pub fn start_new_chain(self) -> Result<Self> {
        self.operator_only("start_new_chain")?;
        self.env
            .update(self.id, |t| t.chaining = ChainingStrategy::Head);
        Ok(self)
    }

    /// Never chain this operator.
    pub fn disable_chaining(self) -> Result<Self> {
        self.operator_only("disable_chaining")?;
        self.env
            .update(self.id, |t| t.chaining = ChainingStrategy::Never);
        Ok(self)
    }
}

/// The output fields of a group aggregation by `keys` over `input`: the
/// keys, the aggregates, and the row kind when `changelog`.
pub(super) fn group_aggregate_fields(
    keys: &[String],
    aggregates: &[AggregateSpec],
    input: &Schema,
    changelog: bool,
) -> Result<Vec<Field>> {
    if aggregates.is_empty() {
        return Err(WeirError::plan(
            "group_aggregate needs at least one aggregate",
        ));
    }
    let mut fields = Vec::new();
    for k in keys {
        fields.push(input.field_with_name(k)?.clone());
    }
    for a in aggregates {
        fields.push(a.output_field(input)?.as_ref().clone());
    }
    if changelog {
        fields.push(crate::spec::row_kind_field());
    }
    let mut seen = std::collections::HashSet::new();
    for f in &fields {
        if !seen.insert(f.name().clone()) {
            return Err(WeirError::plan(format!(
                "group aggregate output has two columns named '{}'; use alias()",
                f.name()
            )));
        }
    }
    Ok(fields)
}

/// A stream partitioned by key.
#[derive(Clone)]
pub struct KeyedStream {
    stream: DataStream,
    keys: Vec<String>,
}

impl KeyedStream {
    /// Key column names.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Windows of every `size` rows per key, in arrival order (Flink's
    /// `countWindow`). The aggregate's output has the keys and the
    /// aggregates, no window bounds.
    pub fn count_window(&self, size: u64) -> WindowedStream {
        self.window(WindowAssigner::Count {
            size: size.min(i64::MAX as u64) as i64,
        })
    }

    /// Group into windows.
    pub fn window(&self, windows: impl Into<Windows>) -> WindowedStream {
        let windows = windows.into();
        WindowedStream {
            keyed: self.clone(),
            assigner: windows.assigner,
            processing_time: windows.processing_time,
            allowed_lateness: Duration::ZERO,
            late_data_tag: None,
            trigger: Trigger::OnWindowEnd,
            purge: false,
        }
    }

    /// Aggregate every row so far per key (SQL's unbounded `GROUP BY`).
    /// In streaming mode the output is a changelog: after each input batch
    /// the keys it changed, `+I` for a new key, `-U` (old row) then `+U`
    /// (new row) for a changed one, in a final row-kind column
    /// ([`crate::spec::ROW_KIND_COLUMN`]); unchanged results are not
    /// re-emitted. In batch mode each key's final row, once, at the end of
    /// the input. Output columns: the keys, then the aggregates. An input
    /// that is itself a changelog is aggregated with its retractions
    /// (COUNT and SUM only); a key left without rows is deleted (`-D`).
    pub fn group_aggregate(&self, aggregates: Vec<AggregateSpec>) -> Result<DataStream> {
        let input = &self.stream;
        let changelog = input.env.config().runtime_mode == crate::config::RuntimeMode::Streaming;
        let fields = group_aggregate_fields(&self.keys, &aggregates, &input.schema, changelog)?;
        let retractions = input.changelog_mode().is_updating();
        if retractions
            && let Some(a) = aggregates.iter().find(|a| {
                !matches!(
                    a.function,
                    crate::spec::AggregateFunction::Count | crate::spec::AggregateFunction::Sum
                )
            })
        {
            return Err(WeirError::plan(format!(
                "{a} over an updating input: only COUNT, SUM and AVG can take retractions"
            )));
        }
        let spec = crate::spec::GroupAggregateSpec {
            keys: self.keys.clone(),
            aggregates,
            input_schema: Arc::clone(&input.schema),
            changelog,
            retractions,
            upsert: false,
            phase: AggregatePhase::Single,
        };
        let name = format!("{:?}", OperatorSpec::GroupAggregate(spec.clone()));
        Ok(input.derive(
            name,
            TransformationKind::Operator(OperatorSpec::GroupAggregate(spec)),
            Arc::new(Schema::new(fields)),
            None,
        ))
    }

    /// Keep the first `limit` rows per key by `order` (column, descending,
    /// nulls first; ties keep arrival order): Flink's Top-N, and its
    /// deduplication with `limit` 1. With `row_number`, the output gets that
    /// column (the row's 1-based position). Streaming: a changelog (row kind)
    /// as the kept rows change; batch: the final rows at the end.
    pub fn top_n(
        &self,
        order: Vec<(String, bool, bool)>,
        limit: usize,
        row_number: Option<&str>,
    ) -> Result<DataStream> {
        self.ranked(order, limit, row_number, false, None)
    }

    /// Window Top-N (and window deduplication, `limit` 1) over window
    /// results or window TVF rows keyed by their window (the keys include
    /// `window_end`): each window's first `limit` rows by `order`, emitted
    /// once, append-only, when the watermark passes `window_end - 1` (rows
    /// of a window already emitted are late and dropped). The stream keeps
    /// its rowtime. Flink's `ROW_NUMBER() OVER (PARTITION BY window_start,
    /// window_end … ORDER BY …) <= N`. With `later_wins_ties`, of rows
    /// ordered equal the later arrival ranks first (window deduplication
    /// keeping the last row).
    pub fn window_top_n(
        &self,
        order: Vec<(String, bool, bool)>,
        limit: usize,
        row_number: Option<&str>,
        window_end: &str,
        later_wins_ties: bool,
    ) -> Result<DataStream> {
        if !self.keys.iter().any(|k| k == window_end) {
            return Err(WeirError::plan(format!(
                "window_top_n: the keys must include the window end '{window_end}'"
            )));
        }
        check_timestamp_column(&self.stream.schema, window_end)?;
        let end = crate::spec::FinalRows::WindowEnd(window_end.to_string());
        self.ranked(order, limit, row_number, later_wins_ties, Some(end))
    }

    /// Deduplication keeping each key's first row by the stream's rowtime,
    /// append-only (Flink's `ROW_NUMBER() OVER (PARTITION BY k ORDER BY
    /// rowtime ASC) = 1`): a key's earliest row is emitted once the
    /// watermark reaches its rowtime; rows behind the watermark, and every
    /// later row of an emitted key, are dropped. Of rows with equal times
    /// the earlier arrival wins.
    pub fn keep_first_by_rowtime(&self, row_number: Option<&str>) -> Result<DataStream> {
        let Some(rowtime) = self.stream.rowtime.clone() else {
            return Err(WeirError::plan(
                "keep_first_by_rowtime: the stream has no rowtime",
            ));
        };
        let order = vec![(rowtime.clone(), false, false)];
        let first = crate::spec::FinalRows::FirstByRowtime(rowtime);
        self.ranked(order, 1, row_number, false, Some(first))
    }

    /// Deduplication keeping the last row per key by `time` (Flink's
    /// `ROW_NUMBER() OVER (PARTITION BY k ORDER BY time DESC) = 1`): of rows
    /// with equal times the later arrival wins. Output as [`Self::top_n`].
    /// By the rowtime, the output keeps it: each row is its key's version
    /// from its time on (Flink's versioned view, which an event-time
    /// temporal join reads).
    pub fn keep_last(&self, time: &str, row_number: Option<&str>) -> Result<DataStream> {
        let mut out = self.ranked(
            vec![(time.to_string(), true, false)],
            1,
            row_number,
            true,
            None,
        )?;
        if self.stream.rowtime.as_deref() == Some(time) {
            out.rowtime = Some(time.to_string());
        }
        Ok(out)
    }

    fn ranked(
        &self,
        order: Vec<(String, bool, bool)>,
        limit: usize,
        row_number: Option<&str>,
        later_wins_ties: bool,
        final_rows: Option<crate::spec::FinalRows>,
    ) -> Result<DataStream> {
        let input = &self.stream;
        if limit == 0 {
            return Err(WeirError::plan("top_n needs a limit of at least 1"));
        }
        if order.is_empty() {
            return Err(WeirError::plan("top_n needs an ordering"));
        }
        for (c, _, _) in &order {
            input.schema.index_of(c).map_err(|_| {
                WeirError::plan(format!(
                    "top_n: no column '{c}'; available columns: {}",
                    column_list(&input.schema)
                ))
            })?;
        }
        let mut fields: Vec<Field> = input
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        if let Some(r) = row_number {
            fields.push(Field::new(r, arrow::datatypes::DataType::UInt64, false));
        }
        // Rows final once the watermark passes them: append-only.
        let changelog = final_rows.is_none()
            && input.env.config().runtime_mode == crate::config::RuntimeMode::Streaming;
        if changelog {
            fields.push(crate::spec::row_kind_field());
        }
        let spec = crate::spec::TopNSpec {
            keys: self.keys.clone(),
            later_wins_ties,
            order,
            limit,
            row_number: row_number.map(str::to_string),
            input_schema: Arc::clone(&input.schema),
            changelog,
            final_rows: final_rows.clone(),
            upsert: None,
        };
        let name = format!("{:?}", OperatorSpec::TopN(spec.clone()));
        // Final rows leave once the watermark passes them: the rowtime holds.
        let rowtime = final_rows.and(input.rowtime.clone());
        Ok(input.derive(
            name,
            TransformationKind::Operator(OperatorSpec::TopN(spec)),
            Arc::new(Schema::new(fields)),
            rowtime,
        ))
    }

    /// The underlying stream (hash-partitioned).
    pub fn as_stream(&self) -> &DataStream {
        &self.stream
    }

    /// Run a keyed process function: `factory` makes one per subtask; its
    /// output has `output_schema`, and it may emit to the declared
    /// `side_outputs` (tag, schema). The output keeps the input's event time
    /// when `output_schema` has the same rowtime column.
    pub fn process(
        &self,
        name: &str,
        output_schema: SchemaRef,
        side_outputs: Vec<(String, SchemaRef)>,
        factory: impl Fn() -> Box<dyn KeyedProcessFunction> + Send + Sync + 'static,
    ) -> Result<DataStream> {
        let input = &self.stream;
        let rowtime = input
            .rowtime
            .clone()
            .filter(|rt| check_timestamp_column(&output_schema, rt).is_ok());
        let spec = KeyedProcessSpec {
            keys: self.keys.clone(),
            input_schema: Arc::clone(&input.schema),
            second: None,
            factory: ProcessFactory::Keyed(Arc::new(factory)),
        };
        let out = input.derive(
            name.to_string(),
            TransformationKind::Operator(OperatorSpec::KeyedProcess(spec)),
            output_schema,
            rowtime,
        );
        Ok(out.with_side_outputs(side_outputs))
    }

    /// Connect with another keyed stream with the same key types: one
    /// function sees both, with shared keyed state and timers.
    pub fn connect(&self, other: &KeyedStream) -> Result<ConnectedStreams> {
        let (l, r) = (&self.stream, &other.stream);
        if self.keys.len() != other.keys.len() {
            return Err(l.in_context(WeirError::plan(format!(
                "connect: keys differ in number: [{}] vs [{}]",
                self.keys.join(", "),
                other.keys.join(", ")
            ))));
        }
        for (a, b) in self.keys.iter().zip(&other.keys) {
            let (ta, tb) = (
                l.schema.field_with_name(a)?.data_type(),
                r.schema.field_with_name(b)?.data_type(),
            );
            if ta != tb {
                return Err(l.in_context(WeirError::plan(format!(
                    "connect: key '{a}' ({ta}) and '{b}' ({tb}) have different types"
                ))));
            }
        }
        Ok(ConnectedStreams {
            first: self.clone(),
            second: other.stream.clone(),
            second_keys: Some(other.keys.clone()),
        })
    }

    /// Connect with a stream broadcast to every subtask of this one (Flink's
    /// broadcast state pattern: e.g. rules updating how keyed events are
    /// handled).
    pub fn connect_broadcast(&self, other: &DataStream) -> ConnectedStreams {
        ConnectedStreams {
            first: self.clone(),
            second: other.broadcast(),
            second_keys: None,
        }
    }
}

/// Two streams feeding one process function.
pub struct ConnectedStreams {
    first: KeyedStream,
    second: DataStream,
    second_keys: Option<Vec<String>>,
}

impl ConnectedStreams {
    /// Run a [`CoProcessFunction`] made by `factory` on every subtask.
    pub fn process(
        &self,
        name: &str,
        output_schema: SchemaRef,
        side_outputs: Vec<(String, SchemaRef)>,
        factory: impl Fn() -> Box<dyn CoProcessFunction> + Send + Sync + 'static,
    ) -> Result<DataStream> {
        let (l, r) = (&self.first.stream, &self.second);
        let spec = KeyedProcessSpec {
            keys: self.first.keys.clone(),
            input_schema: Arc::clone(&l.schema),
            second: Some(SecondInput {
                keys: self.second_keys.clone(),
                schema: Arc::clone(&r.schema),
            }),
            factory: ProcessFactory::Co(Arc::new(factory)),
        };
        let id = l.env.add(
            name.to_string(),
            TransformationKind::Operator(OperatorSpec::KeyedProcess(spec)),
            vec![l.id, r.id],
            Arc::clone(&output_schema),
        );
        let rowtime = l
            .rowtime
            .clone()
            .filter(|rt| check_timestamp_column(&output_schema, rt).is_ok());
        let out = DataStream::new(l.env.clone(), id, output_schema, rowtime);
        Ok(out.with_side_outputs(side_outputs))
    }
}

impl DataStream {
    /// Declare the side outputs of the operator that produced this stream.
    fn with_side_outputs(self, side_outputs: Vec<(String, SchemaRef)>) -> DataStream {
        let input_rowtime = self.rowtime.clone();
        let side_rowtimes = side_outputs
            .iter()
            .map(|(tag, schema)| {
                let rt = input_rowtime
                    .clone()
                    .filter(|rt| check_timestamp_column(schema, rt).is_ok());
                (tag.clone(), rt)
            })
            .collect();
        self.env.update(self.id, |t| t.side_outputs = side_outputs);
        DataStream {
            side_rowtimes,
            ..self
        }
    }
}

/// A keyed stream with a window assigner.
pub struct WindowedStream {
    keyed: KeyedStream,
    assigner: WindowAssigner,
    processing_time: bool,
    allowed_lateness: Duration,
    late_data_tag: Option<String>,
    trigger: Trigger,
    purge: bool,
}

impl WindowedStream {
    /// Fire early as well as at the window end (Flink's continuous
    /// triggers). Each firing emits the window's cumulative result, so the
    /// last row of a (key, window) is its final one.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = trigger;
        self
    }

    /// Clear a window's state at each firing (Flink's `PurgingTrigger`):
    /// each row then covers the records since the previous firing. For
    /// tumbling windows with a continuous trigger.
    pub fn purge_on_fire(mut self) -> Self {
        self.purge = true;
        self
    }

    /// Send records that are too late for every window to the side output
    /// `tag` instead of dropping them; read it with
    /// [`DataStream::side_output`] on the aggregated stream. Its schema is
    /// the window's input schema.
    pub fn side_output_late_data(mut self, tag: &str) -> Self {
        self.late_data_tag = Some(tag.to_string());
        self
    }

    /// Keep window state for `lateness` after a window fired: a late record
    /// within it updates the window and re-emits its result, flagged in the
    /// `is_update` output column. Not supported for session windows.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.allowed_lateness = lateness;
        self
    }

    fn check_trigger(&self) -> Result<()> {
        let interval = match self.trigger {
            Trigger::OnWindowEnd => {
                if self.purge {
                    return Err(WeirError::plan(
                        "purge_on_fire needs a continuous or count trigger: a window firing once is purged anyway",
                    ));
                }
                return Ok(());
            }
            Trigger::ContinuousEventTime { interval } if self.processing_time => {
                let _ = interval;
                return Err(WeirError::plan(
                    "a continuous event-time trigger needs event-time windows",
                ));
            }
            Trigger::Count { count } => {
                if count == 0 {
                    return Err(WeirError::plan("count trigger needs a positive count"));
                }
                if !matches!(self.assigner, WindowAssigner::Tumbling { .. }) {
                    return Err(WeirError::plan(
                        "count triggers apply to tumbling windows (count_window covers global windows)",
                    ));
                }
                if !self.allowed_lateness.is_zero() {
                    return Err(WeirError::plan(
                        "count triggers cannot be combined with allowed lateness",
                    ));
                }
                return Ok(());
            }
            Trigger::ContinuousEventTime { interval }
            | Trigger::ContinuousProcessingTime { interval } => interval,
        };
        if interval <= 0 {
            return Err(WeirError::plan(format!(
                "trigger interval must be positive, got {interval} ms"
            )));
        }
        if matches!(
            self.assigner,
            WindowAssigner::Session { .. } | WindowAssigner::Count { .. }
        ) {
            return Err(WeirError::plan(
                "continuous triggers apply to tumbling, sliding and cumulating windows",
            ));
        }
        if self.purge && !matches!(self.assigner, WindowAssigner::Tumbling { .. }) {
            return Err(WeirError::plan(
                "purge_on_fire is supported for tumbling windows (panes of sliding windows are shared)",
            ));
        }
        if self.purge && !self.allowed_lateness.is_zero() {
            return Err(WeirError::plan(
                "purge_on_fire cannot be combined with allowed lateness",
            ));
        }
        Ok(())
    }

    /// Hand every row of each fired window to `function` (grouped by key),
    /// which returns batches with `output_schema`. For tumbling, sliding and
    /// cumulating windows; the rows are buffered until the window fires, so
    /// prefer [`Self::aggregate`] where an aggregate will do.
    pub fn process(
        &self,
        name: &str,
        output_schema: SchemaRef,
        function: impl ProcessWindowFunction + 'static,
    ) -> Result<DataStream> {
        let input = &self.keyed.stream;
        let check = || -> Result<String> {
            self.assigner.validate()?;
            if self.processing_time {
                return Err(WeirError::plan(
                    "window process functions over processing-time windows are not supported yet",
                ));
            }
            if self.trigger != Trigger::OnWindowEnd || self.purge {
                return Err(WeirError::plan(
                    "triggers apply to window aggregates; a window process function fires at the window end",
                ));
            }
            if matches!(self.assigner, WindowAssigner::Count { .. }) {
                return Err(WeirError::plan(
                    "window process functions need time windows (count windows are not supported yet)",
                ));
            }
            if !self.allowed_lateness.is_zero() {
                return Err(WeirError::plan(
                    "allowed lateness is not supported for window process functions yet",
                ));
            }
            let rowtime = input.rowtime.clone().ok_or_else(|| {
                WeirError::plan("event-time window on a stream without event time")
            })?;
            check_timestamp_column(&input.schema, &rowtime)?;
            Ok(rowtime)
        };
        let rowtime = check().map_err(|e| input.in_context(e))?;
        let spec = WindowProcessSpec {
            keys: self.keyed.keys.clone(),
            rowtime,
            assigner: self.assigner,
            input_schema: Arc::clone(&input.schema),
            function: Arc::new(function),
            late_data_tag: self.late_data_tag.clone(),
        };
        let out = input.derive(
            name.to_string(),
            TransformationKind::Operator(OperatorSpec::WindowProcess(spec)),
            output_schema,
            None,
        );
        if let Some(tag) = &self.late_data_tag {
            let schema = Arc::clone(&input.schema);
            out.env
                .update(out.id, |t| t.side_outputs.push((tag.clone(), schema)));
            let side_rowtimes = vec![(tag.clone(), input.rowtime.clone())];
            return Ok(DataStream {
                side_rowtimes,
                ..out
            });
        }
        Ok(out)
    }

    /// Aggregate each (key, window) incrementally. Output columns:
    /// `window_start`, `window_end`, the keys, then the aggregates.
    pub fn aggregate(&self, aggregates: Vec<AggregateSpec>) -> Result<DataStream> {
        let input = &self.keyed.stream;
        self.aggregate_inner(aggregates)
            .map_err(|e| input.in_context(e))
    }

    fn aggregate_inner(&self, aggregates: Vec<AggregateSpec>) -> Result<DataStream> {
        let input = &self.keyed.stream;
        self.assigner.validate()?;
        let counted = matches!(self.assigner, WindowAssigner::Count { .. });
        self.check_trigger()?;
        if counted && (!self.allowed_lateness.is_zero() || self.late_data_tag.is_some()) {
            return Err(WeirError::plan(
                "count windows have no late records: allowed lateness and late side outputs apply to time windows",
            ));
        }
        let rowtime = if counted {
            if aggregates.iter().any(|a| a.function.is_ordered()) && input.rowtime.is_none() {
                return Err(WeirError::plan(
                    "first_value / last_value follow event time: the stream needs an event-time column",
                ));
            }
            input.rowtime.clone()
        } else if self.processing_time {
            if !self.allowed_lateness.is_zero() || self.late_data_tag.is_some() {
                return Err(WeirError::plan(
                    "processing-time windows have no late records: allowed lateness and late side outputs apply to event time",
                ));
            }
            if aggregates.iter().any(|a| a.function.is_ordered()) {
                return Err(WeirError::plan(
                    "first_value / last_value follow event time and need an event-time window",
                ));
            }
            None
        } else {
            let rowtime = input.rowtime.clone().ok_or_else(|| {
                WeirError::plan(
                    "event-time window on a stream without event time: give the source a WatermarkStrategy with a timestamp column, and keep that column",
                )
            })?;
            check_timestamp_column(&input.schema, &rowtime)?;
            Some(rowtime)
        };
        if aggregates.is_empty() {
            return Err(WeirError::plan(
                "window aggregate needs at least one aggregate",
            ));
        }
        let ts_type =
            arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None);
        let mut fields = if counted {
            vec![]
        } else {
            vec![
                Field::new("window_start", ts_type.clone(), false),
                Field::new("window_end", ts_type, false),
            ]
        };
        for k in &self.keyed.keys {
            let f = input.schema.field_with_name(k)?;
            fields.push(f.clone());
        }
        for a in &aggregates {
            fields.push(a.output_field(&input.schema)?.as_ref().clone());
        }
        let allowed_lateness = self.allowed_lateness.as_millis() as i64;
        if allowed_lateness > 0 {
            fields.push(Field::new(
                "is_update",
                arrow::datatypes::DataType::Boolean,
                false,
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &fields {
            if !seen.insert(f.name().clone()) {
                return Err(WeirError::plan(format!(
                    "window aggregate output has two columns named '{}'; use alias()",
                    f.name()
                )));
            }
        }
        let spec = WindowAggregateSpec {
            keys: self.keyed.keys.clone(),
            rowtime,
            assigner: self.assigner,
            aggregates,
            input_schema: Arc::clone(&input.schema),
            allowed_lateness,
            late_data_tag: self.late_data_tag.clone(),
            processing_time: self.processing_time,
            trigger: self.trigger,
            purge: self.purge,
        };
        let name = format!("{:?}", OperatorSpec::WindowAggregate(spec.clone()));
        let out = input.derive(
            name,
            TransformationKind::Operator(OperatorSpec::WindowAggregate(spec)),
            Arc::new(Schema::new(fields)),
            None,
        );
        if self.keyed.keys.is_empty() {
            // An all-window has one subtask.
            out.env.update(out.id, |t| t.parallelism = Some(1));
        }
        if let Some(tag) = &self.late_data_tag {
            let schema = Arc::clone(&input.schema);
            out.env
                .update(out.id, |t| t.side_outputs.push((tag.clone(), schema)));
            let mut side_rowtime = out.side_rowtimes.clone();
            side_rowtime.push((tag.clone(), input.rowtime.clone()));
            return Ok(DataStream {
                side_rowtimes: side_rowtime,
                ..out
            });
        }
        Ok(out)
    }
}

/// The end of a stream: a sink. Name, uid and parallelism can still be set.
pub struct DataStreamSink {
    stream: DataStream,
}

impl DataStreamSink {
    /// Rename the sink.
    pub fn name(self, name: &str) -> Result<Self> {
        Ok(Self {
            stream: self.stream.name(name)?,
        })
    }

    /// Stable id of the sink.
    pub fn uid(self, uid: &str) -> Result<Self> {
        Ok(Self {
            stream: self.stream.uid(uid)?,
        })
    }

    /// Parallelism of the sink.
    pub fn set_parallelism(self, parallelism: usize) -> Result<Self> {
        Ok(Self {
            stream: self.stream.set_parallelism(parallelism)?,
        })
    }

    /// Never chain the sink.
    pub fn disable_chaining(self) -> Result<Self> {
        Ok(Self {
            stream: self.stream.disable_chaining()?,
        })
    }
}
