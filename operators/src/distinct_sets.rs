//! `COUNT(DISTINCT x)` of the updating aggregation, kept incrementally.
//!
//! DataFusion's distinct count keeps its state as a list of the values seen;
//! the updating aggregation stores states between batches, so every batch
//! that touched a key re-read, re-hashed and re-wrote that key's whole list:
//! one busy key (Nexmark q15 groups by day) made the work grow with the
//! square of the input. Here each key has its own hash set of row-encoded
//! values that lives across batches: a batch costs its own rows, and the
//! count is the set's size. Checkpoints still hold DataFusion's list state
//! (`a{i}_…` columns), so snapshots read the same either way.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, GenericListArray, Int64Array};
use arrow::row::{RowConverter, SortField};
use datafusion_expr::EmitTo;
use datafusion_expr::GroupsAccumulator;
use hashbrown::HashTable;
use weir_core::Result;
use xxhash_rust::xxh3::xxh3_64;

/// One distinct count: per key id, the values seen.
pub(crate) struct DistinctSets {
    /// The aggregate's place among the operator's aggregates.
    pub(crate) position: usize,
    /// The argument's column in the input.
    pub(crate) column: usize,
    converter: RowConverter,
    sets: Vec<HashTable<Box<[u8]>>>,
    bytes: usize,
}

impl DistinctSets {
    pub(crate) fn new(
        position: usize,
        column: usize,
        data_type: &arrow::datatypes::DataType,
    ) -> Result<Self> {
        Ok(Self {
            position,
            column,
            converter: RowConverter::new(vec![SortField::new(data_type.clone())])?,
            sets: Vec::new(),
            bytes: 0,
        })
    }

    fn grow(&mut self, id: usize) {
        if self.sets.len() <= id {
            self.sets.resize_with(id + 1, HashTable::new);
        }
    }

    /// Forget key `id`'s values (a key that starts afresh).
    pub(crate) fn clear(&mut self, id: usize) {
        if let Some(set) = self.sets.get_mut(id) {
            self.bytes -= set.iter().map(|v| v.len() + 16).sum::<usize>();
            *set = HashTable::new();
        }
    }

    /// Add `values` (one per row, NULLs skipped) to the sets of `ids`.
    pub(crate) fn insert(&mut self, values: &ArrayRef, ids: &[usize]) -> Result<()> {
        let rows = self
            .converter
            .convert_columns(std::slice::from_ref(values))?;
        if let Some(&most) = ids.iter().max() {
            self.grow(most);
        }
        for (r, &id) in ids.iter().enumerate() {
            if values.is_null(r) {
                continue;
            }
            let row = rows.row(r);
            let bytes = row.as_ref();
            let hash = xxh3_64(bytes);
            let set = &mut self.sets[id];
            if set.find(hash, |v| **v == *bytes).is_none() {
                set.insert_unique(hash, bytes.into(), |v| xxh3_64(v));
                self.bytes += bytes.len() + 16;
            }
        }
        Ok(())
    }

    /// The counts of keys `ids`.
    pub(crate) fn counts(&self, ids: &[usize]) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            ids.iter()
                .map(|&id| self.sets.get(id).map_or(0, |s| s.len() as i64)),
        ))
    }

    /// The sets in the order of `order` (old ids at their new places).
    pub(crate) fn renumber(&mut self, order: &[usize]) {
        let mut old = std::mem::take(&mut self.sets);
        self.sets = order
            .iter()
            .map(|&i| old.get_mut(i).map(std::mem::take).unwrap_or_default())
            .collect();
        self.bytes = self.sets.iter().flatten().map(|v| v.len() + 16).sum();
    }

    /// DataFusion's state columns of the distinct count for keys `ids`,
    /// made by its own accumulator (`fresh`) from the values.
    pub(crate) fn state(
        &self,
        ids: &[usize],
        mut fresh: Box<dyn GroupsAccumulator>,
    ) -> Result<Vec<ArrayRef>> {
        let mut groups = Vec::new();
        let mut rows = self.converter.empty_rows(0, 0);
        for (g, &id) in ids.iter().enumerate() {
            if let Some(set) = self.sets.get(id) {
                for v in set.iter() {
                    rows.push(self.converter.parser().parse(v));
                    groups.push(g);
                }
            }
        }
        let values = self.converter.convert_rows(&rows)?;
        fresh.update_batch(&values, &groups, None, ids.len())?;
        Ok(fresh.state(EmitTo::All)?)
    }

    /// Take in DataFusion's list state (one list per key) for keys `ids`.
    pub(crate) fn restore(&mut self, state: &ArrayRef, ids: &[usize]) -> Result<()> {
        let (values, offsets): (ArrayRef, Vec<usize>) =
            if let Some(list) = state.as_any().downcast_ref::<GenericListArray<i32>>() {
                let o = list.value_offsets().iter().map(|&o| o as usize).collect();
                (Arc::clone(list.values()), o)
            } else if let Some(list) = state.as_any().downcast_ref::<GenericListArray<i64>>() {
                let o = list.value_offsets().iter().map(|&o| o as usize).collect();
                (Arc::clone(list.values()), o)
            } else {
                return Err(weir_core::WeirError::Execution(format!(
                    "a distinct count's state is a list, not {}",
                    state.data_type()
                )));
            };
        let mut owners = vec![0; values.len()];
        for (r, &id) in ids.iter().enumerate() {
            for o in &mut owners[offsets[r]..offsets[r + 1]] {
                *o = id;
            }
        }
        let from = offsets.first().copied().unwrap_or(0);
        let to = offsets.last().copied().unwrap_or(0);
        self.insert(&values.slice(from, to - from), &owners[from..to])
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes + self.sets.len() * std::mem::size_of::<HashTable<Box<[u8]>>>()
    }
}
