//! The keyed window join.
//!
//! Both inputs are buffered per aligned pane (as in the window aggregation:
//! the window for tumbling windows, `gcd(size, slide)` for sliding ones, the
//! step for cumulating ones). When the watermark passes a window's end, the
//! panes it spans are joined: keys of both sides are interned into one
//! table, left rows are bucketed by key id with a counting sort, and every
//! right row pairs with its bucket — the pairs are gathered with `take`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{ArrayRef, TimestampMillisecondArray, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_physical_plan::aggregates::group_values::new_group_values;
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::message::Watermark;
use weir_core::spec::WindowJoinSpec;
use weir_core::time::{WindowAssigner, tumbling_window_start};
use weir_core::{Result, WeirError};

use crate::window::{split_by, timestamps};
use crate::{Operator, OperatorContext, Output};

struct JoinSide {
    schema: SchemaRef,
    key_indices: Vec<usize>,
    ts_index: usize,
    panes: BTreeMap<i64, Vec<RecordBatch>>,
}

/// Keyed tumbling, sliding or cumulating window join.
pub struct WindowJoinOperator {
    name: String,
    assigner: WindowAssigner,
    pane_size: i64,
    pane_offset: i64,
    sides: [JoinSide; 2],
    key_schema: SchemaRef,
    output_schema: SchemaRef,
    batch_size: usize,
    watermark: i64,
    starts: Vec<i64>,
    late_dropped: u64,
    windows_fired: u64,
}

impl WindowJoinOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowJoinSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let (pane_size, pane_offset) = spec
            .assigner
            .pane()
            .ok_or_else(|| WeirError::plan(format!("{name}: session windows are not supported")))?;
        let side = |schema: &SchemaRef, keys: &[String], rowtime: &str| -> Result<JoinSide> {
            Ok(JoinSide {
                schema: Arc::clone(schema),
                key_indices: keys
                    .iter()
                    .map(|k| schema.index_of(k))
                    .collect::<std::result::Result<_, _>>()?,
                ts_index: schema.index_of(rowtime)?,
                panes: BTreeMap::new(),
            })
        };
        let left = side(&spec.left_schema, &spec.left_keys, &spec.left_rowtime)?;
        let right = side(&spec.right_schema, &spec.right_keys, &spec.right_rowtime)?;
        Ok(Self {
            key_schema: Arc::new(spec.left_schema.project(&left.key_indices)?),
            name,
            assigner: spec.assigner,
            pane_size,
            pane_offset,
            sides: [left, right],
            output_schema,
            batch_size: ctx.config.batch_size,
            watermark: i64::MIN,
            starts: Vec::new(),
            late_dropped: 0,
            windows_fired: 0,
        })
    }

    fn pane_expired(&self, pane: i64) -> bool {
        self.assigner
            .last_window_end_of_pane(pane)
            .saturating_sub(1)
            <= self.watermark
    }

    /// Rows of `side` in panes `[start, end)`, as one batch.
    fn rows(&self, side: usize, start: i64, end: i64) -> Result<Option<RecordBatch>> {
        let s = &self.sides[side];
        let batches: Vec<&RecordBatch> = s.panes.range(start..end).flat_map(|(_, b)| b).collect();
        if batches.is_empty() {
            return Ok(None);
        }
        Ok(Some(concat_batches(&s.schema, batches)?))
    }

    fn fire(&mut self, start: i64, end: i64, out: &mut dyn Output) -> Result<()> {
        let (Some(left), Some(right)) = (self.rows(0, start, end)?, self.rows(1, start, end)?)
        else {
            return Ok(());
        };
        let mut keys = new_group_values(Arc::clone(&self.key_schema), &GroupOrdering::None)?;
        let cols = |b: &RecordBatch, side: usize| -> Vec<ArrayRef> {
            self.sides[side]
                .key_indices
                .iter()
                .map(|&i| Arc::clone(b.column(i)))
                .collect()
        };
        let (mut left_ids, mut right_ids) = (Vec::new(), Vec::new());
        keys.intern(&cols(&left, 0), &mut left_ids)?;
        keys.intern(&cols(&right, 1), &mut right_ids)?;
        // Bucket left rows by key id (counting sort).
        let n = keys.len();
        let mut offsets = vec![0u32; n + 1];
        for &id in &left_ids {
            offsets[id + 1] += 1;
        }
        for i in 1..=n {
            offsets[i] += offsets[i - 1];
        }
        let mut cursor = offsets.clone();
        let mut bucketed = vec![0u32; left_ids.len()];
        for (row, &id) in left_ids.iter().enumerate() {
            bucketed[cursor[id] as usize] = row as u32;
            cursor[id] += 1;
        }
        let (mut left_rows, mut right_rows) = (Vec::new(), Vec::new());
        for (row, &id) in right_ids.iter().enumerate() {
            for &l in &bucketed[offsets[id] as usize..offsets[id + 1] as usize] {
                left_rows.push(l);
                right_rows.push(row as u32);
            }
        }
        if left_rows.is_empty() {
            return Ok(());
        }
        self.windows_fired += 1;
        let rows = left_rows.len();
        let (li, ri) = (UInt32Array::from(left_rows), UInt32Array::from(right_rows));
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampMillisecondArray::from_value(start, rows)),
            Arc::new(TimestampMillisecondArray::from_value(end, rows)),
        ];
        for c in left.columns() {
            columns.push(take(c.as_ref(), &li, None)?);
        }
        for c in right.columns() {
            columns.push(take(c.as_ref(), &ri, None)?);
        }
        let joined = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        let mut offset = 0;
        while offset < rows {
            let len = self.batch_size.min(rows - offset);
            out.collect(joined.slice(offset, len))?;
            offset += len;
        }
        Ok(())
    }
}

