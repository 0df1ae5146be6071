//! Rows of one schema kept in appended batches, addressed by dense id: the
//! group aggregate's columnar state (one row per key), Top-N's rows, an
//! append-only join side's rows.
//!
//! A batch of new rows is appended whole, and each id points at its newest
//! row; when dead rows (rows no id points at any more) outnumber the live
//! ones, everything is rewritten into one batch. Gathers `interleave` from
//! every batch, whose cost grows with their number: a run of small puts (a
//! trickle of input) is merged into one batch every [`SMALL_RUN`] puts, so
//! a row is copied a few times at most and the batches stay few. Ids may
//! be removed (Top-N's rows leave and their ids are reused): a removed id
//! reads nothing and its row counts as dead.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::interleave;
use arrow::datatypes::SchemaRef;
use weir_core::Result;

/// No row yet.
const NONE: (u32, u32) = (u32::MAX, 0);

/// A batch of fewer rows is small.
const SMALL_ROWS: usize = 1024;
/// How many small batches in a row are merged into one.
const SMALL_RUN: usize = 16;

/// A row to gather: a stored id's, or one of a batch given alongside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ref {
    Stored(usize),
    Extra(usize),
}

pub(crate) struct RowStore {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    /// Where each put's rows are: (batch, first row); merging small
    /// batches moves them.
    puts: Vec<(u32, u32)>,
    /// Where each id's current row is: (put, row).
    rows: Vec<(u32, u32)>,
    /// Rows in `batches`, live or dead.
    stored: usize,
    /// Ids with a row.
    live: usize,
    /// Arrow memory of `batches` (their slices of it).
    bytes: usize,
}

