//! Raw rows buffered per aligned window pane, for operators that need every
//! row of a window when it fires (window joins, full-window functions).

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_core::time::{WindowAssigner, tumbling_window_start};
use weir_core::{Result, WeirError};

use crate::Output;
use crate::window::{split_by, timestamps};

/// Rows per pane of a tumbling, sliding or cumulating window assigner.
pub(crate) struct PaneBuffer {
    assigner: WindowAssigner,
    pane_size: i64,
    pane_offset: i64,
    schema: SchemaRef,
    ts_index: usize,
    panes: BTreeMap<i64, Vec<RecordBatch>>,
    starts: Vec<i64>,
}

impl PaneBuffer {
    pub(crate) fn new(
        assigner: WindowAssigner,
        schema: SchemaRef,
        ts_index: usize,
    ) -> Result<Self> {
        let (pane_size, pane_offset) = assigner
            .pane()
            .ok_or_else(|| WeirError::plan("session windows have no panes"))?;
        Ok(Self {
            assigner,
            pane_size,
            pane_offset,
            schema,
            ts_index,
            panes: BTreeMap::new(),
            starts: Vec::new(),
        })
    }

    fn expired(&self, pane: i64, watermark: i64) -> bool {
        self.assigner
            .last_window_end_of_pane(pane)
            .saturating_sub(1)
            <= watermark
    }

    /// Buffer the rows of `batch`; rows whose every window has already fired
    /// are handed to `late` instead.
    pub(crate) fn add(
        &mut self,
        batch: &RecordBatch,
        watermark: i64,
        mut late: impl FnMut(&RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let ts_name = batch.schema().field(self.ts_index).name().clone();
        let ts = timestamps(batch.column(self.ts_index), &ts_name)?;
        let (size, offset) = (self.pane_size, self.pane_offset);
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        starts.extend(ts.iter().map(|&t| tumbling_window_start(t, size, offset)));
        let result = split_by(batch, &starts, |pane, part| -> Result<()> {
            if self.expired(pane, watermark) {
                late(part)
            } else {
                self.panes.entry(pane).or_default().push(part.clone());
                Ok(())
            }
        });
        self.starts = starts;
        result
    }

    /// Windows `(end, start)` with data whose last millisecond lies in
    /// `(previous, watermark]`.
    pub(crate) fn due(&self, previous: i64, watermark: i64, into: &mut BTreeSet<(i64, i64)>) {
        for &p in self.panes.range(..=watermark).map(|(p, _)| p) {
            for (start, end) in self.assigner.windows_of_pane(p) {
                let last = end.saturating_sub(1);
                if last > previous && last <= watermark {
                    into.insert((end, start));
                }
            }
        }
    }

    /// Every buffered row of window `[start, end)`, as one batch.
    pub(crate) fn rows(&self, start: i64, end: i64) -> Result<Option<RecordBatch>> {
        let batches: Vec<&RecordBatch> =
            self.panes.range(start..end).flat_map(|(_, b)| b).collect();
        if batches.is_empty() {
            return Ok(None);
        }
        Ok(Some(concat_batches(&self.schema, batches)?))
    }

    /// The buffered rows, pane by pane.
    pub(crate) fn panes(&self) -> impl Iterator<Item = &[RecordBatch]> {
        self.panes.values().map(Vec::as_slice)
    }

    /// The schema of the buffered rows.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Drop panes whose windows have all fired.
    pub(crate) fn expire(&mut self, watermark: i64) {
        let assigner = self.assigner;
        self.panes
            .retain(|&p, _| assigner.last_window_end_of_pane(p).saturating_sub(1) > watermark);
    }
}

/// Counting sort of row indices by dense id: `(offsets, rows)` where the rows
/// of id `i` are `rows[offsets[i]..offsets[i + 1]]`, in input order.
pub(crate) fn bucket_by_id(ids: &[usize], distinct: usize) -> (Vec<u32>, Vec<u32>) {
    let mut offsets = vec![0u32; distinct + 1];
    for &id in ids {
        offsets[id + 1] += 1;
    }
    for i in 1..=distinct {
        offsets[i] += offsets[i - 1];
    }
    let mut cursor = offsets.clone();
    let mut rows = vec![0u32; ids.len()];
    for (row, &id) in ids.iter().enumerate() {
        rows[cursor[id] as usize] = row as u32;
        cursor[id] += 1;
    }
    (offsets, rows)
}

/// Emit `batch` in slices of at most `batch_size` rows.
pub(crate) fn emit_sliced(
    batch: &RecordBatch,
    batch_size: usize,
    out: &mut dyn Output,
) -> Result<()> {
    let rows = batch.num_rows();
    let batch_size = batch_size.max(1);
    let mut offset = 0;
    while offset < rows {
        let len = batch_size.min(rows - offset);
        out.collect(batch.slice(offset, len))?;
        offset += len;
    }
    Ok(())
}

/// Emit what a user window function returned, refusing batches whose
/// columns differ from the declared `schema`.
pub(crate) fn emit_function_output(
    name: &str,
    schema: &arrow::datatypes::Schema,
    batches: Vec<RecordBatch>,
    batch_size: usize,
    out: &mut dyn Output,
) -> Result<()> {
    for batch in batches {
        if batch.schema().fields() != schema.fields() {
            return Err(weir_core::WeirError::Execution(format!(
                "{name}: function returned columns {:?}, declared {:?}",
                batch.schema().fields(),
                schema.fields()
            )));
        }
        emit_sliced(&batch, batch_size, out)?;
    }
    Ok(())
}

/// The output of a window join: `window_start`, `window_end`, the left
/// columns gathered at `left_rows`, the right ones at `right_rows`.
pub(crate) struct JoinedRows {
    pub(crate) starts: ArrayRef,
    pub(crate) ends: ArrayRef,
    pub(crate) left_rows: Vec<u32>,
    pub(crate) right_rows: Vec<u32>,
}

impl JoinedRows {
    /// Gather the pairs and emit them in slices of `batch_size`.
    pub(crate) fn emit(
        self,
        left: &RecordBatch,
        right: &RecordBatch,
        schema: &SchemaRef,
        batch_size: usize,
        out: &mut dyn Output,
    ) -> Result<()> {
        let (li, ri) = (
            UInt32Array::from(self.left_rows),
            UInt32Array::from(self.right_rows),
        );
        let mut columns = vec![self.starts, self.ends];
        for c in left.columns() {
            columns.push(take(c.as_ref(), &li, None)?);
        }
        for c in right.columns() {
            columns.push(take(c.as_ref(), &ri, None)?);
        }
        let joined = RecordBatch::try_new(Arc::clone(schema), columns)
            .map_err(|e| WeirError::Execution(format!("window join output: {e}")))?;
        emit_sliced(&joined, batch_size, out)
    }
}
