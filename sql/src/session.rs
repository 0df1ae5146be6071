//! A SQL session: statements run in order against one catalog and one set
//! of options, as in Flink's SQL client. DDL and `SET` take effect at once;
//! every `INSERT` (and statement set) is planned — and so checked — when it
//! is read, and all of a script's inserts run together as one job (as if
//! in one statement set). Nothing runs and nothing is written until the
//! whole script has planned.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::DataType;
use datafusion_common::tree_node::TreeNode;
use datafusion_common::{Column, DataFusionError};
use datafusion_expr::{Expr, LogicalPlan, LogicalPlanBuilder, cast};
use sqlparser::ast::{self as sql, Spanned};
use weir_core::WeirError;
use weir_core::api::StreamExecutionEnvironment;
use weir_core::config::RuntimeMode;
use weir_core::spec::SinkSpec;

use crate::catalog::{Catalog, TableEntry, WatermarkDef};
use crate::connectors::ConnectorRegistry;
use crate::functions::Functions;
use crate::lower::Lowering;
use crate::planner::Provider;
use crate::{Column as DdlColumn, CreateTable, SqlError, WeirStatement, connectors, parse};

/// The options `SET` accepts, with what they do.
pub const OPTIONS: &[(&str, &str)] = &[
    ("parallelism.default", "subtasks per operator"),
    ("execution.runtime-mode", "'streaming' or 'batch'"),
    (
        "execution.checkpointing.interval",
        "checkpoint every (e.g. '10 s'); unset: no checkpoints",
    ),
    (
        "execution.checkpointing.mode",
        "'EXACTLY_ONCE' or 'AT_LEAST_ONCE'",
    ),
    (
        "execution.checkpointing.unaligned",
        "'true' for unaligned checkpoints",
    ),
    (
        "execution.checkpointing.dir",
        "where checkpoints go (a path or s3:// URL)",
    ),
    (
        "execution.checkpointing.incremental",
        "'true' to write only the changed key groups of each checkpoint",
    ),
    (
        "state.backend.incremental",
        "the same as execution.checkpointing.incremental (Flink 1.x's name)",
    ),
    (
        "execution.savepoint.path",
        "start from this savepoint or retained checkpoint",
    ),
    ("pipeline.name", "the job's name"),
    (
        "weir.exchange.compression",
        "'none' (the default), 'lz4' or 'zstd': how batches sent between worker processes are compressed",
    ),
    (
        "table.exec.source.idle-timeout",
        "mark a source split idle after this long without data",
    ),
    (
        "table.exec.state.ttl",
        "how long keyed state (regular joins, group aggregates, Top-N, deduplication) keeps a key or row after it was last written, in processing time (default: forever)",
    ),
    (
        "table.optimizer.agg-phase-strategy",
        "'AUTO' (the default) or 'TWO_PHASE': a batch GROUP BY of COUNT, SUM, MIN, MAX and AVG aggregates locally before the hash exchange; 'ONE_PHASE': every row crosses the exchange",
    ),
    (
        "table.optimizer.reuse-sub-plan-enabled",
        "'true' (the default): a subquery that appears twice in a job (same tables, same operations) is computed once; 'false': each computes its own",
    ),
    (
        "state.backend.type",
        "'hashmap' (state in memory, the default) or 'disk' (spills past the memory budget; 'rocksdb' names it too)",
    ),
    (
        "state.backend.local-dir",
        "where the disk backend spills (default: a folder in the temp dir)",
    ),
    (
        "taskmanager.memory.managed.size",
        "memory keyed state may take per process, e.g. '2gb' (default: no limit in memory, 512mb on disk)",
    ),
    (
        "weir.state.ttl.time",
        "'processing-time' (as Flink, the default) or 'event-time': the TTL of a regular inner join of append-only inputs with event time counts in event time, the watermark clears its rows and its output keeps event time",
    ),
    (
        "sql-client.execution.result-mode",
        "how `weir sql` shows a SELECT: 'table' (a live table) or 'changelog' (each change)",
    ),
];

fn err(message: impl Into<String>) -> SqlError {
    SqlError {
        line: None,
        column: None,
        message: message.into(),
    }
}

