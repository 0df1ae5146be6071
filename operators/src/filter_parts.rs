//! A filter's predicate as conjuncts, each evaluated over the whole batch
//! and their masks combined bit by bit.
//!
//! DataFusion evaluates `a AND b` by evaluating `b` only on the rows `a`
//! keeps when `a` keeps few of them: it filters the batch for `b`, then
//! scatters `b`'s answers back to full length, a run of rows at a time.
//! For comparisons of columns with constants, which take a few cycles a
//! row, that is slower than comparing every row: the scatter, its slices
//! and its bit iteration were 12% of TPC-H q6's samples (a date range, a
//! discount range and a quantity bound), the comparisons 3%.
//!
//! Comparing every row must not fail where the rows an earlier conjunct
//! drops would have made it fail (`x <> 0 AND 10 / x > 1`), so a
//! predicate is split only when every conjunct is built from parts that
//! cannot fail: columns, constants, comparisons, `IS [NOT] NULL`, `NOT`,
//! `IN` lists and casts that only widen a number. Anything else (a
//! function, arithmetic, a narrowing cast) keeps the predicate whole.

use std::sync::Arc;

use arrow::datatypes::{DataType, Schema};
use datafusion_expr::Operator;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::{
    BinaryExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, Literal, NotExpr,
};

