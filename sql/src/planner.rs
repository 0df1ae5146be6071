//! From SQL to DataFusion logical plans.
//!
//! DataFusion's SQL planner (`SqlToRel`) does the relational work — name
//! resolution, `SELECT` lists, `GROUP BY`, subqueries, type coercion — over
//! the tables and views of Weir's [`Catalog`]. Two pieces are Weir's:
//!
//! * window table functions (`TUMBLE`, `HOP`, `CUMULATE`, `SESSION` in
//!   `FROM TABLE(…)`) become a [`WindowTvf`] extension node through a
//!   DataFusion `RelationPlanner`; its schema is the input's columns plus
//!   `window_start`, `window_end` and `window_time`, as in Flink;
//! * identifiers keep their case (Flink's `dateTime` is not `datetime`),
//!   table and function names compare case-insensitively.
//!
//! The plans are lowered to Weir's DataStream graph in `lower`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef, TimeUnit};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{DFSchema, DFSchemaRef, DataFusionError, TableReference};
use datafusion_expr::planner::{
    ContextProvider, ExprPlanner, PlannedRelation, RelationPlanner, RelationPlannerContext,
    RelationPlanning,
};
use datafusion_expr::{
    AggregateUDF, Expr, Extension, HigherOrderUDF, LogicalPlan, LogicalPlanBuilder, ScalarUDF,
    TableSource, UserDefinedLogicalNodeCore, WindowUDF, logical_plan::builder::LogicalTableSource,
};
use datafusion_optimizer::Analyzer;
use datafusion_sql::planner::{NullOrdering, ParserOptions, PlannerContext, SqlToRel};
use sqlparser::ast::{self as sql, FunctionArg, FunctionArgExpr, FunctionArguments, TableFactor};

use crate::catalog::{Catalog, Relation};
use crate::functions::Functions;

type DfResult<T> = datafusion_common::Result<T>;

/// The window of a window table function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub enum TvfWindow {
    /// `TUMBLE(data, DESCRIPTOR(ts), size [, offset])`.
    Tumble {
        /// Window size, ms.
        size: i64,
        /// Offset, ms.
        offset: i64,
    },
    /// `HOP(data, DESCRIPTOR(ts), slide, size [, offset])`.
    Hop {
        /// Slide, ms.
        slide: i64,
        /// Size, ms.
        size: i64,
        /// Offset, ms.
        offset: i64,
    },
    /// `CUMULATE(data, DESCRIPTOR(ts), step, size [, offset])`.
    Cumulate {
        /// Step, ms.
        step: i64,
        /// Largest size, ms.
        size: i64,
        /// Offset, ms.
        offset: i64,
    },
    /// `SESSION(data [PARTITION BY k], DESCRIPTOR(ts), gap)`.
    Session {
        /// Inactivity gap, ms.
        gap: i64,
    },
}

/// A window table function over its input: every input row with the
/// window(s) it falls in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowTvf {
    /// The rows windowed.
    pub input: LogicalPlan,
    /// Index of the `DESCRIPTOR` column in the input.
    pub time_column: usize,
    /// The windows.
    pub window: TvfWindow,
    schema: DFSchemaRef,
}

impl PartialOrd for WindowTvf {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        (self.time_column, &self.window).partial_cmp(&(other.time_column, &other.window))
    }
}

impl WindowTvf {
    fn new(input: LogicalPlan, time_column: usize, window: TvfWindow) -> DfResult<Self> {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let mut fields: Vec<(Option<TableReference>, FieldRef)> = input
            .schema()
            .iter()
            .map(|(q, f)| (q.cloned(), Arc::clone(f)))
            .collect();
        for name in ["window_start", "window_end", "window_time"] {
            fields.push((None, Arc::new(Field::new(name, ts.clone(), false))));
        }
        let schema = Arc::new(DFSchema::new_with_metadata(fields, HashMap::new())?);
        Ok(Self {
            input,
            time_column,
            window,
            schema,
        })
    }

    /// Number of input columns (the window columns follow them).
    pub fn input_width(&self) -> usize {
        self.input.schema().fields().len()
    }
}

impl UserDefinedLogicalNodeCore for WindowTvf {
    fn name(&self) -> &str {
        "WindowTableFunction"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let time = self.input.schema().field(self.time_column).name();
        write!(f, "WindowTableFunction: {:?} on {time}", self.window)
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        Self::new(inputs.remove(0), self.time_column, self.window.clone())
    }
}

