//! The keyed session window join.
//!
//! Sessions are formed per key over the rows of *both* inputs (Flink's
//! session window join): each row opens `[ts, ts + gap)`, and sessions that
//! overlap or touch merge (their ids aliased in a union-find table). Rows
//! stay buffered as batches, each row tagged with its session id. When the
//! watermark closes sessions, the rows of closed sessions are filtered out
//! of the buffers and paired per session (left rows bucketed by session with
//! a counting sort, gathered with `take`); the rest is kept with compact ids.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, TimestampMillisecondArray};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::message::Watermark;
use weir_core::spec::WindowJoinSpec;
use weir_core::time::WindowAssigner;
use weir_core::{Result, WeirError};

use crate::pane_buffer::{JoinedRows, bucket_by_id};
use crate::sessions::{LATE, SessionRows, SessionSet};
use crate::window::timestamps;
use crate::{Operator, OperatorContext, Output};

struct Side {
    schema: SchemaRef,
    key_indices: Vec<usize>,
    ts_index: usize,
    /// Buffered rows with the session group of each.
    rows: SessionRows,
}

/// Keyed session window join.
pub struct SessionJoinOperator {
    name: String,
    sides: [Side; 2],
    keys: Box<dyn GroupValues>,
    sessions: SessionSet,
    output_schema: SchemaRef,
    batch_size: usize,
    watermark: i64,
    ids: Vec<usize>,
    late_dropped: u64,
    windows_fired: u64,
    filter: crate::KeyGroupFilter,
}

impl SessionJoinOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowJoinSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let WindowAssigner::Session { gap } = spec.assigner else {
            return Err(WeirError::plan(format!(
                "{name}: not a session window join"
            )));
        };
        let side = |schema: &SchemaRef, keys: &[String], rowtime: &str| -> Result<Side> {
            Ok(Side {
                schema: Arc::clone(schema),
                key_indices: crate::column_indices(schema, keys)?,
                ts_index: schema.index_of(rowtime)?,
                rows: SessionRows::default(),
            })
        };
        let left = side(&spec.left_schema, &spec.left_keys, &spec.left_rowtime)?;
        let right = side(&spec.right_schema, &spec.right_keys, &spec.right_rowtime)?;
        let key_schema = Arc::new(spec.left_schema.project(&left.key_indices)?);
        Ok(Self {
            name,
            sides: [left, right],
            keys: new_group_values(key_schema, &GroupOrdering::None)?,
            sessions: SessionSet::new(gap, 0),
            output_schema,
            batch_size: ctx.config.batch_size,
            watermark: i64::MIN,
            ids: Vec::new(),
            late_dropped: 0,
            windows_fired: 0,
            filter: crate::KeyGroupFilter::new(ctx),
        })
    }

    /// Join the rows of the sessions the watermark closed; keep the others.
    fn close_sessions(&mut self, out: &mut dyn Output) -> Result<()> {
        let [l, r] = &mut self.sides;
        let closed = self
            .sessions
            .close_buffered(self.watermark, &mut [&mut l.rows, &mut r.rows])?;
        let bounds = closed.bounds;
        let mut rows = closed.rows.into_iter();
        let ((left_batches, left_ids), (right_batches, right_ids)) =
            (rows.next().expect("left"), rows.next().expect("right"));
        let closed_rows = [left_batches, right_batches];
        let closed_ids = [left_ids, right_ids];
        if bounds.is_empty() || closed_rows[0].is_empty() || closed_rows[1].is_empty() {
            return Ok(());
        }
        let left = concat_batches(&self.sides[0].schema, &closed_rows[0])?;
        let right = concat_batches(&self.sides[1].schema, &closed_rows[1])?;
        let (offsets, bucketed) = bucket_by_id(&closed_ids[0], bounds.len());
        let (mut li, mut ri, mut starts, mut ends) = (vec![], vec![], vec![], vec![]);
        for (row, &session) in closed_ids[1].iter().enumerate() {
            for &l in &bucketed[offsets[session] as usize..offsets[session + 1] as usize] {
                li.push(l);
                ri.push(row as u32);
                starts.push(bounds[session].0);
                ends.push(bounds[session].1);
            }
        }
        if li.is_empty() {
            return Ok(());
        }
        self.windows_fired += bounds.len() as u64;
        JoinedRows {
            starts: Arc::new(TimestampMillisecondArray::from(starts)),
            ends: Arc::new(TimestampMillisecondArray::from(ends)),
            left_rows: li,
            right_rows: ri,
        }
        .emit(&left, &right, &self.output_schema, self.batch_size, out)
    }
}

impl Operator for SessionJoinOperator {
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
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let side = &self.sides[input];
        let ts_name = batch.schema().field(side.ts_index).name().clone();
        let ts = timestamps(batch.column(side.ts_index), &ts_name)?.to_vec();
        let keys: Vec<ArrayRef> = side
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let mut ids = std::mem::take(&mut self.ids);
        self.keys.intern(&keys, &mut ids)?;
        let groups = self.sessions.assign_batch(&ids, &ts, self.watermark);
        self.ids = ids;
        let late = groups.iter().filter(|&&g| g == LATE).count();
        let (batch, groups) = if late > 0 {
            self.late_dropped += late as u64;
            let keep: BooleanArray = groups.iter().map(|&g| Some(g != LATE)).collect();
            (
                filter_record_batch(&batch, &keep)?,
                groups.into_iter().filter(|&g| g != LATE).collect(),
            )
        } else {
            (batch, groups)
        };
        if batch.num_rows() > 0 {
            self.sides[input].rows.rows.push((batch, groups));
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(watermark.0);
        if self.sessions.next_due <= self.watermark {
            self.close_sessions(out)?;
        }
        Ok(Some(watermark))
    }

    /// Tables `left` and `right` (each input's rows of the open sessions,
    /// as they arrived) and `meta` (the watermark).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<crate::StateTable>> {
        let mut tables = Vec::new();
        for (side, name) in self.sides.iter().zip(["left", "right"]) {
            tables.push(crate::buffered_rows_table(
                name,
                &side.schema,
                side.rows.rows.iter().map(|(b, _)| b),
                &side.key_indices,
            )?);
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
            self.process_input(input, rows, &mut Vec::new())?;
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
