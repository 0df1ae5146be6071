//! From DataFusion logical plans to Weir's DataStream graph.
//!
//! Each plan node becomes stream operators: scans become sources (computed
//! columns evaluated inside the source task, so a computed rowtime can drive
//! watermarks), projections and filters become vectorized DataFusion
//! physical expressions, and an `Aggregate` over a window table function
//! becomes a keyed window aggregation — expressions in `GROUP BY` and
//! aggregate arguments (and `FILTER (WHERE …)` clauses) are computed by a
//! projection in front of it. A stream's column names are its plan's field
//! names; expressions bind columns by position, as DataFusion plans them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion_common::{Column, DFSchema, ScalarValue};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::{Aggregate, Expr, LogicalPlan, cast, lit};
use datafusion_physical_expr::{PhysicalExpr, create_physical_expr};
use weir_core::api::{DataStream, StreamExecutionEnvironment};
use weir_core::spec::{
    AggregateFunction, AggregateSpec, ComputedSourceSpec, ROW_KIND_COLUMN, SourceSpec,
};
use weir_core::time::{WatermarkStrategy, WindowAssigner};
use weir_core::{Result, WeirError};

use crate::catalog::{Catalog, TableEntry};
use crate::match_recognize::as_match_recognize;
use crate::planner::{TvfWindow, WindowTvf, as_window_tvf};
pub(crate) use aggregate::aggregate_function;
use scan::mentioned_columns;

mod aggregate;
mod cse;
mod join;
mod match_recognize;
mod order;
mod over;
mod rows;
mod scan;

fn unsupported(what: impl Into<String>) -> WeirError {
    WeirError::plan(format!("unsupported: {}", what.into()))
}

/// Plan `expr` against `schema` into a vectorized physical expression.
pub(crate) fn physical(expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
    // Some functions exist only in simplified form (COALESCE becomes a
    // CASE); the simplifier also folds constants once instead of per batch.
    use datafusion_expr::simplify::SimplifyContext;
    use datafusion_optimizer::simplify_expressions::ExprSimplifier;
    let simplified = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(Arc::new(schema.clone()))
            .build(),
    )
    .simplify(expr.clone())
    .unwrap_or_else(|_| expr.clone());
    create_physical_expr(
        &simplified,
        schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )
    .map_err(|e| WeirError::plan(format!("expression `{expr}`: {e}")))
}

/// Lowers the plans of one job into one environment; a table scanned by
/// several queries of the job is read by one source.
pub(crate) struct Lowering<'a> {
    env: &'a StreamExecutionEnvironment,
    catalog: &'a Catalog,
    connectors: &'a crate::connectors::ConnectorRegistry,
    idle_timeout: Option<Duration>,
    /// `table.exec.state.ttl`: how long a regular join keeps a row after
    /// it was last written (processing time, as Flink).
    state_ttl: Option<i64>,
    /// `weir.state.ttl.time = event-time`: a regular inner join of
    /// append-only inputs with event time keeps rows for the TTL in event
    /// time instead (an interval join bounded by it).
    ttl_event_time: bool,
    sources: HashMap<String, DataStream>,
    /// Streams of window results: which columns hold their windows'
    /// bounds (Flink's window properties), by stream id.
    windows: HashMap<usize, WindowProps>,
    /// Processing-time attributes (`PROCTIME()` columns), by stream id.
    proctime: HashMap<usize, Vec<String>>,
    /// Batch `GROUP BY`s aggregate locally before the hash exchange when
    /// their aggregates split (`table.optimizer.agg-phase-strategy` other
    /// than `ONE_PHASE`).
    two_phase: bool,
    /// Streams whose rows are in order (batch mode's ORDER BY, and what
    /// follows it), by id.
    ordered: std::collections::HashSet<usize>,
    /// While a query is lowered: the column names it mentions, when its
    /// scans may read only those (`Some(None)`: they read every column).
    used_columns: Option<Option<std::collections::HashSet<String>>>,
}

/// The window bounds a stream of window results carries.
#[derive(Debug, Clone)]
struct WindowProps {
    start: String,
    end: String,
    /// Distance between consecutive window ends, and their offset.
    slide: i64,
    offset: i64,
    /// The stream's rowtime minus its window end (-1 for window_time, 0
    /// for window_end).
    rowtime_offset: i64,
}

