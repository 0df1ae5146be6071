//! Lowering SQL joins: regular joins of any inputs, interval joins of
//! time-bounded ones, and lookup joins against bounded tables.

use datafusion_common::DFSchema;
use datafusion_expr::Expr;
use weir_core::api::DataStream;
use weir_core::{Result, WeirError};

use super::*;

impl Lowering<'_> {
    /// `JOIN t FOR SYSTEM_TIME AS OF …`: the stream's rows joined with the
    /// rows of bounded table `t`, read into memory when the job is planned.
    fn lookup_join(
        &mut self,
        j: &datafusion_expr::logical_plan::Join,
        on: &[(Expr, Expr)],
        others: Vec<Expr>,
        lookup: &crate::planner::LookupTable,
        left: DataStream,
    ) -> Result<DataStream> {
        let LogicalPlan::TableScan(scan) = &lookup.input else {
            return Err(unsupported("a lookup join against anything but a table"));
        };
        let object = sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::new(
            scan.table_name.table(),
        )]);
        let entry = self
            .catalog
            .table(&object)
            .map_err(|e| WeirError::plan(e.message))?;
        if entry.has_computed_columns() {
            return Err(unsupported("a lookup table with computed columns"));
        }
        if on.is_empty() {
            return Err(unsupported("a lookup join without an equality condition"));
        }
        let table = self.connectors.read_all(entry)?;
        if is_changelog(&left) {
            return Err(unsupported("a lookup join of an updating input"));
        }
        let mut keys = vec![];
        let mut widened: Vec<(Expr, String)> = vec![];
        let mut table_keys = vec![];
        for (i, (l, r)) in on.iter().enumerate() {
            let Expr::Column(c) = r else {
                return Err(unsupported(format!(
                    "lookup key `{r}`: the table side of a lookup join takes columns"
                )));
            };
            let at = j.right.schema().index_of_column(c)?;
            table_keys.push(entry.schema.field(at).name().clone());
            // Stream-side keys are computed next to the row, as the table
            // key's type.
            use datafusion_expr::ExprSchemable;
            let want = r.get_type(j.right.schema())?;
            let mut extra = vec![];
            let name = key_column(l, j.left.schema(), &format!("__jl{i}"), &mut extra);
            let same_type = l.get_type(j.left.schema())? == want;
            if extra.is_empty() && same_type {
                keys.push(name);
            } else {
                let n = format!("__jl{i}");
                widened.push((conform(l.clone(), &want, j.left.schema())?, n.clone()));
                keys.push(n);
            }
        }
        let stream = widen(left, j.left.schema(), &widened, "Calc(lookup keys)")?;
        let k: Vec<&str> = keys.iter().map(String::as_str).collect();
        let tk: Vec<&str> = table_keys.iter().map(String::as_str).collect();
        let joined = stream.lookup_join(&k, table, &tk)?;
        join_output(j, joined, stream.schema().fields().len(), others)
    }

    /// `JOIN v FOR SYSTEM_TIME AS OF l.rowtime`: each left row with the
    /// version of `v` its key had at its time. `v` is a versioned table —
    /// a table with a `PRIMARY KEY` and a watermark (each row its key's
    /// next version; an upsert or CDC source's deletions end a key) or a
    /// view keeping the latest row per key by rowtime — as in Flink.
    fn temporal_join(
        &mut self,
        j: &datafusion_expr::logical_plan::Join,
        kind: weir_core::spec::JoinKind,
        on: &[(Expr, Expr)],
        others: Vec<Expr>,
        lookup: &crate::planner::LookupTable,
        left: DataStream,
    ) -> Result<DataStream> {
        if is_changelog(&left) {
            return Err(unsupported(
                "a temporal join of an updating input (its left input must be append-only, as in Flink)",
            ));
        }
        let right = self.lower(&lookup.input)?;
        let versioned = versioned_table(self.catalog, &lookup.input, &right)?;
        if right.rowtime().is_none() {
            return Err(WeirError::plan(format!(
                "the versioned table `{versioned}` of a temporal join needs an event-time attribute (a WATERMARK)"
            )));
        }
        let key_of = |e: &Expr| match e {
            Expr::Column(c) => j.right.schema().index_of_column(c).ok(),
            Expr::Cast(c) => match &*c.expr {
                Expr::Column(c) => j.right.schema().index_of_column(c).ok(),
                _ => None,
            },
            _ => None,
        };
        if let Some(pk) = primary_key(self.catalog, &lookup.input) {
            let joined: Vec<String> = on
                .iter()
                .filter_map(|(_, r)| key_of(r))
                .map(|i| j.right.schema().field(i).name().clone())
                .collect();
            if let Some(missing) = pk.iter().find(|k| !joined.contains(k)) {
                return Err(WeirError::plan(format!(
                    "the temporal join's condition must equate the versioned table's primary key [{}] with the other input; `{versioned}.{missing}` is not (Flink requires the same)",
                    pk.join(", ")
                )));
            }
        }
        if on.is_empty() {
            return Err(unsupported(
                "a temporal join without an equality on the versioned table's primary key",
            ));
        }
        let mut lkeys = vec![];
        let mut rkeys = vec![];
        let mut lextra: Vec<(Expr, String)> = vec![];
        let mut rextra: Vec<(Expr, String)> = vec![];
        for (i, (l, r)) in on.iter().enumerate() {
            lkeys.push(key_column(
                l,
                j.left.schema(),
                &format!("__jl{i}"),
                &mut lextra,
            ));
            rkeys.push(key_column(
                r,
                j.right.schema(),
                &format!("__jr{i}"),
                &mut rextra,
            ));
        }
        let nl = j.left.schema().fields().len();
        let left = widen(left, j.left.schema(), &lextra, "Calc(join keys)")?;
        let right = widen(right, j.right.schema(), &rextra, "Calc(join keys)")?;
        let left_width = left.schema().fields().len();
        let residual = match datafusion_expr::utils::conjunction(others) {
            Some(cond) => {
                let p = physical(&cond, &j.schema)?;
                Some(pair_columns(p, nl, left_width, &left, &right)?)
            }
            None => None,
        };
        let lk: Vec<&str> = lkeys.iter().map(String::as_str).collect();
        let rk: Vec<&str> = rkeys.iter().map(String::as_str).collect();
        let joined = left
            .key_by(&lk)?
            .temporal_join(&right.key_by(&rk)?, kind, residual)?;
        join_output(j, joined, left_width, vec![])
    }

    /// A join of two streams on equalities between them.
    ///
    /// An inner join of two append-only inputs with event time whose
    /// conditions bound the right rowtime against the left one (`r.ts
    /// BETWEEN l.ts - INTERVAL … AND l.ts`, `l.ts = r.ts` of window
    /// results, or one side only) is an interval join: the watermark clears
    /// its state and its output keeps event time. Every other join — outer
    /// joins, updating inputs, inputs without event time, no time bound —
    /// is a regular join as Flink runs it, its other conditions deciding
    /// which pairs match.
    pub(super) fn join(&mut self, j: &datafusion_expr::logical_plan::Join) -> Result<DataStream> {
        use datafusion_expr::JoinType;
        use weir_core::spec::JoinKind;
        let kind = match j.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            other => {
                return Err(unsupported(format!(
                    "{other} joins on streams (INNER, LEFT, RIGHT and FULL OUTER joins are supported)"
                )));
            }
        };
        if let Some(stream) = self.lateral(j, kind)? {
            return Ok(stream);
        }
        // Equalities between the two sides in the condition are join keys.
        let mut on = j.on.clone();
        let mut others = vec![];
        if let Some(f) = &j.filter {
            for c in datafusion_expr::utils::split_conjunction(f) {
                let side = |e: &Expr, s: &DFSchema| {
                    let refs = e.column_refs();
                    !refs.is_empty() && refs.iter().all(|c| s.index_of_column(c).is_ok())
                };
                if let Expr::BinaryExpr(b) = c
                    && b.op == datafusion_expr::Operator::Eq
                {
                    if side(&b.left, j.left.schema()) && side(&b.right, j.right.schema()) {
                        on.push(((*b.left).clone(), (*b.right).clone()));
                        continue;
                    }
                    if side(&b.right, j.left.schema()) && side(&b.left, j.right.schema()) {
                        on.push(((*b.right).clone(), (*b.left).clone()));
                        continue;
                    }
                }
                others.push(c.clone());
            }
        }
        if let Some(lookup) = crate::planner::as_lookup_table(&j.right) {
            if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
                return Err(unsupported(format!(
                    "a {} temporal join (FOR SYSTEM_TIME AS OF joins are INNER or LEFT)",
                    kind.sql()
                )));
            }
            let left = self.lower(&j.left)?;
            // As of the left input's rowtime: an event-time temporal join
            // with the versions of a streamed table; otherwise a lookup
            // (processing time) into a bounded one.
            let as_of = as_of_column(&lookup.as_of, j.left.schema())?;
            if left.rowtime() == Some(as_of.as_str()) {
                return self.temporal_join(j, kind, &on, others, lookup, left);
            }
            if kind != JoinKind::Inner {
                return Err(unsupported(format!(
                    "a {} lookup join (a processing-time FOR SYSTEM_TIME AS OF join is INNER)",
                    kind.sql()
                )));
            }
            return self.lookup_join(j, &on, others, lookup, left);
        }
        if on.is_empty() {
            return Err(unsupported(format!(
                "a join without an equality condition between its inputs (a cross join){}",
                j.filter
                    .as_ref()
                    .map(|f| format!("; its condition: {f}"))
                    .unwrap_or_default()
            )));
        }
        let left = self.lower(&j.left)?;
        let right = self.lower(&j.right)?;
        let nl = j.left.schema().fields().len();
        // The inputs' rowtimes as columns of the join's plan schema.
        let position = |s: &DFSchema, name: Option<&str>| {
            name.and_then(|n| s.fields().iter().position(|f| f.name() == n))
        };
        let times = (!is_changelog(&left) && !is_changelog(&right))
            .then(|| {
                Some((
                    position(j.left.schema(), left.rowtime())?,
                    position(j.right.schema(), right.rowtime())? + nl,
                ))
            })
            .flatten();
        // Bounds on d = right.ts - left.ts.
        let mut lower = i64::MIN;
        let mut upper = i64::MAX;
        let mut rest = vec![];
        for c in &others {
            match times.and_then(|(lrt, rrt)| time_bounds(c, j.schema.as_ref(), lrt, rrt)) {
                Some(v) => {
                    for (lo, hi) in v {
                        lower = lower.max(lo);
                        upper = upper.min(hi);
                    }
                }
                None => rest.push(c.clone()),
            }
        }
        // Key expressions: plain columns are used as they are, others are
        // computed on their side first.
        let mut lkeys = vec![];
        let mut rkeys = vec![];
        let mut lextra: Vec<(Expr, String)> = vec![];
        let mut rextra: Vec<(Expr, String)> = vec![];
        // Window results joined on equal window ends: their rowtimes differ
        // by what each has relative to its end.
        let end_of = |stream: &DataStream| {
            self.windows
                .get(&stream.id())
                .and_then(|w| Some((stream.schema().index_of(&w.end).ok()?, w.rowtime_offset)))
        };
        let (lend, rend) = (end_of(&left), end_of(&right));
        for (i, (l, r)) in on.iter().enumerate() {
            if let Some((lrt, rrt)) = times {
                let (lt, rt) = (
                    time_offset(l, j.left.schema()),
                    time_offset(r, j.right.schema()),
                );
                let mut exact = None;
                if matches!((lt, rt), (Some((a, 0)), Some((b, 0))) if a == lrt && b + nl == rrt) {
                    exact = Some(0);
                }
                if let (Some((a, 0)), Some((b, 0)), Some((le, lo)), Some((re, ro))) =
                    (lt, rt, lend, rend)
                    && a == le
                    && b == re
                {
                    exact = Some(ro - lo);
                }
                if let Some(d) = exact {
                    lower = lower.max(d);
                    upper = upper.min(d);
                }
            }
            lkeys.push(key_column(
                l,
                j.left.schema(),
                &format!("__jl{i}"),
                &mut lextra,
            ));
            rkeys.push(key_column(
                r,
                j.right.schema(),
                &format!("__jr{i}"),
                &mut rextra,
            ));
        }
        if lower > upper {
            return Err(WeirError::plan(format!(
                "the join's time conditions admit no rows (right.ts - left.ts between {lower} and {upper} ms)"
            )));
        }
        let left = widen(left, j.left.schema(), &lextra, "Calc(join keys)")?;
        let right = widen(right, j.right.schema(), &rextra, "Calc(join keys)")?;
        let lk: Vec<&str> = lkeys.iter().map(String::as_str).collect();
        let rk: Vec<&str> = rkeys.iter().map(String::as_str).collect();
        let left_width = left.schema().fields().len() - usize::from(is_changelog(&left));
        // Inner joins: any time bound (or the event-time TTL) makes an
        // interval join. Outer joins: both bounds, as Flink's outer interval
        // join (their unmatched rows are emitted when the watermark passes
        // the bound).
        let bounded = if kind == JoinKind::Inner {
            lower > i64::MIN
                || upper < i64::MAX
                || (self.ttl_event_time && self.state_ttl.is_some())
        } else {
            // (Other conditions of an outer join decide what is unmatched:
            // the regular join evaluates them with the pairs.)
            lower > i64::MIN && upper < i64::MAX && rest.is_empty()
        };
        if times.is_some() && bounded {
            // A side without a bound keeps its rows for the state TTL (in
            // event time), or for as long as the job runs.
            let forever = self.state_ttl.unwrap_or(1 << 60);
            let (lower, upper) = (lower.max(-forever), upper.min(forever));
            let joined = left
                .key_by(&lk)?
                .interval_join(&right.key_by(&rk)?)
                .kind(kind)
                .between(lower, upper)?;
            return join_output(j, joined, left_width, rest);
        }
        let residual = match datafusion_expr::utils::conjunction(others) {
            Some(cond) => {
                let p = physical(&cond, &j.schema)?;
                Some(pair_columns(p, nl, left_width, &left, &right)?)
            }
            None => None,
        };
        let joined =
            left.key_by(&lk)?
                .regular_join(&right.key_by(&rk)?, kind, residual, self.state_ttl)?;
        join_output(j, joined, left_width, vec![])
    }
}

