//! Keyed event-time windows: tumbling, sliding and cumulating.
//!
//! Records are aggregated once, into the aligned *pane* that contains them
//! (the window itself for tumbling windows, `gcd(size, slide)` for sliding
//! windows, `step` for cumulating windows). A pane is a DataFusion
//! [`GroupValues`](datafusion_physical_plan::aggregates::group_values::GroupValues) table mapping keys to dense group ids plus one
//! [`GroupsAccumulator`] per aggregate: a batch is split by pane (usually it
//! falls into one or two), its keys are interned at once and each
//! accumulator is updated with one call — no per-row dispatch.
//!
//! When the watermark reaches `window_end - 1`, the window's panes are
//! frozen into their intermediate state (`GroupsAccumulator::state`) and
//! merged into a fresh table (`merge_batch`), so a record in a sliding window
//! is aggregated once, not once per window. Panes are dropped when the last
//! window containing them is past its allowed lateness. Tumbling windows
//! without lateness skip the freeze and evaluate their single pane directly.
//!
//! Lateness follows Flink's `WindowOperator`: a record is dropped when every
//! window containing it has passed `end - 1 + allowed_lateness`; a record for
//! an already fired window within its lateness updates the window and
//! re-emits the result for the record's keys, with `is_update = true`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, TimestampMillisecondArray, UInt32Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{filter, filter_record_batch};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use datafusion_expr::EmitTo;
use weir_core::message::Watermark;
use weir_core::spec::WindowAggregateSpec;
use weir_core::time::{Trigger, WindowAssigner, tumbling_window_start};
use weir_core::{Result, WeirError};

use crate::process::now_ms;
use crate::{LateRecords, Operator, OperatorContext, Output, StateTable};

mod aggregates;
mod counts;

pub(crate) use aggregates::{
    Accumulation, Aggregates, drain_states, drop_late, keep_key_groups, meta_table, regroup,
    restore_meta, take_ready,
};

/// A pane's groups turned into intermediate state, ready to merge.
struct Frozen {
    keys: Vec<ArrayRef>,
    states: Vec<Vec<ArrayRef>>,
}

#[derive(Default)]
struct Pane {
    live: Option<Accumulation>,
    frozen: Vec<Frozen>,
}

/// Frozen parts of a pane are compacted into one beyond this many.
const MAX_FROZEN_PARTS: usize = 8;

/// Keyed tumbling, sliding or cumulating event-time window with incremental
/// aggregation per pane.
pub struct WindowAggregateOperator {
    name: String,
    aggregates: Aggregates,
    /// Event-time column; `None` for processing-time windows, whose rows are
    /// stamped with the wall clock on arrival.
    ts_index: Option<usize>,
    assigner: WindowAssigner,
    pane_size: i64,
    pane_offset: i64,
    lateness: i64,
    trigger: Trigger,
    purge: bool,
    /// Next wall-clock early firing of a continuous processing-time trigger.
    next_early: i64,
    /// Count trigger: per pane, each key's records and aggregate state (its
    /// pane in `panes` stays empty).
    counts: BTreeMap<i64, counts::Counted>,
    late: LateRecords,
    output_schema: SchemaRef,
    batch_size: usize,
    panes: BTreeMap<i64, Pane>,
    watermark: i64,
    starts: Vec<i64>,
    group_ids: Vec<usize>,
    windows_fired: u64,
    early_firings: u64,
    late_updates: u64,
    state_bytes_max: u64,
    filter: crate::KeyGroupFilter,
    /// Rows a disk-backend snapshot held pending, put through first.
    replay: crate::spill::Replay,
}