impl<'a> Lowering<'a> {
    pub(crate) fn new(
        env: &'a StreamExecutionEnvironment,
        catalog: &'a Catalog,
        connectors: &'a crate::connectors::ConnectorRegistry,
        idle_timeout: Option<Duration>,
    ) -> Self {
        Self {
            env,
            catalog,
            connectors,
            idle_timeout,
            state_ttl: None,
            ttl_event_time: false,
            two_phase: true,
            ordered: Default::default(),
            used_columns: None,
            sources: HashMap::new(),
            windows: HashMap::new(),
            proctime: HashMap::new(),
        }
    }

    /// Bound how long regular joins keep rows (`table.exec.state.ttl`).
    pub(crate) fn with_state_ttl(mut self, ttl_ms: Option<i64>, event_time: bool) -> Self {
        self.state_ttl = ttl_ms.filter(|&t| t > 0);
        self.ttl_event_time = event_time;
        self
    }

    /// Whether batch aggregations may run in two phases.
    pub(crate) fn with_two_phase_aggregation(mut self, on: bool) -> Self {
        self.two_phase = on;
        self
    }

    /// The stream of `plan`'s rows; its schema has the plan's field names.
    pub(crate) fn lower(&mut self, plan: &LogicalPlan) -> Result<DataStream> {
        if self.used_columns.is_none() {
            // A query's root: scans read only the columns it mentions.
            self.used_columns = Some(mentioned_columns(plan));
            let out = self.lower(plan);
            self.used_columns = None;
            return out;
        }
        let out = self.lower_node(plan)?;
        match plan {
            LogicalPlan::Projection(_) | LogicalPlan::Filter(_) => self.keep_order(out),
            _ => Ok(out),
        }
    }