/// The left column a temporal join reads its table as of (its name in the
/// left input).
fn as_of_column(parts: &[String], left: &DFSchema) -> Result<String> {
    // Unquoted identifiers are compared as DataFusion normalizes them.
    let same = |a: &str, b: &str| a == b || a.eq_ignore_ascii_case(b);
    let (qualifier, name) = match parts {
        [name] => (None, name),
        [.., q, name] => (Some(q), name),
        [] => return Err(WeirError::plan("FOR SYSTEM_TIME AS OF needs a column")),
    };
    left.iter()
        .find(|(q, f)| {
            same(f.name(), name)
                && qualifier.is_none_or(|want| q.is_some_and(|q| same(q.table(), want)))
        })
        .map(|(_, f)| f.name().clone())
        .ok_or_else(|| {
            WeirError::plan(format!(
                "FOR SYSTEM_TIME AS OF {}: no such column of the join's other input",
                parts.join(".")
            ))
        })
}

/// The catalog table under a plan, when it is one (not a view).
fn scanned_table<'c>(catalog: &'c Catalog, plan: &LogicalPlan) -> Option<&'c TableEntry> {
    match plan {
        LogicalPlan::TableScan(scan) => catalog
            .table(&sqlparser::ast::ObjectName::from(vec![
                sqlparser::ast::Ident::new(scan.table_name.table()),
            ]))
            .ok(),
        LogicalPlan::SubqueryAlias(a) => scanned_table(catalog, &a.input),
        _ => None,
    }
}