fn weir_err(e: WeirError) -> SqlError {
    let text = e.to_string();
    err(text
        .strip_prefix("planning error: ")
        .or_else(|| text.strip_prefix("plan error: "))
        .unwrap_or(&text)
        .to_string())
}

/// A DataFusion error as a SQL error, with the position DataFusion found.
fn df_err(e: DataFusionError) -> SqlError {
    let at = e.diagnostic().and_then(|d| d.span).map(|s| s.start);
    let mut message = e.strip_backtrace();
    for prefix in [
        "Error during planning: ",
        "Schema error: ",
        "This feature is not implemented: ",
        "Optimizer rule 'type_coercion' failed\ncaused by\n",
        "type_coercion\ncaused by\n",
    ] {
        while let Some(rest) = message.strip_prefix(prefix) {
            message = rest.to_string();
        }
    }
    message = message.replace("Error during planning: ", "");
    if message.starts_with("Schema contains duplicate unqualified field name") {
        // DataFusion names `SUM(CAST(v AS DOUBLE))` like `SUM(v)`; an alias
        // names only the result column, not the aggregate inside the plan.
        message.push_str(
            " (two aggregates differ only by a CAST of their argument: \
             compute the CAST in a subquery, `SELECT SUM(d) FROM (SELECT CAST(v AS DOUBLE) AS d …)`)",
        );
    }
    SqlError {
        line: at.map(|l| l.line).filter(|&l| l > 0),
        column: at
            .map(|l| l.column)
            .filter(|_| at.is_some_and(|l| l.line > 0)),
        message,
    }
}

/// An `INSERT` planned into a table.
#[derive(Debug, Clone)]
struct PlannedInsert {
    table: String,
    plan: LogicalPlan,
}

/// What one statement produced, for a shell or the CLI to show.
#[derive(Debug, Clone, PartialEq)]
pub enum StatementResult {
    /// DDL, `SET`, or an insert added to the job.
    Ok(String),
    /// `EXPLAIN`: the logical plan and the job graph.
    Explain(String),
    /// `SET` alone: the current options.
    Options(Vec<(String, String)>),
    /// A `SELECT`: its rows go to standard output when the job runs.
    Query,
}

/// Statements run in order against one catalog and one set of options.
#[derive(Debug, Default, Clone)]
pub struct SqlSession {
    catalog: Catalog,
    functions: Functions,
    connectors: ConnectorRegistry,
    options: BTreeMap<String, String>,
    inserts: Vec<PlannedInsert>,
    queries: Vec<LogicalPlan>,
}

impl SqlSession {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// The functions SQL can call; register UDFs here.
    pub fn functions_mut(&mut self) -> &mut Functions {
        &mut self.functions
    }

    /// The connectors tables can name: the process's registry, where
    /// [`ConnectorRegistry::register`] adds one written in Rust.
    pub fn connectors(&self) -> &ConnectorRegistry {
        &self.connectors
    }

    /// The tables and views declared so far.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The options `SET` so far.
    pub fn options(&self) -> &BTreeMap<String, String> {
        &self.options
    }

    /// Whether the statements so far add up to a job (inserts or queries).
    pub fn has_job(&self) -> bool {
        !self.inserts.is_empty() || !self.queries.is_empty()
    }

    /// Run every statement of a script; the first error stops it, naming
    /// where it is.
    pub fn execute_script(&mut self, sql: &str) -> Result<Vec<StatementResult>, SqlError> {
        let statements = parse(sql)?;
        let mut results = Vec::with_capacity(statements.len());
        for s in statements {
            let at = statement_start(&s);
            let r = self.execute(s).map_err(|mut e| {
                if e.line.is_none()
                    && let Some((line, column)) = at
                {
                    e.line = Some(line);
                    e.column = Some(column);
                    e.message = format!("{} (in the statement starting here)", e.message);
                }
                e
            })?;
            results.push(r);
        }
        Ok(results)
    }

