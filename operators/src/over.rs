//! The OVER aggregation: each row once, with aggregates over its frame —
//! the rows of its partition up to it in time order, bounded by a number of
//! rows or a time interval, or unbounded (Flink's `RowTime*` and
//! `ProcTime*` over functions).
//!
//! Ordered by event time, rows wait until the watermark passes them; then
//! every waiting row the watermark passed is taken at once, its partition
//! keys interned in one call, sorted by (partition, time, arrival) with one
//! lexicographic sort, its aggregate arguments evaluated over the whole
//! sorted batch, and each partition's run fed through per-partition
//! accumulators — DataFusion's sliding accumulators for bounded frames
//! (rows leaving the frame are retracted), plain ones for unbounded frames.
//! `RANGE` frames feed all rows of one timestamp (peers) in one call and
//! evaluate once for them. Ordered by processing time, rows are worked as
//! they arrive. Rows behind the watermark on arrival are dropped and
//! counted (`num_late_records_dropped`), as in Flink.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{concat, concat_batches};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::message::Watermark;
use weir_core::spec::{OverAggregateSpec, OverFrame};
use weir_core::{Result, WeirError};

use crate::process::now_ms;
use crate::window::{Aggregates, timestamps};
use crate::{Operator, OperatorContext, Output, StateTable};

/// A row still in a bounded frame: its time and its aggregate arguments.
struct FrameRow {
    ts: i64,
    /// Per aggregate, its argument values (one-row arrays).
    args: Vec<Vec<ArrayRef>>,
}

/// One partition's running state.
struct Partition {
    accumulators: Vec<Box<dyn Accumulator>>,
    /// Rows in the frame (bounded frames only), oldest first.
    frame: VecDeque<FrameRow>,
    /// The partition's key (one-row arrays), for snapshots.
    key: Vec<ArrayRef>,
}

/// The OVER aggregation of one subtask.
pub struct OverAggregateOperator {
    name: String,
    frame: OverFrame,
    rowtime: Option<(usize, String)>,
    aggregates: Aggregates,
    keys: Box<dyn GroupValues>,
    partitions: Vec<Partition>,
    /// Rows the watermark has not passed yet (event time).
    waiting: Vec<RecordBatch>,
    watermark: i64,
    input_schema: SchemaRef,
    output_schema: SchemaRef,
    batch_size: usize,
    late_dropped: u64,
    filter: crate::KeyGroupFilter,
    key_ids: Vec<usize>,
}