/// The declared primary key of the table under `plan`, if any.
fn primary_key(catalog: &Catalog, plan: &LogicalPlan) -> Option<Vec<String>> {
    let t = scanned_table(catalog, plan)?;
    let pk = &t.definition.primary_key;
    (!pk.is_empty()).then(|| pk.iter().map(|i| i.value.clone()).collect())
}

/// The versioned table's name; refuses inputs that are not one: an
/// append-only table needs a primary key (Flink's rule), and a view must
/// be updating (the latest row per key).
fn versioned_table(catalog: &Catalog, plan: &LogicalPlan, stream: &DataStream) -> Result<String> {
    let name = match plan {
        LogicalPlan::SubqueryAlias(a) => a.alias.table().to_string(),
        LogicalPlan::TableScan(s) => s.table_name.table().to_string(),
        _ => "?".to_string(),
    };
    if primary_key(catalog, plan).is_none() && !is_changelog(stream) {
        return Err(WeirError::plan(format!(
            "the temporal join's table `{name}` is not a versioned table: declare its PRIMARY KEY (…) NOT ENFORCED, or read a view keeping the latest row per key (ROW_NUMBER() OVER (PARTITION BY key ORDER BY rowtime DESC) = 1), as Flink requires"
        )));
    }
    Ok(name)
}