    /// Run one parsed statement.
    pub fn execute(&mut self, statement: WeirStatement) -> Result<StatementResult, SqlError> {
        match statement {
            WeirStatement::CreateTable(t) => {
                let name = t.name.to_string();
                let entry = self.plan_table(*t)?;
                self.catalog.insert_table(entry)?;
                Ok(StatementResult::Ok(format!("table '{name}' created")))
            }
            WeirStatement::Set(None) => Ok(StatementResult::Options(
                self.options
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )),
            WeirStatement::Set(Some((key, value))) => {
                check_option(&key, &value)?;
                self.options.insert(key.clone(), value.clone());
                Ok(StatementResult::Ok(format!("'{key}' = '{value}'")))
            }
            WeirStatement::Reset(None) => {
                self.options.clear();
                Ok(StatementResult::Ok("options reset".into()))
            }
            WeirStatement::Reset(Some(key)) => {
                self.options.remove(&key);
                Ok(StatementResult::Ok(format!("'{key}' reset")))
            }
            WeirStatement::StatementSet(inserts) => {
                let mut planned = Vec::with_capacity(inserts.len());
                for i in inserts {
                    let sql::Statement::Insert(i) = i else {
                        unreachable!("the parser admits only inserts")
                    };
                    planned.push(self.plan_insert(&i)?);
                }
                let n = planned.len();
                self.inserts.extend(planned);
                Ok(StatementResult::Ok(format!(
                    "statement set of {n} insert(s) added to the job"
                )))
            }
            WeirStatement::Sql(s) => self.execute_sql(*s),
        }
    }

    fn execute_sql(&mut self, statement: sql::Statement) -> Result<StatementResult, SqlError> {
        match statement {
            sql::Statement::CreateView(v) => {
                if v.materialized {
                    return Err(err("unsupported: MATERIALIZED views"));
                }
                let plan = self.provider().plan_query(*v.query).map_err(df_err)?;
                let plan = if v.columns.is_empty() {
                    plan
                } else {
                    rename_columns(plan, &v.columns)?
                };
                self.catalog
                    .create_view(&v.name, plan, v.if_not_exists, v.or_replace)?;
                Ok(StatementResult::Ok(format!("view '{}' created", v.name)))
            }
            sql::Statement::Insert(i) => {
                let planned = self.plan_insert(&i)?;
                let table = planned.table.clone();
                self.inserts.push(planned);
                Ok(StatementResult::Ok(format!(
                    "insert into '{table}' added to the job"
                )))
            }
            sql::Statement::Query(q) => {
                let plan = self.provider().plan_query(*q).map_err(df_err)?;
                // Lower now so an unsupported query fails before anything runs.
                let env = StreamExecutionEnvironment::new(Default::default());
                apply_options(&env, &self.options)?;
                Lowering::new(&env, &self.catalog, &self.connectors, None)
                    .lower(&plan)
                    .map_err(weir_err)?;
                self.queries.push(plan);
                Ok(StatementResult::Query)
            }
            sql::Statement::Explain { statement, .. } => {
                let mut scratch = self.clone();
                scratch.inserts.clear();
                scratch.queries.clear();
                let plans: Vec<LogicalPlan> = match *statement {
                    sql::Statement::Insert(i) => {
                        let p = scratch.plan_insert(&i)?;
                        scratch.inserts.push(p.clone());
                        vec![p.plan]
                    }
                    sql::Statement::Query(q) => {
                        let p = scratch.provider().plan_query(*q).map_err(df_err)?;
                        scratch.queries.push(p.clone());
                        vec![p]
                    }
                    other => return Err(err(format!("unsupported: EXPLAIN of `{other}`"))),
                };
                let env = StreamExecutionEnvironment::new(Default::default());
                scratch.build(&env)?;
                let mut text = String::from("== Logical plan ==\n");
                for p in plans {
                    text.push_str(&p.display_indent().to_string());
                    text.push('\n');
                }
                text.push_str("\n== Job graph ==\n");
                text.push_str(&env.explain(&scratch.job_name()).map_err(weir_err)?);
                Ok(StatementResult::Explain(text))
            }
            sql::Statement::CreateTable(_) => Err(err(
                "CREATE TABLE … AS SELECT and other CREATE TABLE forms are not supported",
            )),
            other => Err(err(format!(
                "unsupported statement: {}",
                other.to_string().chars().take(60).collect::<String>()
            ))),
        }
    }

