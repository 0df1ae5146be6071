//! Casts to `DECIMAL` that cannot fail, without a check per value.
//!
//! Arrow casts an integer to a decimal, and a decimal to another precision
//! of the same scale, with a checked multiplication and a precision test per
//! value. Two casts are common in plans and never fail: an integer into a
//! decimal with room for all its digits (Nexmark q1's `0.908 * price` casts
//! the `BIGINT` price), and a decimal into a precision that holds the
//! batch's values (the product's `DECIMAL(24, 3)` written to a `DECIMAL(23,
//! 3)` column). [`DecimalCast`] computes the first as one widening
//! multiplication per value, and the second by relabelling the same buffer
//! when a pass over the values bounds them below the new precision. Any
//! other cast, or a batch the bound does not clear, goes to the planned
//! cast, so values, nulls and errors are arrow's.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, PrimitiveArray};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Decimal128Type, FieldRef, Schema};
use arrow::datatypes::{Int8Type, Int16Type, Int32Type, Int64Type};
use arrow::datatypes::{UInt8Type, UInt16Type, UInt32Type, UInt64Type};
use arrow::record_batch::RecordBatch;
use datafusion_common::Result;
use datafusion_expr::ColumnarValue;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::CastExpr;

/// What the cast does, when it is one done here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// An integer times `10^scale`, which the precision always holds.
    Integer { factor: i128 },
    /// A decimal of the same scale into `precision` digits.
    Narrow { limit: i128 },
}

/// One cast to `Decimal128` (see the module's documentation).
#[derive(Debug, Eq)]
pub(crate) struct DecimalCast {
    input: Arc<dyn PhysicalExpr>,
    kind: Kind,
    precision: u8,
    scale: i8,
    /// The cast as DataFusion planned it: its name, type, text and the
    /// fallback.
    planned: Arc<dyn PhysicalExpr>,
}

/// Decimal digits of the largest magnitude of each integer type.
fn integer_digits(t: &DataType) -> Option<u8> {
    Some(match t {
        DataType::Int8 | DataType::UInt8 => 3,
        DataType::Int16 | DataType::UInt16 => 5,
        DataType::Int32 | DataType::UInt32 => 10,
        DataType::Int64 => 19,
        DataType::UInt64 => 20,
        _ => return None,
    })
}

impl DecimalCast {
    /// The fast form of `expr`, when it is a cast done here.
    pub(crate) fn wrap(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Self> {
        let cast = expr.downcast_ref::<CastExpr>()?;
        let DataType::Decimal128(precision, scale) = *cast.cast_type() else {
            return None;
        };
        let from = cast.expr().data_type(schema).ok()?;
        let kind = match from {
            // Arrow relabels a widening one without a pass.
            DataType::Decimal128(p, s) if s == scale && precision < p => Kind::Narrow {
                // A value fits `precision` digits when below 10^precision.
                limit: 10i128.checked_pow(u32::from(precision))? - 1,
            },
            t => {
                let digits = integer_digits(&t)?;
                let scale_digits = u8::try_from(scale).ok()?;
                if digits.checked_add(scale_digits)? > precision {
                    return None;
                }
                Kind::Integer {
                    factor: 10i128.checked_pow(u32::from(scale_digits))?,
                }
            }
        };
        Some(Self {
            input: Arc::clone(cast.expr()),
            kind,
            precision,
            scale,
            planned: Arc::clone(expr),
        })
    }

    /// The cast without checks, when `value` is a column it cannot fail on.
    fn unchecked(&self, value: &ColumnarValue) -> Option<ArrayRef> {
        let ColumnarValue::Array(a) = value else {
            return None;
        };
        let out = match self.kind {
            Kind::Integer { factor } => match a.data_type() {
                DataType::Int8 => scaled::<Int8Type>(a, factor),
                DataType::Int16 => scaled::<Int16Type>(a, factor),
                DataType::Int32 => scaled::<Int32Type>(a, factor),
                DataType::Int64 => scaled::<Int64Type>(a, factor),
                DataType::UInt8 => scaled::<UInt8Type>(a, factor),
                DataType::UInt16 => scaled::<UInt16Type>(a, factor),
                DataType::UInt32 => scaled::<UInt32Type>(a, factor),
                DataType::UInt64 => scaled::<UInt64Type>(a, factor),
                _ => None,
            }?,
            Kind::Narrow { limit } => {
                let d = a.as_primitive_opt::<Decimal128Type>()?;
                // Slots under a null count too: at worst the planned cast
                // runs.
                if !within(d.values(), limit) {
                    return None;
                }
                d.clone()
            }
        };
        let out = out
            .with_precision_and_scale(self.precision, self.scale)
            .ok()?;
        Some(Arc::new(out))
    }
}

/// Each value of an integer column times `factor`, as decimals.
fn scaled<T>(a: &ArrayRef, factor: i128) -> Option<Decimal128Array>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i128>,
{
    let a: &PrimitiveArray<T> = a.as_primitive_opt::<T>()?;
    Some(if factor == 1 {
        a.unary::<_, Decimal128Type>(|v| v.into())
    } else {
        a.unary::<_, Decimal128Type>(|v| v.into() * factor)
    })
}

/// Whether every value's magnitude is at most `limit`.
fn within(values: &[i128], limit: i128) -> bool {
    // Branch-free over the column, as one pass of min and max.
    let (lo, hi) = values
        .iter()
        .fold((0i128, 0i128), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    hi <= limit && lo >= -limit
}

// The planned cast holds the input and the type.
impl PartialEq for DecimalCast {
    fn eq(&self, other: &Self) -> bool {
        self.planned.eq(&other.planned)
    }
}

impl Hash for DecimalCast {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.planned.hash(state);
    }
}

impl fmt::Display for DecimalCast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.planned, f)
    }
}

