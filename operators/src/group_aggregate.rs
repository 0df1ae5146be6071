//! The updating aggregation: SQL's `GROUP BY` without a window.
//!
//! Every key's accumulator state lives in a columnar store (one row per key:
//! the key columns, then each aggregate's intermediate state columns as
//! DataFusion's `GroupsAccumulator::state` gives them). A batch is handled
//! whole, with no per-row dispatch:
//!
//! 1. the batch is aggregated on its own (a fresh [`Accumulation`]);
//! 2. its keys are interned into the key index, which says which keys are
//!    new and where the old state of the others is;
//! 3. old states are gathered (`interleave`), evaluated for the old results,
//!    and merged with the batch's partial states into the new states, which
//!    are evaluated for the new results and written back to the store;
//! 4. out goes the changelog of the batch: `-U` old / `+U` new for changed
//!    keys (unchanged results are not re-emitted, as in Flink), `+I` for new
//!    keys.
//!
//! In batch mode nothing is emitted until the input ends; then every key's
//! final row, once.
//!
//! Over an insert-only input, `COUNT(DISTINCT …)` keeps a hash set per key
//! across batches instead ([`crate::distinct_sets`]): its list state would
//! otherwise be re-read whole for every batch touching the key.
//!
//! Snapshots hold the store (`groups`: key columns, then state columns
//! `a{i}_{field}`), keyed by the key columns, so a restore at another
//! parallelism keeps the keys of its own key groups.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_plan::aggregates::group_values::GroupValues;
use weir_core::spec::{AggregatePhase, GroupAggregateSpec, RowKind};
use weir_core::{Result, WeirError};

use crate::distinct_sets::{DistinctCounts, Member};
use crate::memory::StateReservation;
use crate::process::now_ms;
use crate::row_store::RowStore;
use crate::window::{Accumulation, Aggregates};
use crate::{KeyGroupFilter, Operator, OperatorContext, Output, StateTable};

/// The state table of input rows held back (the disk backend's pending
/// rows), processed on restore before the next input.
pub(crate) const PENDING_TABLE: &str = "pending";

/// The updating aggregation operator.
pub struct GroupAggregateOperator {
    name: String,
    /// The aggregates whose states the store holds (all but the
    /// incremental distinct counts).
    aggregates: Aggregates,
    /// Every aggregate, in the spec's order: the snapshot's layout.
    all: Aggregates,
    /// Distinct counts kept as sets (streaming over insert-only input).
    distinct: DistinctCounts,
    /// Key → dense id.
    index: Box<dyn GroupValues>,
    /// Per id: key columns, then state columns.
    store: RowStore,
    key_width: usize,
    state_widths: Vec<usize>,
    /// Per stored aggregate: its value is its state column
    /// ([`Aggregates::values_are_states`]).
    values_are_states: Vec<bool>,
    schema: SchemaRef,
    changelog: bool,
    key_groups: KeyGroupFilter,
    batch_size: usize,
    /// The input is a changelog: its retractions are subtracted, and a
    /// hidden last aggregate counts each key's rows.
    retractions: bool,
    /// Upsert mode: a changed key emits `+U` without `-U`.
    upsert: bool,
    /// Per id: whether the key has rows (always, without retractions) and
    /// is not past the state TTL. A key that is not alive starts afresh.
    alive: Vec<bool>,
    /// How many ids are alive: when the dead outnumber them, the key
    /// index and the store are rebuilt without the dead.
    live: usize,
    /// `table.exec.state.ttl` (ms): a key not written for this long is
    /// forgotten, without output, as Flink's state TTL.
    ttl: Option<i64>,
    /// Per id, when it was last written (ms; with a TTL only).
    written: Vec<i64>,
    last_sweep: i64,
    /// The state's share of the managed memory budget.
    memory: StateReservation,
    /// Restored input rows whose changes were never sent (the disk
    /// backend's pending rows): processed before the next input.
    replay: Vec<RecordBatch>,
    input_schema: SchemaRef,
    /// Batch mode over an insert-only input: one accumulation updated in
    /// place, evaluated once at the end (no per-batch results to compare).
    direct: Option<Accumulation>,
    /// The global phase of a two-phase aggregation: the input is the key
    /// columns then intermediate states, merged into `direct`.
    global: bool,
}