impl RowStore {
    pub(crate) fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            batches: vec![],
            puts: vec![],
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
        self.bytes + (self.rows.len() + self.puts.len()) * std::mem::size_of::<(u32, u32)>()
    }

    /// Where id `id`'s row is (it must have one): (batch, row).
    fn locate(&self, id: usize) -> (usize, usize) {
        let (p, r) = self.rows[id];
        let (b, first) = self.puts[p as usize];
        (b as usize, (first + r) as usize)
    }

    /// The rows of `ids`, in that order (every id must have a row).
    pub(crate) fn gather(&self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        self.gather_columns(ids, &(0..self.schema.fields().len()).collect::<Vec<_>>())
    }

    /// Columns `columns` of the rows of `ids`, in that order.
    pub(crate) fn gather_columns(&self, ids: &[usize], columns: &[usize]) -> Result<Vec<ArrayRef>> {
        let refs: Vec<Ref> = ids.iter().map(|&i| Ref::Stored(i)).collect();
        self.gather_some(&refs, None, columns)
    }

    /// The rows of `refs`, in that order: stored ids (each with a row) and
    /// rows of `extra` (a batch of this schema), in one `interleave` per
    /// column.
    pub(crate) fn gather_refs(
        &self,
        refs: &[Ref],
        extra: Option<&RecordBatch>,
    ) -> Result<Vec<ArrayRef>> {
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        self.gather_some(refs, extra, &all)
    }

    /// [`Self::gather_refs`] of the columns `columns` only.
    fn gather_some(
        &self,
        refs: &[Ref],
        extra: Option<&RecordBatch>,
        columns: &[usize],
    ) -> Result<Vec<ArrayRef>> {
        let last = self.batches.len();
        let at: Vec<(usize, usize)> = refs
            .iter()
            .map(|r| match *r {
                Ref::Stored(i) => self.locate(i),
                Ref::Extra(r) => (last, r),
            })
            .collect();
        columns
            .iter()
            .map(|&c| {
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
        let (b, r) = self.locate(id);
        (&self.batches[b], r)
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
        let rows = 0..ids.len() as u32;
        self.put_rows(ids.iter().copied().zip(rows), columns)
    }

    /// Each `(id, r)`: row `r` of `columns` becomes id `id`'s row (ids
    /// may be new, and appear once each). A batch at least half of whose
    /// rows are named is kept whole, the others dead from the start (and
    /// rewritten away as dead rows are), so nothing is copied; of a batch
    /// fewer of whose rows are named, only those are copied and kept.
    pub(crate) fn put_rows(
        &mut self,
        rows: impl IntoIterator<Item = (usize, u32)>,
        mut columns: Vec<ArrayRef>,
    ) -> Result<()> {
        let mut rows: Vec<(usize, u32)> = rows.into_iter().collect();
        if rows.is_empty() {
            return Ok(());
        }
        let len = columns.first().map_or(0, |c| c.len());
        if 2 * rows.len() < len {
            let take = arrow::array::UInt32Array::from_iter_values(rows.iter().map(|p| p.1));
            columns = arrow::compute::take_arrays(&columns, &take, None)?;
            for (k, row) in rows.iter_mut().enumerate() {
                row.1 = k as u32;
            }
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let b = self.puts.len() as u32;
        self.puts.push((self.batches.len() as u32, 0));
        self.stored += batch.num_rows();
        self.bytes += held_bytes(&batch);
        let n = batch.num_rows() as u32;
        self.batches.push(batch);
        for (id, r) in rows {
            debug_assert!(r < n, "row {r} of a {n}-row batch");
            if id >= self.rows.len() {
                self.rows.resize(id + 1, NONE);
            }
            self.live += usize::from(self.rows[id] == NONE);
            self.rows[id] = (b, r);
        }
        self.merge_small_run()?;
        // Rewrite when dead rows outnumber live ones (amortized: the next
        // rewrite is at least 8192 rows away).
        if self.stored > 2 * self.live + 8192 {
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
            self.bytes = held_bytes(&batch);
            self.batches = vec![batch];
            self.puts = vec![(0, 0)];
            self.rows.fill(NONE);
            for (r, &id) in live.iter().enumerate() {
                self.rows[id] = (0, r as u32);
            }
        }
        Ok(())
    }

    /// When the last [`SMALL_RUN`] batches are all small, concatenate them
    /// into one (the puts that pointed into them point into it).
    fn merge_small_run(&mut self) -> Result<()> {
        let n = self.batches.len();
        if n < SMALL_RUN
            || self.batches[n - SMALL_RUN..]
                .iter()
                .any(|b| b.num_rows() >= SMALL_ROWS)
        {
            return Ok(());
        }
        let first = n - SMALL_RUN;
        let mut starts = Vec::with_capacity(SMALL_RUN);
        let mut at = 0u32;
        for b in &self.batches[first..] {
            starts.push(at);
            at += b.num_rows() as u32;
            self.bytes -= held_bytes(b);
        }
        let merged = arrow::compute::concat_batches(&self.schema, &self.batches[first..])?;
        self.bytes += held_bytes(&merged);
        self.batches.truncate(first);
        self.batches.push(merged);
        for put in self.puts.iter_mut().rev() {
            let b = put.0 as usize;
            if b < first {
                break;
            }
            *put = (first as u32, starts[b - first] + put.1);
        }
        Ok(())
    }
}

/// The bytes of `batch`'s rows: of its slice of each buffer, since a batch
/// put here may be a slice of a larger one (a join's input) whose buffers
/// other batches share.
fn held_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| {
            c.to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size())
        })
        .sum()
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
            assert!(store.stored <= 2 * store.len() + 8192 + 500);
            // 500-row puts are small: merged 16 at a time.
            assert!(
                store.batches.len() < 2 * SMALL_RUN,
                "{} batches",
                store.batches.len()
            );
        }
        let all: Vec<usize> = (0..store.len()).filter(|&i| want[i].is_some()).collect();
        let got = store.gather(&all).unwrap();
        let got = got[0].as_primitive::<Int64Type>();
        for (k, &i) in all.iter().enumerate() {
            assert_eq!(Some(got.value(k)), want[i], "id {i}");
        }
    }

    #[test]
    fn a_whole_batch_put_serves_only_the_rows_named() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let mut store = RowStore::new(schema);
        let mut want: Vec<Option<i64>> = vec![None; 3000];
        for round in 0..40i64 {
            // A 1000-row batch; ids take every third row (copied out) or
            // two rows of three (the batch kept whole), in no order.
            let values: Vec<i64> = (0..1000).map(|r| round * 10_000 + r).collect();
            let named: Vec<(usize, u32)> = (0..1000u32)
                .filter(|r| (r % 3 == (round % 3) as u32) == (round % 2 == 0))
                .map(|r| (((r as i64 * 7 + round * 11) % 3000) as usize, r))
                .rev()
                .collect();
            for &(id, r) in &named {
                want[id] = Some(values[r as usize]);
            }
            store
                .put_rows(named, vec![Arc::new(Int64Array::from(values))])
                .unwrap();
            let live = want.iter().filter(|w| w.is_some()).count();
            assert_eq!(store.live, live);
            // Dead rows are rewritten away.
            assert!(
                store.stored <= 2 * live + 8192 + 1000,
                "{} stored",
                store.stored
            );
        }
        let all: Vec<usize> = (0..store.len()).filter(|&i| want[i].is_some()).collect();
        let got = store.gather(&all).unwrap();
        let got = got[0].as_primitive::<Int64Type>();
        for (k, &i) in all.iter().enumerate() {
            assert_eq!(Some(got.value(k)), want[i], "id {i}");
        }
    }
}
