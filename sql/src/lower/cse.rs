//! Common subexpressions of a projection, computed once: TPC-H q1's
//! aggregate arguments `price * (1 - discount)` and `price * (1 -
//! discount) * (1 + tax)` share their first product, which a projection
//! would otherwise evaluate (with its checked decimal arithmetic) twice a
//! row. DataFusion's own rule for this reshapes aggregations and
//! projections the lowering recognizes, so Weir does the part it needs.

use std::collections::HashMap;

use arrow::datatypes::Schema;
use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::{Column, DFSchema};
use datafusion_expr::{Expr, ExprSchemable};
use weir_core::Result;
use weir_core::api::DataStream;

use super::{column, physical};

/// Expressions with their output names.
type Named = Vec<(Expr, String)>;

/// Worth sharing: computed from columns (a constant folds to a scalar,
/// which a column would make an array), deterministic, not a bare column.
fn shareable(e: &Expr) -> bool {
    !matches!(
        e,
        Expr::Column(_) | Expr::Literal(..) | Expr::Alias(_) | Expr::ScalarVariable(..)
    ) && !e.is_volatile()
        && !e.column_refs().is_empty()
}

/// `exprs` (over `schema`, the plan schema of `stream`) with every
/// largest subexpression occurring more than once among them, and
/// evaluated for every row by one of them, replaced by a column
/// `__cse{i}` that a projection in front computes once; the stream that
/// projection makes (`stream`'s columns, then those), and the schema the
/// rewritten expressions are over. Unchanged when nothing repeats. (Only
/// what some expression evaluates for every row anyway: one behind a CASE
/// branch may be kept from rows where it would fail.)
pub(super) fn shared_subexpressions(
    stream: DataStream,
    exprs: Named,
    schema: &DFSchema,
) -> Result<(DataStream, Named, DFSchema)> {
    let mut always = vec![];
    for (e, _) in &exprs {
        evaluated_always(e, &mut always);
    }
    let mut counts: HashMap<&Expr, usize> = HashMap::new();
    for (e, _) in &exprs {
        e.apply(|sub| {
            if shareable(sub) && always.contains(&sub) {
                *counts.entry(sub).or_default() += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    if counts.values().all(|&n| n < 2) {
        return Ok((stream, exprs, schema.clone()));
    }
    // Largest first: a shared expression's own parts are computed inside it.
    let mut shared: Vec<Expr> = vec![];
    let mut rewritten = vec![];
    for (e, name) in &exprs {
        let out = replace(e.clone(), SHARED, |sub| {
            if !shareable(sub) || counts.get(sub).copied().unwrap_or(0) < 2 {
                return None;
            }
            Some(match shared.iter().position(|s| s == sub) {
                Some(at) => at,
                None => {
                    shared.push(sub.clone());
                    shared.len() - 1
                }
            })
        })?;
        rewritten.push((out, name.clone()));
    }
    let (stream, joined) = compute_in_front(stream, &shared, SHARED, schema)?;
    Ok((stream, rewritten, joined))
}

/// The columns a projection's shared subexpressions are computed into:
/// `__cse{i}`.
const SHARED: &str = "__cse";

/// The columns the subexpressions a filter shares with the projection
/// over it are computed into: `__where{i}` (apart from [`SHARED`], as both
/// may be in one stream).
pub(super) const WHERE_SHARED: &str = "__where";

/// `e` with its largest subexpressions for which `at` gives an index `i`
/// replaced by the column `{prefix}{i}`.
fn replace(e: Expr, prefix: &str, mut at: impl FnMut(&Expr) -> Option<usize>) -> Result<Expr> {
    Ok(e.transform_down(|sub| {
        Ok(match at(&sub) {
            Some(i) => Transformed::new(
                Expr::Column(Column::new_unqualified(format!("{prefix}{i}"))),
                true,
                TreeNodeRecursion::Jump,
            ),
            None => Transformed::no(sub),
        })
    })?
    .data)
}

/// A projection in front of `stream` (whose plan schema is `schema`)
/// keeping its columns and adding `shared[i]` as `{prefix}{i}`; the
/// stream and its plan schema.
fn compute_in_front(
    stream: DataStream,
    shared: &[Expr],
    prefix: &str,
    schema: &DFSchema,
) -> Result<(DataStream, DFSchema)> {
    let fields = stream.schema().fields().clone();
    let mut projection: Vec<_> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| (column(f.name(), i), f.name().clone()))
        .collect();
    for (i, e) in shared.iter().enumerate() {
        projection.push((physical(e, schema)?, format!("{prefix}{i}")));
    }
    let names: Vec<String> = shared.iter().map(ToString::to_string).collect();
    let stream =
        stream.project_physical(projection, format!("Calc(shared: {})", names.join(", ")))?;
    let mut joined = schema.clone();
    joined.merge(&shared_fields(shared, prefix, schema)?);
    Ok((stream, joined))
}

/// The columns `{prefix}{i}` computing `shared[i]` over `schema`.
pub(super) fn shared_fields(shared: &[Expr], prefix: &str, schema: &DFSchema) -> Result<DFSchema> {
    let mut extra = vec![];
    for (i, e) in shared.iter().enumerate() {
        let (_, field) = e.to_field(schema)?;
        extra.push(field.as_ref().clone().with_name(format!("{prefix}{i}")));
    }
    Ok(DFSchema::try_from(Schema::new(extra))?)
}

/// Subexpressions that a filter's `predicate` evaluates for every row and
/// the projection over the filter (`exprs`) computes again: Nexmark q21
/// runs `REGEXP_EXTRACT(url, …)` in its WHERE and again in its SELECT.
/// Computed once in front of the filter they cost one evaluation a row
/// instead of two, and as the predicate evaluated them for every row
/// anyway, no row sees a value (or an error) it would not have.
pub(super) fn shared_with_filter(predicate: &Expr, exprs: &[Expr]) -> Result<Vec<Expr>> {
    let mut always = vec![];
    evaluated_always(predicate, &mut always);
    let mut shared: Vec<Expr> = vec![];
    for e in exprs {
        e.apply(|sub| {
            if always.contains(&sub) {
                if !shared.contains(sub) {
                    shared.push(sub.clone());
                }
                return Ok(TreeNodeRecursion::Jump);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    Ok(shared)
}

/// The shareable subexpressions of `e` evaluated whenever `e` is: not
/// behind AND's or OR's right side, a CASE branch (but the first
/// condition) or a function that evaluates its arguments lazily
/// (COALESCE), which may skip rows.
fn evaluated_always<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    use datafusion_expr::Operator;
    if shareable(e) {
        out.push(e);
    }
    match e {
        Expr::BinaryExpr(b) if matches!(b.op, Operator::And | Operator::Or) => {
            evaluated_always(&b.left, out)
        }
        Expr::BinaryExpr(b) => {
            evaluated_always(&b.left, out);
            evaluated_always(&b.right, out);
        }
        Expr::Alias(a) => evaluated_always(&a.expr, out),
        Expr::Not(x)
        | Expr::IsNull(x)
        | Expr::IsNotNull(x)
        | Expr::IsTrue(x)
        | Expr::IsFalse(x)
        | Expr::IsUnknown(x)
        | Expr::IsNotTrue(x)
        | Expr::IsNotFalse(x)
        | Expr::IsNotUnknown(x)
        | Expr::Negative(x) => evaluated_always(x, out),
        Expr::Cast(c) => evaluated_always(&c.expr, out),
        Expr::TryCast(c) => evaluated_always(&c.expr, out),
        Expr::Like(l) | Expr::SimilarTo(l) => {
            evaluated_always(&l.expr, out);
            evaluated_always(&l.pattern, out);
        }
        Expr::Between(b) => {
            for x in [&b.expr, &b.low, &b.high] {
                evaluated_always(x, out);
            }
        }
        Expr::InList(l) => {
            evaluated_always(&l.expr, out);
            for x in &l.list {
                evaluated_always(x, out);
            }
        }
        Expr::ScalarFunction(f) if !f.func.short_circuits() => {
            for x in &f.args {
                evaluated_always(x, out);
            }
        }
        // The operand and the first condition see every row; the rest
        // only those no earlier branch took.
        Expr::Case(c) => {
            if let Some(operand) = &c.expr {
                evaluated_always(operand, out);
            }
            if let Some((when, _)) = c.when_then_expr.first() {
                evaluated_always(when, out);
            }
        }
        _ => {}
    }
}

/// The filter `predicate` over `stream` (plan schema `schema`) with
/// `shared` computed in front of it; the stream in front, the predicate
/// and the plan schema they are over, where the projection after the
/// filter finds `shared` too.
pub(super) fn filter_sharing(
    stream: DataStream,
    predicate: &Expr,
    shared: &[Expr],
    schema: &DFSchema,
) -> Result<(DataStream, Expr, DFSchema)> {
    let (stream, joined) = compute_in_front(stream, shared, WHERE_SHARED, schema)?;
    let predicate = rewrite_shared(predicate.clone(), shared)?;
    Ok((stream, predicate, joined))
}

/// `e` computing `shared[i]` (shared with a filter) from the column
/// `__where{i}`.
pub(super) fn rewrite_shared(e: Expr, shared: &[Expr]) -> Result<Expr> {
    replace(e, WHERE_SHARED, |sub| shared.iter().position(|s| s == sub))
}
