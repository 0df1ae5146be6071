//! Planning `MATCH_RECOGNIZE` (Flink's row pattern recognition).
//!
//! The clause becomes a [`MatchRecognizeNode`] over its input. Its DEFINE
//! conditions and MEASURES are SQL expressions whose pattern navigations —
//! `A.price`, `LAST(A.price, 1)`, `FIRST(price)`, `PREV(price)`,
//! `SUM(A.price)`, `MATCH_ROWTIME()` — are replaced by columns `__nav{i}`
//! (one per [`Navigation`]); the rest is planned by DataFusion against the
//! input's columns (DEFINE: the current row) and those columns, so every
//! scalar function and operator works inside them.
//!
//! sqlparser does not read Flink's `PATTERN (…) WITHIN INTERVAL …`:
//! [`move_within`] moves the interval into the DEFINE list under a name no
//! variable can have before parsing, and the planner takes it back out.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Field, FieldRef, Schema};
use datafusion_common::{DFSchema, DFSchemaRef, DataFusionError};
use datafusion_expr::planner::RelationPlannerContext;
use datafusion_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};
use sqlparser::ast as sql;
use sqlparser::tokenizer::{Token, TokenWithSpan, Word};
use weir_core::match_spec::{AfterMatchSkip, MatchPattern, NavAggregate, NavKind, Navigation};

type DfResult<T> = datafusion_common::Result<T>;

/// The DEFINE entry that carries `WITHIN`'s interval (quoted: no pattern
/// variable can be called so).
const WITHIN: &str = "weir$within";

fn plan_err<T>(msg: impl Into<String>) -> DfResult<T> {
    Err(DataFusionError::Plan(format!(
        "MATCH_RECOGNIZE: {}",
        msg.into()
    )))
}

/// `PATTERN (…) WITHIN <interval> DEFINE …` → `PATTERN (…) DEFINE
/// "weir$within" AS <interval>, …`, on the tokens of a script.
pub(crate) fn move_within(tokens: &mut Vec<TokenWithSpan>) {
    let is = |t: &TokenWithSpan, w: &str| matches!(&t.token, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    let mut i = 0;
    while i < tokens.len() {
        let open =
            (i + 1..tokens.len()).find(|&k| !matches!(tokens[k].token, Token::Whitespace(_)));
        let Some(open) =
            open.filter(|&o| is(&tokens[i], "PATTERN") && tokens[o].token == Token::LParen)
        else {
            i += 1;
            continue;
        };
        // The pattern's closing parenthesis.
        let mut depth = 0;
        let mut j = open;
        while j < tokens.len() {
            match tokens[j].token {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let within =
            (j + 1..tokens.len()).find(|&k| !matches!(tokens[k].token, Token::Whitespace(_)));
        let Some(w) = within.filter(|&w| is(&tokens[w], "WITHIN")) else {
            i = j;
            continue;
        };
        let Some(define) = (w + 1..tokens.len()).find(|&k| is(&tokens[k], "DEFINE")) else {
            return;
        };
        let interval: Vec<TokenWithSpan> = tokens.drain(w..define).skip(1).collect();
        let define = w;
        let span = tokens[define].span;
        let word = |value: &str, quote: Option<char>| TokenWithSpan {
            token: Token::Word(Word {
                value: value.to_string(),
                quote_style: quote,
                keyword: if value == "AS" {
                    sqlparser::keywords::Keyword::AS
                } else {
                    sqlparser::keywords::Keyword::NoKeyword
                },
            }),
            span,
        };
        let space = TokenWithSpan {
            token: Token::Whitespace(sqlparser::tokenizer::Whitespace::Space),
            span,
        };
        let mut insert = vec![
            space.clone(),
            word(WITHIN, Some('"')),
            space.clone(),
            word("AS", None),
        ];
        insert.extend(interval);
        insert.push(TokenWithSpan {
            token: Token::Comma,
            span,
        });
        let at = define + 1;
        tokens.splice(at..at, insert);
        i = at;
    }
}

/// A DEFINE condition or measure: a planned expression over the input's
/// columns (DEFINE) and its navigations' columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlannedMatchExpr {
    /// The expression, over unqualified column names.
    pub expr: Expr,
    /// Its navigations, columns `__nav{i}`.
    pub navigations: Vec<Navigation>,
}

/// `MATCH_RECOGNIZE` over its input.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatchRecognizeNode {
    /// The rows matched.
    pub input: LogicalPlan,
    /// `PARTITION BY` columns.
    pub keys: Vec<String>,
    /// The time column rows are ordered by.
    pub order: String,
    /// Pattern variables.
    pub variables: Vec<String>,
    /// The pattern.
    pub pattern: MatchPattern,
    /// Per variable, its condition.
    pub defines: Vec<Option<PlannedMatchExpr>>,
    /// Measures and their names.
    pub measures: Vec<(PlannedMatchExpr, String)>,
    /// `AFTER MATCH SKIP`.
    pub skip: AfterMatchSkip,
    /// `WITHIN`, ms.
    pub within_ms: Option<i64>,
    /// The measure that is `MATCH_ROWTIME()`.
    pub rowtime_measure: Option<String>,
    schema: DFSchemaRef,
}

impl PartialOrd for MatchRecognizeNode {
    fn partial_cmp(&self, _other: &Self) -> Option<std::cmp::Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for MatchRecognizeNode {
    fn name(&self) -> &str {
        "MatchRecognize"
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
        write!(
            f,
            "MatchRecognize: partition [{}] order {} pattern ({})",
            self.keys.join(", "),
            self.order,
            self.pattern.sql(&self.variables)
        )
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        let mut node = self.clone();
        node.input = inputs.remove(0);
        Ok(node)
    }
}

/// The MATCH_RECOGNIZE under a plan node, if it is one.
pub(crate) fn as_match_recognize(plan: &LogicalPlan) -> Option<&MatchRecognizeNode> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<MatchRecognizeNode>(),
        _ => None,
    }
}