    fn lower_node(&mut self, plan: &LogicalPlan) -> Result<DataStream> {
        match plan {
            LogicalPlan::Projection(p) => {
                // What the WHERE below computes for every row and the
                // SELECT again is computed once, in front of the filter.
                let shared = match p.input.as_ref() {
                    LogicalPlan::Filter(f) if !over_window(&f.input) => {
                        cse::shared_with_filter(&f.predicate, &p.expr)?
                    }
                    LogicalPlan::TableScan(scan) if !scan.filters.is_empty() => {
                        match datafusion_expr::utils::conjunction(scan.filters.clone()) {
                            Some(cond) => cse::shared_with_filter(&cond, &p.expr)?,
                            None => vec![],
                        }
                    }
                    _ => vec![],
                };
                let (input, input_schema, shares) = match self.narrowed_filter(p, &shared)? {
                    Some(narrowed) => narrowed,
                    None => match p.input.as_ref() {
                        LogicalPlan::Filter(f) if !shared.is_empty() => {
                            let input = self.lower(&f.input)?;
                            self.filter_of(f, input, Arc::clone(f.input.schema()), &shared)?
                        }
                        _ => (self.lower(&p.input)?, Arc::clone(p.input.schema()), false),
                    },
                };
                let selected: Vec<Expr> = if shares {
                    p.expr
                        .iter()
                        .map(|e| cse::rewrite_shared(e.clone(), &shared))
                        .collect::<Result<_>>()?
                } else {
                    p.expr.clone()
                };
                // What the SELECT's expressions repeat, computed once
                // (Nexmark q21's `lower(channel)` in four CASE branches).
                let (input, selected, input_schema) =
                    if is_changelog(&input) || self.proctime.contains_key(&input.id()) {
                        (input, selected, input_schema)
                    } else {
                        let named = selected.into_iter().map(|e| (e, String::new())).collect();
                        let (front, named, joined) =
                            cse::shared_subexpressions(input.clone(), named, &input_schema)?;
                        let front = if front.id() == input.id() {
                            front
                        } else {
                            if let Some(w) = self.windows.get(&input.id()).cloned() {
                                self.windows.insert(front.id(), w);
                            }
                            self.keep_order(front)?
                        };
                        let selected = named.into_iter().map(|(e, _)| e).collect();
                        (front, selected, Arc::new(joined))
                    };
                let mut exprs = selected
                    .iter()
                    .zip(p.schema.fields())
                    .map(|(e, f)| Ok((physical(e, &input_schema)?, f.name().clone())))
                    .collect::<Result<Vec<_>>>()?;
                if is_changelog(&input) {
                    // Each row keeps its change kind.
                    exprs.push(changelog_column(&input));
                }
                if is_identity(&exprs, input.schema()) {
                    return Ok(input);
                }
                let names: Vec<&str> = exprs.iter().map(|(_, n)| n.as_str()).collect();
                let out =
                    input.project_physical(exprs.clone(), format!("Calc({})", names.join(", ")))?;
                let before = self.proctime.get(&input.id()).cloned().unwrap_or_default();
                let proc: Vec<String> = p
                    .expr
                    .iter()
                    .zip(p.schema.fields())
                    .filter(|(e, _)| match (*e).clone().unalias() {
                        Expr::ScalarFunction(f) => f.func.name() == "proctime",
                        Expr::Column(c) => input_schema
                            .index_of_column(&c)
                            .is_ok_and(|i| before.contains(input.schema().field(i).name())),
                        _ => false,
                    })
                    .map(|(_, f)| f.name().clone())
                    .collect();
                if !proc.is_empty() {
                    self.proctime.insert(out.id(), proc);
                }
                if let Some(w) = self.windows.get(&input.id()).cloned() {
                    // The bounds survive when both columns are kept.
                    let renamed = |col: &str| {
                        exprs.iter().find_map(|(e, n)| {
                            e.downcast_ref::<datafusion_physical_expr::expressions::Column>()
                                .filter(|c| input.schema().field(c.index()).name() == col)
                                .map(|_| n.clone())
                        })
                    };
                    if let (Some(start), Some(end)) = (renamed(&w.start), renamed(&w.end)) {
                        self.windows
                            .insert(out.id(), WindowProps { start, end, ..w });
                    }
                }
                Ok(out)
            }
            LogicalPlan::Filter(f) => {
                if let Some(stream) = self.top_n(f)? {
                    return Ok(stream);
                }
                let input = self.lower(&f.input)?;
                Ok(self
                    .filter_of(f, input, Arc::clone(f.input.schema()), &[])?
                    .0)
            }
            LogicalPlan::SubqueryAlias(a) => self.lower(&a.input),
            LogicalPlan::TableScan(scan) => self.table_scan(scan, None),
            LogicalPlan::Aggregate(a) => self.aggregate(a),
            LogicalPlan::Union(u) => {
                let inputs = u
                    .inputs
                    .iter()
                    .map(|i| self.lower(i))
                    .collect::<Result<Vec<_>>>()?;
                inputs[0].union(&inputs[1..])
            }
            LogicalPlan::Extension(_) if as_window_tvf(plan).is_some() => {
                let tvf = as_window_tvf(plan).expect("checked");
                self.window_rows(tvf)
            }
            LogicalPlan::Extension(_) if as_match_recognize(plan).is_some() => {
                let m = as_match_recognize(plan).expect("checked");
                self.match_recognize(m)
            }
            LogicalPlan::Join(j) => self.join(j),
            LogicalPlan::Window(w) => self.over(w),
            LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => self.order(plan),
            LogicalPlan::Distinct(datafusion_expr::Distinct::All(input)) => {
                // SELECT DISTINCT: a GROUP BY of every column, as Flink
                // plans it (updating in streaming mode).
                let columns: Vec<Expr> = input
                    .schema()
                    .columns()
                    .into_iter()
                    .map(Expr::Column)
                    .collect();
                let a = Aggregate::try_new(Arc::clone(input), columns, vec![])?;
                self.aggregate(&a)
            }
            LogicalPlan::Distinct(_) => Err(unsupported("SELECT DISTINCT ON")),
            LogicalPlan::Values(v) => self.values(v),
            other => Err(unsupported(format!(
                "{} in a streaming query",
                other.display()
            ))),
        }
    }

    /// A window table function on its own (not under a window
    /// aggregation): each row once per window, with the window's bounds;
    /// `window_time` becomes the rowtime.
    fn window_rows(&mut self, tvf: &WindowTvf) -> Result<DataStream> {
        let stream = self.lower(&tvf.input)?;
        let time_name = tvf.input.schema().field(tvf.time_column).name().clone();
        if is_changelog(&stream) {
            return Err(unsupported(
                "a window table function over an updating input (Flink rejects it too: window table functions consume append-only rows)",
            ));
        }
        if stream.rowtime() != Some(time_name.as_str()) {
            return Err(WeirError::plan(format!(
                "DESCRIPTOR({time_name}) is not a time attribute: window table functions need the column a WATERMARK is declared for"
            )));
        }
        let (assigner, slide, offset) = match tvf.window {
            TvfWindow::Tumble { size, offset } => {
                (WindowAssigner::Tumbling { size, offset }, size, offset)
            }
            TvfWindow::Hop {
                slide,
                size,
                offset,
            } => (
                WindowAssigner::Sliding {
                    size,
                    slide,
                    offset,
                },
                slide,
                offset,
            ),
            TvfWindow::Cumulate { step, size, offset } => (
                WindowAssigner::Cumulate {
                    step,
                    max_size: size,
                    offset,
                },
                step,
                offset,
            ),
            TvfWindow::Session { .. } => {
                return Err(unsupported(
                    "SESSION outside a window aggregation (a session's bounds are known only when it closes)",
                ));
            }
        };
        let out = stream.assign_windows(assigner)?;
        self.windows.insert(
            out.id(),
            WindowProps {
                start: "window_start".into(),
                end: "window_end".into(),
                slide,
                offset,
                rowtime_offset: -1,
            },
        );
        Ok(out)
    }