    fn provider(&self) -> Provider<'_> {
        Provider::new(&self.catalog, &self.functions)
    }

    /// Plan computed columns and the watermark of a `CREATE TABLE`.
    fn plan_table(&self, definition: CreateTable) -> Result<TableEntry, SqlError> {
        let physical = crate::physical_schema(&definition)?;
        let metadata = crate::types::metadata_columns(&definition)?;
        // Computed columns are over the physical and metadata columns.
        let schema = crate::types::scan_schema(&physical, &metadata);
        let provider = self.provider();
        let mut columns = vec![];
        let mut fields = vec![];
        for c in &definition.columns {
            match c {
                DdlColumn::Physical { name, .. } | DdlColumn::Metadata { name, .. } => {
                    let f = schema
                        .field_with_name(&name.value)
                        .map_err(|e| err(e.to_string()))?;
                    fields.push(f.clone());
                    columns.push((
                        name.value.clone(),
                        Expr::Column(Column::new_unqualified(&name.value)),
                    ));
                }
                DdlColumn::Computed { name, expr } => {
                    let e = provider
                        .plan_expr((**expr).clone(), &schema, &name.value)
                        .map_err(|e| {
                            let mut e = df_err(e);
                            e.message = format!("computed column '{}': {}", name.value, e.message);
                            if e.line.is_none() && name.span.start.line > 0 {
                                e.line = Some(name.span.start.line);
                                e.column = Some(name.span.start.column);
                            }
                            e
                        })?;
                    let df = datafusion_common::DFSchema::try_from(schema.as_ref().clone())
                        .map_err(df_err)?;
                    use datafusion_expr::ExprSchemable;
                    let (_, field) = e.to_field(&df).map_err(df_err)?;
                    fields.push(field.as_ref().clone().with_name(&name.value));
                    columns.push((name.value.clone(), e));
                }
            }
        }
        let full_schema = Arc::new(arrow::datatypes::Schema::new(fields));
        weir_core::changelog::check_user_schema(
            &full_schema,
            &format!("table '{}'", definition.name),
        )
        .map_err(weir_err)?;
        let watermark = match &definition.watermark {
            None => None,
            Some((column, expr)) => Some(watermark_def(column, expr, &full_schema)?),
        };
        let entry = TableEntry {
            definition,
            schema: physical,
            metadata,
            scan_schema: schema,
            full_schema,
            columns,
            watermark,
        };
        // Check the connector and its options now, not when the job starts.
        self.connectors.validate(&entry).map_err(weir_err)?;
        Ok(entry)
    }

    fn plan_insert(&self, insert: &sql::Insert) -> Result<PlannedInsert, SqlError> {
        let sql::TableObject::TableName(name) = &insert.table else {
            return Err(err("unsupported: INSERT INTO a table function"));
        };
        let table = self.catalog.table(name)?;
        self.connectors.sink(table).map_err(weir_err)?;
        let Some(query) = &insert.source else {
            return Err(err("INSERT needs a query (INSERT INTO t SELECT …)"));
        };
        let plan = self
            .provider()
            .plan_query((**query).clone())
            .map_err(df_err)?;
        // The physical columns, then the persisted metadata ones.
        let columns = table.sink_schema();
        let targets: Vec<String> = if insert.columns.is_empty() {
            columns.fields().iter().map(|f| f.name().clone()).collect()
        } else {
            insert.columns.iter().map(|c| c.to_string()).collect()
        };
        let width = plan.schema().fields().len();
        if width != targets.len() {
            return Err(err(format!(
                "INSERT INTO {name}: the query gives {width} column(s) but the table takes {} ({})",
                targets.len(),
                targets.join(", ")
            )));
        }
        let mut exprs = Vec::with_capacity(width);
        for (i, target) in targets.iter().enumerate() {
            let want = columns
                .field_with_name(target)
                .map_err(|_| err(format!("table '{name}' has no column '{target}'")))?;
            let (q, f) = plan.schema().qualified_field(i);
            let e = Expr::Column(Column::from((q, f)));
            let e = if f.data_type() == want.data_type() {
                e
            } else if assignable(f.data_type(), want.data_type()) {
                cast(e, want.data_type().clone())
            } else {
                return Err(err(format!(
                    "INSERT INTO {name}: column '{target}' is {} but the query's column {} ('{}') is {}",
                    crate::types::sql_type_name(want.data_type()),
                    i + 1,
                    f.name(),
                    crate::types::sql_type_name(f.data_type())
                )));
            };
            exprs.push(e.alias(target));
        }
        // The sink takes the table's physical columns in declared order.
        let mut ordered = vec![];
        for f in columns.fields() {
            match targets.iter().position(|t| t == f.name()) {
                Some(i) => ordered.push(exprs[i].clone()),
                None => ordered.push(
                    cast(
                        Expr::Literal(datafusion_common::ScalarValue::Null, None),
                        f.data_type().clone(),
                    )
                    .alias(f.name()),
                ),
            }
        }
        let plan = LogicalPlanBuilder::from(plan)
            .project(ordered)
            .and_then(|b| b.build())
            .map_err(df_err)?;
        // Lower now: an unsupported query fails before anything runs.
        let env = StreamExecutionEnvironment::new(Default::default());
        apply_options(&env, &self.options)?;
        let stream = Lowering::new(&env, &self.catalog, &self.connectors, None)
            .lower(&plan)
            .map_err(weir_err)?;
        check_changelog_sink(&self.connectors, table, &stream)?;
        Ok(PlannedInsert {
            table: name.to_string(),
            plan,
        })
    }

    /// Forget the inserts and queries planned so far (after running them);
    /// tables, views and options stay.
    pub fn clear_job(&mut self) {
        self.inserts.clear();
        self.queries.clear();
    }

    /// The job's name: `pipeline.name`, else one from its sinks.
    pub fn job_name(&self) -> String {
        if let Some(n) = self.options.get("pipeline.name") {
            return n.clone();
        }
        let mut names: Vec<&str> = self.inserts.iter().map(|i| i.table.as_str()).collect();
        names.dedup();
        if names.is_empty() {
            "sql-query".into()
        } else {
            format!("insert-into_{}", names.join("_"))
        }
    }

    /// Configure `env` from the options and add the job's streams to it.
    pub fn build(&self, env: &StreamExecutionEnvironment) -> Result<(), SqlError> {
        self.build_with(env, &weir_operators::connectors::print)
    }

    /// As [`Self::build`], with each `SELECT`'s rows going to the sink
    /// `query_sink` makes (a shell collects them to show a live table).
    pub fn build_with(
        &self,
        env: &StreamExecutionEnvironment,
        query_sink: &dyn Fn() -> SinkSpec,
    ) -> Result<(), SqlError> {
        apply_options(env, &self.options)?;
        let idle = self
            .options
            .get("table.exec.source.idle-timeout")
            .and_then(|v| connectors::parse_duration_ms(v))
            .filter(|&ms| ms > 0)
            .map(|ms| Duration::from_millis(ms as u64));
        let ttl = self
            .options
            .get("table.exec.state.ttl")
            .and_then(|v| connectors::parse_duration_ms(v));
        let event_time = self
            .options
            .get("weir.state.ttl.time")
            .is_some_and(|v| v.eq_ignore_ascii_case("event-time"));
        let two_phase = !self
            .options
            .get("table.optimizer.agg-phase-strategy")
            .is_some_and(|v| v.eq_ignore_ascii_case("one_phase"));
        let mut lowering = Lowering::new(env, &self.catalog, &self.connectors, idle)
            .with_state_ttl(ttl, event_time)
            .with_two_phase_aggregation(two_phase);
        // Sub-plan reuse: a subquery written twice, within one query or
        // across the job's inserts, runs once. A query calling a
        // nondeterministic function (RAND(), UUID()) is lowered on its own.
        let reuse = !self
            .options
            .get("table.optimizer.reuse-sub-plan-enabled")
            .is_some_and(|v| v.eq_ignore_ascii_case("false"));
        let reusable = |plan: &LogicalPlan| {
            reuse
                && !plan
                    .exists(|p| Ok(p.expressions().iter().any(Expr::is_volatile)))
                    .unwrap_or(true)
        };
        for insert in &self.inserts {
            let object = sql::ObjectName::from(vec![sql::Ident::new(insert.table.clone())]);
            let table = self.catalog.table(&object)?;
            let sink = self.connectors.sink(table).map_err(weir_err)?;
            env.set_reuse_identical(reusable(&insert.plan));
            let stream = lowering.lower(&insert.plan).map_err(weir_err)?;
            check_changelog_sink(&self.connectors, table, &stream)?;
            // An upsert sink by the query's group keys gets upserts; a
            // sink dropping `-U` rows, upserts by whatever key gives them.
            if let Some(key) = self.connectors.sink_upsert_key(table).map_err(weir_err)? {
                stream.upsert_by(&key);
            } else if !self
                .connectors
                .sink_uses_update_before(table)
                .map_err(weir_err)?
            {
                stream.upsert_by_its_key();
            }
            let sink = stream.sink_to(sink, &insert.table).map_err(weir_err)?;
            keep_order(&lowering, &stream, sink)?;
        }
        for (i, q) in self.queries.iter().enumerate() {
            env.set_reuse_identical(reusable(q));
            let stream = lowering.lower(q).map_err(weir_err)?;
            let sink = stream
                .sink_to(query_sink(), &format!("query {}", i + 1))
                .map_err(weir_err)?;
            keep_order(&lowering, &stream, sink)?;
        }
        env.set_reuse_identical(false);
        Ok(())
    }
}