/// A table read by a lookup join (`FOR SYSTEM_TIME AS OF`): its rows are
/// looked up, not streamed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LookupTable {
    /// The table's scan (a view's plan, for a versioned view).
    pub input: LogicalPlan,
    /// The time it is read as of: the parts of the column named after `AS
    /// OF` (`o.order_time` → `["o", "order_time"]`).
    pub as_of: Vec<String>,
}

impl PartialOrd for LookupTable {
    fn partial_cmp(&self, _other: &Self) -> Option<std::cmp::Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for LookupTable {
    fn name(&self) -> &str {
        "LookupTable"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "LookupTable")
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        Ok(Self {
            input: inputs.remove(0),
            as_of: self.as_of.clone(),
        })
    }
}

/// `UNNEST(a, …) [WITH ORDINALITY]` beside the tables to its left: the
/// arrays (outer references to their columns) and the columns it makes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LateralUnnest {
    /// The arrays or maps.
    pub args: Vec<Expr>,
    /// `WITH ORDINALITY`.
    pub ordinality: bool,
    schema: DFSchemaRef,
}

impl LateralUnnest {
    fn new(args: Vec<Expr>, ordinality: bool) -> DfResult<Self> {
        use datafusion_expr::ExprSchemable;
        let empty = DFSchema::empty();
        let types = args
            .iter()
            .map(|a| a.get_type(&empty))
            .collect::<DfResult<Vec<_>>>()?;
        let function = weir_core::table_function::Unnest { ordinality };
        let fields = weir_core::table_function::TableFunction::fields_for(&function, &types)
            .map_err(|e| DataFusionError::Plan(e.to_string()))?;
        let schema = Arc::new(DFSchema::try_from(Schema::new(fields))?);
        Ok(Self {
            args,
            ordinality,
            schema,
        })
    }

    /// The table function it calls.
    pub fn function(&self) -> Arc<dyn weir_core::table_function::TableFunction> {
        Arc::new(weir_core::table_function::Unnest {
            ordinality: self.ordinality,
        })
    }
}

impl PartialOrd for LateralUnnest {
    fn partial_cmp(&self, _other: &Self) -> Option<std::cmp::Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for LateralUnnest {
    fn name(&self) -> &str {
        "LateralUnnest"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        self.args.clone()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let args: Vec<String> = self.args.iter().map(|a| a.to_string()).collect();
        write!(f, "LateralUnnest({})", args.join(", "))?;
        if self.ordinality {
            write!(f, " WITH ORDINALITY")?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, _inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        Ok(Self {
            args: exprs,
            ordinality: self.ordinality,
            schema: Arc::clone(&self.schema),
        })
    }
}

/// The lateral UNNEST under a plan node, if it is one.
pub(crate) fn as_lateral_unnest(plan: &LogicalPlan) -> Option<&LateralUnnest> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<LateralUnnest>(),
        LogicalPlan::SubqueryAlias(a) => as_lateral_unnest(&a.input),
        LogicalPlan::Subquery(s) => as_lateral_unnest(&s.subquery),
        _ => None,
    }
}

/// The lookup table under a plan node, if it is one.
pub(crate) fn as_lookup_table(plan: &LogicalPlan) -> Option<&LookupTable> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<LookupTable>(),
        LogicalPlan::SubqueryAlias(a) => as_lookup_table(&a.input),
        _ => None,
    }
}

/// A view: its plan is inlined wherever it is read.
#[derive(Debug)]
struct ViewSource {
    plan: LogicalPlan,
}

impl TableSource for ViewSource {
    fn schema(&self) -> SchemaRef {
        Arc::new(self.plan.schema().as_arrow().clone())
    }

    fn get_logical_plan(&self) -> Option<Cow<'_, LogicalPlan>> {
        Some(Cow::Borrowed(&self.plan))
    }
}

