//! Keyed event-time windows: tumbling, sliding and cumulating.
//!
//! Records are aggregated once, into the aligned *pane* that contains them
//! (the window itself for tumbling windows, `gcd(size, slide)` for sliding
//! windows, `step` for cumulating windows). A pane is a DataFusion
//! [`GroupValues`] table mapping keys to dense group ids plus one
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

use arrow::array::{ArrayRef, AsArray, BooleanArray, TimestampMillisecondArray};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{filter, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use datafusion_common::ScalarValue;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion_physical_expr::expressions::{Column, Literal, cast};
use datafusion_physical_expr::{GroupsAccumulatorAdapter, PhysicalSortExpr};
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::message::Watermark;
use weir_core::spec::WindowAggregateSpec;
use weir_core::time::{Trigger, WindowAssigner, tumbling_window_start};
use weir_core::{Result, WeirError};

use crate::process::now_ms;
use crate::{LateRecords, Operator, OperatorContext, Output, StateTable};

/// Keys and accumulators of one set of groups.
pub(crate) struct Accumulation {
    pub(crate) groups: Box<dyn GroupValues>,
    pub(crate) accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

/// The aggregates of a window operator: functions, their (coerced) argument
/// expressions and the key schema. Shared by the pane and session operators.
pub(crate) struct Aggregates {
    pub(crate) key_indices: Vec<usize>,
    pub(crate) key_schema: SchemaRef,
    pub(crate) functions: Vec<Arc<AggregateFunctionExpr>>,
    /// Arguments of each function: the value, then (ordered functions) the
    /// event time they are ordered by.
    pub(crate) arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
}

impl Aggregates {
    pub(crate) fn try_new(name: &str, spec: &WindowAggregateSpec) -> Result<Self> {
        Self::build(
            name,
            &spec.keys,
            &spec.aggregates,
            &spec.input_schema,
            Some(spec.rowtime.as_deref()),
        )
    }

    /// The aggregates over `input` grouped by `keys`. `rowtime`: `Some` when
    /// FIRST_VALUE / LAST_VALUE follow event time (then it must name the
    /// column), `None` when they follow arrival order.
    pub(crate) fn build(
        name: &str,
        keys: &[String],
        aggregates: &[weir_core::spec::AggregateSpec],
        input: &SchemaRef,
        rowtime: Option<Option<&str>>,
    ) -> Result<Self> {
        let key_indices = crate::column_indices(input, keys)?;
        // A non-keyed (all-window) aggregation groups by one constant.
        let key_schema = if key_indices.is_empty() {
            Arc::new(arrow::datatypes::Schema::new(vec![
                arrow::datatypes::Field::new("__all", DataType::Int8, false),
            ]))
        } else {
            Arc::new(input.project(&key_indices)?)
        };
        let mut functions = Vec::new();
        let mut arguments = Vec::new();
        for a in aggregates {
            let mut arg: Arc<dyn PhysicalExpr> = match &a.column {
                Some(c) => Arc::new(Column::new(c, input.index_of(c)?)),
                None => Arc::new(Literal::new(ScalarValue::Int64(Some(1)))),
            };
            let coerced = a.argument_field(input)?;
            if arg.data_type(input)? != *coerced.data_type() {
                arg = cast(arg, input, coerced.data_type().clone())?;
            }
            let mut builder = AggregateExprBuilder::new(a.function.udaf(), vec![Arc::clone(&arg)])
                .schema(Arc::clone(input))
                .alias(a.alias.clone())
                .with_distinct(a.function.is_distinct());
            let mut args = vec![arg];
            if let (true, Some(rowtime)) = (a.function.is_ordered(), rowtime) {
                // FIRST_VALUE / LAST_VALUE follow event time, not arrival order.
                let rowtime = rowtime.ok_or_else(|| {
                    WeirError::plan(format!("{name}: {a} needs an event-time window"))
                })?;
                let ts: Arc<dyn PhysicalExpr> =
                    Arc::new(Column::new(rowtime, input.index_of(rowtime)?));
                builder = builder.order_by(vec![PhysicalSortExpr::new_default(Arc::clone(&ts))]);
                args.push(ts);
            }
            let expr = builder
                .build()
                .map_err(|e| WeirError::plan(format!("{name}: aggregate {a}: {e}")))?;
            functions.push(Arc::new(expr));
            arguments.push(args);
        }
        Ok(Self {
            key_indices,
            key_schema,
            functions,
            arguments,
        })
    }

    pub(crate) fn new_accumulation(&self) -> Result<Accumulation> {
        Ok(Accumulation {
            groups: new_group_values(Arc::clone(&self.key_schema), &GroupOrdering::None)?,
            accumulators: self
                .functions
                .iter()
                .map(
                    |a| -> datafusion_common::Result<Box<dyn GroupsAccumulator>> {
                        if a.groups_accumulator_supported() {
                            a.create_groups_accumulator()
                        } else {
                            // Any aggregate works: one row accumulator per group.
                            let f = Arc::clone(a);
                            Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                                f.create_accumulator()
                            })))
                        }
                    },
                )
                .collect::<datafusion_common::Result<Vec<_>>>()?,
        })
    }

    pub(crate) fn keys(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        if self.key_indices.is_empty() {
            return vec![Arc::new(arrow::array::Int8Array::from(vec![
                0i8;
                batch
                    .num_rows()
            ]))];
        }
        self.key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect()
    }

    /// The schema of a pane snapshot: `pane_start`, the key columns, then
    /// every accumulator's intermediate state columns, named `a{i}_{field}`.
    pub(crate) fn snapshot_schema(&self) -> Result<SchemaRef> {
        let mut fields = vec![Field::new("pane_start", DataType::Int64, false)];
        fields.extend(self.key_schema.fields().iter().map(|f| f.as_ref().clone()));
        for (i, f) in self.functions.iter().enumerate() {
            for state in f.state_fields()? {
                fields.push(
                    state
                        .as_ref()
                        .clone()
                        .with_name(format!("a{i}_{}", state.name()))
                        .with_nullable(true),
                );
            }
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// The schema of a session snapshot: the key columns, `session_start`,
    /// `session_end`, `fired`, then the accumulators' state columns.
    pub(crate) fn session_snapshot_schema(&self) -> Result<SchemaRef> {
        let panes = self.snapshot_schema()?;
        let keys = self.key_schema.fields().len();
        let mut fields: Vec<Field> = panes.fields()[1..1 + keys]
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("session_start", DataType::Int64, false));
        fields.push(Field::new("session_end", DataType::Int64, false));
        fields.push(Field::new("fired", DataType::Boolean, false));
        fields.extend(
            panes.fields()[1 + keys..]
                .iter()
                .map(|f| f.as_ref().clone()),
        );
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Number of state columns of each accumulator.
    pub(crate) fn state_widths(&self) -> Result<Vec<usize>> {
        self.functions
            .iter()
            .map(|f| Ok(f.state_fields()?.len()))
            .collect()
    }

    /// Schema of the grouping key (a constant for all-windows).
    pub(crate) fn key_schema(&self) -> SchemaRef {
        Arc::clone(&self.key_schema)
    }

    /// Key columns as they appear in the output (none for all-windows).
    pub(crate) fn output_keys(&self, keys: Vec<ArrayRef>) -> Vec<ArrayRef> {
        if self.key_indices.is_empty() {
            vec![]
        } else {
            keys
        }
    }

    /// Update `accumulators` with the rows of `batch` assigned to `group_ids`.
    pub(crate) fn update(
        &self,
        accumulators: &mut [Box<dyn GroupsAccumulator>],
        batch: &RecordBatch,
        group_ids: &[usize],
        total_groups: usize,
    ) -> Result<()> {
        for (a, args) in accumulators.iter_mut().zip(&self.arguments) {
            let values = args
                .iter()
                .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
                .collect::<Result<Vec<_>>>()?;
            a.update_batch(&values, group_ids, None, total_groups)?;
        }
        Ok(())
    }
}

/// The rows of `waiting` that the watermark `w` has passed (event-time
/// column `at`, named `name`), taken out as one batch; the others stay.
pub(crate) fn take_ready(
    waiting: &mut Vec<RecordBatch>,
    schema: &SchemaRef,
    (at, name): (usize, &str),
    w: i64,
) -> Result<Option<RecordBatch>> {
    if waiting.is_empty() {
        return Ok(None);
    }
    let all = arrow::compute::concat_batches(schema, waiting.iter())?;
    waiting.clear();
    let ts = timestamps(all.column(at), name)?;
    let ready: BooleanArray = ts.iter().map(|&t| Some(t <= w)).collect();
    let rest = arrow::compute::filter_record_batch(&all, &arrow::compute::not(&ready)?)?;
    if rest.num_rows() > 0 {
        waiting.push(rest);
    }
    let ready = arrow::compute::filter_record_batch(&all, &ready)?;
    Ok((ready.num_rows() > 0).then_some(ready))
}

/// The rows of `batch` (times `ts`) after the watermark `watermark`; the
/// others are late, counted into `dropped`.
pub(crate) fn drop_late(
    batch: RecordBatch,
    ts: &[i64],
    watermark: i64,
    dropped: &mut u64,
) -> Result<RecordBatch> {
    let late = ts.iter().filter(|&&t| t <= watermark).count();
    if late == 0 {
        return Ok(batch);
    }
    *dropped += late as u64;
    let keep: BooleanArray = ts.iter().map(|&t| Some(t > watermark)).collect();
    Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
}

/// Table `meta`: an operator's event-time clock (`watermark`) at a barrier.
pub(crate) fn meta_table(watermark: i64) -> Result<StateTable> {
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "watermark",
            DataType::Int64,
            false,
        )])),
        vec![Arc::new(arrow::array::Int64Array::from(vec![watermark]))],
    )?;
    Ok(StateTable::new("meta", batch))
}

