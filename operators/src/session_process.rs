//! Full-window functions over session windows.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::message::Watermark;
use weir_core::process::ProcessWindowFunction;
use weir_core::spec::WindowProcessSpec;
use weir_core::time::WindowAssigner;
use weir_core::{Result, WeirError};

use crate::pane_buffer::{bucket_by_id, emit_function_output};
use crate::sessions::{LATE, SessionRows, SessionSet};
use crate::window::timestamps;
use crate::{LateRecords, Operator, OperatorContext, Output};

/// Buffers rows tagged with their session; when the watermark closes a
/// session, its rows go to the function as one window of one key.
pub struct SessionProcessOperator {
    name: String,
    function: Arc<dyn ProcessWindowFunction>,
    key_indices: Vec<usize>,
    keys: Box<dyn GroupValues>,
    ts_index: usize,
    sessions: SessionSet,
    rows: SessionRows,
    schema: SchemaRef,
    output_schema: SchemaRef,
    late: LateRecords,
    batch_size: usize,
    watermark: i64,
    ids: Vec<usize>,
    windows_fired: u64,
    filter: crate::KeyGroupFilter,
}

impl SessionProcessOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowProcessSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let WindowAssigner::Session { gap } = spec.assigner else {
            return Err(WeirError::plan(format!("{name}: not a session window")));
        };
        let input = &spec.input_schema;
        let key_indices = crate::column_indices(input, &spec.keys)?;
        Ok(Self {
            keys: new_group_values(Arc::new(input.project(&key_indices)?), &GroupOrdering::None)?,
            ts_index: input.index_of(&spec.rowtime)?,
            name,
            function: Arc::clone(&spec.function),
            key_indices,
            sessions: SessionSet::new(gap, 0),
            rows: SessionRows::default(),
            schema: Arc::clone(input),
            output_schema,
            late: LateRecords::new(spec.late_data_tag.clone()),
            batch_size: ctx.config.batch_size,
            watermark: i64::MIN,
            ids: Vec::new(),
            windows_fired: 0,
            filter: crate::KeyGroupFilter::new(ctx),
        })
    }

    fn close(&mut self, out: &mut dyn Output) -> Result<()> {
        let closed = self
            .sessions
            .close_buffered(self.watermark, &mut [&mut self.rows])?;
        let (batches, session_ids) = closed.rows.into_iter().next().expect("one row set");
        if batches.is_empty() {
            return Ok(());
        }
        let rows = concat_batches(&self.schema, &batches)?;
        let (offsets, order) = bucket_by_id(&session_ids, closed.bounds.len());
        let grouped = take_record_batch(&rows, &UInt32Array::from(order))?;
        for (session, &(start, end)) in closed.bounds.iter().enumerate() {
            let (from, to) = (offsets[session] as usize, offsets[session + 1] as usize);
            if from == to {
                continue;
            }
            self.windows_fired += 1;
            let rows = grouped.slice(from, to - from);
            // One key per session: a single range covering every row.
            let ranges = std::iter::once(0..to - from).collect::<Vec<_>>();
            let batches = self.function.process((start, end), &rows, &ranges)?;
            emit_function_output(
                &self.name,
                &self.output_schema,
                batches,
                self.batch_size,
                out,
            )?;
        }
        Ok(())
    }
}

impl Operator for SessionProcessOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let name = batch.schema().field(self.ts_index).name().clone();
        let ts = timestamps(batch.column(self.ts_index), &name)?.to_vec();
        let keys: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let mut ids = std::mem::take(&mut self.ids);
        self.keys.intern(&keys, &mut ids)?;
        let groups = self.sessions.assign_batch(&ids, &ts, self.watermark);
        self.ids = ids;
        let late = groups.iter().filter(|&&g| g == LATE).count();
        if late == 0 {
            self.rows.rows.push((batch, groups));
            return Ok(());
        }
        let keep: BooleanArray = groups.iter().map(|&g| Some(g != LATE)).collect();
        self.late.handle(
            &filter_record_batch(&batch, &arrow::compute::not(&keep)?)?,
            out,
        )?;
        if late < groups.len() {
            let kept = filter_record_batch(&batch, &keep)?;
            self.rows
                .rows
                .push((kept, groups.into_iter().filter(|&g| g != LATE).collect()));
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
            self.close(out)?;
        }
        Ok(Some(watermark))
    }

    /// Tables `rows` (the rows of the open sessions, as they arrived; the
    /// sessions follow from them) and `meta` (the watermark).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<crate::StateTable>> {
        Ok(vec![
            crate::buffered_rows_table(
                "rows",
                &self.schema,
                self.rows.rows.iter().map(|(b, _)| b),
                &self.key_indices,
            )?,
            crate::window::meta_table(self.watermark)?,
        ])
    }

    fn restore_state(&mut self, tables: Vec<crate::StateTable>) -> Result<()> {
        let keys = self.key_indices.clone();
        let (name, filter) = (self.name.clone(), self.filter);
        let mut restored = Vec::new();
        let watermark =
            crate::restore_buffered_rows(&name, tables, &[("rows", &keys)], filter, |_, rows| {
                restored.push(rows);
                Ok(())
            })?;
        // Before the watermark is restored, nothing counts as late.
        for rows in restored {
            self.process_batch(rows, &mut Vec::new())?;
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("windows_fired".into(), self.windows_fired),
            ("num_late_records_dropped".into(), self.late.dropped()),
        ]
    }
}