fn column_name(e: &sql::Expr, what: &str) -> DfResult<String> {
    match e {
        sql::Expr::Identifier(i) => Ok(i.value.clone()),
        sql::Expr::CompoundIdentifier(parts) if !parts.is_empty() => {
            Ok(parts.last().expect("non-empty").value.clone())
        }
        other => plan_err(format!("{what} must be a column, not {other}")),
    }
}

/// The pattern as Weir's, its variables numbered in order of appearance.
fn to_pattern(p: &sql::MatchRecognizePattern, vars: &mut Vec<String>) -> DfResult<MatchPattern> {
    use sql::MatchRecognizePattern as P;
    use sql::RepetitionQuantifier as Q;
    Ok(match p {
        P::Symbol(sql::MatchRecognizeSymbol::Named(v)) => {
            let at = match vars.iter().position(|x| *x == v.value) {
                Some(at) => at,
                None => {
                    vars.push(v.value.clone());
                    vars.len() - 1
                }
            };
            MatchPattern::Var(at)
        }
        P::Symbol(s) => return plan_err(format!("the anchor {s} is not supported (nor in Flink)")),
        P::Exclude(s) => return plan_err(format!("{{- {s} -}} is not supported (nor in Flink)")),
        P::Permute(_) => return plan_err("PERMUTE is not supported (nor in Flink)"),
        P::Concat(parts) => MatchPattern::Concat(
            parts
                .iter()
                .map(|x| to_pattern(x, vars))
                .collect::<DfResult<_>>()?,
        ),
        P::Group(inner) => to_pattern(inner, vars)?,
        P::Alternation(parts) => MatchPattern::Alternation(
            parts
                .iter()
                .map(|x| to_pattern(x, vars))
                .collect::<DfResult<_>>()?,
        ),
        P::Repetition(inner, q) => {
            // `A+?` arrives as (A+)? with no group between: reluctant.
            let (inner, q, greedy) = match (inner.as_ref(), q) {
                (P::Repetition(x, q), Q::AtMostOne) => (x.as_ref(), q, false),
                _ => (inner.as_ref(), q, true),
            };
            let (min, max) = match q {
                Q::ZeroOrMore => (0, None),
                Q::OneOrMore => (1, None),
                Q::AtMostOne => (0, Some(1)),
                Q::Exactly(n) => (*n, Some(*n)),
                Q::AtLeast(n) => (*n, None),
                Q::AtMost(n) => (0, Some(*n)),
                Q::Range(n, m) => (*n, Some(*m)),
            };
            if max.is_some_and(|m| m < min || m == 0) {
                return plan_err(format!("the quantifier {q} takes no row"));
            }
            MatchPattern::Repeat {
                inner: Box::new(to_pattern(inner, vars)?),
                min,
                max,
                greedy,
            }
        }
    })
}