impl WindowAggregateOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &WindowAggregateSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let (pane_size, pane_offset) = spec
            .assigner
            .pane()
            .ok_or_else(|| WeirError::plan(format!("{name}: session windows have no panes")))?;
        Ok(Self {
            aggregates: Aggregates::try_new(&name, spec)?,
            name,
            ts_index: match (&spec.rowtime, spec.processing_time) {
                (_, true) => None,
                (Some(rt), false) => Some(spec.input_schema.index_of(rt)?),
                (None, false) => {
                    return Err(WeirError::plan("event-time window without event time"));
                }
            },
            assigner: spec.assigner,
            pane_size,
            pane_offset,
            lateness: spec.allowed_lateness,
            trigger: spec.trigger,
            purge: spec.purge,
            next_early: match spec.trigger {
                Trigger::ContinuousProcessingTime { interval } => next_multiple(now_ms(), interval),
                _ => i64::MAX,
            },
            counts: BTreeMap::new(),
            late: LateRecords::new(spec.late_data_tag.clone()),
            output_schema,
            batch_size: ctx.config.batch_size,
            panes: BTreeMap::new(),
            watermark: i64::MIN,
            starts: Vec::new(),
            group_ids: Vec::new(),
            windows_fired: 0,
            early_firings: 0,
            late_updates: 0,
            state_bytes_max: 0,
            filter: crate::KeyGroupFilter::new(ctx),
            replay: Default::default(),
        })
    }

    /// Number of panes currently holding state.
    pub fn open_panes(&self) -> usize {
        self.panes.len()
    }

    /// Bytes held by the panes (group tables, accumulators, frozen state).
    pub fn state_bytes(&self) -> usize {
        self.counts_bytes()
            + self
                .panes
                .values()
                .map(|p| {
                    let live = p.live.as_ref().map_or(0, |l| {
                        l.groups.size() + l.accumulators.iter().map(|a| a.size()).sum::<usize>()
                    });
                    let frozen: usize = p
                        .frozen
                        .iter()
                        .flat_map(|f| f.keys.iter().chain(f.states.iter().flatten()))
                        .map(|a| a.get_array_memory_size())
                        .sum();
                    live + frozen
                })
                .sum::<usize>()
    }

    fn emits_updates(&self) -> bool {
        self.lateness > 0
    }

    /// Whether every window containing the pane is past its lateness.
    fn pane_expired(&self, pane_start: i64) -> bool {
        self.assigner
            .last_window_end_of_pane(pane_start)
            .saturating_sub(1)
            .saturating_add(self.lateness)
            <= self.watermark
    }

    /// Add the rows of `batch`, all belonging to the pane at `start`.
    fn accumulate(&mut self, start: i64, batch: &RecordBatch) -> Result<()> {
        let pane = self.panes.entry(start).or_default();
        if pane.live.is_none() {
            pane.live = Some(self.aggregates.new_accumulation()?);
        }
        let acc = pane.live.as_mut().expect("set above");
        let rows = batch.num_rows();
        if self.aggregates.key_indices.is_empty() {
            // An all-window (no key): every row is in the one group,
            // whose constant key is interned once per pane, not hashed
            // for every row.
            if acc.groups.is_empty() && rows > 0 {
                acc.groups
                    .intern(&self.aggregates.constant_key(1), &mut self.group_ids)?;
            }
            self.group_ids.clear();
            self.group_ids.resize(rows, 0);
        } else {
            acc.groups
                .intern(&self.aggregates.keys(batch), &mut self.group_ids)?;
        }
        let total = acc.groups.len();
        self.aggregates
            .update(&mut acc.accumulators, batch, &self.group_ids, total)
    }

    /// Turn the live groups of the panes in `[start, end)` into frozen state.
    fn freeze_range(&mut self, start: i64, end: i64) -> Result<()> {
        self.freeze_range_into(start, end, MAX_FROZEN_PARTS)
    }

    /// As [`Self::freeze_range`], compacting panes of more than `max_parts`
    /// frozen parts into one.
    fn freeze_range_into(&mut self, start: i64, end: i64, max_parts: usize) -> Result<()> {
        let mut compact = Vec::new();
        for (&p, pane) in self.panes.range_mut(start..end) {
            if let Some(mut live) = pane.live.take() {
                let keys = live.groups.emit(EmitTo::All)?;
                let states = live
                    .accumulators
                    .iter_mut()
                    .map(|a| a.state(EmitTo::All))
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                if keys.first().is_some_and(|k| !k.is_empty()) {
                    pane.frozen.push(Frozen { keys, states });
                }
            }
            if pane.frozen.len() > max_parts {
                compact.push(p);
            }
        }
        for p in compact {
            let parts = std::mem::take(&mut self.panes.get_mut(&p).expect("listed").frozen);
            let (mut acc, _) = self.merge_parts(parts.iter(), None)?;
            let keys = acc.groups.emit(EmitTo::All)?;
            let states = acc
                .accumulators
                .iter_mut()
                .map(|a| a.state(EmitTo::All))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            self.panes
                .get_mut(&p)
                .expect("listed")
                .frozen
                .push(Frozen { keys, states });
        }
        Ok(())
    }

    /// Merge frozen parts into a fresh accumulation. With `only_keys`, those
    /// keys take the first group ids and rows of other keys are skipped
    /// (interning doubles as a vectorized membership test).
    fn merge_parts<'a>(
        &mut self,
        parts: impl Iterator<Item = &'a Frozen>,
        only_keys: Option<&[ArrayRef]>,
    ) -> Result<(Accumulation, Option<usize>)> {
        let mut acc = self.aggregates.new_accumulation()?;
        let limit = match only_keys {
            Some(keys) => {
                acc.groups.intern(keys, &mut self.group_ids)?;
                Some(acc.groups.len())
            }
            None => None,
        };
        for part in parts {
            acc.groups.intern(&part.keys, &mut self.group_ids)?;
            let total = acc.groups.len();
            match limit {
                None => {
                    for (a, state) in acc.accumulators.iter_mut().zip(&part.states) {
                        a.merge_batch(state, &self.group_ids, total)?;
                    }
                }
                Some(limit) => {
                    let ids = &self.group_ids;
                    let mask = BooleanArray::new(
                        BooleanBuffer::collect_bool(ids.len(), |i| ids[i] < limit),
                        None,
                    );
                    if mask.true_count() == 0 {
                        continue;
                    }
                    let kept: Vec<usize> = ids.iter().copied().filter(|&g| g < limit).collect();
                    for (a, state) in acc.accumulators.iter_mut().zip(&part.states) {
                        let state = state
                            .iter()
                            .map(|s| filter(s.as_ref(), &mask))
                            .collect::<std::result::Result<Vec<_>, _>>()?;
                        a.merge_batch(&state, &kept, total)?;
                    }
                }
            }
        }
        Ok((acc, limit))
    }

    /// The result of window `[start, end)`, optionally for `only_keys`.
    fn window_result(
        &mut self,
        start: i64,
        end: i64,
        only_keys: Option<&[ArrayRef]>,
    ) -> Result<Option<(Vec<ArrayRef>, Vec<ArrayRef>)>> {
        self.freeze_range(start, end)?;
        let panes = std::mem::take(&mut self.panes);
        let merged = self.merge_parts(
            panes.range(start..end).flat_map(|(_, p)| p.frozen.iter()),
            only_keys,
        );
        self.panes = panes;
        let (mut acc, limit) = merged?;
        // With `only_keys`, the first groups are exactly those keys.
        let rows = limit.unwrap_or(acc.groups.len());
        if rows == 0 {
            return Ok(None);
        }
        let keys = acc.groups.emit(EmitTo::All)?;
        let values = acc
            .accumulators
            .iter_mut()
            .map(|a| a.evaluate(EmitTo::All))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let cut = |v: Vec<ArrayRef>| v.into_iter().map(|a| a.slice(0, rows)).collect();
        Ok(Some((cut(keys), cut(values))))
    }

    fn emit(
        &mut self,
        start: i64,
        end: i64,
        keys: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
        is_update: bool,
        out: &mut dyn Output,
    ) -> Result<()> {
        let rows = keys.first().map(|k| k.len()).unwrap_or(0);
        if rows == 0 {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.output_schema.fields().len());
        columns.push(Arc::new(TimestampMillisecondArray::from_value(start, rows)));
        columns.push(Arc::new(TimestampMillisecondArray::from_value(end, rows)));
        columns.extend(self.aggregates.output_keys(keys));
        columns.extend(values);
        if self.emits_updates() {
            columns.push(Arc::new(BooleanArray::from(vec![is_update; rows])));
        }
        let batch = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        crate::pane_buffer::emit_sliced(&batch, self.batch_size, out)
    }

    /// Tumbling windows without lateness: evaluate the single pane in place.
    fn fire_tumbling(&mut self, out: &mut dyn Output) -> Result<()> {
        while let Some(entry) = self.panes.first_entry() {
            let start = *entry.key();
            if start.saturating_add(self.pane_size - 1) > self.watermark {
                break;
            }
            let pane = entry.remove();
            let mut live = if pane.frozen.is_empty() {
                let Some(live) = pane.live else { continue };
                live
            } else {
                // A checkpoint froze part of the pane: merge it back.
                let mut parts = pane.frozen;
                if let Some(mut l) = pane.live {
                    let keys = l.groups.emit(EmitTo::All)?;
                    let states = l
                        .accumulators
                        .iter_mut()
                        .map(|a| a.state(EmitTo::All))
                        .collect::<datafusion_common::Result<Vec<_>>>()?;
                    if keys.first().is_some_and(|k| !k.is_empty()) {
                        parts.push(Frozen { keys, states });
                    }
                }
                self.merge_parts(parts.iter(), None)?.0
            };
            self.windows_fired += 1;
            let keys = live.groups.emit(EmitTo::All)?;
            let values = live
                .accumulators
                .iter_mut()
                .map(|a| a.evaluate(EmitTo::All))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            self.emit(
                start,
                start.saturating_add(self.pane_size),
                keys,
                values,
                false,
                out,
            )?;
        }
        Ok(())
    }

    /// A late part of a pane arrived: re-emit the fired windows containing
    /// it that are still within their lateness, for the part's keys.
    fn refire(&mut self, pane_start: i64, part: &RecordBatch, out: &mut dyn Output) -> Result<()> {
        let keys = self.aggregates.keys(part);
        for (start, end) in self.assigner.windows_of_pane(pane_start) {
            let last = end.saturating_sub(1);
            if last <= self.watermark
                && last.saturating_add(self.lateness) > self.watermark
                && let Some((k, v)) = self.window_result(start, end, Some(&keys))?
            {
                self.late_updates += 1;
                self.emit(start, end, k, v, true, out)?;
            }
        }
        Ok(())
    }

    fn process_pane(
        &mut self,
        pane_start: i64,
        part: &RecordBatch,
        out: &mut dyn Output,
    ) -> Result<()> {
        if self.pane_expired(pane_start) {
            return self.late.handle(part, out);
        }
        if let Trigger::Count { count } = self.trigger {
            return self.process_counted(pane_start, part, count, out);
        }
        self.accumulate(pane_start, part)?;
        if self.emits_updates() && pane_start.saturating_add(self.pane_size - 1) <= self.watermark {
            self.refire(pane_start, part, out)?;
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

/// The order of rows by (partition id, `then`, arrival): ids and values
/// packed into one vector and sorted as tuples. arrow's `lexsort_to_indices`
/// over the same three columns compared them through a dynamic comparator
/// per column, which was a fifth of an OVER aggregation's instructions.
pub(crate) fn partition_order<T: Ord + Copy>(ids: &[usize], then: &[T]) -> UInt32Array {
    let mut rows: Vec<(usize, T, u32)> = ids
        .iter()
        .zip(then)
        .enumerate()
        .map(|(i, (&id, &t))| (id, t, i as u32))
        .collect();
    // The arrival index is unique: an unstable sort of whole tuples gives
    // one order, the stable one.
    rows.sort_unstable();
    UInt32Array::from_iter_values(rows.into_iter().map(|(_, _, i)| i))
}

/// Split `batch` by the value of `keys` (one per row), calling `f` with each
/// distinct value in increasing order and the rows that carry it. The common
/// case — every row shares one value — passes the batch through uncopied.
pub(crate) fn split_by<E>(
    batch: &RecordBatch,
    keys: &[i64],
    mut f: impl FnMut(i64, &RecordBatch) -> std::result::Result<(), E>,
) -> std::result::Result<(), E>
where
    E: From<arrow::error::ArrowError>,
{
    let Some(&first) = keys.first() else {
        return Ok(());
    };
    if keys.iter().all(|&k| k == first) {
        return f(first, batch);
    }
    // The distinct values, in order (few: a binary search each, and runs of
    // one value — the usual — cost one comparison a row).
    let mut distinct: Vec<i64> = Vec::new();
    let mut last = None;
    for &k in keys {
        if last == Some(k) {
            continue;
        }
        last = Some(k);
        if let Err(at) = distinct.binary_search(&k) {
            distinct.insert(at, k);
        }
    }
    if distinct.len() <= SPLIT_BY_FILTERING {
        // A few values (a batch across a pane boundary): one filter each.
        for d in distinct {
            let mask = BooleanArray::new(
                BooleanBuffer::collect_bool(keys.len(), |i| keys[i] == d),
                None,
            );
            let part = filter_record_batch(batch, &mask)?;
            f(d, &part)?;
        }
        return Ok(());
    }
    // Many values (out-of-order rows over many panes, restored state): the
    // rows grouped by value with a counting sort (stable: arrival order
    // within a value) and one gather, then each value's rows are a slice —
    // not one pass over the batch per value.
    let mut bounds = vec![0usize; distinct.len() + 1];
    let buckets: Vec<usize> = keys
        .iter()
        .map(|k| distinct.binary_search(k).unwrap_or_default())
        .collect();
    for &b in &buckets {
        bounds[b + 1] += 1;
    }
    for b in 1..bounds.len() {
        bounds[b] += bounds[b - 1];
    }
    let mut next = bounds.clone();
    let mut order = vec![0u32; keys.len()];
    for (row, &b) in buckets.iter().enumerate() {
        order[next[b]] = row as u32;
        next[b] += 1;
    }
    let sorted = arrow::compute::take_record_batch(batch, &arrow::array::UInt32Array::from(order))?;
    for (b, d) in distinct.into_iter().enumerate() {
        f(d, &sorted.slice(bounds[b], bounds[b + 1] - bounds[b]))?;
    }
    Ok(())
}

/// Most distinct values [`split_by`] splits by filtering once per value;
/// beyond, it groups the rows once.
const SPLIT_BY_FILTERING: usize = 8;

impl WindowAggregateOperator {
    /// Rows of a disk-backend snapshot's pending rows first, as they came.
    fn put_through_replay(&mut self, out: &mut dyn Output) -> Result<()> {
        for (_, batch) in self.replay.drain() {
            self.process_rows(batch, out)?;
        }
        Ok(())
    }

    fn process_rows(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let (size, offset) = (self.pane_size, self.pane_offset);
        let Some(ts_index) = self.ts_index else {
            // Processing time: the whole batch arrived now.
            let pane = tumbling_window_start(now_ms(), size, offset);
            return self.process_pane(pane, &batch, out);
        };
        let ts_name = batch.schema().field(ts_index).name().clone();
        let ts = timestamps(batch.column(ts_index), &ts_name)?;
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        starts.extend(ts.iter().map(|&t| tumbling_window_start(t, size, offset)));
        let result = split_by(&batch, &starts, |p, part| self.process_pane(p, part, out));
        self.starts = starts;
        result
    }
}

impl Operator for WindowAggregateOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        self.process_rows(batch, out)
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        self.put_through_replay(out)?;
        if self.ts_index.is_some() {
            self.advance(watermark.0, out)?;
        }
        Ok(Some(watermark))
    }

    fn next_processing_timer(&self) -> Option<i64> {
        let early = (!self.panes.is_empty()
            && matches!(self.trigger, Trigger::ContinuousProcessingTime { .. }))
        .then_some(self.next_early);
        if self.ts_index.is_some() {
            return early;
        }
        // The earliest window end not yet passed, among panes with data.
        let fired = self.watermark;
        let end = self
            .panes
            .keys()
            .flat_map(|&p| self.assigner.windows_of_pane(p))
            .map(|(_, end)| end.saturating_sub(1))
            .filter(|&last| last > fired)
            .min();
        end.into_iter().chain(early).min()
    }

    fn on_processing_time(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        if self.ts_index.is_none() {
            self.advance(now, out)?;
        }
        if let Trigger::ContinuousProcessingTime { interval } = self.trigger
            && now >= self.next_early
        {
            self.next_early = next_multiple(now, interval);
            let open_after = if self.ts_index.is_none() {
                now
            } else {
                self.watermark
            };
            self.fire_early(open_after, out)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        // End of input fires the processing-time windows still open.
        if self.ts_index.is_none() {
            self.advance(i64::MAX, out)?;
        }
        Ok(())
    }

    /// Tables: `panes`, one per pane (see [`Aggregates::snapshot_schema`]:
    /// one row per (pane, key) with the accumulators' intermediate state),
    /// `meta` (`watermark`: the operator's event-time clock at the
    /// barrier) and, for a count trigger, `counts` (`pane_start`, the key
    /// columns, `count`: records of the key in the window so far).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        let counts = self.counts_tables()?;
        // One part per pane: a snapshot holds each (pane, key) once.
        self.freeze_range_into(i64::MIN, i64::MAX, 1)?;
        // One table per pane: a pane that did not change since the last
        // checkpoint (a fired window kept for allowed lateness) is the same
        // table again, which incremental checkpoints do not write twice.
        let schema = self.aggregates.snapshot_schema()?;
        let keys = 1..1 + self.aggregates.key_indices.len();
        let mut tables = Vec::with_capacity(self.panes.len() + 1);
        for (&start, pane) in &self.panes {
            for f in &pane.frozen {
                let rows = f.keys.first().map_or(0, |k| k.len());
                let mut columns: Vec<ArrayRef> =
                    vec![Arc::new(arrow::array::Int64Array::from(vec![start; rows]))];
                columns.extend(f.keys.iter().cloned());
                columns.extend(f.states.iter().flatten().cloned());
                let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
                tables.push(StateTable::new("panes", batch).keyed(keys.clone()));
            }
        }
        tables.push(meta_table(self.watermark)?);
        tables.extend(counts);
        tables.extend(self.replay.tables(&[&self.aggregates.key_indices]));
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let widths = self.aggregates.state_widths()?;
        let keys = self.aggregates.key_schema().fields().len();
        let mut watermark = None::<i64>;
        for table in tables {
            let keys_of_input = [self.aggregates.key_indices.as_slice()];
            let Some(table) = self
                .replay
                .take_table(table, &keys_of_input, &self.filter)?
            else {
                continue;
            };
            let batch = table.batch;
            match table.name.as_str() {
                "meta" => restore_meta(&self.name, &batch, &mut watermark)?,
                "counts" => self.restore_counts(batch, keys)?,
                "panes" => {
                    if batch.num_columns() != 1 + keys + widths.iter().sum::<usize>() {
                        return Err(WeirError::Execution(format!(
                            "{}: pane state has {} columns, this window needs {}",
                            self.name,
                            batch.num_columns(),
                            1 + keys + widths.iter().sum::<usize>()
                        )));
                    }
                    let batch = self.own_key_groups(batch, keys)?;
                    let starts = batch
                        .column(0)
                        .as_primitive_opt::<arrow::datatypes::Int64Type>()
                        .ok_or_else(|| {
                            WeirError::Execution(format!("{}: malformed pane state", self.name))
                        })?
                        .values()
                        .to_vec();
                    split_by(&batch, &starts, |start, part| {
                        let mut at = 1 + keys;
                        let states = widths
                            .iter()
                            .map(|&w| {
                                let s = part.columns()[at..at + w].to_vec();
                                at += w;
                                s
                            })
                            .collect();
                        self.panes.entry(start).or_default().frozen.push(Frozen {
                            keys: part.columns()[1..1 + keys].to_vec(),
                            states,
                        });
                        Ok::<_, WeirError>(())
                    })?;
                }
                other => {
                    return Err(WeirError::Execution(format!(
                        "{}: unknown state table '{other}'",
                        self.name
                    )));
                }
            }
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        if matches!(self.trigger, Trigger::Count { .. }) {
            self.absorb_restored_panes()?;
        }
        Ok(())
    }

    /// Panes, counts: keyed; `meta` is the clock.
    fn spill_keys(&self) -> Option<Vec<Vec<usize>>> {
        Some(vec![self.aggregates.key_indices.clone()])
    }

    /// `panes` and `counts`: the pane start, then the key columns.
    fn keyed_tables(&self) -> Vec<(String, Vec<usize>)> {
        let keys: Vec<usize> = (1..1 + self.aggregates.key_indices.len()).collect();
        vec![("panes".into(), keys.clone()), ("counts".into(), keys)]
    }

    /// The first window end or end of lateness after the watermark, among
    /// panes with data (a row at time `t` only opens windows ending after
    /// `t`); early firings of a continuous trigger; processing-time windows
    /// by the clock.
    fn watermark_timers(&self) -> Option<crate::WatermarkTimers> {
        let Some(ts) = self.ts_index else {
            return Some(crate::WatermarkTimers {
                event: None,
                processing: self.next_processing_timer(),
                rowtime: vec![None],
            });
        };
        let wm = self.watermark;
        let mut event = self
            .panes
            .keys()
            .map(|&p| {
                let cleanup = self
                    .assigner
                    .last_window_end_of_pane(p)
                    .saturating_sub(1)
                    .saturating_add(self.lateness);
                self.assigner
                    .windows_of_pane(p)
                    .into_iter()
                    .map(|(_, end)| end.saturating_sub(1))
                    .filter(|&last| last > wm)
                    .fold(cleanup, i64::min)
            })
            .min();
        if let Trigger::ContinuousEventTime { interval } = self.trigger
            && !self.panes.is_empty()
        {
            let next = next_multiple(wm, interval);
            event = Some(event.map_or(next, |e| e.min(next)));
        }
        Some(crate::WatermarkTimers {
            event,
            processing: self.next_processing_timer(),
            rowtime: vec![Some(ts)],
        })
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("windows_fired".into(), self.windows_fired),
            ("num_late_records_dropped".into(), self.late.dropped()),
            ("late_updates".into(), self.late_updates),
            ("early_firings".into(), self.early_firings),
            ("state_bytes_max".into(), self.state_bytes_max),
            ("state_bytes".into(), self.state_bytes() as u64),
        ]
    }
}

