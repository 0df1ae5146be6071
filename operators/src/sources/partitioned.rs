//! The source of a `PARTITIONED BY` filesystem table: its Hive folders
//! `col=value/…` each read by the format's own source, the partition
//! columns added from the folder names (cast to their declared types) and
//! the columns put in the table's order. Folders a filter on partition
//! columns rules out were left out when the job was planned.

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray, UInt64Array, new_null_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_core::{Result, WeirError};

use super::{Source, SourcePoll};
use crate::OperatorContext;
use crate::connectors::{FilePlan, PartitionedPlan};

/// Reads the partitions in order; each partition's splits go to the
/// subtasks as that format's source assigns them.
pub struct PartitionedSource {
    plan: PartitionedPlan,
    parts: Vec<Box<dyn Source>>,
    current: usize,
}

impl PartitionedSource {
    pub(crate) fn new(
        plan: PartitionedPlan,
        ctx: &OperatorContext,
        open: impl Fn(FilePlan, &OperatorContext) -> Box<dyn Source>,
    ) -> Self {
        let parts = plan
            .parts
            .iter()
            .map(|p| open(p.files.clone(), ctx))
            .collect();
        Self {
            plan,
            parts,
            current: 0,
        }
    }

    /// `batch` of partition `k` with its partition columns, in table order.
    fn complete(&self, k: usize, batch: RecordBatch) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let part = &self.plan.parts[k];
        let columns = self
            .plan
            .schema
            .fields()
            .iter()
            .map(|f| {
                if let Some(i) = self.plan.keys.iter().position(|k| k == f.name()) {
                    partition_column(f, part.values[i].as_deref(), n)
                } else {
                    batch.column_by_name(f.name()).cloned().ok_or_else(|| {
                        WeirError::Execution(format!(
                            "partition {}: the files have no column '{}'",
                            part.folder,
                            f.name()
                        ))
                    })
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(
            Arc::clone(&self.plan.schema),
            columns,
        )?)
    }
}

/// A partition value as a column of `n` rows of the field's type.
fn partition_column(field: &Field, value: Option<&str>, n: usize) -> Result<ArrayRef> {
    let Some(value) = value else {
        return Ok(new_null_array(field.data_type(), n));
    };
    let text: ArrayRef = Arc::new(StringArray::from(vec![value; n]));
    if field.data_type() == &DataType::Utf8 {
        return Ok(text);
    }
    arrow::compute::cast(&text, field.data_type()).map_err(|e| {
        WeirError::bad_input(
            format!("partition value '{value}'"),
            format!(
                "not a {} for column '{}': {e}",
                field.data_type(),
                field.name()
            ),
        )
    })
}

fn position_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("split", DataType::UInt64, false),
        Field::new("rows_read", DataType::UInt64, false),
        Field::new("partition", DataType::UInt64, false),
    ]))
}

impl Source for PartitionedSource {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        while self.current < self.parts.len() {
            match self.parts[self.current].poll_next()? {
                SourcePoll::Batch(b) => {
                    return Ok(SourcePoll::Batch(self.complete(self.current, b)?));
                }
                SourcePoll::Finished => self.current += 1,
                pending => return Ok(pending),
            }
        }
        Ok(SourcePoll::Finished)
    }

    /// Each partition's position (its source's `split`, `rows_read`) with
    /// the partition's index.
    fn snapshot_position(&mut self, checkpoint: u64) -> Result<RecordBatch> {
        let mut batches = vec![];
        for (k, p) in self.parts.iter_mut().enumerate() {
            let b = p.snapshot_position(checkpoint)?;
            let n = b.num_rows();
            let mut columns = b.columns().to_vec();
            columns.push(Arc::new(UInt64Array::from(vec![k as u64; n])));
            batches.push(RecordBatch::try_new(position_schema(), columns)?);
        }
        Ok(arrow::compute::concat_batches(
            &position_schema(),
            &batches,
        )?)
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        use arrow::array::AsArray;
        use arrow::datatypes::UInt64Type;
        let mut by_part: Vec<Vec<RecordBatch>> = vec![vec![]; self.parts.len()];
        for b in positions {
            let Some(part) = b
                .column_by_name("partition")
                .and_then(|c| c.as_primitive_opt::<UInt64Type>())
            else {
                return Err(WeirError::Execution(
                    "partitioned source position lacks 'partition'".into(),
                ));
            };
            let inner = b.project(&[0, 1])?;
            for (row, k) in part.values().iter().enumerate() {
                let k = *k as usize;
                let Some(slot) = by_part.get_mut(k) else {
                    return Err(WeirError::Execution(format!(
                        "checkpointed partition {k} is not in this source: its folders changed"
                    )));
                };
                slot.push(inner.slice(row, 1));
            }
        }
        for (p, rows) in self.parts.iter_mut().zip(by_part) {
            p.restore_position(rows)?;
        }
        self.current = 0;
        Ok(())
    }
}
