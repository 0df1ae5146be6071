//! The count trigger's state: per pane, each key's records so far and its
//! aggregate state, kept so that a firing costs the rows and keys of the
//! batch that brings it, never the whole pane.
//!
//! A key's intermediate state (`GroupsAccumulator::state`, one row) sits in
//! one of a pane's *parts*, found through the key's location. A batch is cut
//! into rounds: round `r` holds, for every key, its rows after its `r`-th
//! firing in the batch (usually one round). A round gathers the state of its
//! keys only, adds its rows, and stores their new state as a new part; the
//! keys that fire are evaluated from that state. Parts are compacted into
//! one when most of their rows are stale.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use arrow::compute::{concat, interleave, take, take_record_batch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::{Result, WeirError};

use super::{WindowAggregateOperator, split_by};
use crate::{Output, StateTable};

/// No state: the key has had no record since it was purged (or ever).
const NOWHERE: (u32, u32) = (u32::MAX, u32::MAX);

/// One pane's count-trigger state.
pub(super) struct Counted {
    /// Key to dense id.
    table: Box<dyn GroupValues>,
    /// Records per key id in the window so far.
    counts: Vec<u64>,
    /// Per key id, (part, row) of its state, or [`NOWHERE`].
    loc: Vec<(u32, u32)>,
    /// Per part, every aggregate's state columns one after another.
    parts: Vec<Vec<ArrayRef>>,
    part_rows: usize,
    /// Keys with state.
    live: usize,
    /// Per key id, scratch for one batch (reset to `u32::MAX` after use).
    scratch: Vec<u32>,
}

/// Compact a pane's parts beyond this many, or when they hold more than
/// twice the live keys' rows (and some slack).
const MAX_PARTS: usize = 256;
const SLACK_ROWS: usize = 4096;

impl Counted {
    fn new(key_schema: arrow::datatypes::SchemaRef) -> Result<Self> {
        Ok(Self {
            table: new_group_values(key_schema, &GroupOrdering::None)?,
            counts: Vec::new(),
            loc: Vec::new(),
            parts: Vec::new(),
            part_rows: 0,
            live: 0,
            scratch: Vec::new(),
        })
    }

    /// Intern `keys`, giving each row its key id in `ids`.
    fn intern(&mut self, keys: &[ArrayRef], ids: &mut Vec<usize>) -> Result<()> {
        self.table.intern(keys, ids)?;
        let n = self.table.len();
        self.counts.resize(n, 0);
        self.loc.resize(n, NOWHERE);
        self.scratch.resize(n, u32::MAX);
        Ok(())
    }

    /// Bytes held.
    pub(super) fn size(&self) -> usize {
        self.table.size()
            + self.counts.capacity() * 8
            + self.loc.capacity() * 8
            + self.scratch.capacity() * 4
            + self
                .parts
                .iter()
                .flatten()
                .map(|a| a.get_array_memory_size())
                .sum::<usize>()
    }

    /// The state columns of `ids` (each with state), one row per id.
    fn gather(&self, ids: &[usize]) -> Result<Vec<ArrayRef>> {
        let at: Vec<(usize, usize)> = ids
            .iter()
            .map(|&id| {
                let (part, row) = self.loc[id];
                (part as usize, row as usize)
            })
            .collect();
        let columns = self.parts.first().map_or(0, |p| p.len());
        (0..columns)
            .map(|c| {
                let arrays: Vec<&dyn Array> = self.parts.iter().map(|p| p[c].as_ref()).collect();
                Ok(interleave(&arrays, &at)?)
            })
            .collect()
    }