fn call(name: &str, args: Vec<sql::Expr>) -> sql::Expr {
    sql::Expr::Function(sql::Function {
        name: sql::ObjectName::from(vec![sql::Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(sql::FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn call_args(f: &sql::Function) -> Vec<sql::Expr> {
    match &f.args {
        FunctionArguments::List(l) => l
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                _ => None,
            })
            .collect(),
        _ => vec![],
    }
}

/// Flink's older group window functions — `GROUP BY k, TUMBLE(ts, size)`
/// (or `HOP(ts, slide, size)`, `SESSION(ts, gap)`) with `TUMBLE_START(…)`,
/// `…_END`, `…_ROWTIME` in the select list — are the window table function
/// over the single table of the FROM clause, grouped by `window_start,
/// window_end`: rewritten so before planning.
fn group_window_functions(query: &mut sql::Query) -> DfResult<()> {
    use sqlparser::ast::VisitMut;
    fn select(s: &mut sql::Select) -> DfResult<()> {
        let sql::GroupByExpr::Expressions(groups, _) = &mut s.group_by else {
            return Ok(());
        };
        let kinds = ["TUMBLE", "HOP", "SESSION"];
        let Some(at) = groups.iter().position(|g| {
            matches!(g, sql::Expr::Function(f) if kinds.contains(&f.name.to_string().to_ascii_uppercase().as_str()))
        }) else {
            return Ok(());
        };
        let sql::Expr::Function(f) = groups[at].clone() else {
            unreachable!()
        };
        let kind = f.name.to_string().to_ascii_uppercase();
        let mut args = call_args(&f);
        if args.len() < 2 {
            return plan_err(format!(
                "{kind}(time, …) in GROUP BY needs its time column and interval(s)"
            ));
        }
        let time = match args.remove(0) {
            sql::Expr::Identifier(i) => i,
            sql::Expr::CompoundIdentifier(parts) => {
                parts.last().cloned().unwrap_or_else(|| sql::Ident::new(""))
            }
            other => {
                return plan_err(format!(
                    "{kind}({other}, …): the first argument must be a time column"
                ));
            }
        };
        let [from] = s.from.as_mut_slice() else {
            return plan_err(format!("GROUP BY {kind}(…) needs a single table in FROM"));
        };
        if !from.joins.is_empty() {
            return plan_err(format!("GROUP BY {kind}(…) needs a single table in FROM"));
        }
        let TableFactor::Table { name, alias, .. } = &from.relation else {
            return plan_err(format!("GROUP BY {kind}(…) needs a table or view in FROM"));
        };
        let table = sql::Expr::CompoundIdentifier(
            name.0
                .iter()
                .filter_map(|p| p.as_ident().cloned())
                .collect(),
        );
        let mut tvf_args = vec![
            call("TABLE", vec![table]),
            call("DESCRIPTOR", vec![sql::Expr::Identifier(time)]),
        ];
        tvf_args.extend(args);
        from.relation = TableFactor::TableFunction {
            expr: call(&kind, tvf_args),
            alias: alias.clone(),
        };
        groups.splice(
            at..=at,
            [
                sql::Expr::Identifier(sql::Ident::new("window_start")),
                sql::Expr::Identifier(sql::Ident::new("window_end")),
            ],
        );
        // TUMBLE_START(…) and friends name the window columns.
        struct Props;
        impl sql::VisitorMut for Props {
            type Break = ();
            fn post_visit_expr(&mut self, e: &mut sql::Expr) -> std::ops::ControlFlow<()> {
                if let sql::Expr::Function(f) = e {
                    let n = f.name.to_string().to_ascii_uppercase();
                    let column = ["TUMBLE", "HOP", "SESSION"].iter().find_map(|k| {
                        n.strip_prefix(k).and_then(|rest| match rest {
                            "_START" => Some("window_start"),
                            "_END" => Some("window_end"),
                            "_ROWTIME" => Some("window_time"),
                            _ => None,
                        })
                    });
                    if let Some(c) = column {
                        *e = sql::Expr::Identifier(sql::Ident::new(c));
                    }
                }
                std::ops::ControlFlow::Continue(())
            }
        }
        for item in &mut s.projection {
            let _ = item.visit(&mut Props);
        }
        if let Some(h) = &mut s.having {
            let _ = h.visit(&mut Props);
        }
        Ok(())
    }
    fn set_expr(body: &mut sql::SetExpr) -> DfResult<()> {
        match body {
            sql::SetExpr::Select(s) => {
                select(s)?;
                for t in &mut s.from {
                    if let TableFactor::Derived { subquery, .. } = &mut t.relation {
                        group_window_functions(subquery)?;
                    }
                }
                Ok(())
            }
            sql::SetExpr::Query(q) => group_window_functions(q),
            sql::SetExpr::SetOperation { left, right, .. } => {
                set_expr(left)?;
                set_expr(right)
            }
            _ => Ok(()),
        }
    }
    set_expr(&mut query.body)
}

/// Name unaliased select items as Flink does: a `row.field` (or
/// `t.column`) by its last part, where DataFusion would call it
/// `t.row[field]` (so views over ROW columns, Nexmark's, have Flink's
/// column names); any other expression but a plain column `EXPR$i`, `i` its
/// position in the select list. DataFusion would name an expression after
/// its text, and a CAST after its operand, so `SUM(v), SUM(CAST(v AS
/// DOUBLE))` would be two columns of one name.
fn name_select_items(query: &mut sql::Query) {
    fn set_expr(body: &mut sql::SetExpr) {
        match body {
            sql::SetExpr::Select(select) => {
                for (i, item) in select.projection.iter_mut().enumerate() {
                    let sql::SelectItem::UnnamedExpr(expr) = item else {
                        continue;
                    };
                    let alias = match expr {
                        sql::Expr::Identifier(_) => continue,
                        sql::Expr::CompoundIdentifier(parts) => match parts.last() {
                            Some(last) => last.clone(),
                            None => continue,
                        },
                        _ => sql::Ident::new(format!("EXPR${i}")),
                    };
                    let expr = expr.clone();
                    *item = sql::SelectItem::ExprWithAlias { expr, alias };
                }
                for t in &mut select.from {
                    table(&mut t.relation);
                    for j in &mut t.joins {
                        table(&mut j.relation);
                    }
                }
            }
            sql::SetExpr::Query(q) => name_select_items(q),
            sql::SetExpr::SetOperation { left, right, .. } => {
                set_expr(left);
                set_expr(right);
            }
            _ => {}
        }
    }
    fn table(t: &mut TableFactor) {
        match t {
            TableFactor::Derived { subquery, .. } => name_select_items(subquery),
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => {
                table(&mut table_with_joins.relation);
                for j in &mut table_with_joins.joins {
                    table(&mut j.relation);
                }
            }
            _ => {}
        }
    }
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            name_select_items(&mut cte.query);
        }
    }
    set_expr(&mut query.body);
}

/// What DataFusion's SQL planner asks about names.
pub(crate) struct Provider<'a> {
    catalog: &'a Catalog,
    functions: &'a Functions,
    options: ConfigOptions,
    expr_planners: Vec<Arc<dyn ExprPlanner>>,
    relation_planners: Vec<Arc<dyn RelationPlanner>>,
}

/// `m['key']` of a MAP (a Kafka table's `headers`) and `r['field']` of a
/// ROW, as Flink reads them: `get_field`, which takes both.
#[derive(Debug)]
struct FieldAccess;

impl ExprPlanner for FieldAccess {
    fn plan_field_access(
        &self,
        expr: datafusion_expr::planner::RawFieldAccessExpr,
        _schema: &datafusion_common::DFSchema,
    ) -> datafusion_common::Result<
        datafusion_expr::planner::PlannerResult<datafusion_expr::planner::RawFieldAccessExpr>,
    > {
        use datafusion_expr::GetFieldAccess;
        use datafusion_expr::planner::PlannerResult;
        match expr.field_access {
            GetFieldAccess::NamedStructField { name } => Ok(PlannerResult::Planned(
                datafusion_functions::core::get_field()
                    .call(vec![expr.expr, Expr::Literal(name, None)]),
            )),
            other => Ok(PlannerResult::Original(
                datafusion_expr::planner::RawFieldAccessExpr {
                    field_access: other,
                    expr: expr.expr,
                },
            )),
        }
    }
}

impl<'a> Provider<'a> {
    pub(crate) fn new(catalog: &'a Catalog, functions: &'a Functions) -> Self {
        let expr_planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
            Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
            Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
            Arc::new(FieldAccess),
        ];
        Self {
            catalog,
            functions,
            options: ConfigOptions::default(),
            expr_planners,
            relation_planners: vec![Arc::new(WindowTvfPlanner)],
        }
    }

    fn sql_to_rel(&self) -> SqlToRel<'_, Self> {
        SqlToRel::new_with_options(
            self,
            // Flink: exact numeric literals (`0.908`) are DECIMAL.
            ParserOptions::new()
                .with_parse_float_as_decimal(true)
                .with_collect_spans(true)
                .with_enable_ident_normalization(false)
                .with_map_string_types_to_utf8view(false)
                // Flink: NULL is the smallest value (first ascending, last
                // descending) unless NULLS FIRST/LAST says otherwise.
                .with_default_null_ordering(NullOrdering::NullsMin),
        )
    }

    /// Plan a query; types are coerced (DataFusion's analyzer).
    pub(crate) fn plan_query(&self, mut query: sql::Query) -> DfResult<LogicalPlan> {
        lateral_tables(&mut query)?;
        group_window_functions(&mut query)?;
        name_select_items(&mut query);
        let plan = self
            .sql_to_rel()
            .sql_statement_to_plan(sql::Statement::Query(Box::new(query)))?;
        let plan = Analyzer::new().execute_and_check(plan, &self.options, |_, _| {})?;
        // Filters move toward the sources and into joins (`FROM a, b WHERE
        // a.k = b.k` becomes a join with that condition; the lowering takes
        // its equalities as keys). Rules that reshape aggregations or
        // projections are left out: the lowering recognizes window
        // aggregations by their plan shape.
        let optimizer = datafusion_optimizer::Optimizer::with_rules(vec![Arc::new(
            datafusion_optimizer::push_down_filter::PushDownFilter::new(),
        )]);
        optimizer.optimize(
            plan,
            &datafusion_optimizer::OptimizerContext::new().with_skip_failing_rules(false),
            |_, _| {},
        )
    }

    /// Plan one expression against a schema (computed columns); returns
    /// the coerced expression and its field.
    pub(crate) fn plan_expr(&self, expr: sql::Expr, schema: &Schema, name: &str) -> DfResult<Expr> {
        let source = Arc::new(LogicalTableSource::new(Arc::new(schema.clone())));
        let scan = LogicalPlanBuilder::scan("t", source, None)?.build()?;
        let e = self
            .sql_to_rel()
            .sql_to_expr(expr, scan.schema(), &mut PlannerContext::new())?;
        coerce_expr(e, schema, name, &self.options)
    }
}

