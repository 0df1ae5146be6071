//! `DECIMAL` addition, subtraction and multiplication without a check per
//! value.
//!
//! Arrow computes `+`, `-` and `*` over `Decimal128` with a checked 128-bit
//! operation per value (an error on overflow), which makes decimal
//! arithmetic the costliest part of queries such as TPC-H q1. Most decimal
//! values a query sees are far from overflowing: prices, quantities and
//! rates fit in 64 bits. [`accelerate`] wraps each such operator of a
//! planned expression in [`DecimalArith`], which bounds the magnitudes of a
//! batch's operands first (one pass over each) and, when the bound rules
//! overflow out, computes without checks: two 64-bit operands multiply in
//! one widening instruction. Otherwise it runs arrow's checked kernel, so
//! results, types and overflow errors are the same as before.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Decimal128Array};
use arrow::compute::kernels::numeric;
use arrow::datatypes::{DataType, Decimal128Type, DecimalType, FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::{ColumnarValue, Operator};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::BinaryExpr;
use datafusion_physical_expr_common::datum::apply;

use crate::decimal_cast::DecimalCast;

/// `expr` with every decimal `+`, `-` and `*` of it computed by
/// [`DecimalArith`], every cast to a decimal that cannot fail by
/// [`DecimalCast`] and every CASE of equality tests of one string by
/// [`crate::case_lookup::CaseLookup`]; any other part is left as planned.
pub(crate) fn accelerate(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Arc<dyn PhysicalExpr> {
    Arc::clone(expr)
        .transform_up(|e| {
            if let Some(fast) = DecimalArith::wrap(&e, schema) {
                return Ok(Transformed::yes(Arc::new(fast) as Arc<dyn PhysicalExpr>));
            }
            if let Some(fast) = crate::case_lookup::CaseLookup::wrap(&e, schema) {
                return Ok(Transformed::yes(Arc::new(fast) as Arc<dyn PhysicalExpr>));
            }
            Ok(match DecimalCast::wrap(&e, schema) {
                Some(fast) => Transformed::yes(Arc::new(fast) as Arc<dyn PhysicalExpr>),
                None => Transformed::no(e),
            })
        })
        .map_or_else(|_| Arc::clone(expr), |t| t.data)
}

/// The three operators computed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
}

/// One decimal `+`, `-` or `*` (see the module's documentation).
#[derive(Debug, Eq)]
pub(crate) struct DecimalArith {
    left: Arc<dyn PhysicalExpr>,
    right: Arc<dyn PhysicalExpr>,
    op: Op,
    /// Multipliers bringing each side to the result's scale (`+`, `-`).
    l_mul: i128,
    r_mul: i128,
    /// The result's precision and scale, as arrow gives them.
    precision: u8,
    scale: i8,
    /// The expression as DataFusion planned it: its name, type and text.
    planned: Arc<dyn PhysicalExpr>,
}

impl DecimalArith {
    /// The fast form of `expr`, when it is a decimal `+`, `-` or `*`.
    fn wrap(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Self> {
        let b = expr.downcast_ref::<BinaryExpr>()?;
        let op = match b.op() {
            Operator::Plus => Op::Add,
            Operator::Minus => Op::Sub,
            Operator::Multiply => Op::Mul,
            _ => return None,
        };
        let (DataType::Decimal128(p1, s1), DataType::Decimal128(p2, s2)) = (
            b.left().data_type(schema).ok()?,
            b.right().data_type(schema).ok()?,
        ) else {
            return None;
        };
        let max = Decimal128Type::MAX_PRECISION;
        // Arrow's rules (Hive's): the result type of each operator.
        let (precision, scale, l_mul, r_mul) = match op {
            Op::Add | Op::Sub => {
                let scale = s1.max(s2);
                let whole = (p1 as i8 - s1).max(p2 as i8 - s2);
                let precision = (scale.saturating_add(whole) as u8)
                    .saturating_add(1)
                    .min(max);
                let l_mul = 10i128.checked_pow(u32::try_from(scale - s1).ok()?)?;
                let r_mul = 10i128.checked_pow(u32::try_from(scale - s2).ok()?)?;
                (precision, scale, l_mul, r_mul)
            }
            Op::Mul => {
                let scale = s1
                    .checked_add(s2)
                    .filter(|s| *s <= Decimal128Type::MAX_SCALE)?;
                (p1.saturating_add(p2 + 1).min(max), scale, 1, 1)
            }
        };
        // DataFusion's type for the node must be the one computed here.
        if expr.data_type(schema).ok()? != DataType::Decimal128(precision, scale) {
            return None;
        }
        Some(Self {
            left: Arc::clone(b.left()),
            right: Arc::clone(b.right()),
            op,
            l_mul,
            r_mul,
            precision,
            scale,
            planned: Arc::clone(expr),
        })
    }

    /// The result without checks, when the operands' magnitudes allow it.
    fn unchecked(&self, l: &ColumnarValue, r: &ColumnarValue) -> Option<ArrayRef> {
        // The sum of two values below 2^125 stays below 2^126; a product of
        // factors with lb and rb bits has at most lb + rb.
        const LIMIT: u32 = 125;
        let (lb, rb) = (operand_bits(l)?, operand_bits(r)?);
        let (l_mul, r_mul) = (self.l_mul, self.r_mul);
        let scaled = |bits, mul| bits + magnitude_bits(&[mul]) <= LIMIT;
        let result = match self.op {
            Op::Mul if lb <= 63 && rb <= 63 => {
                each(l, r, |a, b| i128::from(a as i64) * i128::from(b as i64))
            }
            Op::Mul if lb + rb <= LIMIT => each(l, r, i128::wrapping_mul),
            Op::Add | Op::Sub if scaled(lb, l_mul) && scaled(rb, r_mul) => {
                match (self.op, l_mul, r_mul) {
                    (Op::Add, 1, 1) => each(l, r, i128::wrapping_add),
                    (Op::Sub, 1, 1) => each(l, r, i128::wrapping_sub),
                    (Op::Add, ..) => each(l, r, |a, b| {
                        a.wrapping_mul(l_mul).wrapping_add(b.wrapping_mul(r_mul))
                    }),
                    _ => each(l, r, |a, b| {
                        a.wrapping_mul(l_mul).wrapping_sub(b.wrapping_mul(r_mul))
                    }),
                }
            }
            _ => None,
        }?;
        let result = result
            .with_precision_and_scale(self.precision, self.scale)
            .ok()?;
        Some(Arc::new(result))
    }

    /// Arrow's checked kernel, as DataFusion's operator calls it.
    fn checked(&self, l: &ColumnarValue, r: &ColumnarValue) -> Result<ColumnarValue> {
        apply(l, r, |a, b| match self.op {
            Op::Add => numeric::add_wrapping(a, b),
            Op::Sub => numeric::sub_wrapping(a, b),
            Op::Mul => numeric::mul_wrapping(a, b),
        })
    }
}

/// The magnitude bits of a decimal column or non-null decimal literal.
fn operand_bits(v: &ColumnarValue) -> Option<u32> {
    match v {
        ColumnarValue::Array(a) => Some(magnitude_bits(
            a.as_primitive_opt::<Decimal128Type>()?.values(),
        )),
        ColumnarValue::Scalar(ScalarValue::Decimal128(Some(s), ..)) => Some(magnitude_bits(&[*s])),
        ColumnarValue::Scalar(_) => None,
    }
}

/// `f` over the rows of a column and a column or literal (or a literal and
/// a column), inlined into arrow's kernel loop; `None` for two literals.
fn each(
    l: &ColumnarValue,
    r: &ColumnarValue,
    f: impl Fn(i128, i128) -> i128,
) -> Option<Decimal128Array> {
    let scalar = |v: &ColumnarValue| match v {
        ColumnarValue::Scalar(ScalarValue::Decimal128(Some(s), ..)) => Some(*s),
        _ => None,
    };
    match (l, r) {
        (ColumnarValue::Array(a), ColumnarValue::Array(b)) => arrow::compute::binary(
            a.as_primitive_opt::<Decimal128Type>()?,
            b.as_primitive_opt::<Decimal128Type>()?,
            f,
        )
        .ok(),
        (ColumnarValue::Array(a), r) => {
            let s = scalar(r)?;
            Some(a.as_primitive_opt::<Decimal128Type>()?.unary(|x| f(x, s)))
        }
        (l, ColumnarValue::Array(b)) => {
            let s = scalar(l)?;
            Some(b.as_primitive_opt::<Decimal128Type>()?.unary(|x| f(s, x)))
        }
        _ => None,
    }
}

/// Bits enough for the magnitude of every value: each `v` has
/// `|v| <= 2^bits` (slots under a null count too, harmlessly).
fn magnitude_bits(values: &[i128]) -> u32 {
    // `v ^ (v >> 127)` is `v` for v >= 0 and `|v| - 1` below: OR-ing them
    // gives the highest bit any magnitude needs, without a branch.
    let any = values
        .iter()
        .fold(0u128, |m, v| m | (v ^ (v >> 127)) as u128);
    128 - any.leading_zeros()
}

// The planned expression holds the operands and the operator.
impl PartialEq for DecimalArith {
    fn eq(&self, other: &Self) -> bool {
        self.planned.eq(&other.planned)
    }
}

impl Hash for DecimalArith {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.planned.hash(state);
    }
}

impl DecimalArith {
    /// The expression as planned, with DataFusion's operators below it too
    /// (its text parenthesises by the operators it sees).
    fn as_planned(&self) -> Arc<dyn PhysicalExpr> {
        let planned = |e: &Arc<dyn PhysicalExpr>| {
            Arc::clone(e)
                .transform_up(|e| {
                    Ok(match e.downcast_ref::<DecimalArith>() {
                        Some(d) => Transformed::yes(Arc::clone(&d.planned)),
                        None => Transformed::no(e),
                    })
                })
                .map_or_else(|_| Arc::clone(e), |t| t.data)
        };
        Arc::clone(&self.planned)
            .with_new_children(vec![planned(&self.left), planned(&self.right)])
            .unwrap_or_else(|_| Arc::clone(&self.planned))
    }
}

impl fmt::Display for DecimalArith {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.as_planned(), f)
    }
}

