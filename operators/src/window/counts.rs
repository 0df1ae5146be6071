//! The count trigger's state: per pane, each key's records so far.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion_expr::EmitTo;
use datafusion_physical_plan::aggregates::group_values::new_group_values;
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::{Result, WeirError};

use super::{Frozen, WindowAggregateOperator, split_by};
use crate::{Output, StateTable};

impl WindowAggregateOperator {
    /// Count trigger (tumbling windows): split `part` after every record
    /// that brings its key's count in the window to a multiple of `count`,
    /// and fire that key's window there — exactly where Flink's per-record
    /// trigger fires, with the result as of that record.
    pub(super) fn process_counted(
        &mut self,
        pane: i64,
        part: &RecordBatch,
        count: u64,
        out: &mut dyn Output,
    ) -> Result<()> {
        let keys = self.aggregates.keys(part);
        if !self.counts.contains_key(&pane) {
            let table = new_group_values(self.aggregates.key_schema(), &GroupOrdering::None)?;
            self.counts.insert(pane, (table, Vec::new()));
        }
        let (table, counts) = self.counts.get_mut(&pane).expect("inserted above");
        let mut ids = Vec::new();
        table.intern(&keys, &mut ids)?;
        counts.resize(table.len(), 0);
        let mut cuts = Vec::new();
        for (row, &id) in ids.iter().enumerate() {
            counts[id] += 1;
            if counts[id] % count == 0 {
                cuts.push(row);
            }
        }
        let mut from = 0;
        let end = pane.saturating_add(self.pane_size);
        for row in cuts {
            self.accumulate(pane, &part.slice(from, row + 1 - from))?;
            from = row + 1;
            let key: Vec<ArrayRef> = keys.iter().map(|k| k.slice(row, 1)).collect();
            if let Some((k, v)) = self.window_result(pane, end, Some(&key))? {
                self.windows_fired += 1;
                self.emit(pane, end, k, v, false, out)?;
            }
            if self.purge {
                self.forget_keys(pane, &key)?;
            }
        }
        if from < part.num_rows() {
            self.accumulate(pane, &part.slice(from, part.num_rows() - from))?;
        }
        Ok(())
    }

    /// Drop the state of `keys` in the pane at `start` (purging triggers).
    pub(super) fn forget_keys(&mut self, start: i64, keys: &[ArrayRef]) -> Result<()> {
        self.freeze_range(start, start.saturating_add(1))?;
        let Some(pane) = self.panes.get_mut(&start) else {
            return Ok(());
        };
        let mut kept = Vec::new();
        for part in pane.frozen.drain(..) {
            let mut table = new_group_values(self.aggregates.key_schema(), &GroupOrdering::None)?;
            let mut ids = Vec::new();
            table.intern(keys, &mut ids)?;
            let forget = table.len();
            table.intern(&part.keys, &mut ids)?;
            let keep = BooleanArray::new(
                BooleanBuffer::collect_bool(ids.len(), |i| ids[i] >= forget),
                None,
            );
            if keep.true_count() == 0 {
                continue;
            }
            let cut = |arrays: &[ArrayRef]| -> Result<Vec<ArrayRef>> {
                Ok(arrays
                    .iter()
                    .map(|a| filter(a.as_ref(), &keep))
                    .collect::<std::result::Result<Vec<_>, _>>()?)
            };
            kept.push(Frozen {
                keys: cut(&part.keys)?,
                states: part
                    .states
                    .iter()
                    .map(|s| cut(s))
                    .collect::<Result<Vec<_>>>()?,
            });
        }
        pane.frozen = kept;
        Ok(())
    }

    /// The count trigger's per-pane key counts as a `counts` table.
    pub(super) fn counts_table(&mut self) -> Result<Option<StateTable>> {
        if self.counts.is_empty() {
            return Ok(None);
        }
        let key_schema = self.aggregates.key_schema();
        let mut fields = vec![Field::new("pane_start", DataType::Int64, false)];
        fields.extend(key_schema.fields().iter().map(|f| f.as_ref().clone()));
        fields.push(Field::new("count", DataType::UInt64, false));
        let schema = Arc::new(Schema::new(fields));
        let mut parts = Vec::new();
        for (&pane, (table, counts)) in &mut self.counts {
            // Reading the keys empties the table: intern them again, in
            // order, so every key keeps its id.
            let keys = table.emit(EmitTo::All)?;
            let mut ids = Vec::new();
            table.intern(&keys, &mut ids)?;
            let rows = counts.len();
            let mut columns: Vec<ArrayRef> =
                vec![Arc::new(arrow::array::Int64Array::from(vec![pane; rows]))];
            columns.extend(keys);
            columns.push(Arc::new(arrow::array::UInt64Array::from(counts.clone())));
            parts.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
        }
        let batch = arrow::compute::concat_batches(&schema, &parts)?;
        let keys = 1..1 + key_schema.fields().len();
        Ok(Some(StateTable::new("counts", batch).keyed(keys)))
    }

    pub(super) fn restore_counts(&mut self, batch: RecordBatch, keys: usize) -> Result<()> {
        let batch = self.own_key_groups(batch, keys)?;
        let malformed = || WeirError::Execution(format!("{}: malformed count state", self.name));
        let starts = batch
            .column(0)
            .as_primitive_opt::<arrow::datatypes::Int64Type>()
            .ok_or_else(malformed)?
            .values()
            .to_vec();
        let key_schema = self.aggregates.key_schema();
        split_by(&batch, &starts, |pane, part| {
            let counts = part
                .column(1 + keys)
                .as_primitive_opt::<arrow::datatypes::UInt64Type>()
                .ok_or_else(malformed)?;
            let (table, pane_counts) = match self.counts.entry(pane) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert((
                    new_group_values(Arc::clone(&key_schema), &GroupOrdering::None)?,
                    Vec::new(),
                )),
            };
            let mut ids = Vec::new();
            table.intern(&part.columns()[1..1 + keys], &mut ids)?;
            pane_counts.resize(table.len(), 0);
            for (row, &id) in ids.iter().enumerate() {
                pane_counts[id] = counts.value(row);
            }
            Ok::<_, WeirError>(())
        })
    }
}