    /// `WHERE rn <= N` over `ROW_NUMBER() OVER (PARTITION BY k ORDER BY
    /// …) AS rn`: a Top-N (deduplication for N = 1), when the filter is one.
    fn top_n(&mut self, f: &datafusion_expr::logical_plan::Filter) -> Result<Option<DataStream>> {
        use datafusion_expr::{BinaryExpr, Operator};
        fn peel(mut p: &LogicalPlan) -> &LogicalPlan {
            while let LogicalPlan::SubqueryAlias(a) = p {
                p = &a.input;
            }
            p
        }
        let mut node = peel(&f.input);
        let projection = match node {
            LogicalPlan::Projection(p)
                if p.expr
                    .iter()
                    .all(|e| matches!(e.clone().unalias(), Expr::Column(_))) =>
            {
                node = peel(&p.input);
                Some(p)
            }
            _ => None,
        };
        let LogicalPlan::Window(w) = node else {
            return Ok(None);
        };
        let [wexpr] = w.window_expr.as_slice() else {
            return Ok(None);
        };
        let Expr::WindowFunction(wf) = wexpr.clone().unalias() else {
            return Ok(None);
        };
        if !wf.fun.name().eq_ignore_ascii_case("row_number") {
            return Ok(None);
        }
        let rank_at = w.input.schema().fields().len();
        // The rank column as the filter sees it.
        let rank_in_filter = match projection {
            None => Some(rank_at),
            Some(p) => p.expr.iter().position(|e| {
                matches!(e.clone().unalias(), Expr::Column(c) if w.schema.index_of_column(&c).ok() == Some(rank_at))
            }),
        };
        let is_rank = |e: &Expr| matches!(e, Expr::Column(c) if f.input.schema().index_of_column(c).ok() == rank_in_filter && rank_in_filter.is_some());
        let number = |e: &Expr| match e {
            Expr::Literal(v, _) => {
                v.cast_to(&arrow::datatypes::DataType::Int64)
                    .ok()
                    .and_then(|v| match v {
                        ScalarValue::Int64(Some(n)) => Some(n),
                        _ => None,
                    })
            }
            Expr::Cast(c) => match c.expr.as_ref() {
                Expr::Literal(v, _) => {
                    v.cast_to(&arrow::datatypes::DataType::Int64)
                        .ok()
                        .and_then(|v| match v {
                            ScalarValue::Int64(Some(n)) => Some(n),
                            _ => None,
                        })
                }
                _ => None,
            },
            _ => None,
        };
        let strip = |e: &Expr| match e {
            Expr::Cast(c) => (*c.expr).clone(),
            other => other.clone(),
        };
        let limit = match &f.predicate {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (l, r) = (strip(left), strip(right));
                match (is_rank(&l), is_rank(&r), op) {
                    (true, _, Operator::LtEq) => number(right),
                    (true, _, Operator::Lt) => number(right).map(|n| n - 1),
                    (true, _, Operator::Eq) => number(right).filter(|&n| n == 1),
                    (_, true, Operator::GtEq) => number(left),
                    (_, true, Operator::Gt) => number(left).map(|n| n - 1),
                    (_, true, Operator::Eq) => number(left).filter(|&n| n == 1),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some(limit) = limit.filter(|&n| n >= 1) else {
            return Err(unsupported(format!(
                "a filter `{}` on ROW_NUMBER(); Top-N takes `rownum <= N`, `rownum < N` or `rownum = 1`",
                f.predicate
            )));
        };
        let input = self.lower(&w.input)?;
        if is_changelog(&input) {
            return Err(unsupported("a Top-N over an updating input"));
        }
        let in_schema = w.input.schema();
        let column_name = |e: &Expr| -> Result<String> {
            match e {
                Expr::Column(c) => Ok(input
                    .schema()
                    .field(in_schema.index_of_column(c)?)
                    .name()
                    .clone()),
                other => Err(unsupported(format!(
                    "`{other}` in the PARTITION BY / ORDER BY of a Top-N (use columns)"
                ))),
            }
        };
        if wf.params.partition_by.is_empty() {
            return Err(unsupported("a Top-N without PARTITION BY"));
        }
        let keys = wf
            .params
            .partition_by
            .iter()
            .map(&column_name)
            .collect::<Result<Vec<_>>>()?;
        let order = wf
            .params
            .order_by
            .iter()
            .map(|s| Ok((column_name(&s.expr)?, !s.asc, s.nulls_first)))
            .collect::<Result<Vec<_>>>()?;
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        let rank_name = w.schema.field(rank_at).name().clone();
        // Deduplication keeping the last row by time: later arrivals win ties.
        let keep_last = limit == 1
            && matches!(order.as_slice(), [(c, true, _)] if Some(c.as_str()) == input.rowtime());
        // PARTITION BY window_start, window_end (…) of window results or
        // window TVF rows: a window Top-N, final per window, append-only.
        let window = self
            .windows
            .get(&input.id())
            .filter(|w| keys.contains(&w.start) && keys.contains(&w.end))
            .cloned();
        let keyed = input.key_by(&k)?;
        // Deduplication keeping the first row by time: final once the
        // watermark reaches it, append-only (as Flink plans it).
        let keep_first = limit == 1
            && matches!(order.as_slice(), [(c, false, _)] if Some(c.as_str()) == input.rowtime());
        let ranked = if let Some(w) = &window {
            // Window deduplication keeping the last row: later arrivals win.
            keyed.window_top_n(order, limit as usize, Some(&rank_name), &w.end, keep_last)?
        } else if keep_first {
            keyed.keep_first_by_rowtime(Some(&rank_name))?
        } else if keep_last {
            keyed.keep_last(&order[0].0, Some(&rank_name))?
        } else {
            keyed.top_n(order, limit as usize, Some(&rank_name))?
        };
        if let Some(w) = window {
            self.windows.insert(ranked.id(), w.clone());
        }
        let Some(p) = projection else {
            return Ok(Some(ranked));
        };
        let mut exprs = p
            .expr
            .iter()
            .zip(p.schema.fields())
            .map(|(e, f)| Ok((physical(e, &w.schema)?, f.name().clone())))
            .collect::<Result<Vec<_>>>()?;
        if is_changelog(&ranked) {
            exprs.push(changelog_column(&ranked));
        }
        let out = ranked.project_physical(exprs, "Calc(Top-N output)")?;
        if let Some(w) = self.windows.get(&ranked.id()).cloned() {
            // The bounds survive when the projection keeps both.
            let names = out.schema();
            if names.index_of(&w.start).is_ok() && names.index_of(&w.end).is_ok() {
                self.windows.insert(out.id(), w);
            }
        }
        Ok(Some(out))
    }

    /// The source of a table: read by its connector, computed columns
    /// added inside the source, watermarks from the declared strategy.
    fn source(
        &mut self,
        entry: &TableEntry,
        filters: &[Expr],
        projection: Option<&[usize]>,
    ) -> Result<DataStream> {
        // A table read under different filters may skip different data,
        // and under different projections read different columns.
        let shown: Vec<String> = filters.iter().map(ToString::to_string).collect();
        let key = format!(
            "{}|{}|{projection:?}",
            entry.definition.name.to_string().to_ascii_lowercase(),
            shown.join(" AND ")
        );
        if let Some(s) = self.sources.get(&key) {
            return Ok(s.clone());
        }
        let mut spec = self.connectors.source(entry, filters, projection)?;
        if entry.has_computed_columns() {
            let physical_schema = DFSchema::try_from(entry.scan_schema.as_ref().clone())?;
            let mut exprs = entry
                .columns
                .iter()
                .map(|(n, e)| Ok((physical(e, &physical_schema)?, n.clone())))
                .collect::<Result<Vec<_>>>()?;
            // A changelog source's row kind stays last.
            if spec.changelog_mode().is_updating() {
                let at = entry.scan_schema.fields().len();
                exprs.push((column(ROW_KIND_COLUMN, at), ROW_KIND_COLUMN.to_string()));
            }
            spec = SourceSpec::Computed(ComputedSourceSpec {
                inner: Box::new(spec),
                exprs,
            });
        }
        let mut watermarks = match &entry.watermark {
            Some(w) if w.delay_ms > 0 => WatermarkStrategy::for_bounded_out_of_orderness(
                w.column.clone(),
                Duration::from_millis(w.delay_ms as u64 - 1),
            ),
            Some(w) => WatermarkStrategy::for_monotonous_timestamps(w.column.clone()),
            None => WatermarkStrategy::no_watermarks(),
        };
        // The table's own idle timeout (Flink's scan.watermark.idle-timeout),
        // else the session's table.exec.source.idle-timeout.
        let idle = entry
            .option("scan.watermark.idle-timeout")
            .and_then(crate::connectors::parse_duration_ms)
            .filter(|&ms| ms > 0)
            .map(|ms| Duration::from_millis(ms as u64))
            .or(self.idle_timeout);
        if let Some(t) = idle {
            watermarks = watermarks.with_idleness(t);
        }
        let stream = self
            .env
            .from_source(spec, watermarks, &entry.definition.name.to_string())?;
        self.sources.insert(key, stream.clone());
        Ok(stream)
    }
}
/// Whether a stream carries updates, as the operator producing it
/// declared (it then ends with the row kind).
pub(crate) fn is_changelog(stream: &DataStream) -> bool {
    stream.changelog_mode().is_updating()
}

/// Column `i` of a stream, named `name`, as a physical expression.
fn column(name: &str, i: usize) -> Arc<dyn PhysicalExpr> {
    Arc::new(datafusion_physical_expr::expressions::Column::new(name, i))
}

/// The row-kind column of a changelog stream, passed on by a projection.
fn changelog_column(stream: &DataStream) -> (Arc<dyn PhysicalExpr>, String) {
    let at = stream.schema().fields().len() - 1;
    (column(ROW_KIND_COLUMN, at), ROW_KIND_COLUMN.to_string())
}

/// `stream` with the columns `extra` computes (planned against `schema`,
/// the stream's plan schema) after its own.
fn widen(
    stream: DataStream,
    schema: &DFSchema,
    extra: &[(Expr, String)],
    name: &str,
) -> Result<DataStream> {
    if extra.is_empty() {
        return Ok(stream);
    }
    let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = (0..schema.fields().len())
        .map(|i| {
            let f = stream.schema().field(i);
            (column(f.name(), i), f.name().clone())
        })
        .collect();
    for (e, n) in extra {
        exprs.push((physical(e, schema)?, n.clone()));
    }
    if is_changelog(&stream) {
        exprs.push(changelog_column(&stream));
    }
    stream.project_physical(exprs, name)
}

/// A day-time interval literal in milliseconds.
pub(crate) fn interval_literal(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
            Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
        }
        Expr::Literal(ScalarValue::DurationMillisecond(Some(v)), _) => Some(*v),
        Expr::Cast(c) => interval_literal(&c.expr),
        _ => None,
    }
}