impl PhysicalExpr for DecimalArith {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.planned.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let l = self.left.evaluate(batch)?;
        let r = self.right.evaluate(batch)?;
        match self.unchecked(&l, &r) {
            Some(array) => Ok(ColumnarValue::Array(array)),
            None => self.checked(&l, &r),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [left, right]: [Arc<dyn PhysicalExpr>; 2] = children.try_into().map_err(|_| {
            datafusion_common::DataFusionError::Internal(
                "a binary operator has two children".into(),
            )
        })?;
        let planned = Arc::clone(&self.planned)
            .with_new_children(vec![Arc::clone(&left), Arc::clone(&right)])?;
        Ok(Arc::new(Self {
            left,
            right,
            op: self.op,
            l_mul: self.l_mul,
            r_mul: self.r_mul,
            precision: self.precision,
            scale: self.scale,
            planned,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_planned().fmt_sql(f)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use arrow::array::Array;
    use arrow::datatypes::Field;
    use datafusion_physical_expr::expressions::{Column, Literal};
    use proptest::prelude::*;

    fn schema(p1: u8, s1: i8, p2: u8, s2: i8) -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("a", DataType::Decimal128(p1, s1), true),
            Field::new("b", DataType::Decimal128(p2, s2), true),
        ]))
    }

    fn column(name: &str, index: usize) -> Arc<dyn PhysicalExpr> {
        Arc::new(Column::new(name, index))
    }