    /// Fresh accumulators over `ids.len()` groups, group `i` holding the
    /// state so far of `ids[i]` (none for a key without state).
    fn accumulators_for(
        &self,
        aggregates: &super::aggregates::Aggregates,
        widths: &[usize],
        ids: &[usize],
    ) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        let mut accumulators = aggregates.new_accumulators()?;
        let (earlier, at): (Vec<usize>, Vec<usize>) = ids
            .iter()
            .enumerate()
            .filter(|&(_, &id)| self.loc[id] != NOWHERE)
            .map(|(slot, &id)| (id, slot))
            .unzip();
        if !earlier.is_empty() {
            let state = self.gather(&earlier)?;
            merge_state(&mut accumulators, widths, &state, &at, ids.len())?;
        }
        Ok(accumulators)
    }

    /// `state` (one row per id, in order) is now the state of `ids`.
    fn store(&mut self, ids: &[usize], state: Vec<ArrayRef>) -> Result<()> {
        let part = self.parts.len() as u32;
        for (row, &id) in ids.iter().enumerate() {
            if self.loc[id] == NOWHERE {
                self.live += 1;
            }
            self.loc[id] = (part, row as u32);
        }
        self.part_rows += ids.len();
        self.parts.push(state);
        if self.parts.len() > MAX_PARTS || self.part_rows > 2 * self.live + SLACK_ROWS {
            self.compact()?;
        }
        Ok(())
    }

    /// Forget the state of `id` (a purging firing).
    fn clear(&mut self, id: usize) {
        if self.loc[id] != NOWHERE {
            self.loc[id] = NOWHERE;
            self.live -= 1;
        }
    }

    /// The key ids with state.
    fn live_ids(&self) -> Vec<usize> {
        (0..self.loc.len())
            .filter(|&id| self.loc[id] != NOWHERE)
            .collect()
    }

    /// Gather every live key's state into one part.
    fn compact(&mut self) -> Result<()> {
        let ids = self.live_ids();
        let state = if ids.is_empty() {
            None
        } else {
            Some(self.gather(&ids)?)
        };
        self.parts.clear();
        self.part_rows = 0;
        self.live = 0;
        self.loc.fill(NOWHERE);
        if let Some(state) = state {
            self.store(&ids, state)?;
        }
        Ok(())
    }

    /// The key columns, in id order (reading them empties the table: they
    /// are interned again, in order, so every key keeps its id).
    fn keys(&mut self) -> Result<Vec<ArrayRef>> {
        let keys = self.table.emit(EmitTo::All)?;
        let mut ids = Vec::new();
        self.table.intern(&keys, &mut ids)?;
        Ok(keys)
    }
}

/// Merge `state` (every aggregate's columns, one after another, as `widths`
/// says) into `accumulators`, row `i` into group `groups[i]`.
fn merge_state(
    accumulators: &mut [Box<dyn GroupsAccumulator>],
    widths: &[usize],
    state: &[ArrayRef],
    groups: &[usize],
    total: usize,
) -> Result<()> {
    let mut at = 0;
    for (a, &w) in accumulators.iter_mut().zip(widths) {
        a.merge_batch(&state[at..at + w], groups, total)?;
        at += w;
    }
    Ok(())
}

/// Every accumulator's state, one after another.
fn take_state(accumulators: &mut [Box<dyn GroupsAccumulator>]) -> Result<Vec<ArrayRef>> {
    let mut state = Vec::new();
    for a in accumulators {
        state.extend(a.state(EmitTo::All)?);
    }
    Ok(state)
}