impl WindowAggregateOperator {
    /// The rows of a restored pane table whose keys fall in this subtask's
    /// key groups (all of them unless the job was rescaled).
    fn own_key_groups(&self, batch: RecordBatch, keys: usize) -> Result<RecordBatch> {
        self.filter.keep(batch, &(1..1 + keys).collect::<Vec<_>>())
    }

    /// Time (the watermark, or the clock for processing-time windows)
    /// advanced to `time`: fire the windows it completes, drop expired panes.
    fn advance(&mut self, time: i64, out: &mut dyn Output) -> Result<()> {
        let previous = self.watermark;
        if time <= previous {
            return Ok(());
        }
        self.watermark = time;
        // Sampled at every watermark, before firing: the peak a window holds.
        self.state_bytes_max = self.state_bytes_max.max(self.state_bytes() as u64);
        if matches!(self.assigner, WindowAssigner::Tumbling { .. })
            && self.lateness == 0
            && self.trigger == Trigger::OnWindowEnd
        {
            return self.fire_tumbling(out);
        }
        if matches!(self.trigger, Trigger::Count { .. }) {
            // A count trigger never fires at the window end; state goes.
            let expired: Vec<i64> = self
                .panes
                .keys()
                .copied()
                .filter(|&p| self.pane_expired(p))
                .collect();
            for p in expired {
                self.panes.remove(&p);
                self.counts.remove(&p);
            }
            return Ok(());
        }
        // Windows whose last millisecond the watermark has just passed, and
        // that hold data.
        let mut due = BTreeSet::new();
        for &p in self.panes.range(..=self.watermark).map(|(p, _)| p) {
            for (start, end) in self.assigner.windows_of_pane(p) {
                let last = end.saturating_sub(1);
                if last > previous && last <= self.watermark {
                    due.insert((end, start));
                }
            }
        }
        for (end, start) in due {
            if let Some((keys, values)) = self.window_result(start, end, None)? {
                self.windows_fired += 1;
                self.emit(start, end, keys, values, false, out)?;
            }
        }
        let expired: Vec<i64> = self
            .panes
            .keys()
            .copied()
            .filter(|&p| self.pane_expired(p))
            .collect();
        for p in expired {
            self.panes.remove(&p);
        }
        if let Trigger::ContinuousEventTime { interval } = self.trigger
            && self.ts_index.is_some()
            && time.div_euclid(interval) > previous.div_euclid(interval)
        {
            self.fire_early(time, out)?;
        }
        Ok(())
    }