/// A sorted result's sink runs in one subtask, so its rows stay in order.
fn keep_order(
    lowering: &Lowering,
    stream: &weir_core::api::DataStream,
    sink: weir_core::api::DataStreamSink,
) -> Result<(), SqlError> {
    if lowering.is_ordered(stream) {
        sink.set_parallelism(1).map_err(weir_err)?;
    }
    Ok(())
}

/// An updating query into a sink that takes only inserts is refused, as
/// Flink refuses it.
fn check_changelog_sink(
    connectors: &ConnectorRegistry,
    table: &TableEntry,
    stream: &weir_core::api::DataStream,
) -> Result<(), SqlError> {
    if crate::lower::is_changelog(stream)
        && !connectors.accepts_changelog(table).map_err(weir_err)?
    {
        let from = stream.updates_from();
        let from = if from.is_empty() {
            String::new()
        } else {
            format!(" (updates come from {})", from.join(", "))
        };
        return Err(err(format!(
            "table sink '{}' doesn't support consuming update changes, which the query produces{from}; write them to a print, blackhole or flight table, to a filesystem table with 'sink.changelog-mode' = 'retract', or run in batch mode",
            table.definition.name
        )));
    }
    Ok(())
}

/// The start of a statement, for errors found while planning it.
fn statement_start(s: &WeirStatement) -> Option<(u64, u64)> {
    let loc = match s {
        WeirStatement::CreateTable(t) => t.name.span().start,
        WeirStatement::Sql(s) => s.span().start,
        WeirStatement::StatementSet(v) => v.first()?.span().start,
        _ => return None,
    };
    (loc.line > 0).then_some((loc.line, loc.column))
}