impl WindowAggregateOperator {
    /// Count trigger (tumbling windows): fire a key's window after every
    /// record that brings its count in the window to a multiple of `count`
    /// — exactly where Flink's per-record trigger fires, with the result as
    /// of that record. Results come out in the order of those records.
    pub(super) fn process_counted(
        &mut self,
        pane: i64,
        part: &RecordBatch,
        count: u64,
        out: &mut dyn Output,
    ) -> Result<()> {
        // An empty entry in `panes` lets timers and expiry see the pane.
        self.panes.entry(pane).or_default();
        let widths = self.aggregates.state_widths()?;
        let keys = self.aggregates.keys(part);
        let counted = match self.counts.entry(pane) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(Counted::new(self.aggregates.key_schema())?)
            }
        };
        let mut ids = Vec::new();
        counted.intern(&keys, &mut ids)?;
        // Each row's round: the firings of its key earlier in this batch.
        let rows = ids.len();
        let mut round = vec![0u32; rows];
        let mut fires = vec![false; rows];
        let mut rounds = 1;
        for (row, &id) in ids.iter().enumerate() {
            let seen = &mut counted.scratch[id];
            if *seen == u32::MAX {
                *seen = 0;
            }
            round[row] = *seen;
            counted.counts[id] += 1;
            if counted.counts[id].is_multiple_of(count) {
                fires[row] = true;
                *seen += 1;
                rounds = rounds.max(*seen as usize + 1);
            }
        }
        for &id in &ids {
            counted.scratch[id] = u32::MAX;
        }
        // Per round: the rows that fire and their results.
        let mut fired_rows: Vec<Vec<u32>> = Vec::new();
        let mut fired_values: Vec<Vec<ArrayRef>> = Vec::new();
        for r in 0..rounds as u32 {
            let selected: Option<Vec<u32>> = (rounds > 1).then(|| {
                (0..rows as u32)
                    .filter(|&row| round[row as usize] == r)
                    .collect()
            });
            let round_rows: Box<dyn Iterator<Item = u32>> = match &selected {
                Some(s) => Box::new(s.iter().copied()),
                None => Box::new(0..rows as u32),
            };
            // The round's keys in order of appearance, numbered from 0.
            let mut round_keys = Vec::new();
            let mut groups = Vec::new();
            let mut firing = Vec::new();
            for row in round_rows {
                let id = ids[row as usize];
                let slot = &mut counted.scratch[id];
                if *slot == u32::MAX {
                    *slot = round_keys.len() as u32;
                    round_keys.push(id);
                }
                groups.push(*slot as usize);
                if fires[row as usize] {
                    firing.push(row);
                }
            }
            if round_keys.is_empty() {
                continue;
            }
            let total = round_keys.len();
            let mut accumulators =
                counted.accumulators_for(&self.aggregates, &widths, &round_keys)?;
            let batch = match &selected {
                Some(s) => take_record_batch(part, &UInt32Array::from(s.clone()))?,
                None => part.clone(),
            };
            self.aggregates
                .update(&mut accumulators, &batch, &groups, total)?;
            let state = take_state(&mut accumulators)?;
            if !firing.is_empty() {
                // A key fires at most once per round.
                let slots = UInt32Array::from_iter_values(
                    firing.iter().map(|&row| counted.scratch[ids[row as usize]]),
                );
                let fired = state
                    .iter()
                    .map(|c| Ok(take(c.as_ref(), &slots, None)?))
                    .collect::<Result<Vec<_>>>()?;
                let n = firing.len();
                let mut results = self.aggregates.new_accumulators()?;
                merge_state(
                    &mut results,
                    &widths,
                    &fired,
                    &(0..n).collect::<Vec<_>>(),
                    n,
                )?;
                fired_values.push(
                    results
                        .iter_mut()
                        .map(|a| a.evaluate(EmitTo::All))
                        .collect::<datafusion_common::Result<Vec<_>>>()?,
                );
            }
            for &id in &round_keys {
                counted.scratch[id] = u32::MAX;
            }
            counted.store(&round_keys, state)?;
            if self.purge {
                for &row in &firing {
                    counted.clear(ids[row as usize]);
                }
            }
            if !firing.is_empty() {
                fired_rows.push(firing);
            }
        }
        if fired_rows.is_empty() {
            return Ok(());
        }
        // The results in the order of the records that fired them.
        let (rows_in_order, values) = if fired_rows.len() == 1 {
            (
                fired_rows.pop().expect("one"),
                fired_values.pop().expect("one"),
            )
        } else {
            let all: Vec<u32> = fired_rows.concat();
            let mut order: Vec<u32> = (0..all.len() as u32).collect();
            order.sort_unstable_by_key(|&i| all[i as usize]);
            let order = UInt32Array::from(order);
            let columns = fired_values[0].len();
            let values = (0..columns)
                .map(|c| {
                    let parts: Vec<&dyn Array> =
                        fired_values.iter().map(|v| v[c].as_ref()).collect();
                    Ok(take(concat(&parts)?.as_ref(), &order, None)?)
                })
                .collect::<Result<Vec<_>>>()?;
            let rows_in_order = order.values().iter().map(|&i| all[i as usize]).collect();
            (rows_in_order, values)
        };
        let fired_keys = {
            let rows = UInt32Array::from(rows_in_order);
            keys.iter()
                .map(|k| Ok(take(k.as_ref(), &rows, None)?))
                .collect::<Result<Vec<_>>>()?
        };
        self.windows_fired += fired_keys.first().map_or(0, |k| k.len()) as u64;
        let end = pane.saturating_add(self.pane_size);
        self.emit(pane, end, fired_keys, values, false, out)
    }

    /// Bytes of the count trigger's state.
    pub(super) fn counts_bytes(&self) -> usize {
        self.counts.values().map(Counted::size).sum()
    }

    /// The count trigger's state as tables: `counts` (`pane_start`, the key
    /// columns, `count`) and, per pane, a `panes` table of the keys with
    /// aggregate state (the layout every window snapshots its panes in).
    pub(super) fn counts_tables(&mut self) -> Result<Vec<StateTable>> {
        if self.counts.is_empty() {
            return Ok(Vec::new());
        }
        let key_schema = self.aggregates.key_schema();
        let key_columns = 1..1 + key_schema.fields().len();
        let mut fields = vec![Field::new("pane_start", DataType::Int64, false)];
        fields.extend(key_schema.fields().iter().map(|f| f.as_ref().clone()));
        fields.push(Field::new("count", DataType::UInt64, false));
        let schema = Arc::new(Schema::new(fields));
        let pane_schema = self.aggregates.snapshot_schema()?;
        let mut counts = Vec::new();
        let mut tables = Vec::new();
        for (&pane, counted) in &mut self.counts {
            let keys = counted.keys()?;
            let rows = counted.counts.len();
            let mut columns: Vec<ArrayRef> =
                vec![Arc::new(arrow::array::Int64Array::from(vec![pane; rows]))];
            columns.extend(keys.iter().cloned());
            columns.push(Arc::new(arrow::array::UInt64Array::from(
                counted.counts.clone(),
            )));
            counts.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
            let live = counted.live_ids();
            if live.is_empty() {
                continue;
            }
            let state = counted.gather(&live)?;
            let live = UInt32Array::from_iter_values(live.iter().map(|&id| id as u32));
            let mut columns: Vec<ArrayRef> = vec![Arc::new(arrow::array::Int64Array::from(vec![
                    pane;
                    live.len()
                ]))];
            for k in &keys {
                columns.push(take(k.as_ref(), &live, None)?);
            }
            columns.extend(state);
            let batch = RecordBatch::try_new(Arc::clone(&pane_schema), columns)?;
            tables.push(StateTable::new("panes", batch).keyed(key_columns.clone()));
        }
        let batch = arrow::compute::concat_batches(&schema, &counts)?;
        tables.push(StateTable::new("counts", batch).keyed(key_columns));
        Ok(tables)
    }

    pub(super) fn restore_counts(&mut self, batch: RecordBatch, keys: usize) -> Result<()> {
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
            let counted = match self.counts.entry(pane) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(Counted::new(Arc::clone(&key_schema))?)
                }
            };
            self.panes.entry(pane).or_default();
            let mut ids = Vec::new();
            counted.intern(&part.columns()[1..1 + keys], &mut ids)?;
            for (row, &id) in ids.iter().enumerate() {
                counted.counts[id] = counts.value(row);
            }
            Ok::<_, WeirError>(())
        })
    }

    /// Restored pane state (in `panes` as frozen parts) moved into the
    /// count trigger's per-key state.
    pub(super) fn absorb_restored_panes(&mut self) -> Result<()> {
        let widths = self.aggregates.state_widths()?;
        let starts: Vec<i64> = self
            .panes
            .iter()
            .filter(|(_, p)| !p.frozen.is_empty())
            .map(|(&s, _)| s)
            .collect();
        for start in starts {
            let parts = std::mem::take(&mut self.panes.get_mut(&start).expect("listed").frozen);
            let (mut acc, _) = self.merge_parts(parts.iter(), None)?;
            let keys = acc.groups.emit(EmitTo::All)?;
            let restored = take_state(&mut acc.accumulators)?;
            let counted = match self.counts.entry(start) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(Counted::new(self.aggregates.key_schema())?)
                }
            };
            let mut ids = Vec::new();
            counted.intern(&keys, &mut ids)?;
            let total = ids.len();
            // Keys that already had state (not expected: key groups are
            // disjoint) keep it, merged with the restored state.
            let mut accumulators = counted.accumulators_for(&self.aggregates, &widths, &ids)?;
            let all: Vec<usize> = (0..total).collect();
            merge_state(&mut accumulators, &widths, &restored, &all, total)?;
            let state = take_state(&mut accumulators)?;
            counted.store(&ids, state)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;
    use arrow::datatypes::TimeUnit;
    use weir_core::config::WeirConfig;

    use weir_core::spec::{AggregateSpec, WindowAggregateSpec};
    use weir_core::time::{Trigger, WindowAssigner};

    use super::*;

    use crate::{Operator, OperatorContext};

    fn operator(purge: bool) -> WindowAggregateOperator {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
            Field::new("ts", ts.clone(), false),
        ]));
        let spec = WindowAggregateSpec {
            keys: vec!["k".into()],
            rowtime: Some("ts".into()),
            processing_time: false,
            trigger: Trigger::Count { count: 3 },
            purge,
            assigner: WindowAssigner::Tumbling {
                size: 1_000_000,
                offset: 0,
            },
            aggregates: vec![
                AggregateSpec::count_star().alias("n"),
                AggregateSpec::sum("v").alias("total"),
            ],
            input_schema: input,
            allowed_lateness: 0,
            late_data_tag: None,
        };
        let output = Arc::new(Schema::new(vec![
            Field::new("window_start", ts.clone(), false),
            Field::new("window_end", ts, false),
            Field::new("k", DataType::Int64, false),
            Field::new("n", DataType::Int64, false),
            Field::new("total", DataType::Int64, true),
        ]));
        let config = WeirConfig::default();
        let ctx = OperatorContext::single("window (1/1)", config);
        WindowAggregateOperator::try_new("window".into(), &spec, output, &ctx).unwrap()
    }

    /// 600 small batches over 40 keys, keys repeating within a batch (so a
    /// key fires more than once in one), values `(k, v)`.
    fn input() -> Vec<Vec<(i64, i64)>> {
        (0..600i64)
            .map(|b| {
                let rows = 1 + (b * 7) % 9;
                (0..rows)
                    .map(|r| ((b * 13 + r * r * 5) % 40, b * 10 + r))
                    .collect()
            })
            .collect()
    }

    fn batch(rows: &[(i64, i64)]) -> RecordBatch {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
            Field::new("ts", ts, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(arrow::array::TimestampMillisecondArray::from_iter_values(
                    rows.iter().map(|r| r.1),
                )),
            ],
        )
        .unwrap()
    }

    /// Firings `(k, n, total)` in the order they came out.
    fn firings(out: &[RecordBatch]) -> Vec<(i64, i64, i64)> {
        let mut got = Vec::new();
        for b in out {
            let col = |i: usize| b.column(i).as_primitive::<arrow::datatypes::Int64Type>();
            for r in 0..b.num_rows() {
                got.push((col(2).value(r), col(3).value(r), col(4).value(r)));
            }
        }
        got
    }

    /// Record at a time, as Flink's CountTrigger fires.
    fn reference(input: &[Vec<(i64, i64)>], purge: bool) -> Vec<(i64, i64, i64)> {
        let mut seen: BTreeMap<i64, (u64, i64, i64)> = BTreeMap::new();
        let mut fired = Vec::new();
        for &(k, v) in input.iter().flatten() {
            let (c, n, total) = seen.entry(k).or_default();
            *c += 1;
            *n += 1;
            *total += v;
            if c.is_multiple_of(3) {
                fired.push((k, *n, *total));
                if purge {
                    (*n, *total) = (0, 0);
                }
            }
        }
        fired
    }

    use std::collections::BTreeMap;

    /// Hundreds of batches (more parts than a pane keeps before compacting),
    /// keys firing several times within one batch: the firings of the
    /// record-at-a-time reference, in its order, keeping and purging; a
    /// snapshot halfway restored into a fresh operator goes on the same.
    #[test]
    fn firings_match_the_record_at_a_time_reference() {
        let input = input();
        for purge in [false, true] {
            let expected = reference(&input, purge);
            let mut op = operator(purge);
            let mut out = Vec::new();
            for rows in &input {
                op.process_batch(batch(rows), &mut out).unwrap();
            }
            assert_eq!(firings(&out), expected, "purge {purge}");
            assert!(expected.len() > 500);

            let half = input.len() / 2;
            let mut first = operator(purge);
            let mut out = Vec::new();
            for rows in &input[..half] {
                first.process_batch(batch(rows), &mut out).unwrap();
            }
            let tables = first.snapshot_state(1).unwrap();
            let mut resumed = operator(purge);
            resumed.restore_state(tables).unwrap();
            for rows in &input[half..] {
                resumed.process_batch(batch(rows), &mut out).unwrap();
            }
            assert_eq!(firings(&out), expected, "purge {purge}, restored");
        }
    }
}