/// Per row, whether `before` and `after` (the same columns) differ in any
/// column, NULL equal to NULL: a `distinct` kernel per column, or for
/// nested types, whose columns it does not compare, the rows' encodings.
fn differs(before: &[ArrayRef], after: &[ArrayRef]) -> Result<Vec<bool>> {
    let rows = before.first().map_or(0, |c| c.len());
    if before.iter().any(|c| c.data_type().is_nested()) {
        let fields: Vec<SortField> = before
            .iter()
            .map(|v| SortField::new(v.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let (b, a) = (
            converter.convert_columns(before)?,
            converter.convert_columns(after)?,
        );
        return Ok((0..rows).map(|i| b.row(i) != a.row(i)).collect());
    }
    let mut any = arrow::array::BooleanArray::from(vec![false; rows]);
    for (b, a) in before.iter().zip(after) {
        let d = arrow::compute::kernels::cmp::distinct(b, a)?;
        any = arrow::compute::or(&any, &d)?;
    }
    Ok(any.values().iter().collect())
}

impl GroupAggregateOperator {
    /// The operator of one subtask.
    pub fn try_new(
        name: String,
        spec: &GroupAggregateSpec,
        schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let mut list = spec.aggregates.clone();
        if spec.retractions {
            list.push(weir_core::spec::AggregateSpec::count_star().alias("__rows"));
        }
        let mut distinct = vec![];
        let mut stored = vec![];
        for (i, a) in list.iter().enumerate() {
            match (&a.function, &a.column) {
                (weir_core::spec::AggregateFunction::CountDistinct, Some(c))
                    if spec.changelog && !spec.retractions =>
                {
                    let column = spec.input_schema.index_of(c)?;
                    let ty = spec.input_schema.field(column).data_type();
                    let filter = a.filter_index(&spec.input_schema)?;
                    let member = Member {
                        position: i,
                        filter,
                    };
                    distinct.push((member, column, ty.clone()));
                }
                _ => stored.push(a.clone()),
            }
        }
        let distinct = DistinctCounts::new(distinct)?;
        let rows = spec.rows_schema();
        let all = Aggregates::build(&name, &spec.keys, &list, rows, None)?;
        let aggregates = Aggregates::build(&name, &spec.keys, &stored, rows, None)?;
        let global = matches!(spec.phase, AggregatePhase::Global { .. });
        if global && (spec.changelog || spec.retractions || !distinct.is_empty()) {
            return Err(WeirError::plan(format!(
                "{name}: a global aggregation phase runs in batch mode over an insert-only input"
            )));
        }
        let key_schema = aggregates.key_schema();
        let snapshot = aggregates.snapshot_schema()?;
        // The pane snapshot schema minus its `pane_start`: keys, then states.
        let store_schema = Arc::new(Schema::new(
            snapshot.fields()[1..]
                .iter()
                .map(|f| f.as_ref().clone())
                .collect::<Vec<Field>>(),
        ));
        let direct = (!spec.changelog && !spec.retractions)
            .then(|| aggregates.new_lasting_accumulation())
            .transpose()?;
        Ok(Self {
            index: crate::key_table::new_table(&key_schema)?,
            store: RowStore::new(store_schema),
            key_width: key_schema.fields().len(),
            state_widths: aggregates.state_widths()?,
            values_are_states: aggregates.values_are_states()?,
            aggregates,
            all,
            distinct,
            schema,
            changelog: spec.changelog,
            key_groups: KeyGroupFilter::new(ctx),
            batch_size: ctx.config.batch_size.max(1),
            retractions: spec.retractions,
            upsert: spec.upsert,
            alive: vec![],
            live: 0,
            ttl: ctx
                .config
                .state
                .ttl
                .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            written: vec![],
            last_sweep: now_ms(),
            memory: ctx.memory.reserve(&name, false),
            replay: vec![],
            input_schema: Arc::clone(&spec.input_schema),
            direct,
            global,
            name,
        })
    }

    /// Whether each of the `n` groups of `values` (evaluated) has rows left.
    fn has_rows(&self, values: &[ArrayRef], n: usize) -> Vec<bool> {
        match (self.retractions, values.last()) {
            (true, Some(rows)) => rows
                .as_primitive::<arrow::datatypes::Int64Type>()
                .iter()
                .map(|n| n.unwrap_or(0) > 0)
                .collect(),
            _ => vec![true; n],
        }
    }

    /// The stored aggregates' values and the distinct counts, in the
    /// spec's order.
    fn in_order(&self, stored: Vec<ArrayRef>, distinct: Vec<ArrayRef>) -> Vec<ArrayRef> {
        if distinct.is_empty() {
            return stored;
        }
        let mut stored = stored.into_iter();
        let mut distinct = distinct.into_iter();
        let mut next = self.distinct.positions().peekable();
        (0..stored.len() + distinct.len())
            .filter_map(|p| {
                if next.peek() == Some(&p) {
                    next.next();
                    distinct.next()
                } else {
                    stored.next()
                }
            })
            .collect()
    }

    /// The batch's rows split into additions and (for a changelog input)
    /// retractions.
    fn parts(&self, batch: &RecordBatch) -> Result<Vec<(RecordBatch, bool)>> {
        if !self.retractions {
            return Ok(vec![(batch.clone(), false)]);
        }
        let adds = weir_core::changelog::additions(weir_core::changelog::row_kinds(batch)?);
        let subs = arrow::compute::not(&adds)?;
        Ok(vec![
            (arrow::compute::filter_record_batch(batch, &adds)?, false),
            (arrow::compute::filter_record_batch(batch, &subs)?, true),
        ])
    }

    /// Split stored columns into each aggregate's state columns.
    fn states_of<'a>(&self, columns: &'a [ArrayRef]) -> Vec<&'a [ArrayRef]> {
        self.states_from(&columns[self.key_width..])
    }

    /// Split state columns (without the keys) into each aggregate's.
    fn states_from<'a>(&self, columns: &'a [ArrayRef]) -> Vec<&'a [ArrayRef]> {
        let mut at = 0;
        self.state_widths
            .iter()
            .map(|&w| {
                let s = &columns[at..at + w];
                at += w;
                s
            })
            .collect()
    }

    /// Final values of groups given their state columns (one row each):
    /// the state itself where it is the value, else the state merged
    /// into a fresh accumulator and evaluated.
    fn evaluate(&self, states: &[&[ArrayRef]], rows: usize) -> Result<Vec<ArrayRef>> {
        let mut accumulators = None;
        let mut ids = vec![];
        let mut out = Vec::with_capacity(states.len());
        for (i, s) in states.iter().enumerate() {
            if self.values_are_states[i] {
                out.push(Arc::clone(&s[0]));
                continue;
            }
            let all = match &mut accumulators {
                Some(all) => all,
                None => {
                    ids = (0..rows).collect();
                    accumulators.insert(self.aggregates.new_accumulators()?)
                }
            };
            let a: &mut Box<dyn GroupsAccumulator> = &mut all[i];
            a.merge_batch(s, &ids, rows)?;
            out.push(a.evaluate(EmitTo::All)?);
        }
        Ok(out)
    }

    fn output(
        &self,
        keys: &[ArrayRef],
        values: &[ArrayRef],
        kind: Option<RowKind>,
    ) -> Result<RecordBatch> {
        let rows = keys.first().or(values.first()).map_or(0, |c| c.len());
        let mut columns: Vec<ArrayRef> = self.aggregates.output_keys(keys.to_vec());
        for (v, f) in values
            .iter()
            .zip(self.schema.fields().iter().skip(columns.len()))
        {
            columns.push(if v.data_type() == f.data_type() {
                Arc::clone(v)
            } else {
                arrow::compute::cast(v, f.data_type())?
            });
        }
        if let Some(kind) = kind {
            columns.push(weir_core::changelog::row_kind_repeat(kind, rows));
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    fn accumulate(&mut self, batch: &RecordBatch, now: i64, out: &mut dyn Output) -> Result<()> {
        // 1. The batch on its own (additions, and retractions negated),
        //    each part's keys interned once: (keys, groups, row groups,
        //    states) per part.
        type Part = (Vec<ArrayRef>, usize, Vec<usize>, Vec<Vec<ArrayRef>>);
        let mut done: Vec<Part> = vec![];
        for (rows, negate) in self.parts(batch)? {
            if rows.num_rows() == 0 {
                continue;
            }
            let mut part: Accumulation = self.aggregates.new_accumulation()?;
            let mut ids = Vec::new();
            part.groups.intern(&self.aggregates.keys(&rows), &mut ids)?;
            let n = part.groups.len();
            self.aggregates
                .update(&mut part.accumulators, &rows, &ids, n)?;
            let keys = part.groups.emit(EmitTo::All)?;
            let mut states: Vec<Vec<ArrayRef>> = part
                .accumulators
                .iter_mut()
                .map(|a| a.state(EmitTo::All))
                .collect::<datafusion_common::Result<_>>()?;
            if negate {
                for s in states.iter_mut().flatten() {
                    *s = arrow::compute::kernels::numeric::neg(s)?;
                }
            }
            done.push((keys, n, ids, states));
        }
        // The parts' groups as one: a single part's are already distinct
        // (an insert-only input's batch), others are interned together.
        // Each input row's group (distinct counts only: their input is
        // insert-only, so the batch is one part).
        let mut row_groups: Vec<usize> = vec![];
        let mut partials: Vec<(Vec<usize>, Vec<Vec<ArrayRef>>)> = vec![];
        let (keys, n) = if done.len() == 1 {
            let (keys, n, ids, states) = done.pop().expect("one part");
            row_groups = ids;
            partials.push(((0..n).collect(), states));
            (keys, n)
        } else {
            let mut local = crate::key_table::new_table(&self.aggregates.key_schema())?;
            for (keys, _, ids, states) in done {
                let mut at = Vec::new();
                local.intern(&keys, &mut at)?;
                if !self.distinct.is_empty() {
                    row_groups = ids.iter().map(|&g| at[g]).collect();
                }
                partials.push((at, states));
            }
            let n = local.len();
            (local.emit(EmitTo::All)?, n)
        };
        if n == 0 {
            return Ok(());
        }
        // 2. Which keys are new.
        let known = self.index.len();
        let mut ids = Vec::new();
        self.index.intern(&keys, &mut ids)?;
        // A key known but not alive (all its rows retracted, or past the
        // TTL) starts afresh.
        let was_alive: Vec<bool> = (0..n)
            .map(|r| ids[r] < known && self.alive.get(ids[r]).copied().unwrap_or(false))
            .collect();
        let old_rows: Vec<usize> = (0..n).filter(|&r| was_alive[r]).collect();
        let old_ids: Vec<usize> = old_rows.iter().map(|&r| ids[r]).collect();
        // 3. Old states merged with the batch's.
        // Their states only: the batch has their keys.
        let state_columns: Vec<usize> =
            (self.key_width..self.key_width + self.state_widths.iter().sum::<usize>()).collect();
        let old_columns = self.store.gather_columns(&old_ids, &state_columns)?;
        let old_states = self.states_from(&old_columns);
        let mut merged = self.aggregates.new_accumulation()?;
        let mut new_states: Vec<ArrayRef> = keys.clone();
        for (i, a) in merged.accumulators.iter_mut().enumerate() {
            for (at, states) in &partials {
                a.merge_batch(&states[i], at, n)?;
            }
            if !old_rows.is_empty() {
                a.merge_batch(old_states[i], &old_rows, n)?;
            }
            new_states.extend(a.state(EmitTo::All)?);
        }
        // Distinct counts: the old ones, then the batch's values added
        // (a key that starts afresh forgets its values first).
        let old_distinct: Vec<ArrayRef> = self.distinct.counts(&old_ids);
        if !self.distinct.is_empty() {
            for (r, &id) in ids.iter().enumerate() {
                if !was_alive[r] {
                    self.distinct.clear(id);
                }
            }
            let row_ids: Vec<usize> = row_groups.iter().map(|&g| ids[g]).collect();
            self.distinct.insert(batch, &row_ids)?;
        }
        let new_distinct = self.distinct.counts(&ids);
        let new_values = self.evaluate(&self.states_of(&new_states), n)?;
        let new_values = self.in_order(new_values, new_distinct);
        let alive = self.has_rows(&new_values, n);
        if self.changelog {
            self.emit_changes(
                &keys,
                &new_values,
                &old_rows,
                (&old_states, old_distinct),
                &was_alive,
                &alive,
                out,
            )?;
        }
        let max = ids.iter().max().copied().unwrap_or(0);
        if self.alive.len() <= max {
            self.alive.resize(max + 1, false);
        }
        for (r, &id) in ids.iter().enumerate() {
            self.live = self.live + usize::from(alive[r]) - usize::from(was_alive[r]);
            self.alive[id] = alive[r];
        }
        if self.ttl.is_some() {
            if self.written.len() <= max {
                self.written.resize(max + 1, now);
            }
            for &id in &ids {
                self.written[id] = now;
            }
        }
        self.store.put(&ids, new_states)?;
        if crate::key_table::due(self.index.len(), self.live) {
            self.compact()?;
        }
        self.account()
    }

    /// Take in restored groups (key columns, then state columns) of this
    /// subtask's keys.
    pub(crate) fn restore_groups(&mut self, batch: RecordBatch) -> Result<()> {
        let layout = self.groups_schema()?;
        if batch.schema().fields() != layout.fields() {
            return Err(WeirError::Execution(format!(
                "{}: the checkpoint's groups have columns [{}], this aggregation needs [{}]",
                self.name,
                weir_core::time::column_list(&batch.schema()),
                weir_core::time::column_list(&layout)
            )));
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        // The distinct counts' states go to their sets, the rest to the store.
        let mut columns = batch.columns()[..self.key_width].to_vec();
        let mut distinct_states = vec![];
        let mut at = self.key_width;
        for (p, w) in self.all.state_widths()?.into_iter().enumerate() {
            let state = &batch.columns()[at..at + w];
            if self.distinct.has(p) {
                distinct_states.push(Arc::clone(&state[0]));
            } else {
                columns.extend(state.iter().cloned());
            }
            at += w;
        }
        // Subtasks own disjoint keys: a key seen twice is damaged state.
        let mut ids = Vec::new();
        let known = self.index.len();
        self.index.intern(&columns[..self.key_width], &mut ids)?;
        if ids.iter().any(|&i| i < known) {
            return Err(WeirError::Execution(format!(
                "{}: a key appears twice in the restored state",
                self.name
            )));
        }
        let alive = if self.retractions {
            let values = self.evaluate(&self.states_of(&columns), ids.len())?;
            self.has_rows(&values, ids.len())
        } else {
            vec![true; ids.len()]
        };
        let positions: Vec<usize> = self.distinct.positions().collect();
        for (p, state) in positions.into_iter().zip(&distinct_states) {
            self.distinct.restore(p, state, &ids)?;
        }
        let max = ids.iter().max().copied().unwrap_or(0);
        if self.alive.len() <= max {
            self.alive.resize(max + 1, false);
        }
        for (r, &id) in ids.iter().enumerate() {
            self.alive[id] = alive[r];
            self.live += usize::from(alive[r]);
        }
        // Restored keys' TTL starts over.
        if self.ttl.is_some() {
            self.written.resize(self.alive.len(), now_ms());
        }
        self.store.put(&ids, columns)
    }

    /// The layout of snapshots' groups: key columns, then every
    /// aggregate's state columns in the spec's order.
    fn groups_schema(&self) -> Result<SchemaRef> {
        if self.distinct.is_empty() {
            return Ok(Arc::clone(self.store.schema()));
        }
        let snapshot = self.all.snapshot_schema()?;
        Ok(Arc::new(Schema::new(
            snapshot.fields()[1..]
                .iter()
                .map(|f| f.as_ref().clone())
                .collect::<Vec<Field>>(),
        )))
    }

    /// The live groups (key columns, then state columns), as snapshots
    /// hold them.
    pub(crate) fn groups(&self) -> Result<RecordBatch> {
        let ids: Vec<usize> = (0..self.store.len())
            .filter(|&i| self.alive.get(i).copied().unwrap_or(false))
            .collect();
        let stored = self.store.gather(&ids)?;
        let columns = if self.distinct.is_empty() {
            stored
        } else {
            let mut columns = stored[..self.key_width].to_vec();
            let mut states = self.states_of(&stored).into_iter();
            let mut fresh = self.all.new_accumulation()?.accumulators.into_iter();
            for p in 0..self.all.state_widths()?.len() {
                let accumulator = fresh.next().expect("one accumulator per aggregate");
                if self.distinct.has(p) {
                    columns.extend(self.distinct.state(p, &ids, accumulator)?);
                } else {
                    columns.extend(states.next().into_iter().flatten().cloned());
                }
            }
            columns
        };
        Ok(RecordBatch::try_new_with_options(
            self.groups_schema()?,
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(ids.len())),
        )?)
    }

    /// Bytes of state held in memory.
    pub(crate) fn state_size(&self) -> usize {
        self.store.bytes()
            + self.distinct.bytes()
            + self.index.size()
            + self.alive.len()
            + self.written.len() * std::mem::size_of::<i64>()
    }

    /// Refuse input rows of another layout (a restored pending table).
    pub(crate) fn check_input_layout(&self, batch: &RecordBatch) -> Result<()> {
        if batch.schema().fields() != self.input_schema.fields() {
            return Err(WeirError::Execution(format!(
                "{}: the checkpoint's pending rows have columns [{}], this aggregation reads [{}]",
                self.name,
                weir_core::time::column_list(&batch.schema()),
                weir_core::time::column_list(&self.input_schema)
            )));
        }
        Ok(())
    }

    /// Restored pending rows first: their changes go out before the next
    /// input's.
    fn replay_pending(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        for batch in std::mem::take(&mut self.replay) {
            self.accumulate(&batch, now, out)?;
        }
        Ok(())
    }

    /// Process a batch (streaming) at processing time `now`.
    pub(crate) fn process_batch_at(
        &mut self,
        batch: RecordBatch,
        now: i64,
        out: &mut dyn Output,
    ) -> Result<()> {
        self.replay_pending(now, out)
            .and_then(|()| self.accumulate(&batch, now, out))
            .and_then(|()| self.sweep(now))
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))
    }

    /// Size the memory reservation to the state held.
    fn account(&mut self) -> Result<()> {
        let bytes = self.state_size();
        self.memory.resize(bytes)?;
        Ok(())
    }

    /// Rebuild the key index and the store with only the alive keys.
    fn compact(&mut self) -> Result<()> {
        let moved =
            crate::key_table::compact(&mut self.index, &self.aggregates.key_schema(), &self.alive)?;
        // Old ids in their new order.
        let mut order = vec![0; self.index.len()];
        for (old, new) in moved.iter().enumerate() {
            if let Some(new) = new {
                order[*new] = old;
            }
        }
        let columns = self.store.gather(&order)?;
        self.store = RowStore::new(Arc::clone(self.store.schema()));
        let ids: Vec<usize> = (0..order.len()).collect();
        self.store.put(&ids, columns)?;
        self.distinct.renumber(&order);
        self.alive = vec![true; order.len()];
        self.live = order.len();
        if self.ttl.is_some() {
            self.written = order.iter().map(|&i| self.written[i]).collect();
        }
        Ok(())
    }

    /// Forget keys not written within the TTL, at most every tenth of it.
    fn sweep(&mut self, now: i64) -> Result<()> {
        let Some(ttl) = self.ttl else {
            return Ok(());
        };
        if now - self.last_sweep < (ttl / 10).max(10) {
            return Ok(());
        }
        self.last_sweep = now;
        let cutoff = now.saturating_sub(ttl);
        for (id, &w) in self.written.iter().enumerate() {
            if w < cutoff && self.alive[id] {
                self.alive[id] = false;
                self.live -= 1;
            }
        }
        if crate::key_table::due(self.index.len(), self.live) {
            self.compact()?;
        }
        self.account()
    }

    #[allow(clippy::too_many_arguments)]
    fn emit_changes(
        &self,
        keys: &[ArrayRef],
        new_values: &[ArrayRef],
        old_rows: &[usize],
        (old_states, old_distinct): (&[&[ArrayRef]], Vec<ArrayRef>),
        was_alive: &[bool],
        alive: &[bool],
        out: &mut dyn Output,
    ) -> Result<()> {
        let n = keys.first().map_or(0, |k| k.len());
        let visible = new_values.len() - usize::from(self.retractions);
        let new_values = &new_values[..visible];
        let mut changed = vec![];
        let mut old_changed = vec![];
        let mut deleted = vec![];
        let mut old_deleted = vec![];
        if !old_rows.is_empty() {
            let old_values = self.evaluate(old_states, old_rows.len())?;
            let old_values = self.in_order(old_values, old_distinct);
            let old_values = &old_values[..visible];
            let index = UInt32Array::from_iter_values(old_rows.iter().map(|&r| r as u32));
            let new_of_old: Vec<ArrayRef> = new_values
                .iter()
                .map(|v| take(v, &index, None))
                .collect::<std::result::Result<_, _>>()?;
            let differs = differs(old_values, &new_of_old)?;
            for (i, &r) in old_rows.iter().enumerate() {
                match (was_alive[r], alive[r]) {
                    (true, true) if differs[i] => {
                        changed.push(r as u32);
                        old_changed.push(i as u32);
                    }
                    (true, false) => {
                        deleted.push(r as u32);
                        old_deleted.push(i as u32);
                    }
                    _ => {}
                }
            }
            if !changed.is_empty() {
                let pick = |cols: &[ArrayRef], at: &[u32]| -> Result<Vec<ArrayRef>> {
                    let index = UInt32Array::from(at.to_vec());
                    Ok(cols
                        .iter()
                        .map(|c| take(c, &index, None))
                        .collect::<std::result::Result<_, _>>()?)
                };
                let ks = pick(keys, &changed)?;
                // Upsert mode: the new row alone replaces the key's row.
                if !self.upsert {
                    let old = pick(old_values, &old_changed)?;
                    out.collect(self.output(&ks, &old, Some(RowKind::UpdateBefore))?)?;
                }
                let new = pick(new_values, &changed)?;
                out.collect(self.output(&ks, &new, Some(RowKind::UpdateAfter))?)?;
            }
            if !deleted.is_empty() {
                let index = UInt32Array::from(deleted);
                let ks: Vec<ArrayRef> = keys
                    .iter()
                    .map(|c| take(c, &index, None))
                    .collect::<std::result::Result<_, _>>()?;
                let index = UInt32Array::from(old_deleted);
                let vs: Vec<ArrayRef> = old_values
                    .iter()
                    .map(|c| take(c, &index, None))
                    .collect::<std::result::Result<_, _>>()?;
                out.collect(self.output(&ks, &vs, Some(RowKind::Delete))?)?;
            }
        }
        // New keys, and keys back after all their rows were retracted.
        let inserted: Vec<u32> = (0..n as u32)
            .filter(|&r| !was_alive[r as usize] && alive[r as usize])
            .collect();
        if !inserted.is_empty() {
            let index = UInt32Array::from(inserted);
            let pick = |cols: &[ArrayRef]| -> Result<Vec<ArrayRef>> {
                Ok(cols
                    .iter()
                    .map(|c| take(c, &index, None))
                    .collect::<std::result::Result<_, _>>()?)
            };
            let (ks, vs) = (pick(keys)?, pick(new_values)?);
            out.collect(self.output(&ks, &vs, Some(RowKind::Insert))?)?;
        }
        Ok(())
    }
}