/// Whether a query column of type `from` may be written into `to` (Flink's
/// implicit casts: numbers widen or narrow among numbers, anything goes
/// into a string, timestamps among timestamps).
fn assignable(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let number = |t: &DataType| t.is_numeric();
    let time = |t: &DataType| matches!(t, Timestamp(_, _) | Date32 | Date64);
    (number(from) && number(to))
        || matches!(to, Utf8 | LargeUtf8 | Utf8View)
        || (time(from) && time(to))
        || matches!(from, Null)
        || (matches!(from, Utf8 | LargeUtf8 | Utf8View)
            && matches!(to, Utf8 | LargeUtf8 | Utf8View))
}

fn rename_columns(
    plan: LogicalPlan,
    columns: &[sql::ViewColumnDef],
) -> Result<LogicalPlan, SqlError> {
    if columns.len() != plan.schema().fields().len() {
        return Err(err(format!(
            "the view names {} columns but its query gives {}",
            columns.len(),
            plan.schema().fields().len()
        )));
    }
    let exprs: Vec<Expr> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Expr::Column(Column::from(plan.schema().qualified_field(i))).alias(c.name.value.clone())
        })
        .collect();
    LogicalPlanBuilder::from(plan)
        .project(exprs)
        .and_then(|b| b.build())
        .map_err(df_err)
}