/// Fold a restored `meta` table into `watermark`: the smallest of them.
pub(crate) fn restore_meta(
    name: &str,
    batch: &RecordBatch,
    watermark: &mut Option<i64>,
) -> Result<()> {
    let w = batch
        .column_by_name("watermark")
        .and_then(|c| c.as_primitive_opt::<arrow::datatypes::Int64Type>())
        .ok_or_else(|| WeirError::Execution(format!("{name}: malformed meta state")))?;
    for v in w.values() {
        *watermark = Some(watermark.map_or(*v, |m| m.min(*v)));
    }
    Ok(())
}

/// The rows of `batch` whose key (columns `keys`) hashes into `range`.
pub(crate) fn keep_key_groups(
    batch: RecordBatch,
    keys: &[usize],
    range: weir_core::keys::KeyGroupRange,
    max_parallelism: u32,
) -> Result<RecordBatch> {
    let mut groups = Vec::new();
    let columns: Vec<ArrayRef> = keys.iter().map(|&k| Arc::clone(batch.column(k))).collect();
    weir_core::keys::key_groups(&columns, max_parallelism, &mut Vec::new(), &mut groups)?;
    let mask: BooleanArray = groups.iter().map(|g| Some(range.contains(*g))).collect();
    Ok(filter_record_batch(&batch, &mask)?)
}

