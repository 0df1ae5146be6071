//! The keyed window join.
//!
//! Both inputs are buffered per aligned pane (as in the window aggregation:
//! the window for tumbling windows, `gcd(size, slide)` for sliding ones, the
//! step for cumulating ones). When the watermark passes a window's end, the
//! panes it spans are joined: keys of both sides are interned into one
//! table, left rows are bucketed by key id with a counting sort, and every
//! right row pairs with its bucket — the pairs are gathered with `take`.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, TimestampMillisecondArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_physical_plan::aggregates::group_values::new_group_values;
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::Result;
use weir_core::message::Watermark;
use weir_core::spec::WindowJoinSpec;

use crate::pane_buffer::{JoinedRows, PaneBuffer, bucket_by_id};
use crate::{Operator, OperatorContext, Output};

struct JoinSide {
    key_indices: Vec<usize>,
    buffer: PaneBuffer,
}

/// Keyed tumbling, sliding or cumulating window join.
pub struct WindowJoinOperator {
    name: String,
    sides: [JoinSide; 2],
    key_schema: SchemaRef,
    output_schema: SchemaRef,
    batch_size: usize,
    watermark: i64,
    late_dropped: u64,
    windows_fired: u64,
    filter: crate::KeyGroupFilter,
}

impl WindowJoinOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowJoinSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let side = |schema: &SchemaRef, keys: &[String], rowtime: &str| -> Result<JoinSide> {
            Ok(JoinSide {
                key_indices: crate::column_indices(schema, keys)?,
                buffer: PaneBuffer::new(
                    spec.assigner,
                    Arc::clone(schema),
                    schema.index_of(rowtime)?,
                )?,
            })
        };
        let left = side(&spec.left_schema, &spec.left_keys, &spec.left_rowtime)?;
        let right = side(&spec.right_schema, &spec.right_keys, &spec.right_rowtime)?;
        Ok(Self {
            key_schema: Arc::new(spec.left_schema.project(&left.key_indices)?),
            name,
            sides: [left, right],
            output_schema,
            batch_size: ctx.config.batch_size,
            watermark: i64::MIN,
            late_dropped: 0,
            windows_fired: 0,
            filter: crate::KeyGroupFilter::new(ctx),
        })
    }

    fn fire(&mut self, start: i64, end: i64, out: &mut dyn Output) -> Result<()> {
        let (Some(left), Some(right)) = (
            self.sides[0].buffer.rows(start, end)?,
            self.sides[1].buffer.rows(start, end)?,
        ) else {
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
        let (offsets, bucketed) = bucket_by_id(&left_ids, keys.len());
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
        JoinedRows {
            starts: Arc::new(TimestampMillisecondArray::from_value(start, rows)),
            ends: Arc::new(TimestampMillisecondArray::from_value(end, rows)),
            left_rows,
            right_rows,
        }
        .emit(&left, &right, &self.output_schema, self.batch_size, out)
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
        crate::two_inputs(&self.name, input)?;
        let mut late = 0;
        self.sides[input]
            .buffer
            .add(&batch, self.watermark, |part| {
                late += part.num_rows() as u64;
                Ok(())
            })?;
        self.late_dropped += late;
        Ok(())
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
            side.buffer.due(previous, self.watermark, &mut due);
        }
        for (end, start) in due {
            self.fire(start, end, out)?;
        }
        for side in &mut self.sides {
            side.buffer.expire(watermark.0);
        }
        Ok(Some(watermark))
    }

    /// Tables `left` and `right` (each input's buffered rows, one table
    /// per pane) and `meta` (the watermark).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<crate::StateTable>> {
        let mut tables = Vec::new();
        for (side, name) in self.sides.iter().zip(["left", "right"]) {
            for pane in side.buffer.panes() {
                tables.push(crate::buffered_rows_table(
                    name,
                    side.buffer.schema(),
                    pane,
                    &side.key_indices,
                )?);
            }
        }
        tables.push(crate::window::meta_table(self.watermark)?);
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<crate::StateTable>) -> Result<()> {
        let keys = [
            self.sides[0].key_indices.clone(),
            self.sides[1].key_indices.clone(),
        ];
        let (rows, watermark) =
            crate::restore_two_inputs(&self.name, tables, [&keys[0], &keys[1]], self.filter)?;
        for (input, rows) in rows {
            self.sides[input].buffer.add(&rows, i64::MIN, |_| Ok(()))?;
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("windows_fired".into(), self.windows_fired),
            ("num_late_records_dropped".into(), self.late_dropped),
        ]
    }
}