/// `WATERMARK FOR ts AS ts - INTERVAL 'n' unit` (or `AS ts`).
fn watermark_def(
    column: &sql::Ident,
    expr: &sql::Expr,
    schema: &arrow::datatypes::Schema,
) -> Result<WatermarkDef, SqlError> {
    let at = |e: &mut SqlError| {
        if column.span.start.line > 0 {
            e.line = Some(column.span.start.line);
            e.column = Some(column.span.start.column);
        }
    };
    let fail = |message: String| {
        let mut e = err(message);
        at(&mut e);
        e
    };
    let name = column.value.clone();
    let field = schema.field_with_name(&name).map_err(|_| {
        fail(format!(
            "WATERMARK FOR {name}: the table has no column '{name}'"
        ))
    })?;
    if !matches!(field.data_type(), DataType::Timestamp(_, _)) {
        return Err(fail(format!(
            "WATERMARK FOR {name}: the rowtime column must be TIMESTAMP(3) or TIMESTAMP_LTZ(3), not {}",
            crate::types::sql_type_name(field.data_type())
        )));
    }
    let is_column = |e: &sql::Expr| match e {
        sql::Expr::Identifier(i) => i.value == name,
        _ => false,
    };
    let delay_ms = match expr {
        e if is_column(e) => 0,
        sql::Expr::BinaryOp {
            left,
            op: sql::BinaryOperator::Minus,
            right,
        } if is_column(left) => match right.as_ref() {
            sql::Expr::Interval(i) => interval_literal_ms(i).ok_or_else(|| {
                fail(format!(
                    "WATERMARK FOR {name}: cannot read the interval {i}"
                ))
            })?,
            other => {
                return Err(fail(format!(
                    "WATERMARK FOR {name}: expected {name} - INTERVAL '…' unit, found `{other}`"
                )));
            }
        },
        other => {
            return Err(fail(format!(
                "unsupported: WATERMARK FOR {name} AS `{other}`; Weir takes `{name}` or `{name} - INTERVAL '…' unit`"
            )));
        }
    };
    Ok(WatermarkDef {
        column: name,
        delay_ms,
    })
}

/// `INTERVAL '5' SECOND`, `INTERVAL '0.5' SECOND`, `INTERVAL '1' MINUTE`, … in ms.
fn interval_literal_ms(i: &sql::Interval) -> Option<i64> {
    let text = match i.value.as_ref() {
        sql::Expr::Value(v) => match &v.value {
            sql::Value::SingleQuotedString(s) => s.clone(),
            sql::Value::Number(n, _) => n.clone(),
            _ => return None,
        },
        _ => return None,
    };
    let n: f64 = text.trim().parse().ok()?;
    let unit = match &i.leading_field {
        None => return connectors::parse_duration_ms(&text),
        Some(f) => f.to_string().to_ascii_uppercase(),
    };
    let factor = match unit.as_str() {
        "MILLISECOND" | "MILLISECONDS" => 1.0,
        "SECOND" | "SECONDS" => 1000.0,
        "MINUTE" | "MINUTES" => 60_000.0,
        "HOUR" | "HOURS" => 3_600_000.0,
        "DAY" | "DAYS" => 86_400_000.0,
        _ => return None,
    };
    Some((n * factor).round() as i64)
}

