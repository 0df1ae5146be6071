//! Full-window functions: every row of a fired window, grouped by key.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_physical_plan::aggregates::group_values::new_group_values;
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::Result;
use weir_core::message::Watermark;
use weir_core::process::ProcessWindowFunction;
use weir_core::spec::WindowProcessSpec;

use crate::pane_buffer::{PaneBuffer, bucket_by_id, emit_function_output};
use crate::{LateRecords, Operator, OperatorContext, Output};

/// Buffers rows per pane; when a window fires, groups its rows by key (one
/// interning call and a counting sort) and calls the function once.
pub struct WindowProcessOperator {
    name: String,
    function: Arc<dyn ProcessWindowFunction>,
    key_indices: Vec<usize>,
    key_schema: SchemaRef,
    buffer: PaneBuffer,
    output_schema: SchemaRef,
    late: LateRecords,
    batch_size: usize,
    watermark: i64,
    windows_fired: u64,
    filter: crate::KeyGroupFilter,
}

impl WindowProcessOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowProcessSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let input = &spec.input_schema;
        let key_indices = crate::column_indices(input, &spec.keys)?;
        Ok(Self {
            key_schema: Arc::new(input.project(&key_indices)?),
            buffer: PaneBuffer::new(
                spec.assigner,
                Arc::clone(input),
                input.index_of(&spec.rowtime)?,
            )?,
            name,
            function: Arc::clone(&spec.function),
            key_indices,
            output_schema,
            late: LateRecords::new(spec.late_data_tag.clone()),
            batch_size: ctx.config.batch_size,
            watermark: i64::MIN,
            windows_fired: 0,
            filter: crate::KeyGroupFilter::new(ctx),
        })
    }

    fn fire(&mut self, start: i64, end: i64, out: &mut dyn Output) -> Result<()> {
        let Some(rows) = self.buffer.rows(start, end)? else {
            return Ok(());
        };
        let mut keys = new_group_values(Arc::clone(&self.key_schema), &GroupOrdering::None)?;
        let columns: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|&i| Arc::clone(rows.column(i)))
            .collect();
        let mut ids = Vec::new();
        keys.intern(&columns, &mut ids)?;
        let (offsets, order) = bucket_by_id(&ids, keys.len());
        let grouped = take_record_batch(&rows, &UInt32Array::from(order))?;
        let ranges: Vec<std::ops::Range<usize>> = offsets
            .windows(2)
            .map(|w| w[0] as usize..w[1] as usize)
            .collect();
        self.windows_fired += 1;
        let batches = self.function.process((start, end), &grouped, &ranges)?;
        emit_function_output(
            &self.name,
            &self.output_schema,
            batches,
            self.batch_size,
            out,
        )
    }
}

impl Operator for WindowProcessOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let late = &mut self.late;
        self.buffer
            .add(&batch, self.watermark, |part| late.handle(part, out))
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
        self.buffer.due(previous, self.watermark, &mut due);
        for (end, start) in due {
            self.fire(start, end, out)?;
        }
        self.buffer.expire(self.watermark);
        Ok(Some(watermark))
    }

    /// Tables `rows` (the buffered input rows, one table per pane) and
    /// `meta` (the watermark).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<crate::StateTable>> {
        let mut tables = self
            .buffer
            .panes()
            .map(|p| crate::buffered_rows_table("rows", self.buffer.schema(), p, &self.key_indices))
            .collect::<Result<Vec<_>>>()?;
        tables.push(crate::window::meta_table(self.watermark)?);
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<crate::StateTable>) -> Result<()> {
        let keys = self.key_indices.clone();
        let buffer = &mut self.buffer;
        let watermark = crate::restore_buffered_rows(
            &self.name,
            tables,
            &[("rows", &keys)],
            self.filter,
            |_, rows| buffer.add(&rows, i64::MIN, |_| Ok(())),
        )?;
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