/// Rewrites the navigations of one expression into `__nav{i}` columns.
struct Navigations<'a> {
    vars: &'a [String],
    /// The variable a DEFINE defines (`None` in MEASURES).
    defining: Option<usize>,
    rowtime: &'a str,
    found: Vec<Navigation>,
    error: Option<String>,
}

impl Navigations<'_> {
    fn var(&self, name: &str) -> Option<usize> {
        self.vars.iter().position(|v| v == name)
    }

    /// `v.col` or `col`: (variable, column).
    fn reference(&self, e: &sql::Expr) -> Option<(Option<usize>, Option<String>)> {
        match e {
            sql::Expr::Identifier(i) => Some((None, Some(i.value.clone()))),
            sql::Expr::CompoundIdentifier(p) if p.len() == 2 => {
                let v = self.var(&p[0].value)?;
                Some((Some(v), Some(p[1].value.clone())))
            }
            sql::Expr::QualifiedWildcard(name, _) => {
                let v = self.var(&name.to_string())?;
                Some((Some(v), None))
            }
            sql::Expr::Wildcard(_) => Some((None, None)),
            _ => None,
        }
    }

    fn push(&mut self, n: Navigation) -> sql::Expr {
        let at = self.found.iter().position(|x| *x == n).unwrap_or_else(|| {
            self.found.push(n);
            self.found.len() - 1
        });
        sql::Expr::Identifier(sql::Ident::new(Navigation::column_name(at)))
    }

    fn nav(
        &mut self,
        kind: NavKind,
        (var, column): (Option<usize>, Option<String>),
        offset: u32,
    ) -> sql::Expr {
        self.push(Navigation {
            kind,
            var,
            column,
            offset,
        })
    }

    fn rewrite(&mut self, e: &mut sql::Expr) {
        match e {
            sql::Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_uppercase();
                let args: Vec<sql::Expr> = match &f.args {
                    sql::FunctionArguments::List(l) => l
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(e)) => {
                                Some(e.clone())
                            }
                            sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Wildcard) => {
                                Some(sql::Expr::Wildcard(
                                    sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                                ))
                            }
                            sql::FunctionArg::Unnamed(sql::FunctionArgExpr::QualifiedWildcard(
                                n,
                            )) => Some(sql::Expr::QualifiedWildcard(
                                n.clone(),
                                sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
                            )),
                            _ => None,
                        })
                        .collect(),
                    _ => vec![],
                };
                let offset = |a: Option<&sql::Expr>| -> Result<u32, String> {
                    match a {
                        None => Ok(0),
                        Some(sql::Expr::Value(v)) => match &v.value {
                            sql::Value::Number(n, _) => n
                                .parse()
                                .map_err(|_| format!("{name}: offset {n} is not a row count")),
                            other => Err(format!("{name}: offset {other} is not a row count")),
                        },
                        Some(other) => Err(format!("{name}: offset {other} must be a number")),
                    }
                };
                let kind = match name.as_str() {
                    "LAST" => Some(NavKind::Last),
                    "FIRST" => Some(NavKind::First),
                    "PREV" => Some(NavKind::Prev),
                    "SUM" => Some(NavKind::Aggregate(NavAggregate::Sum)),
                    "MIN" => Some(NavKind::Aggregate(NavAggregate::Min)),
                    "MAX" => Some(NavKind::Aggregate(NavAggregate::Max)),
                    "COUNT" => Some(NavKind::Aggregate(NavAggregate::Count)),
                    "AVG" => Some(NavKind::Aggregate(NavAggregate::Sum)),
                    "MATCH_ROWTIME" => {
                        *e = self.nav(NavKind::Last, (None, Some(self.rowtime.to_string())), 0);
                        return;
                    }
                    "MATCH_PROCTIME" | "NEXT" | "CLASSIFIER" | "MATCH_NUMBER" => {
                        self.error = Some(format!("{name}() is not supported"));
                        return;
                    }
                    _ => None,
                };
                let Some(kind) = kind else {
                    // Any other function: its arguments may navigate.
                    if let sql::FunctionArguments::List(l) = &mut f.args {
                        for a in &mut l.args {
                            if let sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(x)) = a {
                                self.rewrite(x);
                            }
                        }
                    }
                    return;
                };
                let Some(target) = args.first().and_then(|a| self.reference(a)) else {
                    self.error = Some(format!(
                        "{name}(…) takes a column of the pattern (A.price or price), not {}",
                        args.first().map(|a| a.to_string()).unwrap_or_default()
                    ));
                    return;
                };
                match kind {
                    NavKind::Aggregate(_) if args.len() > 1 => {
                        self.error = Some(format!("{name} takes one argument"));
                    }
                    NavKind::Aggregate(a) => {
                        let a = match (a, &target.1) {
                            (NavAggregate::Count, None) => NavAggregate::CountRows,
                            (_, None) => {
                                self.error = Some(format!("{name}(*) is not an aggregate"));
                                return;
                            }
                            (a, Some(_)) => a,
                        };
                        if name == "AVG" {
                            // As Flink's AVG: of integers, an integer.
                            let sum =
                                self.nav(NavKind::Aggregate(NavAggregate::Sum), target.clone(), 0);
                            let count =
                                self.nav(NavKind::Aggregate(NavAggregate::Count), target, 0);
                            *e = sql::Expr::Nested(Box::new(sql::Expr::BinaryOp {
                                left: Box::new(sum),
                                op: sql::BinaryOperator::Divide,
                                right: Box::new(count),
                            }));
                        } else {
                            *e = self.nav(NavKind::Aggregate(a), target, 0);
                        }
                    }
                    kind => {
                        if target.1.is_none() {
                            self.error = Some(format!("{name}(*) is not a navigation"));
                            return;
                        }
                        match offset(args.get(1)) {
                            Ok(n) => {
                                // PREV(col) is the row before.
                                let n = if kind == NavKind::Prev && args.len() < 2 {
                                    1
                                } else {
                                    n
                                };
                                *e = self.nav(kind, target, n);
                            }
                            Err(m) => self.error = Some(m),
                        }
                    }
                }
            }
            sql::Expr::CompoundIdentifier(p) if p.len() == 2 && self.var(&p[0].value).is_some() => {
                let v = self.var(&p[0].value);
                let col = p[1].value.clone();
                if v.is_some() && v == self.defining {
                    *e = sql::Expr::Identifier(sql::Ident::new(col));
                } else {
                    *e = self.nav(NavKind::Last, (v, Some(col)), 0);
                }
            }
            sql::Expr::Identifier(i) if self.defining.is_none() => {
                let col = i.value.clone();
                *e = self.nav(NavKind::Last, (None, Some(col)), 0);
            }
            _ => {
                rewrite_children(self, e);
            }
        }
    }
}