impl Operator for GroupAggregateOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if let Some(acc) = &mut self.direct {
            let mut ids = Vec::new();
            if self.global {
                let (keys, states) = batch.columns().split_at(self.key_width);
                acc.groups.intern(keys, &mut ids)?;
                let n = acc.groups.len();
                let mut at = 0;
                for (a, &w) in acc.accumulators.iter_mut().zip(&self.state_widths) {
                    a.merge_batch(&states[at..at + w], &ids, n)?;
                    at += w;
                }
                return Ok(());
            }
            acc.groups.intern(&self.aggregates.keys(&batch), &mut ids)?;
            let n = acc.groups.len();
            return self
                .aggregates
                .update(&mut acc.accumulators, &batch, &ids, n);
        }
        self.process_batch_at(batch, now_ms(), out)
    }

    fn accounts_memory(&self) -> bool {
        true
    }

    fn next_processing_timer(&self) -> Option<i64> {
        // With a TTL, sweep while no input comes too.
        self.ttl.map(|t| self.last_sweep + (t / 10).max(10))
    }

    fn on_processing_time(&mut self, now: i64, _out: &mut dyn Output) -> Result<()> {
        self.sweep(now)
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        if self.changelog {
            return self.replay_pending(now_ms(), out);
        }
        if let Some(mut acc) = self.direct.take() {
            if acc.groups.is_empty() {
                return Ok(());
            }
            let keys = acc.groups.emit(EmitTo::All)?;
            let values = acc
                .accumulators
                .iter_mut()
                .map(|a| a.evaluate(EmitTo::All))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            let all = self.output(&keys, &values, None)?;
            let mut from = 0;
            while from < all.num_rows() {
                let len = self.batch_size.min(all.num_rows() - from);
                out.collect(all.slice(from, len))?;
                from += len;
            }
            return Ok(());
        }
        let total = self.store.len();
        let mut from = 0;
        while from < total {
            let to = (from + self.batch_size).min(total);
            let ids: Vec<usize> = (from..to)
                .filter(|&i| self.alive.get(i).copied().unwrap_or(false))
                .collect();
            from = to;
            if ids.is_empty() {
                continue;
            }
            let columns = self.store.gather(&ids)?;
            let mut values = self.evaluate(&self.states_of(&columns), ids.len())?;
            if self.retractions {
                values.pop();
            }
            out.collect(self.output(&columns[..self.key_width], &values, None)?)?;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("groups".into(), self.live as u64),
            ("state_bytes".into(), self.state_size() as u64),
        ]
    }

    /// A streaming aggregation spills by its keys (batch mode aggregates
    /// in memory: it takes no checkpoints).
    fn spill_keys(&self) -> Option<Vec<Vec<usize>>> {
        (self.changelog && self.direct.is_none()).then(|| vec![self.aggregates.key_indices.clone()])
    }

    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        if self.direct.is_some() {
            return Err(WeirError::Execution(format!(
                "{}: batch mode takes no checkpoints (a failed batch job runs again)",
                self.name
            )));
        }
        // Keys retracted to nothing or past the TTL are not state.
        let batch = self.groups()?;
        let mut tables = vec![StateTable::new("groups", batch).keyed(0..self.key_width)];
        for rows in &self.replay {
            tables.push(
                StateTable::new(PENDING_TABLE, rows.clone())
                    .keyed(self.aggregates.key_indices.iter().copied()),
            );
        }
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let keys: Vec<usize> = (0..self.key_width).collect();
        let all_keys = self.aggregates.key_indices.is_empty();
        for t in tables {
            match t.name.as_str() {
                "groups" => {
                    let batch = if all_keys {
                        t.batch
                    } else {
                        self.key_groups.keep(t.batch, &keys)?
                    };
                    self.restore_groups(batch)?;
                }
                // Input rows the disk backend held back: their changes were
                // never sent, so they go through before the next input.
                PENDING_TABLE => {
                    self.check_input_layout(&t.batch)?;
                    let key_indices = self.aggregates.key_indices.clone();
                    let batch = self.key_groups.keep(t.batch, &key_indices)?;
                    if batch.num_rows() > 0 {
                        self.replay.push(batch);
                    }
                }
                other => {
                    return Err(WeirError::Execution(format!(
                        "{}: unknown state table '{other}'",
                        self.name
                    )));
                }
            }
        }
        self.account()
    }
}

#[cfg(test)]
#[path = "group_aggregate_tests.rs"]
mod tests;
