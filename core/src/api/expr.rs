//! Turning DataFusion logical expressions into physical ones against a schema.

use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion_common::DFSchema;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable};
use datafusion_physical_expr::{PhysicalExpr, create_physical_expr};

use crate::error::{Result, WeirError};
use crate::time::column_list;

/// Plan `expr` against `schema`: binary operands are coerced to a common type
/// (so `col("price").gt(lit(10))` works for any numeric `price`), then the
/// expression becomes a vectorized physical expression.
pub fn plan_expr(expr: &Expr, schema: &Schema) -> Result<Arc<dyn PhysicalExpr>> {
    let dfschema = DFSchema::try_from(schema.clone())?;
    for column in expr.column_refs() {
        if schema.index_of(&column.name).is_err() {
            return Err(WeirError::plan(format!(
                "expression `{expr}` references unknown column '{}'; available columns: {}",
                column.name,
                column_list(schema)
            )));
        }
    }
    let coerced = expr
        .clone()
        .transform_up(|e| match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let lt = left.get_type(&dfschema)?;
                let rt = right.get_type(&dfschema)?;
                let (lc, rc) = BinaryTypeCoercer::new(&lt, &op, &rt).get_input_types()?;
                let left = if lc != lt {
                    left.cast_to(&lc, &dfschema)?
                } else {
                    *left
                };
                let right = if rc != rt {
                    right.cast_to(&rc, &dfschema)?
                } else {
                    *right
                };
                Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(left),
                    op,
                    Box::new(right),
                ))))
            }
            other => Ok(Transformed::no(other)),
        })
        .map_err(|e| WeirError::plan(format!("expression `{expr}`: {e}")))?
        .data;
    create_physical_expr(
        &coerced,
        &dfschema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )
    .map_err(|e| WeirError::plan(format!("expression `{expr}`: {e}")))
}
