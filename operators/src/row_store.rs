//! Rows of one schema kept in appended batches, addressed by dense id: the
//! group aggregate's columnar state (one row per key).
//!
//! A batch of new rows is appended whole, and each id points at its newest
//! row; when dead rows (rows no id points at any more) outnumber the live
//! ones, everything is rewritten into one batch. Gathers `interleave` from
//! every batch, so callers put rows in batches of thousands, not a few (the
//! disk backend merges a partition's rows before they reach it). Ids may
//! be removed (Top-N's rows leave and their ids are reused): a removed id
//! reads nothing and its row counts as dead.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::interleave;
use arrow::datatypes::SchemaRef;
use weir_core::Result;

/// No row yet.
const NONE: (u32, u32) = (u32::MAX, 0);

/// A row to gather: a stored id's, or one of a batch given alongside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ref {
    Stored(usize),
    Extra(usize),
}

pub(crate) struct RowStore {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    /// Where each id's current row is: (batch, row).
    rows: Vec<(u32, u32)>,
    /// Rows in `batches`, live or dead.
    stored: usize,
    /// Ids with a row.
    live: usize,
    /// Arrow memory of `batches`.
    bytes: usize,
}

impl RowStore {
    pub(crate) fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            batches: vec![],
            rows: vec![],
            stored: 0,
            live: 0,
            bytes: 0,
        }
    }

    /// Ids addressed (the highest put, plus one).
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Bytes held: the batches' Arrow memory and the id table.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes + self.rows.len() * std::mem::size_of::<(u32, u32)>()
    }

    /// The rows of `ids`, in that order (every id must have a row).
    pub(crate) fn gather(&self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        let refs: Vec<Ref> = ids.iter().map(|&i| Ref::Stored(i)).collect();
        self.gather_refs(&refs, None)
    }

    /// The rows of `refs`, in that order: stored ids (each with a row) and
    /// rows of `extra` (a batch of this schema), in one `interleave` per
    /// column.
    pub(crate) fn gather_refs(
        &self,
        refs: &[Ref],
        extra: Option<&RecordBatch>,
    ) -> Result<Vec<ArrayRef>> {
        let last = self.batches.len();
        let at: Vec<(usize, usize)> = refs
            .iter()
            .map(|r| match *r {
                Ref::Stored(i) => {
                    let (b, r) = self.rows[i];
                    (b as usize, r as usize)
                }
                Ref::Extra(r) => (last, r),
            })
            .collect();
        (0..self.schema.fields().len())
            .map(|c| {
                let mut columns: Vec<&dyn Array> =
                    self.batches.iter().map(|b| b.column(c).as_ref()).collect();
                if let Some(extra) = extra {
                    columns.push(extra.column(c).as_ref());
                }
                if columns.is_empty() || at.is_empty() {
                    return Ok(arrow::array::new_empty_array(
                        self.schema.field(c).data_type(),
                    ));
                }
                Ok(interleave(&columns, &at)?)
            })
            .collect()
    }

    /// Where id `id`'s row is (it must have one): its batch and index.
    pub(crate) fn row(&self, id: usize) -> (&RecordBatch, usize) {
        let (b, r) = self.rows[id];
        (&self.batches[b as usize], r as usize)
    }

    /// Forget id `id`'s row (if it has one).
    pub(crate) fn remove(&mut self, id: usize) {
        if let Some(at) = self.rows.get_mut(id)
            && *at != NONE
        {
            *at = NONE;
            self.live -= 1;
        }
    }

    /// Row `r` of `columns` becomes id `ids[r]`'s row (ids may be new,
    /// and appear once each).
    pub(crate) fn put(&mut self, ids: &[usize], columns: Vec<ArrayRef>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let b = self.batches.len() as u32;
        self.stored += batch.num_rows();
        self.bytes += batch.get_array_memory_size();
        self.batches.push(batch);
        let max = ids.iter().max().copied().unwrap_or(0);
        if max >= self.rows.len() {
            self.rows.resize(max + 1, NONE);
        }
        for (r, &id) in ids.iter().enumerate() {
            self.live += usize::from(self.rows[id] == NONE);
            self.rows[id] = (b, r as u32);
        }
        // Rewrite when dead rows outnumber live ones.
        if self.batches.len() > 64 && self.stored > 2 * self.live + 8192 {
            let live: Vec<usize> = (0..self.rows.len())
                .filter(|&i| self.rows[i] != NONE)
                .collect();
            let columns = self.gather(&live)?;
            let batch = RecordBatch::try_new_with_options(
                Arc::clone(&self.schema),
                columns,
                &arrow::array::RecordBatchOptions::new().with_row_count(Some(live.len())),
            )?;
            self.stored = batch.num_rows();
            self.bytes = batch.get_array_memory_size();
            self.batches = vec![batch];
            self.rows.fill(NONE);
            for (r, &id) in live.iter().enumerate() {
                self.rows[id] = (0, r as u32);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    #[test]
    fn every_id_reads_its_newest_row_and_dead_rows_stay_bounded() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let mut store = RowStore::new(schema);
        let mut want: Vec<Option<i64>> = vec![None; 50_000];
        let mut x: u64 = 7;
        for round in 0..400i64 {
            // 500 distinct ids a round, some new, most updates.
            let mut ids: Vec<usize> = vec![];
            let mut seen = std::collections::HashSet::new();
            while ids.len() < 500 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let id = ((x >> 33) as usize) % (1000 + round as usize * 100).min(50_000);
                if seen.insert(id) {
                    ids.push(id);
                }
            }
            let values: Vec<i64> = ids.iter().map(|&i| round * 100_000 + i as i64).collect();
            for (&i, &v) in ids.iter().zip(&values) {
                want[i] = Some(v);
            }
            store
                .put(&ids, vec![Arc::new(Int64Array::from(values))])
                .unwrap();
            assert!(store.batches.len() <= 65 || store.stored <= 2 * store.len() + 8192 + 500);
        }
        let all: Vec<usize> = (0..store.len()).filter(|&i| want[i].is_some()).collect();
        let got = store.gather(&all).unwrap();
        let got = got[0].as_primitive::<Int64Type>();
        for (k, &i) in all.iter().enumerate() {
            assert_eq!(Some(got.value(k)), want[i], "id {i}");
        }
    }
}