/// `e` over a table of `schema`, types coerced by DataFusion's analyzer,
/// its columns unqualified.
pub(crate) fn coerce_expr(
    e: Expr,
    schema: &Schema,
    name: &str,
    options: &ConfigOptions,
) -> DfResult<Expr> {
    let source = Arc::new(LogicalTableSource::new(Arc::new(schema.clone())));
    let plan = LogicalPlanBuilder::scan("t", source, None)?
        .project(vec![e.alias(name)])?
        .build()?;
    let plan = Analyzer::new().execute_and_check(plan, options, |_, _| {})?;
    match plan {
        LogicalPlan::Projection(mut p) => {
            use datafusion_common::tree_node::{Transformed, TreeNode};
            // Columns of the table itself: no qualifier.
            let e = p.expr.remove(0).unalias().transform(|e| {
                Ok(match e {
                    Expr::Column(c) if c.relation.is_some() => Transformed::yes(Expr::Column(
                        datafusion_common::Column::new_unqualified(c.name),
                    )),
                    other => Transformed::no(other),
                })
            })?;
            Ok(e.data)
        }
        other => Err(DataFusionError::Internal(format!(
            "expression planned as {other}"
        ))),
    }
}

impl ContextProvider for Provider<'_> {
    fn get_table_function_source(
        &self,
        name: &str,
        args: Vec<Expr>,
    ) -> DfResult<Arc<dyn TableSource>> {
        let Some(function) = self.functions.table(name) else {
            return plan_err(format!(
                "unknown table function '{name}'{}",
                match self.functions.table_names().as_slice() {
                    [] => " (no table functions are registered)".to_string(),
                    names => format!("; registered: {}", names.join(", ")),
                }
            ));
        };
        let schema = Arc::new(Schema::new(function.fields()));
        Ok(Arc::new(TableFunctionSource {
            function,
            args,
            schema,
        }))
    }

    fn get_table_source(&self, name: TableReference) -> DfResult<Arc<dyn TableSource>> {
        let object = sql::ObjectName::from(vec![sql::Ident::new(name.table())]);
        match self.catalog.relation(&object) {
            Ok(Relation::Table(t)) => Ok(Arc::new(LogicalTableSource::new(Arc::clone(
                &t.full_schema,
            )))),
            Ok(Relation::View(v)) => Ok(Arc::new(ViewSource {
                plan: v.plan.clone(),
            })),
            Err(e) => Err(DataFusionError::Plan(e.message)),
        }
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.expr_planners
    }

    fn get_relation_planners(&self) -> &[Arc<dyn RelationPlanner>] {
        &self.relation_planners
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.functions.scalar(name)
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.functions.aggregate(name)
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.functions.window(name)
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.functions.scalar_names()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        vec![]
    }

    fn udaf_names(&self) -> Vec<String> {
        self.functions.aggregate_names()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.functions.window_names()
    }
}

