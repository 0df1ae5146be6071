//! Rows waiting for their partition, and restored pending rows an
//! in-memory operator puts through first.

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::BatchCoalescer;
use weir_core::Result;

use crate::group_aggregate::PENDING_TABLE;
use crate::{KeyGroupFilter, StateTable};

/// Rows of the batches pending rows are gathered into.
const PENDING_BATCH: usize = 1024;

/// Input rows waiting for their partition, gathered into batches of
/// [`PENDING_BATCH`] rows as they come (a 64th of a batch each time would
/// cost more in array headers than in rows).
#[derive(Default)]
pub(super) struct Pending {
    building: Option<BatchCoalescer>,
    full: Vec<RecordBatch>,
    full_bytes: usize,
    rows: usize,
    /// Bytes a row takes, as the last input batch had them.
    row_bytes: usize,
}

impl Pending {
    /// Rows `rows` of `batch`.
    pub(super) fn push(&mut self, batch: &RecordBatch, rows: UInt32Array) -> Result<()> {
        self.rows += rows.len();
        self.row_bytes = batch.get_array_memory_size() / batch.num_rows().max(1);
        let c = self
            .building
            .get_or_insert_with(|| BatchCoalescer::new(batch.schema(), PENDING_BATCH));
        if rows.len() == batch.num_rows() {
            c.push_batch(batch.clone())?;
        } else {
            c.push_batch_with_indices(batch.clone(), &rows)?;
        }
        while let Some(done) = c.next_completed_batch() {
            self.full_bytes += done.get_array_memory_size();
            self.full.push(done);
        }
        Ok(())
    }

    /// Bytes of the rows held (the batch being gathered counted by its
    /// rows, not the capacity it set aside: that is headroom's part).
    pub(super) fn bytes(&self) -> usize {
        let building = self.building.as_ref().map_or(0, |c| c.get_buffered_rows());
        self.full_bytes + building * self.row_bytes
    }

    /// Every row, in batches (what is being gathered, finished).
    pub(super) fn batches(&mut self) -> Result<&[RecordBatch]> {
        if let Some(c) = &mut self.building
            && c.get_buffered_rows() > 0
        {
            c.finish_buffered_batch()?;
            while let Some(done) = c.next_completed_batch() {
                self.full_bytes += done.get_array_memory_size();
                self.full.push(done);
            }
        }
        Ok(&self.full)
    }

    /// Every row, in batches, leaving none.
    pub(super) fn take(&mut self) -> Result<Vec<RecordBatch>> {
        self.batches()?;
        self.rows = 0;
        self.full_bytes = 0;
        Ok(std::mem::take(&mut self.full))
    }
}

/// The state table holding input `input`'s rows not yet put through.
pub fn pending_table(input: usize) -> String {
    match input {
        0 => PENDING_TABLE.to_string(),
        n => format!("{PENDING_TABLE}-{n}"),
    }
}

/// The input whose pending rows table `name` holds.
pub fn pending_input(name: &str) -> Option<usize> {
    match name.strip_prefix(PENDING_TABLE)? {
        "" => Some(0),
        rest => rest.strip_prefix('-')?.parse().ok(),
    }
}

/// Restored input rows an in-memory operator puts through before its next
/// input, watermark or end (a disk-backend snapshot's pending rows: their
/// changes were never sent).
#[derive(Default)]
pub(crate) struct Replay {
    rows: Vec<(usize, RecordBatch)>,
}

impl Replay {
    /// Takes `t` when it holds pending rows of one of the inputs whose key
    /// columns are `keys` (keeping this subtask's rows), or hands it back.
    pub(crate) fn take_table(
        &mut self,
        t: StateTable,
        keys: &[&[usize]],
        filter: &KeyGroupFilter,
    ) -> Result<Option<StateTable>> {
        let Some(input) = pending_input(&t.name).filter(|&i| i < keys.len()) else {
            return Ok(Some(t));
        };
        let batch = filter.keep(t.batch, keys[input])?;
        if batch.num_rows() > 0 {
            self.rows.push((input, batch));
        }
        Ok(None)
    }

    /// The rows to put through, in the order they arrived.
    pub(crate) fn drain(&mut self) -> Vec<(usize, RecordBatch)> {
        std::mem::take(&mut self.rows)
    }

    /// The rows not yet put through, as tables of a snapshot.
    pub(crate) fn tables(&self, keys: &[&[usize]]) -> Vec<StateTable> {
        self.rows
            .iter()
            .map(|(i, b)| {
                StateTable::new(pending_table(*i), b.clone()).keyed(keys[*i].iter().copied())
            })
            .collect()
    }
}

/// Rows of one input waiting, in arrival order with the other runs.
pub(super) struct Run {
    pub(super) input: usize,
    pub(super) rows: Pending,
}
