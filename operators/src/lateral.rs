//! The lateral join with a table function (`CROSS JOIN UNNEST(…)`,
//! `LATERAL TABLE(f(…))`): stateless, one call of the function per batch,
//! the input's columns repeated by one `take` per column.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{Field, SchemaRef};
use weir_core::table_function::{LateralSpec, TableFunction, TableRows};
use weir_core::{Result, WeirError};

use crate::{Operator, OperatorContext, Output, StateTable};

/// The lateral join of one subtask.
pub struct LateralOperator {
    name: String,
    function: Arc<dyn TableFunction>,
    args: Vec<usize>,
    fields: Vec<Field>,
    /// Data columns of the input (without its row kind).
    width: usize,
    changelog: bool,
    outer: bool,
    schema: SchemaRef,
    batch_size: usize,
}

impl LateralOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &LateralSpec,
        schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let changelog = weir_core::spec::is_changelog_schema(&spec.input_schema);
        Ok(Self {
            name,
            function: Arc::clone(&spec.function),
            args: crate::column_indices(&spec.input_schema, &spec.args)?,
            fields: spec.function_fields()?,
            width: spec.input_schema.fields().len() - usize::from(changelog),
            changelog,
            outer: spec.outer,
            schema,
            batch_size: ctx.config.batch_size.max(1),
        })
    }

    /// Check what the function returned for a batch of `n` rows.
    fn check(&self, made: &TableRows, n: usize) -> Result<()> {
        let bad = |what: String| {
            Err(WeirError::Execution(format!(
                "{}: table function {} {what}",
                self.name,
                self.function.name()
            )))
        };
        if made.columns.len() != self.fields.len() {
            return bad(format!(
                "returned {} columns, declared {}",
                made.columns.len(),
                self.fields.len()
            ));
        }
        for (c, f) in made.columns.iter().zip(&self.fields) {
            if c.len() != made.rows.len() {
                return bad(format!(
                    "returned {} values in column '{}' for {} rows",
                    c.len(),
                    f.name(),
                    made.rows.len()
                ));
            }
            if c.data_type() != f.data_type() {
                return bad(format!(
                    "returned {} for column '{}', declared {}",
                    c.data_type(),
                    f.name(),
                    f.data_type()
                ));
            }
        }
        if made.rows.windows(2).any(|w| w[0] > w[1])
            || made.rows.last().is_some_and(|&r| r as usize >= n)
        {
            return bad(format!(
                "returned row numbers that are not ascending input rows below {n}"
            ));
        }
        Ok(())
    }
}

impl Operator for LateralOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let args: Vec<ArrayRef> = self
            .args
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let made = self.function.eval(&args)?;
        self.check(&made, n)?;
        // Input row of each output row, and the function row (None: the
        // NULL row an outer join keeps for an input row with none).
        let (input_rows, function_rows): (Vec<u32>, Option<Vec<Option<u32>>>) = if self.outer {
            let mut inputs = Vec::with_capacity(made.rows.len() + n);
            let mut picks = Vec::with_capacity(made.rows.len() + n);
            let mut j = 0;
            for r in 0..n as u32 {
                let start = j;
                while j < made.rows.len() && made.rows[j] == r {
                    inputs.push(r);
                    picks.push(Some(j as u32));
                    j += 1;
                }
                if j == start {
                    inputs.push(r);
                    picks.push(None);
                }
            }
            (inputs, Some(picks))
        } else {
            (made.rows.clone(), None)
        };
        if input_rows.is_empty() {
            return Ok(());
        }
        let idx = UInt32Array::from(input_rows);
        let repeat = |c: &ArrayRef| take(c.as_ref(), &idx, None);
        let mut columns = batch.columns()[..self.width]
            .iter()
            .map(repeat)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        match function_rows {
            Some(picks) => {
                let picks = UInt32Array::from(picks);
                for c in &made.columns {
                    columns.push(take(c.as_ref(), &picks, None)?);
                }
            }
            None => columns.extend(made.columns),
        }
        if self.changelog {
            columns.push(repeat(batch.column(self.width))?);
        }
        let output = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        crate::pane_buffer::emit_sliced(&output, self.batch_size, out)
    }

    /// Stateless: nothing to snapshot.
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        Ok(vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, ListArray, StringArray};
    use arrow::datatypes::{DataType, Int64Type, Schema};
    use arrow::util::display::array_value_to_string;
    use weir_core::config::WeirConfig;

    use weir_core::table_function::Unnest;

    fn input() -> RecordBatch {
        let tags = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![]),
            None,
            Some(vec![Some(3), None]),
        ]);
        let ids = StringArray::from(vec!["a", "b", "c", "d"]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("tags", tags.data_type().clone(), true),
        ]));
        RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(tags)]).unwrap()
    }

    fn run(outer: bool) -> Vec<String> {
        let batch = input();
        let spec = LateralSpec {
            input_schema: batch.schema(),
            args: vec!["tags".into()],
            function: Unnest::arc(),
            names: vec!["tag".into()],
            outer,
        };
        let ctx = OperatorContext::single("lateral", WeirConfig::default());
        let mut op =
            LateralOperator::try_new("lateral".into(), &spec, spec.output_schema().unwrap(), &ctx)
                .unwrap();
        let mut out: Vec<RecordBatch> = vec![];
        op.process_batch(batch, &mut out).unwrap();
        out.iter()
            .flat_map(|b| {
                (0..b.num_rows())
                    .map(|r| {
                        format!(
                            "{},{}",
                            array_value_to_string(b.column(0), r).unwrap(),
                            array_value_to_string(b.column(2), r).unwrap()
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn unnest_repeats_each_row_per_element_and_an_outer_one_keeps_empty_rows() {
        assert_eq!(run(false), ["a,1", "a,2", "d,3", "d,"]);
        assert_eq!(run(true), ["a,1", "a,2", "b,", "c,", "d,3", "d,"]);
    }

    #[test]
    fn unnest_zips_several_arrays_padding_the_shorter() {
        let a =
            ListArray::from_iter_primitive::<Int64Type, _, _>(vec![Some(vec![Some(1), Some(2)])]);
        let b = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![Some(vec![Some(7)])]);
        let made = Unnest::default().eval(&[Arc::new(a), Arc::new(b)]).unwrap();
        assert_eq!(made.rows, [0, 0]);
        let second = made.columns[1]
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(second.iter().collect::<Vec<_>>(), [Some(7), None]);
    }
}