/// `window_end - 1 ms`: SQL's rowtime of a window result.
fn window_time(end: Expr) -> Expr {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    cast(
        cast(end, DataType::Int64) - lit(ScalarValue::Int64(Some(1))),
        ts,
    )
}

/// Cast `e` to `to` when its type differs.
fn conform(e: Expr, to: &DataType, schema: &DFSchema) -> Result<Expr> {
    use datafusion_expr::ExprSchemable;
    let from = e.get_type(schema)?;
    Ok(if &from == to { e } else { cast(e, to.clone()) })
}

/// Whether a projection passes its input through unchanged.
fn is_identity(exprs: &[(Arc<dyn PhysicalExpr>, String)], input: &Schema) -> bool {
    exprs.len() == input.fields().len()
        && exprs.iter().enumerate().all(|(i, (e, n))| {
            e.downcast_ref::<datafusion_physical_expr::expressions::Column>()
                .is_some_and(|c| c.index() == i)
                && input.field(i).name() == n
        })
}

/// Whether `plan` (through aliases) is an OVER window: a filter on it may
/// be a Top-N, which the lowering recognizes as it stands.
fn over_window(plan: &LogicalPlan) -> bool {
    let mut plan = plan;
    while let LogicalPlan::SubqueryAlias(a) = plan {
        plan = &a.input;
    }
    matches!(plan, LogicalPlan::Window(_))
}
