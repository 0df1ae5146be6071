//! The keyed event-time window aggregation.
//!
//! Each open window is a *pane*: a DataFusion [`GroupValues`] table mapping
//! keys to dense group ids, and one [`GroupsAccumulator`] per aggregate
//! indexed by those ids. A batch is split by window (usually it falls into one
//! or two), keys are interned for the whole slice at once and accumulators are
//! updated with one call per aggregate — no per-row dispatch. When the
//! watermark reaches `window_end - 1`, the pane is evaluated into one output
//! batch and dropped, so state holds only windows that have not fired.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, TimestampMillisecondArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use datafusion_common::ScalarValue;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion_physical_expr::expressions::{Column, Literal, cast};
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::message::Watermark;
use weir_core::spec::WindowAggregateSpec;
use weir_core::time::{WindowAssigner, tumbling_window_start};
use weir_core::{Result, WeirError};

use crate::{Operator, OperatorContext, Output};

struct Pane {
    groups: Box<dyn GroupValues>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

/// Keyed tumbling event-time window with incremental aggregation.
pub struct WindowAggregateOperator {
    name: String,
    key_indices: Vec<usize>,
    key_schema: SchemaRef,
    ts_index: usize,
    size: i64,
    offset: i64,
    aggregates: Vec<AggregateFunctionExpr>,
    arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    output_schema: SchemaRef,
    batch_size: usize,
    panes: BTreeMap<i64, Pane>,
    watermark: i64,
    starts: Vec<i64>,
    group_ids: Vec<usize>,
    windows_fired: u64,
    late_dropped: u64,
}

impl WindowAggregateOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowAggregateSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let input = &spec.input_schema;
        let WindowAssigner::Tumbling { size, offset } = spec.assigner;
        let key_indices = spec
            .keys
            .iter()
            .map(|k| input.index_of(k))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let key_schema = Arc::new(input.project(&key_indices)?);
        let ts_index = input.index_of(&spec.rowtime)?;
        let mut aggregates = Vec::new();
        let mut arguments = Vec::new();
        for a in &spec.aggregates {
            let mut arg: Arc<dyn PhysicalExpr> = match &a.column {
                Some(c) => Arc::new(Column::new(c, input.index_of(c)?)),
                None => Arc::new(Literal::new(ScalarValue::Int64(Some(1)))),
            };
            let coerced = a.argument_field(input)?;
            if arg.data_type(input)? != *coerced.data_type() {
                arg = cast(arg, input, coerced.data_type().clone())?;
            }
            let expr = AggregateExprBuilder::new(a.function.udaf(), vec![Arc::clone(&arg)])
                .schema(Arc::clone(input))
                .alias(a.alias.clone())
                .build()?;
            if !expr.groups_accumulator_supported() {
                return Err(WeirError::plan(format!(
                    "{name}: aggregate {a} over this column type is not supported in windows"
                )));
            }
            aggregates.push(expr);
            arguments.push(vec![arg]);
        }
        Ok(Self {
            name,
            key_indices,
            key_schema,
            ts_index,
            size,
            offset,
            aggregates,
            arguments,
            output_schema,
            batch_size: ctx.config.batch_size,
            panes: BTreeMap::new(),
            watermark: i64::MIN,
            starts: Vec::new(),
            group_ids: Vec::new(),
            windows_fired: 0,
            late_dropped: 0,
        })
    }

    /// Number of windows currently holding state.
    pub fn open_windows(&self) -> usize {
        self.panes.len()
    }

    fn new_pane(&self) -> Result<Pane> {
        Ok(Pane {
            groups: new_group_values(Arc::clone(&self.key_schema), &GroupOrdering::None)?,
            accumulators: self
                .aggregates
                .iter()
                .map(|a| a.create_groups_accumulator())
                .collect::<datafusion_common::Result<Vec<_>>>()?,
        })
    }

    /// Add the rows of `batch`, all belonging to the window starting at `start`.
    fn accumulate(&mut self, start: i64, batch: &RecordBatch) -> Result<()> {
        if !self.panes.contains_key(&start) {
            let pane = self.new_pane()?;
            self.panes.insert(start, pane);
        }
        let pane = self.panes.get_mut(&start).expect("inserted above");
        let keys: Vec<ArrayRef> = self
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        pane.groups.intern(&keys, &mut self.group_ids)?;
        let total_groups = pane.groups.len();
        for (acc, args) in pane.accumulators.iter_mut().zip(&self.arguments) {
            let values = args
                .iter()
                .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
                .collect::<Result<Vec<_>>>()?;
            acc.update_batch(&values, &self.group_ids, None, total_groups)?;
        }
        Ok(())
    }

    fn fire(&mut self, start: i64, mut pane: Pane, out: &mut dyn Output) -> Result<()> {
        self.windows_fired += 1;
        let keys = pane.groups.emit(EmitTo::All)?;
        let rows = keys.first().map(|k| k.len()).unwrap_or(0);
        if rows == 0 {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.output_schema.fields().len());
        columns.push(Arc::new(TimestampMillisecondArray::from_value(start, rows)));
        columns.push(Arc::new(TimestampMillisecondArray::from_value(
            start.saturating_add(self.size),
            rows,
        )));
        columns.extend(keys);
        for acc in &mut pane.accumulators {
            columns.push(acc.evaluate(EmitTo::All)?);
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        let mut offset = 0;
        while offset < rows {
            let len = self.batch_size.min(rows - offset);
            out.collect(batch.slice(offset, len))?;
            offset += len;
        }
        Ok(())
    }
}