/// Move groups between accumulators: merge the intermediate `states` of
/// old group `g` (one array per state column, one row per old group) into
/// `into` at group `target[g]`, skipping groups whose target is `None`.
/// Several old groups may share a target (they are merged).
pub(crate) fn regroup(
    states: &[Vec<ArrayRef>],
    target: &[Option<usize>],
    into: &mut [Box<dyn GroupsAccumulator>],
    total_groups: usize,
) -> Result<()> {
    let mask: BooleanArray = target.iter().map(|t| Some(t.is_some())).collect();
    let ids: Vec<usize> = target.iter().flatten().copied().collect();
    for (a, state) in into.iter_mut().zip(states) {
        let state = state
            .iter()
            .map(|s| filter(s.as_ref(), &mask))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        a.merge_batch(&state, &ids, total_groups)?;
    }
    Ok(())
}

/// Drain the intermediate state of every group of `accumulators`.
pub(crate) fn drain_states(
    accumulators: &mut [Box<dyn GroupsAccumulator>],
) -> Result<Vec<Vec<ArrayRef>>> {
    Ok(accumulators
        .iter_mut()
        .map(|a| a.state(EmitTo::All))
        .collect::<datafusion_common::Result<Vec<_>>>()?)
}

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
    /// Count trigger: per pane, the keys seen and how many records each got.
    counts: BTreeMap<i64, (Box<dyn GroupValues>, Vec<u64>)>,
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
        })
    }

    /// Number of panes currently holding state.
    pub fn open_panes(&self) -> usize {
        self.panes.len()
    }

    /// Bytes held by the panes (group tables, accumulators, frozen state).
    pub fn state_bytes(&self) -> usize {
        self.panes
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
            .sum()
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
        acc.groups
            .intern(&self.aggregates.keys(batch), &mut self.group_ids)?;
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

impl WindowAggregateOperator {
    /// Count trigger (tumbling windows): split `part` after every record
    /// that brings its key's count in the window to a multiple of `count`,
    /// and fire that key's window there — exactly where Flink's per-record
    /// trigger fires, with the result as of that record.
    fn process_counted(
        &mut self,
        pane: i64,
        part: &RecordBatch,
        count: u64,
        out: &mut dyn Output,
    ) -> Result<()> {
        let keys = self.aggregates.keys(part);
        if !self.counts.contains_key(&pane) {
            let table = new_group_values(self.aggregates.key_schema(), &GroupOrdering::None)?;
            self.counts.insert(pane, (table, Vec::new()));
        }
        let (table, counts) = self.counts.get_mut(&pane).expect("inserted above");
        let mut ids = Vec::new();
        table.intern(&keys, &mut ids)?;
        counts.resize(table.len(), 0);
        let mut cuts = Vec::new();
        for (row, &id) in ids.iter().enumerate() {
            counts[id] += 1;
            if counts[id] % count == 0 {
                cuts.push(row);
            }
        }
        let mut from = 0;
        let end = pane.saturating_add(self.pane_size);
        for row in cuts {
            self.accumulate(pane, &part.slice(from, row + 1 - from))?;
            from = row + 1;
            let key: Vec<ArrayRef> = keys.iter().map(|k| k.slice(row, 1)).collect();
            if let Some((k, v)) = self.window_result(pane, end, Some(&key))? {
                self.windows_fired += 1;
                self.emit(pane, end, k, v, false, out)?;
            }
            if self.purge {
                self.forget_keys(pane, &key)?;
            }
        }
        if from < part.num_rows() {
            self.accumulate(pane, &part.slice(from, part.num_rows() - from))?;
        }
        Ok(())
    }

    /// Drop the state of `keys` in the pane at `start` (purging triggers).
    fn forget_keys(&mut self, start: i64, keys: &[ArrayRef]) -> Result<()> {
        self.freeze_range(start, start.saturating_add(1))?;
        let Some(pane) = self.panes.get_mut(&start) else {
            return Ok(());
        };
        let mut kept = Vec::new();
        for part in pane.frozen.drain(..) {
            let mut table = new_group_values(self.aggregates.key_schema(), &GroupOrdering::None)?;
            let mut ids = Vec::new();
            table.intern(keys, &mut ids)?;
            let forget = table.len();
            table.intern(&part.keys, &mut ids)?;
            let keep = BooleanArray::new(
                BooleanBuffer::collect_bool(ids.len(), |i| ids[i] >= forget),
                None,
            );
            if keep.true_count() == 0 {
                continue;
            }
            let cut = |arrays: &[ArrayRef]| -> Result<Vec<ArrayRef>> {
                Ok(arrays
                    .iter()
                    .map(|a| filter(a.as_ref(), &keep))
                    .collect::<std::result::Result<Vec<_>, _>>()?)
            };
            kept.push(Frozen {
                keys: cut(&part.keys)?,
                states: part
                    .states
                    .iter()
                    .map(|s| cut(s))
                    .collect::<Result<Vec<_>>>()?,
            });
        }
        pane.frozen = kept;
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
    let mut distinct = keys.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    for d in distinct {
        let mask = BooleanArray::new(
            BooleanBuffer::collect_bool(keys.len(), |i| keys[i] == d),
            None,
        );
        let part = filter_record_batch(batch, &mask)?;
        f(d, &part)?;
    }
    Ok(())
}

impl Operator for WindowAggregateOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
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

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
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
        let counts = self.counts_table()?;
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
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let widths = self.aggregates.state_widths()?;
        let keys = self.aggregates.key_schema().fields().len();
        let mut watermark = None::<i64>;
        for table in tables {
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
        Ok(())
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
    /// The count trigger's per-pane key counts as a `counts` table.
    fn counts_table(&mut self) -> Result<Option<StateTable>> {
        if self.counts.is_empty() {
            return Ok(None);
        }
        let key_schema = self.aggregates.key_schema();
        let mut fields = vec![Field::new("pane_start", DataType::Int64, false)];
        fields.extend(key_schema.fields().iter().map(|f| f.as_ref().clone()));
        fields.push(Field::new("count", DataType::UInt64, false));
        let schema = Arc::new(Schema::new(fields));
        let mut parts = Vec::new();
        for (&pane, (table, counts)) in &mut self.counts {
            // Reading the keys empties the table: intern them again, in
            // order, so every key keeps its id.
            let keys = table.emit(EmitTo::All)?;
            let mut ids = Vec::new();
            table.intern(&keys, &mut ids)?;
            let rows = counts.len();
            let mut columns: Vec<ArrayRef> =
                vec![Arc::new(arrow::array::Int64Array::from(vec![pane; rows]))];
            columns.extend(keys);
            columns.push(Arc::new(arrow::array::UInt64Array::from(counts.clone())));
            parts.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
        }
        let batch = arrow::compute::concat_batches(&schema, &parts)?;
        let keys = 1..1 + key_schema.fields().len();
        Ok(Some(StateTable::new("counts", batch).keyed(keys)))
    }

    fn restore_counts(&mut self, batch: RecordBatch, keys: usize) -> Result<()> {
        let batch = self.own_key_groups(batch, keys)?;
        let malformed = || WeirError::Execution(format!("{}: malformed count state", self.name));
        let starts = batch
            .column(0)
            .as_primitive_opt::<arrow::datatypes::Int64Type>()
            .ok_or_else(malformed)?
            .values()
            .to_vec();
        let key_schema = self.aggregates.key_schema();
        split_by(&batch, &starts, |pane, part| {
            let counts = part
                .column(1 + keys)
                .as_primitive_opt::<arrow::datatypes::UInt64Type>()
                .ok_or_else(malformed)?;
            let (table, pane_counts) = match self.counts.entry(pane) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert((
                    new_group_values(Arc::clone(&key_schema), &GroupOrdering::None)?,
                    Vec::new(),
                )),
            };
            let mut ids = Vec::new();
            table.intern(&part.columns()[1..1 + keys], &mut ids)?;
            pane_counts.resize(table.len(), 0);
            for (row, &id) in ids.iter().enumerate() {
                pane_counts[id] = counts.value(row);
            }
            Ok::<_, WeirError>(())
        })
    }

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
