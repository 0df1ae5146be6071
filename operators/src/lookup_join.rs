//! The lookup join: stream rows joined with a bounded table every subtask
//! holds in memory, indexed by its key (row-encoded) once at start. A batch
//! is probed row by row against the index and the matches are gathered with
//! two `take`s — the output is built column by column.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use weir_core::spec::LookupJoinSpec;
use weir_core::{Result, WeirError};

use crate::{Operator, Output, StateTable};

/// The lookup join of one subtask.
pub struct LookupJoinOperator {
    name: String,
    key_indices: Vec<usize>,
    converter: RowConverter,
    /// Row-encoded key → table rows (looked up by the encoded bytes, so
    /// probing allocates nothing per row).
    index: HashMap<Box<[u8]>, Vec<u32>>,
    table: RecordBatch,
    schema: SchemaRef,
}

impl LookupJoinOperator {
    /// Index the table.
    pub fn try_new(name: String, spec: &LookupJoinSpec, schema: SchemaRef) -> Result<Self> {
        let key_indices = crate::column_indices(&spec.input_schema, &spec.keys)?;
        let table_keys = crate::column_indices(&spec.table_schema, &spec.table_keys)?;
        let table = concat_batches(&spec.table_schema, &spec.table)?;
        let converter = RowConverter::new(
            table_keys
                .iter()
                .map(|&i| SortField::new(spec.table_schema.field(i).data_type().clone()))
                .collect(),
        )?;
        let columns: Vec<ArrayRef> = table_keys
            .iter()
            .map(|&i| Arc::clone(table.column(i)))
            .collect();
        let rows = converter.convert_columns(&columns)?;
        let mut index: HashMap<Box<[u8]>, Vec<u32>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            // NULL keys match nothing, as in SQL.
            if columns.iter().any(|c| c.is_null(i)) {
                continue;
            }
            index.entry(r.data().into()).or_default().push(i as u32);
        }
        Ok(Self {
            name,
            key_indices,
            converter,
            index,
            table,
            schema,
        })
    }
}

impl Operator for LookupJoinOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let keys: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let rows = self
            .converter
            .convert_columns(&keys)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        let (mut left, mut right) = (vec![], vec![]);
        for (i, r) in rows.iter().enumerate() {
            if keys.iter().any(|c| c.is_null(i)) {
                continue;
            }
            if let Some(matches) = self.index.get(r.data()) {
                for &m in matches {
                    left.push(i as u32);
                    right.push(m);
                }
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        let (left, right) = (UInt32Array::from(left), UInt32Array::from(right));
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for c in batch.columns() {
            columns.push(take(c, &left, None)?);
        }
        for c in self.table.columns() {
            columns.push(take(c, &right, None)?);
        }
        out.collect(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    /// Stateless: the table is part of the job.
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        Ok(vec![])
    }
}