/// Plans `FROM TABLE(TUMBLE(…))` and its siblings into [`WindowTvf`].
#[derive(Debug)]
struct WindowTvfPlanner;

fn plan_err<T>(msg: impl Into<String>) -> DfResult<T> {
    Err(DataFusionError::Plan(msg.into()))
}

/// An interval literal in milliseconds.
fn interval_ms(e: &Expr, what: &str, function: &str) -> DfResult<i64> {
    let Some(ms) = crate::lower::interval_literal(e) else {
        return plan_err(format!(
            "{function}: the {what} must be a day-time interval literal such as INTERVAL '10' SECOND, not {e}"
        ));
    };
    if ms < 0 || (ms == 0 && what != "offset") {
        return plan_err(format!(
            "{function}: the {what} must be positive, got {ms} ms"
        ));
    }
    Ok(ms)
}

impl RelationPlanner for WindowTvfPlanner {
    fn plan_relation(
        &self,
        relation: TableFactor,
        ctx: &mut dyn RelationPlannerContext,
    ) -> DfResult<RelationPlanning> {
        if let TableFactor::Table {
            name,
            alias,
            version: Some(sql::TableVersion::ForSystemTimeAsOf(at)),
            ..
        } = &relation
        {
            let as_of = match at {
                sql::Expr::Identifier(i) => vec![i.value.clone()],
                sql::Expr::CompoundIdentifier(parts) => {
                    parts.iter().map(|i| i.value.clone()).collect()
                }
                other => {
                    return plan_err(format!(
                        "FOR SYSTEM_TIME AS OF {other}: a temporal join reads its table as of a time attribute of the other input (a column), as in Flink"
                    ));
                }
            };
            let table = name.to_string();
            let source = ctx
                .context_provider()
                .get_table_source(TableReference::bare(table.clone()))?;
            // A view (a versioned view: the latest row per key) is read
            // through its plan.
            let input = match source.get_logical_plan() {
                Some(view) => LogicalPlanBuilder::from(view.into_owned())
                    .alias(table)?
                    .build()?,
                None => LogicalPlanBuilder::scan(table, source, None)?.build()?,
            };
            let plan = LogicalPlan::Extension(Extension {
                node: Arc::new(LookupTable { input, as_of }),
            });
            return Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
                plan,
                alias.clone(),
            ))));
        }
        if let TableFactor::UNNEST {
            alias,
            array_exprs,
            with_ordinality,
            with_offset: false,
            ..
        } = &relation
        {
            // Planned here, not by DataFusion: its columns come from the
            // arrays' element types (a ROW's fields, a map's key and value)
            // and WITH ORDINALITY adds one. The arrays are columns of the
            // tables to the left (outer references).
            let empty = DFSchema::empty();
            let args = array_exprs
                .iter()
                .map(|e| ctx.sql_to_expr(e.clone(), &empty))
                .collect::<DfResult<Vec<_>>>()?;
            let node = LateralUnnest::new(args, *with_ordinality)?;
            let plan = LogicalPlan::Extension(Extension {
                node: Arc::new(node),
            });
            return Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
                plan,
                alias.clone(),
            ))));
        }
        if let Some((plan, alias)) = crate::match_recognize::plan(ctx, &relation)? {
            return Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
                plan, alias,
            ))));
        }
        let TableFactor::TableFunction {
            expr: sql::Expr::Function(f),
            alias,
        } = &relation
        else {
            return Ok(RelationPlanning::Original(Box::new(relation)));
        };
        let function = f.name.to_string().to_ascii_uppercase();
        if !["TUMBLE", "HOP", "CUMULATE", "SESSION"].contains(&function.as_str()) {
            return plan_err(format!(
                "unknown table function '{}': Weir's window table functions are TUMBLE, HOP, CUMULATE and SESSION",
                f.name
            ));
        }
        let FunctionArguments::List(list) = &f.args else {
            return plan_err(format!("{function} needs arguments"));
        };
        let mut data: Option<String> = None;
        let mut time: Option<String> = None;
        let mut intervals: Vec<(Option<String>, sql::Expr)> = vec![];
        for arg in &list.args {
            let (name, e) = match arg {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => (None, e),
                FunctionArg::Named {
                    name,
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => (Some(name.value.to_ascii_uppercase()), e),
                other => return plan_err(format!("{function}: unexpected argument {other}")),
            };
            let call = match e {
                sql::Expr::Function(c) => Some((c.name.to_string().to_ascii_uppercase(), c)),
                _ => None,
            };
            match (name.as_deref(), call) {
                (Some("DATA") | None, Some((n, c))) if n == "TABLE" => {
                    data = Some(single_name(c)?);
                }
                (Some("TIMECOL") | None, Some((n, c))) if n == "DESCRIPTOR" => {
                    time = Some(single_name(c)?);
                }
                (Some("DATA"), _) => {
                    return plan_err(format!("{function}: DATA must be TABLE name"));
                }
                (Some("TIMECOL"), _) => {
                    return plan_err(format!("{function}: TIMECOL must be DESCRIPTOR(column)"));
                }
                _ => intervals.push((name, e.clone())),
            }
        }
        let Some(data) = data else {
            return plan_err(format!(
                "{function} needs its input as TABLE name, e.g. {function}(TABLE bid, DESCRIPTOR(dateTime), …)"
            ));
        };
        let Some(time) = time else {
            return plan_err(format!(
                "{function} needs the time column as DESCRIPTOR(column)"
            ));
        };
        let source = ctx
            .context_provider()
            .get_table_source(TableReference::bare(data.clone()))?;
        let input = LogicalPlanBuilder::scan(data.clone(), source, None)?.build()?;
        let Some(time_column) = input
            .schema()
            .fields()
            .iter()
            .position(|f| f.name() == &time)
        else {
            let names: Vec<&str> = input
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            let near = crate::catalog::near_matches(&time, names.iter().copied());
            return plan_err(format!(
                "{function}: DESCRIPTOR({time}) names no column of '{data}'{}; columns: {}",
                match near.as_slice() {
                    [] => String::new(),
                    n => format!(" (did you mean {}?)", n.join(", ")),
                },
                names.join(", ")
            ));
        };
        // Interval arguments by name, else by position.
        let order: &[&str] = match function.as_str() {
            "TUMBLE" => &["SIZE", "OFFSET"],
            "HOP" => &["SLIDE", "SIZE", "OFFSET"],
            "CUMULATE" => &["STEP", "SIZE", "OFFSET"],
            _ => &["GAP"],
        };
        let empty = DFSchema::empty();
        let mut values: HashMap<&str, i64> = HashMap::new();
        for (i, (name, e)) in intervals.into_iter().enumerate() {
            let slot = match name {
                Some(n) => *order.iter().find(|o| **o == n).ok_or_else(|| {
                    DataFusionError::Plan(format!(
                        "{function} has no argument {n}; its arguments are DATA, TIMECOL, {}",
                        order.join(", ")
                    ))
                })?,
                None => *order.get(i).ok_or_else(|| {
                    DataFusionError::Plan(format!(
                        "{function} takes at most {} interval arguments ({})",
                        order.len(),
                        order.join(", ")
                    ))
                })?,
            };
            let planned = ctx.sql_to_expr(e, &empty)?;
            values.insert(
                slot,
                interval_ms(&planned, &slot.to_ascii_lowercase(), &function)?,
            );
        }
        let need = |k: &str| {
            values
                .get(k)
                .copied()
                .ok_or_else(|| DataFusionError::Plan(format!("{function} needs its {k} interval")))
        };
        let offset = values.get("OFFSET").copied().unwrap_or(0);
        let window = match function.as_str() {
            "TUMBLE" => TvfWindow::Tumble {
                size: need("SIZE")?,
                offset,
            },
            "HOP" => {
                let (slide, size) = (need("SLIDE")?, need("SIZE")?);
                if size % slide != 0 {
                    return plan_err(format!(
                        "HOP: the size ({size} ms) must be a multiple of the slide ({slide} ms)"
                    ));
                }
                TvfWindow::Hop {
                    slide,
                    size,
                    offset,
                }
            }
            "CUMULATE" => {
                let (step, size) = (need("STEP")?, need("SIZE")?);
                if size % step != 0 {
                    return plan_err(format!(
                        "CUMULATE: the size ({size} ms) must be a multiple of the step ({step} ms)"
                    ));
                }
                TvfWindow::Cumulate { step, size, offset }
            }
            _ => TvfWindow::Session { gap: need("GAP")? },
        };
        if let Some(clash) =
            input.schema().fields().iter().find(|f| {
                ["window_start", "window_end", "window_time"].contains(&f.name().as_str())
            })
        {
            return plan_err(format!(
                "{function}: the input '{data}' already has a column '{}'; rename it in a view ({function} adds window_start, window_end and window_time)",
                clash.name()
            ));
        }
        let node = WindowTvf::new(input, time_column, window)?;
        let plan = LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        });
        Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
            plan,
            alias.clone(),
        ))))
    }
}