/// Rewrite the direct child expressions of `e`.
fn rewrite_children(n: &mut Navigations, e: &mut sql::Expr) {
    use sql::Expr as E;
    match e {
        E::BinaryOp { left, right, .. } => {
            n.rewrite(left);
            n.rewrite(right);
        }
        E::UnaryOp { expr, .. }
        | E::Nested(expr)
        | E::IsNull(expr)
        | E::IsNotNull(expr)
        | E::IsTrue(expr)
        | E::IsFalse(expr)
        | E::IsNotTrue(expr)
        | E::IsNotFalse(expr)
        | E::Cast { expr, .. } => n.rewrite(expr),
        E::Between {
            expr, low, high, ..
        } => {
            n.rewrite(expr);
            n.rewrite(low);
            n.rewrite(high);
        }
        E::InList { expr, list, .. } => {
            n.rewrite(expr);
            list.iter_mut().for_each(|x| n.rewrite(x));
        }
        E::Like { expr, pattern, .. } | E::ILike { expr, pattern, .. } => {
            n.rewrite(expr);
            n.rewrite(pattern);
        }
        E::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            if let Some(o) = operand {
                n.rewrite(o);
            }
            for c in conditions {
                n.rewrite(&mut c.condition);
                n.rewrite(&mut c.result);
            }
            if let Some(x) = else_result {
                n.rewrite(x);
            }
        }
        _ => {}
    }
}

