//! `CASE WHEN e = 'a' THEN x WHEN e = 'b' THEN y … ELSE z END` as one
//! lookup a row.
//!
//! DataFusion evaluates a searched CASE branch by branch: each condition
//! over the rows no earlier one took, the batch filtered for it every
//! time, the results scattered back. When every condition compares one
//! expression with a constant (Nexmark q21 maps `lower(channel)` to a
//! channel id), that is the expression computed once and each row's value
//! looked up among the constants: [`CaseLookup`]. The first condition is
//! evaluated for every row in either form, so computing the expression
//! for every row shows no row a value or an error it would not have seen.
//! The results must be constants and the ELSE a column or a constant
//! (which cannot fail on the rows a condition took); any other CASE is
//! left as planned.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, FieldRef, Schema};
use arrow::record_batch::RecordBatch;
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::{ColumnarValue, Operator};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::{BinaryExpr, CaseExpr, Column, Literal};

/// A searched CASE of equality tests of one string expression (see the
/// module's documentation), giving strings.
#[derive(Debug, Eq)]
pub(crate) struct CaseLookup {
    key: Arc<dyn PhysicalExpr>,
    /// The constants compared with, in order (a later duplicate never
    /// matches), and each one's result (`None`: NULL).
    arms: Vec<(String, Option<String>)>,
    /// The ELSE: a column or a constant; NULL when absent.
    otherwise: Option<Arc<dyn PhysicalExpr>>,
    /// The CASE as DataFusion planned it: its name, type and text.
    planned: Arc<dyn PhysicalExpr>,
}

impl CaseLookup {
    /// The lookup form of `expr`, when it is such a CASE.
    pub(crate) fn wrap(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Self> {
        let case = expr.downcast_ref::<CaseExpr>()?;
        if case.expr().is_some() || case.when_then_expr().len() < 2 {
            return None;
        }
        if expr.data_type(schema).ok()? != DataType::Utf8 {
            return None;
        }
        let mut key: Option<&Arc<dyn PhysicalExpr>> = None;
        let mut arms = Vec::new();
        for (when, then) in case.when_then_expr() {
            let b = when.downcast_ref::<BinaryExpr>()?;
            if *b.op() != Operator::Eq {
                return None;
            }
            let (e, constant) = match (text(b.right()), text(b.left())) {
                (Some(c), _) => (b.left(), c),
                (None, Some(c)) => (b.right(), c),
                (None, None) => return None,
            };
            // `e = NULL` is never true.
            let constant = constant?;
            match key {
                None => key = Some(e),
                Some(k) if k == e => {}
                Some(_) => return None,
            }
            let result = text(then)?;
            arms.push((constant, result));
        }
        let key = Arc::clone(key?);
        if key.data_type(schema).ok()? != DataType::Utf8 {
            return None;
        }
        let otherwise = match case.else_expr() {
            None => None,
            Some(e) if text(e).is_some() => Some(Arc::clone(e)),
            Some(e)
                if e.downcast_ref::<Column>().is_some()
                    && e.data_type(schema).ok()? == DataType::Utf8 =>
            {
                Some(Arc::clone(e))
            }
            Some(_) => return None,
        };
        Some(Self {
            key,
            arms,
            otherwise,
            planned: Arc::clone(expr),
        })
    }
}

/// The text of a string constant (`Some(None)` for a NULL one), or `None`
/// when `e` is not one.
fn text(e: &Arc<dyn PhysicalExpr>) -> Option<Option<String>> {
    match e.downcast_ref::<Literal>()?.value() {
        ScalarValue::Utf8(v) => Some(v.clone()),
        _ => None,
    }
}

impl PhysicalExpr for CaseLookup {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.planned.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let n = batch.num_rows();
        let keys = self.key.evaluate(batch)?.into_array(n)?;
        // A constant ELSE stays one value, not a column of copies.
        let otherwise = match self
            .otherwise
            .as_ref()
            .map(|e| e.evaluate(batch))
            .transpose()?
        {
            None => Otherwise::Value(None),
            Some(ColumnarValue::Scalar(ScalarValue::Utf8(v))) => Otherwise::Value(v),
            Some(other) => Otherwise::Column(other.into_array(n)?),
        };
        Ok(ColumnarValue::Array(self.lookup(&keys, &otherwise)?))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.planned.children()
    }

    /// The new CASE as DataFusion evaluates it: its parts are no longer
    /// known to be a key, constants and a column.
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Arc::clone(&self.planned).with_new_children(children)
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.planned.fmt_sql(f)
    }
}

impl CaseLookup {
    /// Each row's result: the first arm whose constant its key equals,
    /// else the ELSE's value.
    fn lookup(&self, keys: &ArrayRef, otherwise: &Otherwise) -> Result<ArrayRef> {
        let keys = keys.as_string::<i32>();
        let (column, constant) = match otherwise {
            Otherwise::Column(c) => (Some(c.as_string::<i32>()), None),
            Otherwise::Value(v) => (None, v.as_deref()),
        };
        let n = keys.len();
        let mut out = StringBuilder::with_capacity(n, column.map_or(n, |o| o.value_data().len()));
        for i in 0..n {
            let arm = keys.is_valid(i).then(|| {
                let k = keys.value(i).as_bytes();
                self.arms.iter().find(|(c, _)| c.as_bytes() == k)
            });
            match arm.flatten() {
                Some((_, result)) => out.append_option(result.as_deref()),
                None => match column {
                    Some(o) if o.is_valid(i) => out.append_value(o.value(i)),
                    Some(_) => out.append_null(),
                    None => out.append_option(constant),
                },
            }
        }
        Ok(Arc::new(out.finish()))
    }
}