/// Flink's lateral tables in the forms DataFusion plans: `UNNEST(a)`
/// (which the Flink dialect reads as a table named UNNEST) becomes the
/// UNNEST table factor, and `LATERAL TABLE(f(x))` the lateral table
/// function `f(x)`; both are planned against the columns of the tables to
/// their left.
fn lateral_tables(query: &mut sql::Query) -> DfResult<()> {
    struct Lateral(Option<DataFusionError>);
    impl sql::VisitorMut for Lateral {
        type Break = ();
        fn pre_visit_table_factor(&mut self, t: &mut TableFactor) -> std::ops::ControlFlow<()> {
            match t {
                TableFactor::Table {
                    name,
                    alias,
                    args: Some(args),
                    with_ordinality,
                    ..
                } if name.to_string().eq_ignore_ascii_case("unnest") => {
                    let with_ordinality = *with_ordinality;
                    let mut exprs = vec![];
                    for a in &args.args {
                        match a {
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => exprs.push(e.clone()),
                            other => {
                                self.0 = Some(DataFusionError::Plan(format!(
                                    "UNNEST takes arrays, not {other}"
                                )));
                                return std::ops::ControlFlow::Break(());
                            }
                        }
                    }
                    *t = TableFactor::UNNEST {
                        alias: alias.take(),
                        array_exprs: exprs,
                        with_offset: false,
                        with_offset_alias: None,
                        with_ordinality,
                    };
                }
                TableFactor::Function {
                    lateral: true,
                    name,
                    args,
                    alias,
                    ..
                } if name.to_string().eq_ignore_ascii_case("table") => {
                    let call = match args.as_slice() {
                        [FunctionArg::Unnamed(FunctionArgExpr::Expr(sql::Expr::Function(f)))] => {
                            f.clone()
                        }
                        _ => {
                            self.0 = Some(DataFusionError::Plan(
                                "LATERAL TABLE(…) takes one call of a table function, as LATERAL TABLE(f(x))".into(),
                            ));
                            return std::ops::ControlFlow::Break(());
                        }
                    };
                    *t = TableFactor::Function {
                        lateral: true,
                        name: call.name.clone(),
                        args: call_args(&call)
                            .into_iter()
                            .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                            .collect(),
                        with_ordinality: false,
                        alias: alias.take(),
                    };
                }
                _ => {}
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    use sql::VisitMut;
    let mut v = Lateral(None);
    let _ = query.visit(&mut v);
    v.0.map_or(Ok(()), Err)
}

/// A table function called in a query (`LATERAL TABLE(f(x))`): what the
/// lowering turns into a lateral join of the rows to its left.
#[derive(Debug)]
pub(crate) struct TableFunctionSource {
    pub(crate) function: Arc<dyn weir_core::table_function::TableFunction>,
    pub(crate) args: Vec<Expr>,
    schema: SchemaRef,
}

impl TableSource for TableFunctionSource {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// Whether `e` is the literal TRUE (`ON TRUE`).
pub(crate) fn is_true(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Literal(datafusion_common::ScalarValue::Boolean(Some(true)), _)
    )
}

/// The table function under a plan node, if it is a call of one.
pub(crate) fn as_table_function(plan: &LogicalPlan) -> Option<&TableFunctionSource> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let source: &dyn std::any::Any = scan.source.as_ref();
            source.downcast_ref::<TableFunctionSource>()
        }
        LogicalPlan::SubqueryAlias(a) => as_table_function(&a.input),
        _ => None,
    }
}

/// The single identifier argument of `TABLE(x)` / `DESCRIPTOR(x)`.
fn single_name(call: &sql::Function) -> DfResult<String> {
    // TABLE(name, partition columns…): the name comes first.
    if let FunctionArguments::List(l) = &call.args
        && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) = l.args.first()
    {
        match e {
            sql::Expr::Identifier(i) => return Ok(i.value.clone()),
            sql::Expr::CompoundIdentifier(parts) => {
                return Ok(parts.last().map(|i| i.value.clone()).unwrap_or_default());
            }
            _ => {}
        }
    }
    plan_err(format!("{}(…) takes one name", call.name))
}

/// The window table function under a plan node, if the node is one.
pub(crate) fn as_window_tvf(plan: &LogicalPlan) -> Option<&WindowTvf> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<WindowTvf>(),
        _ => None,
    }
}