    fn decimals(values: &[Option<i128>], p: u8, s: i8) -> ArrayRef {
        Arc::new(
            Decimal128Array::from(values.to_vec())
                .with_precision_and_scale(p, s)
                .unwrap(),
        )
    }

    /// Both forms' results over `batch`: values, nulls and type, or both
    /// errors (also for the casts of [`crate::decimal_cast`]).
    pub(crate) fn same(planned: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) {
        let fast = accelerate(planned, &batch.schema());
        let want = planned
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()));
        let got = fast
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()));
        match (want, got) {
            (Ok(w), Ok(g)) => {
                assert_eq!(w.data_type(), g.data_type(), "{planned}");
                assert_eq!(w.as_ref(), g.as_ref(), "{planned}");
            }
            (Err(_), Err(_)) => {}
            (w, g) => panic!("{planned}: planned gave {w:?}, fast {g:?}"),
        }
    }

    fn value(p: u8) -> impl Strategy<Value = Option<i128>> {
        let max = 10i128.pow(u32::from(p)) - 1;
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(max)),
            1 => Just(Some(-max)),
            6 => (-max..=max).prop_map(Some),
            3 => (-100_000i128..100_000).prop_map(Some),
        ]
    }

    /// Two operand types (precision, scale) and rows of operand values.
    type Case = (u8, i8, u8, i8, Vec<(Option<i128>, Option<i128>)>);

    fn case() -> impl Strategy<Value = Case> {
        (1u8..=38, 1u8..=38).prop_flat_map(|(p1, p2)| {
            (
                Just(p1),
                0..=p1 as i8,
                Just(p2),
                0..=p2 as i8,
                prop::collection::vec((value(p1), value(p2)), 1..40),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Every operator, over columns and literals, gives what arrow's
        /// checked kernel gives: the same values, nulls, type, or an error.
        #[test]
        fn results_are_arrows((p1, s1, p2, s2, rows) in case()) {
            let schema = schema(p1, s1, p2, s2);
            let (a, b): (Vec<_>, Vec<_>) = rows.iter().copied().unzip();
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![decimals(&a, p1, s1), decimals(&b, p2, s2)],
            )
            .unwrap();
            let lit_a: Arc<dyn PhysicalExpr> =
                Arc::new(Literal::new(ScalarValue::Decimal128(a[0], p1, s1)));
            let lit_b: Arc<dyn PhysicalExpr> =
                Arc::new(Literal::new(ScalarValue::Decimal128(b[0], p2, s2)));
            for op in [Operator::Plus, Operator::Minus, Operator::Multiply] {
                for (l, r) in [
                    (column("a", 0), column("b", 1)),
                    (Arc::clone(&lit_a), column("b", 1)),
                    (column("a", 0), Arc::clone(&lit_b)),
                    (Arc::clone(&lit_a), Arc::clone(&lit_b)),
                ] {
                    let planned: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(l, op, r));
                    same(&planned, &batch);
                }
            }
        }
    }

    #[test]
    fn nested_operators_are_all_wrapped_and_read_as_planned() {
        // TPC-H q1's charge: price * (1 - discount) * (1 + tax).
        let schema = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Decimal128(15, 2), false),
            Field::new("discount", DataType::Decimal128(15, 2), false),
            Field::new("tax", DataType::Decimal128(15, 2), false),
        ]));
        let one: Arc<dyn PhysicalExpr> =
            Arc::new(Literal::new(ScalarValue::Decimal128(Some(1), 20, 0)));
        let sub: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            Arc::clone(&one),
            Operator::Minus,
            column("discount", 1),
        ));
        let add: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(one, Operator::Plus, column("tax", 2)));
        let mul: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(column("price", 0), Operator::Multiply, sub));
        let planned: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(mul, Operator::Multiply, add));
        let fast = accelerate(&planned, &schema);
        assert_eq!(fast.to_string(), planned.to_string());
        let mut wrapped = 0;
        fast.apply(|e| {
            wrapped += usize::from(e.downcast_ref::<DecimalArith>().is_some());
            Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert_eq!(wrapped, 4);
        let price = [Some(9_999_999_999_999), Some(10_500_000), Some(1)];
        let rate = [Some(10), Some(0), Some(99)];
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                decimals(&price, 15, 2),
                decimals(&rate, 15, 2),
                decimals(&rate, 15, 2),
            ],
        )
        .unwrap();
        same(&planned, &batch);
        let got = fast.evaluate(&batch).unwrap().into_array(3).unwrap();
        let got = got.as_primitive::<Decimal128Type>();
        // 105000.00 * 1.00 * 1.00 = 105000.000000
        assert_eq!(got.value(1), 105_000_000_000);
        assert_eq!(got.data_type(), &DataType::Decimal128(38, 6));
    }

    #[test]
    fn an_overflow_is_still_an_error() {
        let schema = schema(38, 0, 38, 0);
        let big = [Some(10i128.pow(37)), Some(1)];
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![decimals(&big, 38, 0), decimals(&big, 38, 0)],
        )
        .unwrap();
        let planned: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            column("a", 0),
            Operator::Multiply,
            column("b", 1),
        ));
        let fast = accelerate(&planned, &schema);
        assert!(fast.evaluate(&batch).is_err());
        same(&planned, &batch);
    }

    #[test]
    fn magnitudes_bound_every_value() {
        for v in [
            0,
            1,
            -1,
            2,
            -2,
            i128::from(i64::MAX),
            i128::from(i64::MIN),
            i128::from(i64::MAX) + 1,
            i128::MAX,
            i128::MIN,
        ] {
            let bits = magnitude_bits(&[v]);
            assert!(v.unsigned_abs() <= 1u128 << bits.min(127), "{v}: {bits}");
            let fits_i64 = i64::try_from(v).is_ok();
            assert_eq!(bits <= 63, fits_i64, "{v}: {bits}");
        }
        assert_eq!(magnitude_bits(&[]), 0);
    }

    #[test]
    fn other_operators_and_types_stay_as_planned() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]));
        let planned: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            column("a", 0),
            Operator::Plus,
            column("b", 1),
        ));
        let fast = accelerate(&planned, &schema);
        assert!(fast.downcast_ref::<BinaryExpr>().is_some());
        let decimal = self::schema(10, 2, 10, 2);
        let divide: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            column("a", 0),
            Operator::Divide,
            column("b", 1),
        ));
        assert!(
            accelerate(&divide, &decimal)
                .downcast_ref::<BinaryExpr>()
                .is_some()
        );
    }
}