fn check_option(key: &str, value: &str) -> Result<(), SqlError> {
    if !OPTIONS.iter().any(|(k, _)| *k == key) {
        let near = crate::catalog::near_matches(key, OPTIONS.iter().map(|(k, _)| *k));
        return Err(err(format!(
            "unknown option '{key}'{}; Weir's options are {}",
            match near.as_slice() {
                [] => String::new(),
                n => format!(" (did you mean {}?)", n.join(", ")),
            },
            OPTIONS
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let env = StreamExecutionEnvironment::new(Default::default());
    let mut one = BTreeMap::new();
    one.insert(key.to_string(), value.to_string());
    apply_options(&env, &one)
}

fn apply_options(
    env: &StreamExecutionEnvironment,
    options: &BTreeMap<String, String>,
) -> Result<(), SqlError> {
    let bad = |k: &str, v: &str, want: &str| err(format!("option '{k}' = '{v}': expected {want}"));
    for (k, v) in options {
        match k.as_str() {
            "parallelism.default" => {
                let p: usize = v
                    .parse()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| bad(k, v, "a positive number"))?;
                env.set_parallelism(p);
            }
            "weir.exchange.compression" => {
                let codec = weir_core::config::ExchangeCompression::parse(v)
                    .ok_or_else(|| bad(k, v, "'none', 'lz4' or 'zstd'"))?;
                env.configure(|c| c.exchange_compression = codec);
            }
            "execution.runtime-mode" => {
                let mode = match v.to_ascii_lowercase().as_str() {
                    "streaming" => RuntimeMode::Streaming,
                    "batch" => RuntimeMode::Batch,
                    _ => return Err(bad(k, v, "'streaming' or 'batch'")),
                };
                env.set_runtime_mode(mode);
            }
            "execution.checkpointing.interval" => {
                let ms = connectors::parse_duration_ms(v)
                    .ok_or_else(|| bad(k, v, "a duration such as '10 s'"))?;
                env.configure(|c| {
                    c.checkpoint_interval = (ms > 0).then(|| Duration::from_millis(ms as u64))
                });
            }
            "execution.checkpointing.mode" => {
                let mode = match v.to_ascii_uppercase().replace('-', "_").as_str() {
                    "EXACTLY_ONCE" => weir_core::config::CheckpointingMode::ExactlyOnce,
                    "AT_LEAST_ONCE" => weir_core::config::CheckpointingMode::AtLeastOnce,
                    _ => return Err(bad(k, v, "'EXACTLY_ONCE' or 'AT_LEAST_ONCE'")),
                };
                env.configure(|c| c.checkpoint_mode = mode);
            }
            "execution.checkpointing.unaligned" => {
                let on: bool = v
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|_| bad(k, v, "'true' or 'false'"))?;
                env.configure(|c| c.checkpoint_unaligned = on);
            }
            "execution.checkpointing.incremental" | "state.backend.incremental" => {
                let on: bool = v
                    .to_ascii_lowercase()
                    .parse()
                    .map_err(|_| bad(k, v, "'true' or 'false'"))?;
                env.configure(|c| c.checkpoint_incremental = on);
            }
            "execution.checkpointing.dir" => {
                let dir = v.clone();
                env.configure(|c| c.checkpoint_dir = Some(dir));
            }
            "execution.savepoint.path" => {
                let dir = v.clone();
                env.configure(|c| c.restore_from = Some(dir));
            }
            "table.exec.source.idle-timeout" => {
                connectors::parse_duration_ms(v)
                    .ok_or_else(|| bad(k, v, "a duration such as '5 s'"))?;
            }
            "table.optimizer.agg-phase-strategy"
                if !["auto", "one_phase", "two_phase"]
                    .contains(&v.to_ascii_lowercase().as_str()) =>
            {
                return Err(bad(k, v, "'AUTO', 'ONE_PHASE' or 'TWO_PHASE'"));
            }
            "table.optimizer.reuse-sub-plan-enabled"
                if !["true", "false"].contains(&v.to_ascii_lowercase().as_str()) =>
            {
                return Err(bad(k, v, "'true' or 'false'"));
            }
            "table.exec.state.ttl" => {
                let ms = connectors::parse_duration_ms(v)
                    .ok_or_else(|| bad(k, v, "a duration such as '1 h'"))?;
                env.configure(|c| c.state.ttl = (ms > 0).then(|| Duration::from_millis(ms as u64)));
            }
            "state.backend.type" => {
                let backend = weir_core::state_config::StateBackend::parse(v)
                    .map_err(|_| bad(k, v, "'hashmap' or 'disk' (or 'rocksdb')"))?;
                env.configure(|c| c.state.backend = backend);
            }
            "state.backend.local-dir" => {
                let dir = std::path::PathBuf::from(v);
                env.configure(|c| c.state.local_dir = Some(dir));
            }
            "taskmanager.memory.managed.size" => {
                let bytes = weir_core::state_config::parse_memory_size(v)
                    .map_err(|_| bad(k, v, "a memory size such as '2gb' or '512 mb'"))?;
                env.configure(|c| c.state.managed_memory = Some(bytes));
            }
            "weir.state.ttl.time"
                if !["processing-time", "event-time"]
                    .contains(&v.to_ascii_lowercase().as_str()) =>
            {
                return Err(bad(k, v, "'processing-time' or 'event-time'"));
            }
            "sql-client.execution.result-mode"
                if !["table", "changelog"].contains(&v.to_ascii_lowercase().as_str()) =>
            {
                return Err(bad(k, v, "'table' or 'changelog'"));
            }
            _ => {}
        }
    }
    Ok(())
}