/// `e`, planned against a join's plan schema (`nl` left columns, then the
/// right's), over the regular join's pairs instead: the widened left
/// input's `left_width` data columns, then the right's.
fn pair_columns(
    e: Arc<dyn PhysicalExpr>,
    nl: usize,
    left_width: usize,
    left: &DataStream,
    right: &DataStream,
) -> Result<Arc<dyn PhysicalExpr>> {
    use datafusion_common::tree_node::{Transformed, TreeNode};
    use datafusion_physical_expr::expressions::Column as PhysicalColumn;
    let pair = weir_core::join_spec::pair_fields(left.schema(), right.schema(), [false; 2]);
    Ok(e.transform(|node| {
        let Some(c) = node.downcast_ref::<PhysicalColumn>() else {
            return Ok(Transformed::no(node));
        };
        let at = if c.index() < nl {
            c.index()
        } else {
            left_width + (c.index() - nl)
        };
        let column: Arc<dyn PhysicalExpr> = Arc::new(PhysicalColumn::new(pair[at].name(), at));
        Ok(Transformed::yes(column))
    })?
    .data)
}

/// A join's result as the plan has it: the left input's plan columns, the
/// right input's after the joined left's `left_width` columns (computed
/// keys dropped), then the remaining conditions.
pub(super) fn join_output(
    j: &datafusion_expr::logical_plan::Join,
    joined: DataStream,
    left_width: usize,
    conditions: Vec<Expr>,
) -> Result<DataStream> {
    let nl = j.left.schema().fields().len();
    let exprs = j
        .schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let at = if i < nl { i } else { left_width + (i - nl) };
            (
                column(joined.schema().field(at).name(), at),
                f.name().clone(),
            )
        })
        .collect::<Vec<_>>();
    let mut exprs = exprs;
    if is_changelog(&joined) {
        exprs.push(changelog_column(&joined));
    }
    let mut out = joined.project_physical(exprs, "Calc(join output)")?;
    if let Some(cond) = datafusion_expr::utils::conjunction(conditions) {
        let p = physical(&cond, &j.schema)?;
        out = out.filter_physical(p, format!("Where({cond})"))?;
    }
    Ok(out)
}