    /// Early firing: every window with data that is still open after `time`
    /// emits its current result (and, purging, forgets it).
    fn fire_early(&mut self, time: i64, out: &mut dyn Output) -> Result<()> {
        let mut open = BTreeSet::new();
        for &p in self.panes.keys() {
            for (start, end) in self.assigner.windows_of_pane(p) {
                if end.saturating_sub(1) > time {
                    open.insert((end, start));
                }
            }
        }
        for (end, start) in open {
            if let Some((keys, values)) = self.window_result(start, end, None)? {
                self.early_firings += 1;
                self.emit(start, end, keys, values, false, out)?;
                if self.purge {
                    // Tumbling only (checked when the job is built): the
                    // window is its single pane.
                    self.panes.remove(&start);
                }
            }
        }
        Ok(())
    }
}

/// The first multiple of `interval` after `t`.
fn next_multiple(t: i64, interval: i64) -> i64 {
    (t.div_euclid(interval) + 1).saturating_mul(interval)
}

#[cfg(test)]
mod split_tests {
    use super::*;
    use arrow::array::Int64Array;
    use proptest::prelude::*;

    proptest! {
        /// The order arrow's sort of (id, value, arrival) columns gives,
        /// ties included.
        #[test]
        fn partition_order_is_lexsorts(rows in proptest::collection::vec((0usize..5, -3i64..3), 0..200)) {
            let (ids, then): (Vec<usize>, Vec<i64>) = rows.into_iter().unzip();
            let column = |values: ArrayRef| arrow::compute::SortColumn { values, options: None };
            let want = arrow::compute::lexsort_to_indices(
                &[
                    column(Arc::new(arrow::array::UInt64Array::from_iter_values(ids.iter().map(|&i| i as u64)))),
                    column(Arc::new(Int64Array::from(then.clone()))),
                    column(Arc::new(UInt32Array::from_iter_values(0..ids.len() as u32))),
                ],
                None,
            )
            .unwrap();
            prop_assert_eq!(partition_order(&ids, &then), want);
        }
    }

