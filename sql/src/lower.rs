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
use datafusion_expr::{Aggregate, Expr, LogicalPlan, case, cast, lit};
use datafusion_physical_expr::{PhysicalExpr, create_physical_expr};
use weir_core::api::{DataStream, StreamExecutionEnvironment};
use weir_core::spec::{
    AggregateFunction, AggregateSpec, CHANGELOG_COLUMN, ComputedSourceSpec, SourceSpec,
};
use weir_core::time::{WatermarkStrategy, WindowAssigner};
use weir_core::{Result, WeirError};

use crate::catalog::{Catalog, TableEntry};
use crate::connectors;
use crate::planner::{TvfWindow, WindowTvf, as_window_tvf};

fn unsupported(what: impl Into<String>) -> WeirError {
    WeirError::plan(format!("unsupported: {}", what.into()))
}

/// Plan `expr` against `schema` into a vectorized physical expression.
pub(crate) fn physical(expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
    create_physical_expr(
        expr,
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
    idle_timeout: Option<Duration>,
    sources: HashMap<String, DataStream>,
}

impl<'a> Lowering<'a> {
    pub(crate) fn new(
        env: &'a StreamExecutionEnvironment,
        catalog: &'a Catalog,
        idle_timeout: Option<Duration>,
    ) -> Self {
        Self {
            env,
            catalog,
            idle_timeout,
            sources: HashMap::new(),
        }
    }

    /// The stream of `plan`'s rows; its schema has the plan's field names.
    pub(crate) fn lower(&mut self, plan: &LogicalPlan) -> Result<DataStream> {
        match plan {
            LogicalPlan::Projection(p) => {
                let input = self.lower(&p.input)?;
                let mut exprs = p
                    .expr
                    .iter()
                    .zip(p.schema.fields())
                    .map(|(e, f)| Ok((physical(e, p.input.schema())?, f.name().clone())))
                    .collect::<Result<Vec<_>>>()?;
                if is_changelog(&input) {
                    // Each row keeps its change kind.
                    let at = input.schema().fields().len() - 1;
                    exprs.push((
                        Arc::new(datafusion_physical_expr::expressions::Column::new(
                            CHANGELOG_COLUMN,
                            at,
                        )) as Arc<dyn PhysicalExpr>,
                        CHANGELOG_COLUMN.to_string(),
                    ));
                }
                if is_identity(&exprs, input.schema()) {
                    return Ok(input);
                }
                let names: Vec<&str> = exprs.iter().map(|(_, n)| n.as_str()).collect();
                input.project_physical(exprs.clone(), format!("Calc({})", names.join(", ")))
            }
            LogicalPlan::Filter(f) => {
                let input = self.lower(&f.input)?;
                let predicate = physical(&f.predicate, f.input.schema())?;
                input.filter_physical(predicate, format!("Where({})", f.predicate))
            }
            LogicalPlan::SubqueryAlias(a) => self.lower(&a.input),
            LogicalPlan::TableScan(scan) => {
                let name = scan.table_name.table().to_string();
                let object = sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::new(
                    name.clone(),
                )]);
                let entry = self
                    .catalog
                    .table(&object)
                    .map_err(|e| WeirError::plan(e.message))?;
                let stream = self.source(entry)?;
                match &scan.projection {
                    Some(cols) if cols.len() != stream.schema().fields().len() => {
                        let schema = Arc::clone(stream.schema());
                        let exprs = cols
                            .iter()
                            .map(|&i| {
                                let f = schema.field(i);
                                (
                                    Arc::new(datafusion_physical_expr::expressions::Column::new(
                                        f.name(),
                                        i,
                                    )) as Arc<dyn PhysicalExpr>,
                                    f.name().clone(),
                                )
                            })
                            .collect();
                        stream.project_physical(exprs, format!("Scan({name})"))
                    }
                    _ => Ok(stream),
                }
            }
            LogicalPlan::Aggregate(a) => self.aggregate(a),
            LogicalPlan::Union(u) => {
                let inputs = u
                    .inputs
                    .iter()
                    .map(|i| self.lower(i))
                    .collect::<Result<Vec<_>>>()?;
                inputs[0].union(&inputs[1..])
            }
            LogicalPlan::Extension(e) if as_window_tvf(plan).is_some() => {
                let _ = e;
                Err(unsupported(
                    "a window table function must feed a window aggregation (GROUP BY window_start, window_end, …); other uses are not supported yet",
                ))
            }
            LogicalPlan::Join(_) => Err(unsupported("joins are not supported yet")),
            LogicalPlan::Window(_) => Err(unsupported("OVER windows are not supported yet")),
            LogicalPlan::Sort(_) => Err(unsupported(
                "ORDER BY on a stream (order by time ascending is implied; Top-N is not supported yet)",
            )),
            LogicalPlan::Limit(_) => Err(unsupported("LIMIT on a stream")),
            LogicalPlan::Distinct(_) => Err(unsupported("SELECT DISTINCT is not supported yet")),
            LogicalPlan::Values(_) => Err(unsupported("VALUES is not supported yet")),
            other => Err(unsupported(format!(
                "{} in a streaming query",
                other.display()
            ))),
        }
    }

    /// The source of a table: read by its connector, computed columns
    /// added inside the source, watermarks from the declared strategy.
    fn source(&mut self, entry: &TableEntry) -> Result<DataStream> {
        let key = entry.definition.name.to_string().to_ascii_lowercase();
        if let Some(s) = self.sources.get(&key) {
            return Ok(s.clone());
        }
        let mut spec = connectors::source(entry)?;
        if entry.has_computed_columns() {
            let physical_schema = DFSchema::try_from(entry.schema.as_ref().clone())?;
            let exprs = entry
                .columns
                .iter()
                .map(|(n, e)| Ok((physical(e, &physical_schema)?, n.clone())))
                .collect::<Result<Vec<_>>>()?;
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
        if let Some(t) = self.idle_timeout {
            watermarks = watermarks.with_idleness(t);
        }
        let stream = self
            .env
            .from_source(spec, watermarks, &entry.definition.name.to_string())?;
        self.sources.insert(key, stream.clone());
        Ok(stream)
    }

    fn aggregate(&mut self, a: &Aggregate) -> Result<DataStream> {
        // Find the window table function under filters and aliases.
        let mut filters = vec![];
        let mut node = a.input.as_ref();
        let tvf = loop {
            match node {
                LogicalPlan::SubqueryAlias(s) => node = &s.input,
                LogicalPlan::Filter(f) => {
                    filters.push(f);
                    node = &f.input;
                }
                other => break as_window_tvf(other),
            }
        };
        match tvf {
            Some(tvf) => self.window_aggregate(a, tvf, &filters),
            None => self.group_aggregate(a),
        }
    }

    /// An unbounded `GROUP BY`: an updating aggregation (a changelog in
    /// streaming mode, the final rows in batch mode).
    fn group_aggregate(&mut self, a: &Aggregate) -> Result<DataStream> {
        let stream = self.lower(&a.input)?;
        if is_changelog(&stream) {
            return Err(unsupported(
                "an aggregation over an updating input (e.g. GROUP BY over another GROUP BY's result)",
            ));
        }
        let in_schema = a.input.schema();
        let mut pre: Vec<(Expr, String)> = vec![];
        let mut keys = vec![];
        for g in &a.group_expr {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(unsupported("GROUPING SETS / ROLLUP / CUBE on a stream"));
            }
            let name = format!("__k{}", keys.len());
            pre.push((g.clone(), name.clone()));
            keys.push(name);
        }
        let global = keys.is_empty();
        if global {
            // One group: every row has the same key.
            pre.push((lit(0i8), "__k0".into()));
            keys.push("__k0".into());
        }
        let specs = aggregate_specs(a, &|_| false, &mut pre)?;
        let exprs = pre
            .iter()
            .map(|(e, n)| Ok((physical(e, in_schema)?, n.clone())))
            .collect::<Result<Vec<_>>>()?;
        let pre_stream = stream.project_physical(exprs, "Calc(aggregate arguments)")?;
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        let out = pre_stream.key_by(&k)?.group_aggregate(specs)?;
        let changelog = is_changelog(&out);
        let out_df = DFSchema::try_from(out.schema().as_ref().clone())?;
        let c = |name: &str| Expr::Column(Column::new_unqualified(name));
        let mut post = vec![];
        let group_fields = if global { 0 } else { keys.len() };
        for (i, field) in a.schema.fields().iter().enumerate() {
            let e = if i < group_fields {
                c(&format!("__k{i}"))
            } else {
                c(&format!("__a{}", i - group_fields))
            };
            let e = conform(e, field.data_type(), &out_df)?;
            post.push((physical(&e, &out_df)?, field.name().clone()));
        }
        if changelog {
            post.push((
                physical(&c(CHANGELOG_COLUMN), &out_df)?,
                CHANGELOG_COLUMN.into(),
            ));
        }
        let names: Vec<&str> = post.iter().map(|(_, n)| n.as_str()).collect();
        out.project_physical(post.clone(), format!("Calc({})", names.join(", ")))
    }

    fn window_aggregate(
        &mut self,
        a: &Aggregate,
        tvf: &WindowTvf,
        filters: &[&datafusion_expr::logical_plan::Filter],
    ) -> Result<DataStream> {
        let width = tvf.input_width();
        let in_schema = a.input.schema();
        let window_column = |e: &Expr| -> Option<usize> {
            let Expr::Column(c) = e else { return None };
            let i = in_schema.index_of_column(c).ok()?;
            (i >= width).then(|| i - width)
        };
        let touches_window = |e: &Expr| {
            e.column_refs()
                .iter()
                .any(|c| in_schema.index_of_column(c).is_ok_and(|i| i >= width))
        };
        let mut stream = self.lower(&tvf.input)?;
        let time_name = tvf.input.schema().field(tvf.time_column).name().clone();
        if stream.rowtime() != Some(time_name.as_str()) {
            return Err(WeirError::plan(format!(
                "DESCRIPTOR({time_name}) is not a time attribute: window table functions need the column a WATERMARK is declared for{}",
                match stream.rowtime() {
                    Some(r) => format!(" ('{r}' here)"),
                    None => " (this input has none)".into(),
                }
            )));
        }
        for f in filters.iter().rev() {
            if touches_window(&f.predicate) {
                return Err(unsupported(
                    "a WHERE on window columns under a window aggregation",
                ));
            }
            let p = physical(&f.predicate, in_schema)?;
            stream = stream.filter_physical(p, format!("Where({})", f.predicate))?;
        }
        // What the window operator needs as columns: keys, aggregate
        // arguments, the rowtime.
        let mut pre: Vec<(Expr, String)> = vec![];
        let mut group_out: Vec<GroupOut> = vec![];
        let mut keys: Vec<String> = vec![];
        for g in &a.group_expr {
            if let Some(w) = window_column(g) {
                group_out.push(GroupOut::Window(w));
                continue;
            }
            if touches_window(g) {
                return Err(unsupported(format!(
                    "GROUP BY expression `{g}` over window columns"
                )));
            }
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(unsupported("GROUPING SETS / ROLLUP / CUBE on a stream"));
            }
            let name = format!("__k{}", keys.len());
            pre.push((g.clone(), name.clone()));
            group_out.push(GroupOut::Key(keys.len()));
            keys.push(name);
        }
        if !group_out.iter().any(|g| matches!(g, GroupOut::Window(0)))
            || !group_out.iter().any(|g| matches!(g, GroupOut::Window(1)))
        {
            return Err(unsupported(
                "a window aggregation must GROUP BY both window_start and window_end",
            ));
        }
        let specs = aggregate_specs(a, &touches_window, &mut pre)?;
        // The rowtime rides along under its own name.
        pre.push((
            Expr::Column(Column::from(in_schema.qualified_field(tvf.time_column))),
            time_name.clone(),
        ));
        let exprs = pre
            .iter()
            .map(|(e, n)| Ok((physical(e, in_schema)?, n.clone())))
            .collect::<Result<Vec<_>>>()?;
        let pre_stream = stream.project_physical(exprs, "Calc(window arguments)")?;
        let assigner = match tvf.window {
            TvfWindow::Tumble { size, offset } => WindowAssigner::Tumbling { size, offset },
            TvfWindow::Hop {
                slide,
                size,
                offset,
            } => WindowAssigner::Sliding {
                size,
                slide,
                offset,
            },
            TvfWindow::Cumulate { step, size, offset } => WindowAssigner::Cumulate {
                step,
                max_size: size,
                offset,
            },
            TvfWindow::Session { gap } => WindowAssigner::Session { gap },
        };
        let windowed = if keys.is_empty() {
            pre_stream.window_all(assigner)
        } else {
            let k: Vec<&str> = keys.iter().map(String::as_str).collect();
            pre_stream.key_by(&k)?.window(assigner)
        };
        let out = windowed.aggregate(specs)?;
        // Back to the aggregate's columns: groups in order, then aggregates.
        let out_schema = Arc::clone(out.schema());
        let out_df = DFSchema::try_from(out_schema.as_ref().clone())?;
        let c = |name: &str| Expr::Column(Column::new_unqualified(name));
        let mut post = vec![];
        let mut rowtime = None;
        for (g, field) in group_out.iter().zip(a.schema.fields()) {
            let e = match g {
                GroupOut::Window(0) => c("window_start"),
                GroupOut::Window(1) => c("window_end"),
                GroupOut::Window(_) => {
                    rowtime = Some(field.name().clone());
                    window_time(c("window_end"))
                }
                GroupOut::Key(k) => c(&format!("__k{k}")),
            };
            post.push((e, field));
        }
        for (j, field) in a.schema.fields().iter().skip(group_out.len()).enumerate() {
            post.push((c(&format!("__a{j}")), field));
        }
        let exprs = post
            .into_iter()
            .map(|(e, field)| {
                let e = conform(e, field.data_type(), &out_df)?;
                Ok((physical(&e, &out_df)?, field.name().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<&str> = exprs.iter().map(|(_, n)| n.as_str()).collect();
        let result = out.project_physical(exprs.clone(), format!("Calc({})", names.join(", ")))?;
        result.with_rowtime(rowtime.as_deref())
    }
}

/// The aggregates of `a` as window/group aggregate specs over the columns
/// `__arg{j}` that `pre` computes (an argument under `FILTER (WHERE c)`
/// becomes `CASE WHEN c THEN arg END`, which every aggregate skips when
/// null); outputs are named `__a{j}`.
fn aggregate_specs(
    a: &Aggregate,
    forbidden: &dyn Fn(&Expr) -> bool,
    pre: &mut Vec<(Expr, String)>,
) -> Result<Vec<AggregateSpec>> {
    let mut specs = vec![];
    for (j, e) in a.aggr_expr.iter().enumerate() {
        let Expr::AggregateFunction(f) = e.clone().unalias() else {
            return Err(unsupported(format!("aggregate expression `{e}`")));
        };
        let p = &f.params;
        if !p.order_by.is_empty() {
            return Err(unsupported(format!("ORDER BY inside aggregate `{e}`")));
        }
        if p.args.len() > 1 {
            return Err(unsupported(format!(
                "aggregate `{e}` with {} arguments",
                p.args.len()
            )));
        }
        let name = f.func.name().to_ascii_lowercase();
        let function = match (name.as_str(), p.distinct) {
            ("count", false) => AggregateFunction::Count,
            ("count", true) => AggregateFunction::CountDistinct,
            ("sum", false) => AggregateFunction::Sum,
            ("min", _) => AggregateFunction::Min,
            ("max", _) => AggregateFunction::Max,
            ("avg", false) => AggregateFunction::Avg,
            ("first_value", false) => AggregateFunction::FirstValue,
            ("last_value", false) => AggregateFunction::LastValue,
            (_, true) => {
                return Err(unsupported(format!(
                    "DISTINCT in `{e}` (COUNT(DISTINCT …) is supported)"
                )));
            }
            _ => AggregateFunction::Udf(Arc::clone(&f.func)),
        };
        let arg = p.args.first().cloned();
        if arg.as_ref().is_some_and(forbidden) || p.filter.as_deref().is_some_and(forbidden) {
            return Err(unsupported(format!("aggregate `{e}` over window columns")));
        }
        let is_count_star =
            name == "count" && !p.distinct && matches!(arg, None | Some(Expr::Literal(_, _)));
        let arg = match (arg, p.filter.as_deref()) {
            (None, None) => None,
            (Some(_), None) if is_count_star => None,
            (Some(x), None) => Some(x),
            (x, Some(cond)) => {
                let value = match x {
                    Some(x) if !is_count_star => x,
                    _ => lit(1i64),
                };
                Some(case(cond.clone()).when(lit(true), value).end()?)
            }
        };
        let column = match arg {
            Some(x) => {
                let n = format!("__arg{j}");
                pre.push((x, n.clone()));
                Some(n)
            }
            None => None,
        };
        specs.push(AggregateSpec {
            function,
            column,
            alias: format!("__a{j}"),
        });
    }
    Ok(specs)
}

/// Whether a stream is a changelog (its last column is `_op`).
pub(crate) fn is_changelog(stream: &DataStream) -> bool {
    stream
        .schema()
        .fields()
        .last()
        .is_some_and(|f| f.name() == CHANGELOG_COLUMN)
}

enum GroupOut {
    /// 0 window_start, 1 window_end, 2 window_time.
    Window(usize),
    Key(usize),
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
