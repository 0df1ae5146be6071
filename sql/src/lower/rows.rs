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