impl OverAggregateOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &OverAggregateSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        spec.validate()?;
        let aggregates = Aggregates::build(
            &name,
            &spec.keys,
            &spec.aggregates,
            &spec.input_schema,
            None,
        )?;
        let rowtime = match &spec.rowtime {
            Some(rt) => Some((spec.input_schema.index_of(rt)?, rt.clone())),
            None => None,
        };
        Ok(Self {
            keys: new_group_values(Arc::clone(&aggregates.key_schema), &GroupOrdering::None)?,
            name,
            frame: spec.frame,
            rowtime,
            aggregates,
            partitions: Vec::new(),
            waiting: Vec::new(),
            watermark: i64::MIN,
            input_schema: Arc::clone(&spec.input_schema),
            output_schema,
            batch_size: ctx.config.batch_size.max(1),
            late_dropped: 0,
            filter: crate::KeyGroupFilter::new(ctx),
            key_ids: Vec::new(),
        })
    }

    /// A new partition's accumulators: sliding ones (rows can be taken
    /// back out) for bounded frames.
    fn accumulators(&self, bounded: bool) -> Result<Vec<Box<dyn Accumulator>>> {
        Ok(self
            .aggregates
            .functions
            .iter()
            .map(|f| {
                if bounded {
                    f.create_sliding_accumulator()
                } else {
                    f.create_accumulator()
                }
            })
            .collect::<datafusion_common::Result<Vec<_>>>()?)
    }

    fn bounded(&self) -> bool {
        matches!(
            self.frame,
            OverFrame::Rows(Some(_)) | OverFrame::Range(Some(_))
        )
    }

    /// Intern the partition keys of `batch` into `self.key_ids`, creating
    /// the state of new partitions.
    fn intern(&mut self, batch: &RecordBatch) -> Result<()> {
        let keys = self.aggregates.keys(batch);
        let mut ids = std::mem::take(&mut self.key_ids);
        self.keys.intern(&keys, &mut ids)?;
        let bounded = self.bounded();
        for (row, &id) in ids.iter().enumerate() {
            if id < self.partitions.len() {
                continue;
            }
            self.partitions.push(Partition {
                accumulators: self.accumulators(bounded)?,
                frame: VecDeque::new(),
                key: keys.iter().map(|k| k.slice(row, 1)).collect(),
            });
        }
        self.key_ids = ids;
        Ok(())
    }

    /// The aggregate arguments over `batch`.
    fn arguments(&self, batch: &RecordBatch) -> Result<Vec<Vec<ArrayRef>>> {
        let n = batch.num_rows();
        self.aggregates
            .arguments
            .iter()
            .map(|args| {
                args.iter()
                    .map(|e| Ok(e.evaluate(batch)?.into_array(n)?))
                    .collect::<Result<Vec<_>>>()
            })
            .collect()
    }

    /// Work `batch` (each partition's rows in time order) whose rows have
    /// times `ts`: each row is emitted with its frame's aggregates.
    /// The partition ids of its rows are in `self.key_ids` ([`Self::intern`]).
    fn work(&mut self, batch: RecordBatch, ts: &[i64], out: &mut dyn Output) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let args = self.arguments(&batch)?;
        let mut values: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(n); args.len()];
        let ids = std::mem::take(&mut self.key_ids);
        let slice = |i: usize, len: usize| -> Vec<Vec<ArrayRef>> {
            args.iter()
                .map(|a| a.iter().map(|c| c.slice(i, len)).collect())
                .collect()
        };
        let mut i = 0;
        while i < n {
            let k = ids[i];
            // Rows worked together: one row (ROWS), or its peers (RANGE).
            let mut j = i + 1;
            if matches!(self.frame, OverFrame::Range(_)) {
                while j < n && ids[j] == k && ts[j] == ts[i] {
                    j += 1;
                }
            }
            let p = &mut self.partitions[k];
            let rows = slice(i, j - i);
            for (acc, a) in p.accumulators.iter_mut().zip(&rows) {
                acc.update_batch(a)?;
            }
            match self.frame {
                OverFrame::Rows(Some(preceding)) => {
                    p.frame.push_back(FrameRow {
                        ts: ts[i],
                        args: rows,
                    });
                    while p.frame.len() as u64 > preceding + 1 {
                        let gone = p.frame.pop_front().expect("longer than the frame");
                        for (acc, a) in p.accumulators.iter_mut().zip(&gone.args) {
                            acc.retract_batch(a)?;
                        }
                    }
                }
                OverFrame::Range(Some(preceding)) => {
                    for (r, &t) in ts.iter().enumerate().take(j).skip(i) {
                        p.frame.push_back(FrameRow {
                            ts: t,
                            args: slice(r, 1),
                        });
                    }
                    let from = ts[i].saturating_sub(preceding);
                    while p.frame.front().is_some_and(|f| f.ts < from) {
                        let gone = p.frame.pop_front().expect("checked");
                        for (acc, a) in p.accumulators.iter_mut().zip(&gone.args) {
                            acc.retract_batch(a)?;
                        }
                    }
                }
                OverFrame::Rows(None) | OverFrame::Range(None) => {}
            }
            for (acc, v) in p.accumulators.iter_mut().zip(values.iter_mut()) {
                let value = acc.evaluate()?;
                v.extend(std::iter::repeat_n(value, j - i));
            }
            i = j;
        }
        self.key_ids = ids;
        let mut columns = batch.columns().to_vec();
        let width = columns.len();
        for (a, v) in values.into_iter().enumerate() {
            let want = self.output_schema.field(width + a).data_type();
            columns.push(crate::cast_to(ScalarValue::iter_to_array(v)?, want)?);
        }
        let result = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        crate::pane_buffer::emit_sliced(&result, self.batch_size, out)
    }

    /// Rows the watermark `w` passed, sorted by (partition, time, arrival),
    /// and worked; later ones keep waiting.
    fn release(&mut self, w: i64, out: &mut dyn Output) -> Result<()> {
        let Some((at, name)) = self.rowtime.clone() else {
            return Ok(());
        };
        let Some(ready) =
            crate::window::take_ready(&mut self.waiting, &self.input_schema, (at, &name), w)?
        else {
            return Ok(());
        };
        self.intern(&ready)?;
        let order =
            crate::window::partition_order(&self.key_ids, timestamps(ready.column(at), &name)?);
        let sorted = arrow::compute::take_record_batch(&ready, &order)?;
        // The partition ids follow their rows (no second intern).
        self.key_ids = order
            .values()
            .iter()
            .map(|&i| self.key_ids[i as usize])
            .collect();
        let ts = timestamps(sorted.column(at), &name)?.to_vec();
        self.work(sorted, &ts, out)
    }

    fn state_schema(&self, what: &str) -> Result<SchemaRef> {
        let mut fields: Vec<Field> = self
            .aggregates
            .key_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        if what == "frames" {
            fields.push(Field::new("__ts", DataType::Int64, false));
            for (i, args) in self.aggregates.arguments.iter().enumerate() {
                for (j, e) in args.iter().enumerate() {
                    fields.push(Field::new(
                        format!("a{i}_{j}"),
                        e.data_type(&self.input_schema)?,
                        true,
                    ));
                }
            }
        } else {
            for (i, f) in self.aggregates.functions.iter().enumerate() {
                for s in f.state_fields()? {
                    fields.push(
                        s.as_ref()
                            .clone()
                            .with_name(format!("a{i}_{}", s.name()))
                            .with_nullable(true),
                    );
                }
            }
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Every partition's frame rows (bounded) or accumulator states
    /// (unbounded), one table.
    fn partitions_table(&mut self) -> Result<StateTable> {
        let bounded = self.bounded();
        let what = if bounded { "frames" } else { "accumulators" };
        let schema = self.state_schema(what)?;
        let mut columns: Vec<Vec<ArrayRef>> = vec![Vec::new(); schema.fields().len()];
        let width = self.aggregates.key_schema.fields().len();
        for p in &mut self.partitions {
            let mut rows: Vec<Vec<ArrayRef>> = Vec::new();
            if bounded {
                for f in &p.frame {
                    let mut row =
                        vec![Arc::new(arrow::array::Int64Array::from(vec![f.ts])) as ArrayRef];
                    row.extend(f.args.iter().flatten().cloned());
                    rows.push(row);
                }
            } else {
                let mut row = Vec::new();
                for acc in p.accumulators.iter_mut() {
                    for s in acc.state()? {
                        row.push(s.to_array()?);
                    }
                }
                rows.push(row);
            }
            for row in rows {
                for (c, k) in p.key.iter().enumerate() {
                    columns[c].push(Arc::clone(k));
                }
                for (c, v) in row.into_iter().enumerate() {
                    columns[width + c].push(v);
                }
            }
        }
        let arrays = columns
            .iter()
            .zip(schema.fields())
            .map(|(parts, f)| {
                if parts.is_empty() {
                    return Ok(arrow::array::new_empty_array(f.data_type()));
                }
                let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                let array = concat(&refs)?;
                Ok(if array.data_type() == f.data_type() {
                    array
                } else {
                    arrow::compute::cast(&array, f.data_type())?
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(schema, arrays)?;
        let keyed = if self.aggregates.key_indices.is_empty() {
            vec![]
        } else {
            (0..width).collect()
        };
        Ok(StateTable::new(what, batch).keyed(keyed))
    }

    fn restore_partitions(&mut self, batch: RecordBatch, bounded: bool) -> Result<()> {
        let width = self.aggregates.key_schema.fields().len();
        let keyed: Vec<usize> = if self.aggregates.key_indices.is_empty() {
            vec![]
        } else {
            (0..width).collect()
        };
        let batch = self.filter.keep(batch, &keyed)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let keys: Vec<ArrayRef> = batch.columns()[..width].to_vec();
        let mut ids = std::mem::take(&mut self.key_ids);
        self.keys.intern(&keys, &mut ids)?;
        for (row, &id) in ids.iter().enumerate() {
            while self.partitions.len() <= id {
                self.partitions.push(Partition {
                    accumulators: self.accumulators(bounded)?,
                    frame: VecDeque::new(),
                    key: keys.iter().map(|k| k.slice(row, 1)).collect(),
                });
            }
            let p = &mut self.partitions[id];
            let mut c = width;
            if bounded {
                let ts = batch
                    .column(c)
                    .as_primitive_opt::<arrow::datatypes::Int64Type>()
                    .ok_or_else(|| {
                        WeirError::Execution(format!(
                            "{}: malformed state table 'frames'",
                            self.name
                        ))
                    })?
                    .value(row);
                c += 1;
                let mut args = Vec::new();
                for (acc, a) in p.accumulators.iter_mut().zip(&self.aggregates.arguments) {
                    let values: Vec<ArrayRef> = (0..a.len())
                        .map(|j| batch.column(c + j).slice(row, 1))
                        .collect();
                    c += a.len();
                    acc.update_batch(&values)?;
                    args.push(values);
                }
                p.frame.push_back(FrameRow { ts, args });
            } else {
                for (acc, f) in p.accumulators.iter_mut().zip(&self.aggregates.functions) {
                    let n = f.state_fields()?.len();
                    let states: Vec<ArrayRef> =
                        (0..n).map(|j| batch.column(c + j).slice(row, 1)).collect();
                    c += n;
                    acc.merge_batch(&states)?;
                }
            }
        }
        self.key_ids = ids;
        Ok(())
    }
}

impl Operator for OverAggregateOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let Some((at, name)) = self.rowtime.clone() else {
            // Processing time: in arrival order, now.
            let ts = vec![now_ms(); batch.num_rows()];
            self.intern(&batch)?;
            return self.work(batch, &ts, out);
        };
        let ts = timestamps(batch.column(at), &name)?.to_vec();
        let batch = crate::window::drop_late(batch, &ts, self.watermark, &mut self.late_dropped)?;
        if batch.num_rows() > 0 {
            self.waiting.push(batch);
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        if watermark.0 > self.watermark {
            self.release(watermark.0, out)?;
            self.watermark = watermark.0;
        }
        Ok(Some(watermark))
    }

    /// Tables `waiting` (rows the watermark has not passed), `meta` (the
    /// watermark), and `frames` — per partition key, the rows of a bounded
    /// frame (`__ts`, then each aggregate's arguments `a{i}_{j}`) — or
    /// `accumulators` — per partition key, each unbounded aggregate's
    /// intermediate state (`a{i}_{field}`).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let waiting = concat_batches(&self.input_schema, &self.waiting)?;
        let key_indices = self.aggregates.key_indices.clone();
        Ok(vec![
            StateTable::new("waiting", waiting).keyed(key_indices),
            crate::window::meta_table(self.watermark)?,
            self.partitions_table()?,
        ])
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        for t in tables {
            match t.name.as_str() {
                "meta" => {
                    let mut w = None;
                    crate::window::restore_meta(&self.name, &t.batch, &mut w)?;
                    if let Some(w) = w {
                        self.watermark = w;
                    }
                }
                "waiting" => {
                    let rows = self.filter.keep(t.batch, &self.aggregates.key_indices)?;
                    if rows.num_rows() > 0 {
                        self.waiting.push(rows);
                    }
                }
                "frames" => self.restore_partitions(t.batch, true)?,
                "accumulators" => self.restore_partitions(t.batch, false)?,
                other => {
                    return Err(WeirError::Execution(format!(
                        "{}: unknown state table '{other}'",
                        self.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        let frames: usize = self.partitions.iter().map(|p| p.frame.len()).sum();
        let waiting: usize = self.waiting.iter().map(RecordBatch::num_rows).sum();
        let bytes = self.keys.size()
            + self
                .partitions
                .iter()
                .flat_map(|p| &p.accumulators)
                .map(|a| a.size())
                .sum::<usize>()
            + self
                .waiting
                .iter()
                .map(RecordBatch::get_array_memory_size)
                .sum::<usize>();
        vec![
            ("num_late_records_dropped".into(), self.late_dropped),
            ("state_rows".into(), (frames + waiting) as u64),
            ("state_bytes".into(), bytes as u64),
        ]
    }
}

#[cfg(test)]
#[path = "over_tests.rs"]
mod tests;