impl PhysicalExpr for DecimalCast {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.planned.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let value = self.input.evaluate(batch)?;
        match self.unchecked(&value) {
            Some(array) => Ok(ColumnarValue::Array(array)),
            None => {
                let cast = self
                    .planned
                    .downcast_ref::<CastExpr>()
                    .expect("wrapped only around a cast");
                value.cast_to(cast.cast_type(), Some(cast.cast_options()))
            }
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [input]: [Arc<dyn PhysicalExpr>; 1] = children.try_into().map_err(|_| {
            datafusion_common::DataFusionError::Internal("a cast has one child".into())
        })?;
        let planned = Arc::clone(&self.planned).with_new_children(vec![Arc::clone(&input)])?;
        Ok(Arc::new(Self {
            input,
            kind: self.kind,
            precision: self.precision,
            scale: self.scale,
            planned,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.planned.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::compute::CastOptions;
    use arrow::datatypes::Field;
    use datafusion_physical_expr::expressions::Column;
    use proptest::prelude::*;

    use crate::decimal_arith::tests::same;

    fn cast(from: DataType, to: DataType, safe: bool) -> (Arc<Schema>, Arc<dyn PhysicalExpr>) {
        let schema = Arc::new(Schema::new(vec![Field::new("a", from, true)]));
        let options = CastOptions {
            safe,
            ..Default::default()
        };
        let e: Arc<dyn PhysicalExpr> = Arc::new(CastExpr::new(
            Arc::new(Column::new("a", 0)),
            to,
            Some(options),
        ));
        (schema, e)
    }

    fn integer() -> impl Strategy<Value = Option<i64>> {
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(i64::MAX)),
            1 => Just(Some(i64::MIN)),
            3 => any::<i64>().prop_map(Some),
            3 => (-1000i64..1000).prop_map(Some),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// `BIGINT`, `INT` and `SMALLINT` into every decimal type, including
        /// those too narrow for the integer (arrow's checks decide those).
        #[test]
        fn integers_cast_as_arrow_casts_them(
            values in prop::collection::vec(integer(), 1..40),
            precision in 1u8..=38,
            scale in -2i8..=20,
            safe in any::<bool>(),
        ) {
            let scale = scale.min(precision as i8);
            let column = Int64Array::from(values);
            for (from, col) in [
                (DataType::Int64, Arc::new(column.clone()) as ArrayRef),
                (DataType::Int32, arrow::compute::cast(&column, &DataType::Int32).unwrap()),
                (DataType::Int16, arrow::compute::cast(&column, &DataType::Int16).unwrap()),
                (DataType::UInt64, arrow::compute::cast(&column, &DataType::UInt64).unwrap()),
            ] {
                let (schema, e) = cast(from, DataType::Decimal128(precision, scale), safe);
                let batch = RecordBatch::try_new(schema, vec![col]).unwrap();
                same(&e, &batch);
            }
        }

        /// A decimal into another precision of the same scale (and, left
        /// to arrow, another scale): wider, narrower, values at the limit.
        #[test]
        fn decimals_change_precision_as_arrow_changes_it(
            digits in prop::collection::vec((0u32..=38, -2i32..=1, 0i128..=1, any::<bool>()), 1..30),
            from in 1u8..=38,
            to in 1u8..=38,
            scale in 0i8..=10,
            rescale in any::<bool>(),
            safe in any::<bool>(),
        ) {
            let scale = scale.min(from as i8).min(to as i8);
            // Values of up to `from` digits, each 10^d - 1 or 10^d (the
            // largest of d digits or the smallest of d + 1), d any or near
            // the new precision; some negative, some NULL.
            let values: Vec<Option<i128>> = digits
                .iter()
                .map(|&(any_d, near, over, sign)| {
                    let d = if near == -2 { any_d } else { (i32::from(to) + near).max(0) as u32 };
                    let d = d.min(u32::from(from) - over as u32);
                    let v = 10i128.pow(d) - 1 + over;
                    (any_d % 5 != 0).then_some(if sign { -v } else { v })
                })
                .collect();
            let col = Decimal128Array::from(values)
                .with_precision_and_scale(from, scale)
                .unwrap();
            let to_scale = if rescale { (scale + 1).min(to as i8) } else { scale };
            let (schema, e) = cast(
                DataType::Decimal128(from, scale),
                DataType::Decimal128(to, to_scale),
                safe,
            );
            let batch = RecordBatch::try_new(schema, vec![Arc::new(col) as ArrayRef]).unwrap();
            same(&e, &batch);
        }
    }

    #[test]
    fn nexmark_q1s_casts_are_done_here() {
        let (schema, e) = cast(DataType::Int64, DataType::Decimal128(20, 0), false);
        assert!(DecimalCast::wrap(&e, &schema).is_some());
        let (schema, e) = cast(
            DataType::Decimal128(24, 3),
            DataType::Decimal128(23, 3),
            false,
        );
        assert!(DecimalCast::wrap(&e, &schema).is_some());
        // BIGINT needs 19 digits before the point.
        let (schema, e) = cast(DataType::Int64, DataType::Decimal128(20, 2), false);
        assert!(DecimalCast::wrap(&e, &schema).is_none());
    }
}
