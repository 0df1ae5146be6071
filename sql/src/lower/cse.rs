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
/// largest subexpression occurring more than once among them replaced by a
/// column `__cse{i}` that a projection in front computes once; the stream
/// that projection makes (`stream`'s columns, then those), and the schema
/// the rewritten expressions are over. Unchanged when nothing repeats.
pub(super) fn shared_subexpressions(
    stream: DataStream,
    exprs: Named,
    schema: &DFSchema,
) -> Result<(DataStream, Named, DFSchema)> {
    let mut counts: HashMap<&Expr, usize> = HashMap::new();
    for (e, _) in &exprs {
        e.apply(|sub| {
            if shareable(sub) {
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
        let out = e
            .clone()
            .transform_down(|sub| {
                if !shareable(&sub) || counts.get(&sub).copied().unwrap_or(0) < 2 {
                    return Ok(Transformed::no(sub));
                }
                let at = match shared.iter().position(|s| s == &sub) {
                    Some(at) => at,
                    None => {
                        shared.push(sub);
                        shared.len() - 1
                    }
                };
                Ok(Transformed::new(
                    Expr::Column(Column::new_unqualified(format!("__cse{at}"))),
                    true,
                    TreeNodeRecursion::Jump,
                ))
            })?
            .data;
        rewritten.push((out, name.clone()));
    }
    let fields = stream.schema().fields().clone();
    let mut projection: Vec<_> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| (column(f.name(), i), f.name().clone()))
        .collect();
    let mut extra = vec![];
    for (i, e) in shared.iter().enumerate() {
        let name = format!("__cse{i}");
        let (_, field) = e.to_field(schema)?;
        extra.push(field.as_ref().clone().with_name(&name));
        projection.push((physical(e, schema)?, name));
    }
    let names: Vec<String> = shared.iter().map(ToString::to_string).collect();
    let stream =
        stream.project_physical(projection, format!("Calc(shared: {})", names.join(", ")))?;
    let mut joined = schema.clone();
    joined.merge(&DFSchema::try_from(Schema::new(extra))?);
    Ok((stream, rewritten, joined))
}