/// Plan one rewritten expression against `schema` (unqualified), with
/// DataFusion's type coercion.
fn plan_expr(
    ctx: &mut dyn RelationPlannerContext,
    expr: sql::Expr,
    schema: &Schema,
) -> DfResult<Expr> {
    let e = ctx.sql_to_expr(expr, &DFSchema::try_from(schema.clone())?)?;
    let options = ctx.context_provider().options().clone();
    crate::planner::coerce_expr(e, schema, "__e", &options)
}

/// Plan a `MATCH_RECOGNIZE` relation (`None` for any other): the node
/// over its planned input, and the relation's alias.
pub(crate) fn plan(
    ctx: &mut dyn RelationPlannerContext,
    relation: &sql::TableFactor,
) -> DfResult<Option<(LogicalPlan, Option<sql::TableAlias>)>> {
    let sql::TableFactor::MatchRecognize {
        table,
        partition_by,
        order_by,
        measures,
        rows_per_match,
        after_match_skip,
        pattern,
        symbols,
        alias,
    } = relation
    else {
        return Ok(None);
    };
    let input = ctx.plan(table.as_ref().clone())?;
    if matches!(rows_per_match, Some(sql::RowsPerMatch::AllRows(_))) {
        return plan_err(
            "ALL ROWS PER MATCH is not supported (nor in Flink); use ONE ROW PER MATCH",
        );
    }
    let fields: Vec<FieldRef> = input.schema().fields().iter().cloned().collect();
    let row_schema = Schema::new(fields.clone());
    let has = |n: &str| row_schema.index_of(n).is_ok();
    let mut keys = vec![];
    for k in partition_by {
        let k = column_name(k, "a PARTITION BY entry")?;
        if !has(&k) {
            return plan_err(format!("PARTITION BY {k}: no such column"));
        }
        keys.push(k);
    }
    let order = match order_by.as_slice() {
        [o] if o.options.asc != Some(false) => column_name(&o.expr, "ORDER BY")?,
        [] => return plan_err("ORDER BY a time attribute is required"),
        [_] => return plan_err("ORDER BY must be a time attribute, ascending"),
        _ => return plan_err("ORDER BY more than the time attribute is not supported"),
    };
    if !has(&order) {
        return plan_err(format!("ORDER BY {order}: no such column"));
    }
    let mut variables = vec![];
    let pattern = to_pattern(pattern, &mut variables)?;
    if pattern.ends_greedy() {
        return plan_err(
            "greedy quantifiers are not allowed as the last element of a pattern (as in Flink): finish it with a simple variable or a reluctant quantifier",
        );
    }
    let mut defines_sql: HashMap<usize, sql::Expr> = HashMap::new();
    let mut within_ms = None;
    for s in symbols {
        if s.symbol.value == WITHIN && s.symbol.quote_style == Some('"') {
            let e = ctx.sql_to_expr(s.definition.clone(), &DFSchema::empty())?;
            let Some(ms) = crate::lower::interval_literal(&e) else {
                return plan_err(format!(
                    "WITHIN {}: not a day-time interval literal",
                    s.definition
                ));
            };
            within_ms = Some(ms);
            continue;
        }
        let Some(v) = variables.iter().position(|x| *x == s.symbol.value) else {
            return plan_err(format!(
                "DEFINE {}: no such variable in the pattern ({})",
                s.symbol.value,
                variables.join(", ")
            ));
        };
        if defines_sql.insert(v, s.definition.clone()).is_some() {
            return plan_err(format!("{} is defined twice", s.symbol.value));
        }
    }
    let rewrite =
        |e: &sql::Expr, defining: Option<usize>| -> DfResult<(sql::Expr, Vec<Navigation>)> {
            let mut n = Navigations {
                vars: &variables,
                defining,
                rowtime: &order,
                found: vec![],
                error: None,
            };
            let mut e = e.clone();
            n.rewrite(&mut e);
            if let Some(m) = n.error {
                return plan_err(m);
            }
            Ok((e, n.found))
        };
    let nav_fields = |navs: &[Navigation]| -> DfResult<Vec<Field>> {
        navs.iter()
            .enumerate()
            .map(|(i, n)| {
                n.field(i, &row_schema)
                    .map_err(|e| DataFusionError::Plan(e.to_string()))
            })
            .collect()
    };
    let mut defines = vec![None; variables.len()];
    for (v, e) in defines_sql {
        let (e, navs) = rewrite(&e, Some(v))?;
        let mut schema_fields: Vec<Field> = fields.iter().map(|f| f.as_ref().clone()).collect();
        schema_fields.extend(nav_fields(&navs)?);
        let expr = plan_expr(ctx, e, &Schema::new(schema_fields))?;
        defines[v] = Some(PlannedMatchExpr {
            expr,
            navigations: navs,
        });
    }
    let mut out: Vec<(Option<datafusion_common::TableReference>, FieldRef)> = vec![];
    for k in &keys {
        out.push((None, Arc::new(row_schema.field_with_name(k)?.clone())));
    }
    let mut planned = vec![];
    let mut rowtime_measure = None;
    for m in measures {
        let is_rowtime = matches!(&m.expr, sql::Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("MATCH_ROWTIME"));
        let (e, navs) = rewrite(&m.expr, None)?;
        let schema = Schema::new(nav_fields(&navs)?);
        let expr = plan_expr(ctx, e, &schema)?;
        use datafusion_expr::ExprSchemable;
        let t = expr.get_type(&DFSchema::try_from(schema)?)?;
        let name = m.alias.value.clone();
        if is_rowtime {
            rowtime_measure = Some(name.clone());
        }
        out.push((None, Arc::new(Field::new(&name, t, true))));
        planned.push((
            PlannedMatchExpr {
                expr,
                navigations: navs,
            },
            name,
        ));
    }
    let skip = match after_match_skip {
        None | Some(sql::AfterMatchSkip::ToNextRow) => AfterMatchSkip::ToNextRow,
        Some(sql::AfterMatchSkip::PastLastRow) => AfterMatchSkip::PastLastRow,
        Some(sql::AfterMatchSkip::ToFirst(v) | sql::AfterMatchSkip::ToLast(v)) => {
            let Some(at) = variables.iter().position(|x| *x == v.value) else {
                return plan_err(format!("AFTER MATCH SKIP TO {v}: no such variable"));
            };
            if matches!(after_match_skip, Some(sql::AfterMatchSkip::ToFirst(_))) {
                AfterMatchSkip::ToFirst(at)
            } else {
                AfterMatchSkip::ToLast(at)
            }
        }
    };
    let schema = Arc::new(DFSchema::new_with_metadata(out, HashMap::new())?);
    let node = MatchRecognizeNode {
        input,
        keys,
        order,
        variables,
        pattern,
        defines,
        measures: planned,
        skip,
        within_ms,
        rowtime_measure,
        schema,
    };
    let plan = LogicalPlan::Extension(datafusion_expr::Extension {
        node: Arc::new(node),
    });
    Ok(Some((plan, alias.clone())))
}