/// The ELSE's values for a batch.
enum Otherwise {
    Column(ArrayRef),
    /// A constant (or NULL, also when there is no ELSE).
    Value(Option<String>),
}

impl PartialEq for CaseLookup {
    fn eq(&self, other: &Self) -> bool {
        self.planned.eq(&other.planned)
    }
}

impl Hash for CaseLookup {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.planned.hash(state);
    }
}

impl fmt::Display for CaseLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.planned, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;
    use arrow::datatypes::Field;
    use datafusion_physical_expr::expressions::{binary, case, col, lit};
    use proptest::prelude::*;

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("z", DataType::Utf8, true),
        ]))
    }

    fn word() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(prop_oneof![
            Just("apple".to_string()),
            Just("Apple".to_string()),
            Just("baidu".to_string()),
            Just(String::new()),
            "[a-c]{0,3}",
        ])
    }

    /// The CASE `k = c1 THEN r1 …` with `otherwise` (0: none, 1: the
    /// column z, 2: a constant).
    fn planned(
        arms: &[(String, Option<String>)],
        otherwise: u8,
        reversed: bool,
    ) -> Arc<dyn PhysicalExpr> {
        let s = schema();
        let k = col("k", &s).unwrap();
        let when_then = arms
            .iter()
            .map(|(c, r)| {
                let (l, r2) = (lit(c.as_str()), Arc::clone(&k));
                let when = if reversed {
                    binary(l, Operator::Eq, r2, &s).unwrap()
                } else {
                    binary(r2, Operator::Eq, l, &s).unwrap()
                };
                (when, lit(ScalarValue::Utf8(r.clone())))
            })
            .collect();
        let otherwise = match otherwise {
            0 => None,
            1 => Some(col("z", &s).unwrap()),
            _ => Some(lit("other")),
        };
        case(None, when_then, otherwise).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Row for row what DataFusion's CASE gives: NULL keys, NULL
        /// results, repeated constants, every ELSE form.
        #[test]
        fn the_lookup_gives_the_case_s_rows(
            rows in proptest::collection::vec((word(), word()), 0..40),
            arms in proptest::collection::vec(
                (prop_oneof![Just("apple".to_string()), Just("baidu".to_string()), "[a-c]{0,2}"],
                 proptest::option::of("[0-9]{1,2}")),
                2..6,
            ),
            otherwise in 0u8..3,
            reversed in any::<bool>(),
        ) {
            let s = schema();
            let (k, z): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
            let batch = RecordBatch::try_new(
                Arc::clone(&s),
                vec![Arc::new(StringArray::from(k)), Arc::new(StringArray::from(z))],
            )
            .unwrap();
            let planned = planned(&arms, otherwise, reversed);
            let fast = CaseLookup::wrap(&planned, &s).expect("a lookup");
            let n = batch.num_rows();
            let want = planned.evaluate(&batch).unwrap().into_array(n).unwrap();
            let got = fast.evaluate(&batch).unwrap().into_array(n).unwrap();
            prop_assert_eq!(got.as_ref(), want.as_ref());
        }
    }

    /// Other CASEs stay as planned: a second key, a computed result, an
    /// ELSE that is computed (it may fail on rows a condition took).
    #[test]
    fn other_cases_are_left_alone() {
        let s = schema();
        let k = col("k", &s).unwrap();
        let z = col("z", &s).unwrap();
        let eq = |e: &Arc<dyn PhysicalExpr>, c: &str| {
            binary(Arc::clone(e), Operator::Eq, lit(c), &s).unwrap()
        };
        let two_keys = case(
            None,
            vec![(eq(&k, "a"), lit("1")), (eq(&z, "b"), lit("2"))],
            None,
        )
        .unwrap();
        assert!(CaseLookup::wrap(&two_keys, &s).is_none());
        let computed = case(
            None,
            vec![(eq(&k, "a"), lit("1")), (eq(&k, "b"), Arc::clone(&z))],
            None,
        )
        .unwrap();
        assert!(CaseLookup::wrap(&computed, &s).is_none());
        // An ELSE computed (here another CASE): left as planned.
        let inner = case(None, vec![(eq(&z, "x"), lit("y"))], None).unwrap();
        let computed_else = case(
            None,
            vec![(eq(&k, "a"), lit("1")), (eq(&k, "b"), lit("2"))],
            Some(inner),
        )
        .unwrap();
        assert!(CaseLookup::wrap(&computed_else, &s).is_none());
        let planned = planned(
            &[("a".into(), Some("1".into())), ("b".into(), None)],
            1,
            false,
        );
        let fast = crate::decimal_arith::accelerate(&planned, &s);
        assert!(fast.downcast_ref::<CaseLookup>().is_some());
        assert_eq!(fast.to_string(), planned.to_string());
    }
}