/// Millisecond timestamps of an event-time column as a plain slice.
pub fn timestamps<'a>(column: &'a ArrayRef, name: &str) -> Result<&'a [i64]> {
    if column.null_count() > 0 {
        return Err(WeirError::bad_input(
            format!("event-time column '{name}'"),
            "contains NULL timestamps",
        ));
    }
    match column.data_type() {
        DataType::Int64 => Ok(column
            .as_primitive::<arrow::datatypes::Int64Type>()
            .values()),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            Ok(column.as_primitive::<TimestampMillisecondType>().values())
        }
        other => Err(WeirError::bad_input(
            format!("event-time column '{name}'"),
            format!("has type {other}, expected Timestamp(Millisecond) or Int64"),
        )),
    }
}

impl Operator for WindowAggregateOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        let ts_name = batch.schema().field(self.ts_index).name().clone();
        let ts = timestamps(batch.column(self.ts_index), &ts_name)?;
        let (size, offset) = (self.size, self.offset);
        self.starts.clear();
        self.starts
            .extend(ts.iter().map(|&t| tumbling_window_start(t, size, offset)));
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for &s in &self.starts {
            lo = lo.min(s);
            hi = hi.max(s);
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        // A window is late once the watermark has reached its last millisecond:
        // it has fired and its state is gone (Flink's WindowOperator rule).
        let last_fired = self.watermark.saturating_sub(size - 1);
        if lo == hi {
            if lo <= last_fired {
                self.late_dropped += batch.num_rows() as u64;
                return Ok(());
            }
            return self.accumulate(lo, &batch);
        }
        let mut distinct: Vec<i64> = self.starts.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for s in distinct {
            let starts = &self.starts;
            let mask = BooleanArray::new(
                BooleanBuffer::collect_bool(starts.len(), |i| starts[i] == s),
                None,
            );
            if s <= last_fired {
                self.late_dropped += mask.true_count() as u64;
                continue;
            }
            let part = filter_record_batch(&batch, &mask)?;
            self.accumulate(s, &part)?;
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(watermark.0);
        while let Some(entry) = self.panes.first_entry() {
            let start = *entry.key();
            if start.saturating_add(self.size - 1) > self.watermark {
                break;
            }
            let pane = entry.remove();
            self.fire(start, pane, out)?;
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
