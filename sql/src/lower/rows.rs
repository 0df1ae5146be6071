//! Rows made by the query itself: `VALUES` as a source, and rows
//! multiplied by a lateral table (`CROSS JOIN UNNEST(…)`, `LATERAL
//! TABLE(f(…))`).

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use datafusion_expr::ColumnarValue;
use weir_core::spec::MemorySourceSpec;

use super::*;

impl Lowering<'_> {
    /// `VALUES (…), (…)`: a bounded source of the rows, each expression
    /// evaluated once when the job is planned (as Flink's values source).
    pub(super) fn values(
        &mut self,
        v: &datafusion_expr::logical_plan::Values,
    ) -> Result<DataStream> {
        let schema: SchemaRef = Arc::new(v.schema.as_arrow().clone());
        let empty = DFSchema::empty();
        let one = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (c, field) in schema.fields().iter().enumerate() {
            let mut scalars = Vec::with_capacity(v.values.len());
            for (r, row) in v.values.iter().enumerate() {
                let at = |e: &dyn std::fmt::Display| {
                    WeirError::plan(format!("VALUES row {}, column {}: {e}", r + 1, c + 1))
                };
                let value = physical(&row[c], &empty)?
                    .evaluate(&one)
                    .map_err(|e| at(&e))?;
                let scalar = match value {
                    ColumnarValue::Scalar(s) => s,
                    ColumnarValue::Array(a) => {
                        ScalarValue::try_from_array(&a, 0).map_err(|e| at(&e))?
                    }
                };
                scalars.push(scalar.cast_to(field.data_type()).map_err(|e| at(&e))?);
            }
            columns.push(ScalarValue::iter_to_array(scalars)?);
        }
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        let name = format!("Values({} rows)", batch.num_rows());
        self.env.from_source(
            MemorySourceSpec::new(schema, vec![batch]),
            WatermarkStrategy::no_watermarks(),
            &name,
        )
    }
}

impl Lowering<'_> {
    /// A join whose right side is a lateral table — `UNNEST(…)` of the
    /// left's columns or a table function `LATERAL TABLE(f(…))` — as a
    /// lateral join of the left stream: each left row with the rows made of
    /// it. `CROSS JOIN` / `JOIN … ON TRUE` keep rows with some (other
    /// conditions filter the result); `LEFT JOIN … ON TRUE` keeps every
    /// row, as in Flink.
    pub(super) fn lateral(
        &mut self,
        j: &datafusion_expr::logical_plan::Join,
        kind: weir_core::spec::JoinKind,
    ) -> Result<Option<DataStream>> {
        use weir_core::spec::JoinKind;
        use weir_core::table_function::TableFunction;
        // Filters pushed into the lateral side (`ON TRUE`, WHERE
        // conditions on its columns) run after the join.
        let mut node = j.right.as_ref();
        let mut pushed = vec![];
        loop {
            match node {
                LogicalPlan::SubqueryAlias(a) => node = &a.input,
                LogicalPlan::Subquery(s) => node = &s.subquery,
                LogicalPlan::Filter(f) => {
                    if !crate::planner::is_true(&f.predicate) {
                        pushed.push(requalify(&f.predicate, f.input.schema(), j.right.schema())?);
                    }
                    node = &f.input;
                }
                // `AS T(a, b)` names the function's columns.
                LogicalPlan::Projection(p) if renames_only(p) => node = &p.input,
                _ => break,
            }
        }
        let (function, args): (Arc<dyn TableFunction>, Vec<Expr>) =
            if let Some(t) = crate::planner::as_table_function(node) {
                (Arc::clone(&t.function), t.args.clone())
            } else if let Some(u) = crate::planner::as_lateral_unnest(node) {
                (u.function(), u.args.clone())
            } else {
                return Ok(None);
            };
        let mut conditions: Vec<Expr> = j.on.iter().map(|(l, r)| l.clone().eq(r.clone())).collect();
        conditions.extend(
            j.filter
                .iter()
                .flat_map(datafusion_expr::utils::split_conjunction)
                .filter(|c| !crate::planner::is_true(c))
                .cloned(),
        );
        conditions.extend(pushed);
        let outer = match kind {
            JoinKind::Inner => false,
            JoinKind::Left if conditions.is_empty() => true,
            JoinKind::Left => {
                return Err(unsupported(
                    "a LEFT JOIN with a lateral table on a condition other than ON TRUE (Flink refuses it too)",
                ));
            }
            other => {
                return Err(unsupported(format!(
                    "a {} join with a lateral table (CROSS JOIN, JOIN … ON TRUE and LEFT JOIN … ON TRUE are)",
                    other.sql()
                )));
            }
        };
        let left = self.lower(&j.left)?;
        // Arguments: columns (or expressions) of the left input, computed
        // next to its rows.
        let mut extra: Vec<(Expr, String)> = vec![];
        let names: Vec<String> = args
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                super::join::key_column(
                    &outer_as_column(e),
                    j.left.schema(),
                    &format!("__lat{i}"),
                    &mut extra,
                )
            })
            .collect();
        let left = widen(
            left,
            j.left.schema(),
            &extra,
            "Calc(table function arguments)",
        )?;
        let left_width = left.schema().fields().len() - usize::from(is_changelog(&left));
        let taken: Vec<&str> = left
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        let columns: Vec<String> = j
            .right
            .schema()
            .fields()
            .iter()
            .map(|f| {
                if taken.contains(&f.name().as_str()) {
                    format!("right_{}", f.name())
                } else {
                    f.name().clone()
                }
            })
            .collect();
        let a: Vec<&str> = names.iter().map(String::as_str).collect();
        let c: Vec<&str> = columns.iter().map(String::as_str).collect();
        let joined = left.join_lateral(function, &a, &c, outer)?;
        Ok(Some(super::join::join_output(
            j, joined, left_width, conditions,
        )?))
    }
}

/// Whether a projection only renames its input's columns, in order.
fn renames_only(p: &datafusion_expr::logical_plan::Projection) -> bool {
    p.expr.len() == p.input.schema().fields().len()
        && p.expr.iter().enumerate().all(|(i, e)| {
            matches!(e.clone().unalias(), Expr::Column(c)
                if p.input.schema().index_of_column(&c).ok() == Some(i))
        })
}

/// `e`, over the columns of `from`, over the same columns of `to` (a
/// schema of the same fields, qualified otherwise).
fn requalify(e: &Expr, from: &DFSchema, to: &DFSchema) -> Result<Expr> {
    use datafusion_common::tree_node::{Transformed, TreeNode};
    Ok(e.clone()
        .transform(|e| match e {
            Expr::Column(c) => {
                let i = from.index_of_column(&c)?;
                Ok(Transformed::yes(Expr::Column(Column::from(
                    to.qualified_field(i),
                ))))
            }
            e => Ok(Transformed::no(e)),
        })?
        .data)
}

/// A reference to a column of the left input written inside the lateral
/// table, as a column.
fn outer_as_column(e: Expr) -> Expr {
    use datafusion_common::tree_node::{Transformed, TreeNode};
    e.transform(|e| match e {
        Expr::OuterReferenceColumn(_, c) => Ok(Transformed::yes(Expr::Column(c))),
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
    .unwrap_or_else(|e| Expr::Literal(ScalarValue::Utf8(Some(e.to_string())), None))
}