/// `column + offset_ms` for a column (possibly cast) plus or minus an
/// interval literal; the column's index in `schema`.
fn time_offset(e: &Expr, schema: &DFSchema) -> Option<(usize, i64)> {
    use datafusion_expr::{BinaryExpr, Operator};
    match e {
        Expr::Column(c) => schema.index_of_column(c).ok().map(|i| (i, 0)),
        Expr::Cast(c) => time_offset(&c.expr, schema),
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::Plus | Operator::Minus) =>
        {
            let (i, base) = time_offset(left, schema)?;
            let ms = interval_literal(right)?;
            Some((
                i,
                if *op == Operator::Plus {
                    base + ms
                } else {
                    base - ms
                },
            ))
        }
        _ => None,
    }
}

/// The bounds a join condition puts on `d = right.ts - left.ts` (columns
/// `lrt`, `rrt` of the join schema), when it is a comparison of the two
/// rowtimes; several for BETWEEN.
fn time_bounds(e: &Expr, schema: &DFSchema, lrt: usize, rrt: usize) -> Option<Vec<(i64, i64)>> {
    use datafusion_expr::{BinaryExpr, Operator};
    match e {
        Expr::Between(b) if !b.negated => {
            let lo = Expr::BinaryExpr(BinaryExpr::new(
                b.expr.clone(),
                Operator::GtEq,
                b.low.clone(),
            ));
            let hi = Expr::BinaryExpr(BinaryExpr::new(
                b.expr.clone(),
                Operator::LtEq,
                b.high.clone(),
            ));
            let mut v = time_bounds(&lo, schema, lrt, rrt)?;
            v.extend(time_bounds(&hi, schema, lrt, rrt)?);
            Some(v)
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (x, a) = time_offset(left, schema)?;
            let (y, b) = time_offset(right, schema)?;
            const MIN: i64 = i64::MIN;
            const MAX: i64 = i64::MAX;
            // x + a  op  y + b
            if x == lrt && y == rrt {
                // r - l  (flipped op)  a - b
                let c = a - b;
                Some(vec![match op {
                    Operator::GtEq => (MIN, c),
                    Operator::Gt => (MIN, c - 1),
                    Operator::LtEq => (c, MAX),
                    Operator::Lt => (c + 1, MAX),
                    Operator::Eq => (c, c),
                    _ => return None,
                }])
            } else if x == rrt && y == lrt {
                // r - l  op  b - a
                let c = b - a;
                Some(vec![match op {
                    Operator::GtEq => (c, MAX),
                    Operator::Gt => (c + 1, MAX),
                    Operator::LtEq => (MIN, c),
                    Operator::Lt => (MIN, c - 1),
                    Operator::Eq => (c, c),
                    _ => return None,
                }])
            } else {
                None
            }
        }
        _ => None,
    }
}

/// A join key as a column name of its side: the column itself, or a
/// computed column `name` added to `extra`.
pub(super) fn key_column(
    e: &Expr,
    schema: &DFSchema,
    name: &str,
    extra: &mut Vec<(Expr, String)>,
) -> String {
    if let Expr::Column(c) = e
        && let Ok(i) = schema.index_of_column(c)
    {
        let f = schema.field(i).name();
        // A name used twice on one side would be ambiguous for key_by.
        if schema.fields().iter().filter(|x| x.name() == f).count() == 1 {
            return f.clone();
        }
    }
    extra.push((e.clone(), name.to_string()));
    name.to_string()
}