impl Operator for WindowJoinOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.process_input(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        _out: &mut dyn Output,
    ) -> Result<()> {
        if input > 1 {
            return Err(WeirError::Execution(format!(
                "{}: no input {input}",
                self.name
            )));
        }
        let ts_index = self.sides[input].ts_index;
        let ts_name = batch.schema().field(ts_index).name().clone();
        let ts = timestamps(batch.column(ts_index), &ts_name)?;
        let (size, offset) = (self.pane_size, self.pane_offset);
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        starts.extend(ts.iter().map(|&t| tumbling_window_start(t, size, offset)));
        let result = split_by(&batch, &starts, |pane, part| -> Result<()> {
            if self.pane_expired(pane) {
                self.late_dropped += part.num_rows() as u64;
            } else {
                self.sides[input]
                    .panes
                    .entry(pane)
                    .or_default()
                    .push(part.clone());
            }
            Ok(())
        });
        self.starts = starts;
        result
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        let previous = self.watermark;
        if watermark.0 <= previous {
            return Ok(Some(watermark));
        }
        self.watermark = watermark.0;
        let mut due = BTreeSet::new();
        for side in &self.sides {
            for &p in side.panes.range(..=self.watermark).map(|(p, _)| p) {
                for (start, end) in self.assigner.windows_of_pane(p) {
                    let last = end.saturating_sub(1);
                    if last > previous && last <= self.watermark {
                        due.insert((end, start));
                    }
                }
            }
        }
        for (end, start) in due {
            self.fire(start, end, out)?;
        }
        for side in 0..2 {
            let expired: Vec<i64> = self.sides[side]
                .panes
                .keys()
                .copied()
                .filter(|&p| self.pane_expired(p))
                .collect();
            for p in expired {
                self.sides[side].panes.remove(&p);
            }
        }
        Ok(Some(watermark))
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("windows_fired".into(), self.windows_fired),
            ("num_late_records_dropped".into(), self.late_dropped),
        ]
    }
}