/// `predicate` as conjuncts to evaluate each over every row, or alone.
pub(crate) fn parts(
    predicate: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Vec<Arc<dyn PhysicalExpr>> {
    let parts = datafusion_physical_expr::split_conjunction(predicate);
    if parts.len() > 1 && parts.iter().all(|p| cannot_fail(p.as_ref(), schema)) {
        parts.into_iter().cloned().collect()
    } else {
        vec![Arc::clone(predicate)]
    }
}

/// Whether evaluating `e` over any row of `schema` gives a value, never
/// an error.
fn cannot_fail(e: &dyn PhysicalExpr, schema: &Schema) -> bool {
    let any = e;
    if any.downcast_ref::<Column>().is_some() || any.downcast_ref::<Literal>().is_some() {
        return true;
    }
    if let Some(b) = any.downcast_ref::<BinaryExpr>() {
        use Operator::*;
        return matches!(
            b.op(),
            Eq | NotEq | Lt | LtEq | Gt | GtEq | IsDistinctFrom | IsNotDistinctFrom | And | Or
        ) && cannot_fail(b.left().as_ref(), schema)
            && cannot_fail(b.right().as_ref(), schema);
    }
    if let Some(n) = any.downcast_ref::<IsNullExpr>() {
        return cannot_fail(n.arg().as_ref(), schema);
    }
    if let Some(n) = any.downcast_ref::<IsNotNullExpr>() {
        return cannot_fail(n.arg().as_ref(), schema);
    }
    if let Some(n) = any.downcast_ref::<NotExpr>() {
        return cannot_fail(n.arg().as_ref(), schema);
    }
    if let Some(l) = any.downcast_ref::<InListExpr>() {
        return cannot_fail(l.expr().as_ref(), schema)
            && l.list().iter().all(|v| cannot_fail(v.as_ref(), schema));
    }
    if let Some(c) = any.downcast_ref::<CastExpr>() {
        return cannot_fail(c.expr().as_ref(), schema)
            && c.expr()
                .data_type(schema)
                .is_ok_and(|from| widens(&from, c.cast_type()));
    }
    false
}

/// Whether every value of type `from` has a value of type `to` (a cast
/// between them cannot overflow).
fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    /// An integer type's bits, whether it is signed, and the decimal
    /// digits its values need.
    fn integer(t: &DataType) -> Option<(u32, bool, u8)> {
        Some(match t {
            Int8 => (8, true, 3),
            Int16 => (16, true, 5),
            Int32 => (32, true, 10),
            Int64 => (64, true, 19),
            UInt8 => (8, false, 3),
            UInt16 => (16, false, 5),
            UInt32 => (32, false, 10),
            UInt64 => (64, false, 20),
            _ => return None,
        })
    }
    // Room for `p` digits of which `s` after the point.
    let room = |q: u8, t: i8, p: u8, s: i8| {
        t >= s && i16::from(q) - i16::from(t) >= i16::from(p) - i16::from(s)
    };
    if from == to {
        return true;
    }
    match (from, to) {
        (Decimal128(p, s), Decimal128(q, t) | Decimal256(q, t)) => room(*q, *t, *p, *s),
        (i, Decimal128(q, t) | Decimal256(q, t)) => {
            integer(i).is_some_and(|(_, _, d)| room(*q, *t, d, 0))
        }
        (a, b) => match (integer(a), integer(b)) {
            // Signed into wider signed, unsigned into wider (or equal)
            // unsigned, unsigned into strictly wider signed.
            (Some((m, sa, _)), Some((n, sb, _))) => (sa == sb && n >= m) || (!sa && sb && n > m),
            _ => matches!((a, b), (Date32, Date64) | (Float32, Float64)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        ArrayRef, Decimal128Array, Int32Array, Int64Array, RecordBatch, UInt8Array,
    };
    use arrow::datatypes::Field;
    use datafusion_physical_expr::expressions::{binary, cast, col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("d", DataType::Decimal128(15, 2), true),
        ])
    }

    #[test]
    fn comparisons_split_and_arithmetic_does_not() {
        let s = schema();
        let a = col("a", &s).unwrap();
        let d = col("d", &s).unwrap();
        let ge = binary(Arc::clone(&a), Operator::GtEq, lit(1i64), &s).unwrap();
        let wide = cast(Arc::clone(&d), &s, DataType::Decimal128(22, 2)).unwrap();
        let lt = binary(
            wide,
            Operator::Lt,
            lit(datafusion_common::ScalarValue::Decimal128(
                Some(2400),
                22,
                2,
            )),
            &s,
        )
        .unwrap();
        let both = binary(Arc::clone(&ge), Operator::And, lt, &s).unwrap();
        assert_eq!(parts(&both, &s).len(), 2);
        // 10 / a fails where a is 0: the predicate stays whole.
        let div = binary(lit(10i64), Operator::Divide, Arc::clone(&a), &s).unwrap();
        let gt = binary(div, Operator::Gt, lit(1i64), &s).unwrap();
        let guarded = binary(ge, Operator::And, gt, &s).unwrap();
        assert_eq!(parts(&guarded, &s).len(), 1);
        // A narrowing cast may overflow.
        let narrow = cast(d, &s, DataType::Decimal128(5, 2)).unwrap();
        let n = binary(
            narrow,
            Operator::Lt,
            lit(datafusion_common::ScalarValue::Decimal128(Some(1), 5, 2)),
            &s,
        )
        .unwrap();
        let with_narrow = binary(col("a", &s).unwrap(), Operator::Eq, lit(3i64), &s).unwrap();
        let with_narrow = binary(with_narrow, Operator::And, n, &s).unwrap();
        assert_eq!(parts(&with_narrow, &s).len(), 1);
    }

    /// A cast judged widening never fails on the extremes of its source
    /// type.
    #[test]
    fn widening_casts_hold_every_value() {
        let sources: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![i32::MIN, i32::MAX])),
            Arc::new(Int64Array::from(vec![i64::MIN, i64::MAX])),
            Arc::new(UInt8Array::from(vec![0, u8::MAX])),
            Arc::new(
                Decimal128Array::from(vec![-999_999_999_999_999i128, 999_999_999_999_999])
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
        ];
        let targets = [
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::UInt64,
            DataType::Decimal128(10, 0),
            DataType::Decimal128(12, 2),
            DataType::Decimal128(19, 0),
            DataType::Decimal128(21, 2),
            DataType::Decimal128(17, 2),
            DataType::Decimal128(17, 4),
            DataType::Decimal128(16, 3),
            DataType::Decimal128(38, 10),
        ];
        let mut judged = 0;
        for a in &sources {
            for t in &targets {
                if !widens(a.data_type(), t) {
                    continue;
                }
                judged += 1;
                let options = arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                };
                arrow::compute::cast_with_options(a, t, &options)
                    .unwrap_or_else(|e| panic!("{} -> {t} judged widening: {e}", a.data_type()));
            }
        }
        assert!(judged >= 12, "{judged}");
        // And some are refused.
        assert!(!widens(&DataType::Int64, &DataType::Decimal128(18, 0)));
        assert!(!widens(
            &DataType::Decimal128(15, 2),
            &DataType::Decimal128(15, 3)
        ));
        assert!(!widens(&DataType::Int64, &DataType::UInt64));
    }

    /// The filter keeps the rows the whole predicate keeps, NULLs
    /// included.
    #[test]
    fn parts_keep_what_the_whole_keeps() {
        let s = Arc::new(schema());
        let batch = RecordBatch::try_new(
            Arc::clone(&s),
            vec![
                Arc::new(Int64Array::from(vec![
                    Some(1),
                    None,
                    Some(5),
                    Some(7),
                    Some(0),
                ])),
                Arc::new(
                    Decimal128Array::from(vec![Some(100), Some(200), None, Some(2500), Some(50)])
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let a = col("a", &s).unwrap();
        let d = col("d", &s).unwrap();
        let ge = binary(a, Operator::GtEq, lit(1i64), &s).unwrap();
        let lt = binary(
            d,
            Operator::Lt,
            lit(datafusion_common::ScalarValue::Decimal128(
                Some(2400),
                15,
                2,
            )),
            &s,
        )
        .unwrap();
        let both = binary(ge, Operator::And, lt, &s).unwrap();
        let whole = both.evaluate(&batch).unwrap().into_array(5).unwrap();
        let whole =
            arrow::compute::filter_record_batch(&batch, arrow::array::AsArray::as_boolean(&whole))
                .unwrap();
        let mut op = crate::basic::FilterOperator::for_test(parts(&both, &s));
        let mut out = Vec::new();
        crate::Operator::process_batch(&mut op, batch, &mut out).unwrap();
        assert_eq!(out, vec![whole]);
    }
}