    /// Each value's rows, in arrival order, values in increasing order —
    /// with few values (filtered) and many (sorted once).
    #[test]
    fn split_by_gives_each_values_rows_in_arrival_order() {
        for values in [1i64, 3, 4, 5, 17] {
            let keys: Vec<i64> = (0..200).map(|i| (i * 7 % values) * 10 - 30).collect();
            let rows = Int64Array::from_iter_values(0..200);
            let batch = RecordBatch::try_from_iter([("row", Arc::new(rows) as ArrayRef)]).unwrap();
            let mut seen: Vec<(i64, Vec<i64>)> = Vec::new();
            split_by(&batch, &keys, |value, part| {
                let rows = part.column(0).as_primitive::<arrow::datatypes::Int64Type>();
                seen.push((value, rows.values().to_vec()));
                Ok::<_, arrow::error::ArrowError>(())
            })
            .unwrap();
            let mut expected: Vec<(i64, Vec<i64>)> = Vec::new();
            let mut distinct = keys.clone();
            distinct.sort();
            distinct.dedup();
            for d in distinct {
                let rows = (0..200).filter(|&r| keys[r as usize] == d).collect();
                expected.push((d, rows));
            }
            assert_eq!(seen, expected, "{values} values");
        }
    }

    /// Splitting 65 536 rows over 8, 64 and 1 024 panes: one filter per
    /// pane (the way before) against `split_by`. Prints figures:
    /// `cargo test --release -p weir-operators --lib split_by_speed --
    /// --ignored --nocapture`.
    #[test]
    #[ignore]
    fn split_by_speed() {
        let n = 65_536;
        for panes in [8i64, 64, 1024] {
            let keys: Vec<i64> = (0..n as i64).map(|i| (i * 2_654_435_761) % panes).collect();
            let batch = RecordBatch::try_from_iter([
                (
                    "a",
                    Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
                ),
                (
                    "b",
                    Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef,
                ),
            ])
            .unwrap();
            let rounds = 20;
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                let mut distinct = keys.clone();
                distinct.sort_unstable();
                distinct.dedup();
                for d in distinct {
                    let mask =
                        BooleanArray::new(BooleanBuffer::collect_bool(n, |i| keys[i] == d), None);
                    std::hint::black_box(filter_record_batch(&batch, &mask).unwrap());
                }
            }
            let filtering = start.elapsed() / rounds;
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                split_by(&batch, &keys, |_, part| {
                    std::hint::black_box(part);
                    Ok::<_, arrow::error::ArrowError>(())
                })
                .unwrap();
            }
            let grouping = start.elapsed() / rounds;
            println!(
                "65 536 rows over {panes} panes: a filter per pane {filtering:?}, split_by {grouping:?} ({:.1}x)",
                filtering.as_secs_f64() / grouping.as_secs_f64()
            );
        }
    }
}
