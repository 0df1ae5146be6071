//! The keyed interval join.
//!
//! Each side buffers its rows (whole batches, referenced by slot) and an
//! index per key of `(timestamp, slot, row)` sorted by time. A batch from
//! one side is interned into the shared key table in one call, probes the
//! other side's index by binary search on the time bounds, and its pairs are
//! gathered column-wise: `take` for the probing side, `interleave` across the
//! buffered batches of the other. Every pair is emitted once, by whichever of
//! its two rows arrives second.
//!
//! A left row can match no future right row once the watermark passes
//! `ts + upper`, a right row once it passes `ts - lower`; the watermark drops
//! such rows from the index and frees batches whose rows are all gone. The
//! index is a vector by dense key id, and a queue of each key's earliest
//! timestamp ([`TimeQueue`]) finds the keys a watermark expires without
//! visiting the rest.
//! Unlike Flink, which drops its left rows when the watermark *reaches*
//! `ts + upper` and so can miss a right row at exactly that timestamp, rows
//! stay until the watermark has passed, so every pair of on-time rows joins.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::compute::{filter_record_batch, interleave, take};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_physical_plan::aggregates::group_values::GroupValues;
use weir_core::message::Watermark;
use weir_core::spec::IntervalJoinSpec;
use weir_core::{Result, WeirError};

use crate::window::timestamps;

/// The column of an outer side's snapshot saying whether a row found a
/// partner.
const MATCHED: &str = "__matched";
use crate::time_queue::TimeQueue;
use crate::{Operator, OperatorContext, Output};

/// A key's `(ts, slot, row)`s, sorted by `ts`. The first is held in place:
/// most keys of a wide key space (Nexmark q7 joins on a bid's price) hold
/// one row at a time, and finding it then costs no second cache miss.
type Entries = smallvec::SmallVec<[(i64, u32, u32); 1]>;

struct Buffered {
    batch: RecordBatch,
    live: usize,
}

/// One input's buffered rows.
struct Side {
    key_indices: Vec<usize>,
    ts_index: usize,
    slots: Vec<Option<Buffered>>,
    free: Vec<u32>,
    /// Per key id: `(ts, slot, row)` sorted by `ts` (empty: none live).
    index: Vec<Entries>,
    /// Keys with live rows.
    live_keys: usize,
    /// `(earliest ts, key)` of keys with live rows; an entry is current
    /// when `scheduled[key]` still holds its ts (others are skipped).
    expiry: TimeQueue,
    /// Per key id: the ts its current `expiry` entry has (`i64::MAX`: none).
    scheduled: Vec<i64>,
    live_rows: usize,
    /// An outer side: the `(slot, row)`s that found a partner.
    outer: bool,
    matched: std::collections::HashSet<(u32, u32)>,
}

impl Side {
    fn new(schema: &Schema, keys: &[String], rowtime: &str, outer: bool) -> Result<Self> {
        Ok(Self {
            key_indices: crate::column_indices(schema, keys)?,
            ts_index: schema.index_of(rowtime)?,
            slots: Vec::new(),
            free: Vec::new(),
            index: Vec::new(),
            live_keys: 0,
            expiry: TimeQueue::default(),
            scheduled: Vec::new(),
            live_rows: 0,
            outer,
            matched: Default::default(),
        })
    }

    /// The next slot `insert` fills.
    fn next_slot(&self) -> u32 {
        self.free.last().copied().unwrap_or(self.slots.len() as u32)
    }

    /// The keys with rows `ts < threshold`, in key order, taken off the
    /// expiry queue (`expire` schedules those that keep rows again).
    fn due(&mut self, threshold: i64) -> Vec<usize> {
        let mut keys = Vec::new();
        while let Some((ts, k)) = self.expiry.peek() {
            if ts >= threshold {
                break;
            }
            self.expiry.pop();
            if self.scheduled[k] == ts {
                self.scheduled[k] = i64::MAX;
                keys.push(k);
            }
        }
        keys.sort_unstable();
        keys
    }

    /// An outer side's rows of `keys` with `ts < threshold` that never
    /// found a partner (what `expire` is about to drop), gathered.
    fn unmatched_before(
        &self,
        keys: &[usize],
        threshold: i64,
        schema: &SchemaRef,
    ) -> Result<Option<RecordBatch>> {
        if !self.outer {
            return Ok(None);
        }
        let mut picks: Vec<(u32, u32)> = Vec::new();
        for &k in keys {
            let entries = &self.index[k];
            let n = entries.partition_point(|e| e.0 < threshold);
            picks.extend(
                entries[..n]
                    .iter()
                    .map(|&(_, slot, row)| (slot, row))
                    .filter(|p| !self.matched.contains(p)),
            );
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let columns = self.gather(&picks, schema.fields().len())?;
        Ok(Some(RecordBatch::try_new(Arc::clone(schema), columns)?))
    }

    /// The columns `..width` of buffered rows `(slot, row)`, in that order:
    /// one `interleave` per column across the batches they are in.
    fn gather(&self, picks: &[(u32, u32)], width: usize) -> Result<Vec<ArrayRef>> {
        // The buffered batches used, numbered densely for `interleave`.
        let mut dense: HashMap<u32, usize> = HashMap::new();
        let mut used: Vec<&RecordBatch> = Vec::new();
        let picks: Vec<(usize, usize)> = picks
            .iter()
            .map(|&(slot, row)| {
                let n = *dense.entry(slot).or_insert_with(|| {
                    used.push(&self.slots[slot as usize].as_ref().expect("live slot").batch);
                    used.len() - 1
                });
                (n, row as usize)
            })
            .collect();
        Ok((0..width)
            .map(|c| {
                let arrays: Vec<&dyn Array> = used.iter().map(|b| b.column(c).as_ref()).collect();
                interleave(&arrays, &picks)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?)
    }

    fn insert(&mut self, batch: RecordBatch, key_ids: &[usize], ts: &[i64]) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        if let Some(&most) = key_ids.iter().max()
            && most >= self.index.len()
        {
            self.index.resize_with(most + 1, Entries::new);
            self.scheduled.resize(most + 1, i64::MAX);
        }
        for (row, (&k, &t)) in key_ids.iter().zip(ts).enumerate() {
            let entries = &mut self.index[k];
            if entries.is_empty() {
                self.live_keys += 1;
            }
            // In-order rows append; a late one goes to its place.
            let pos = match entries.last() {
                Some(e) if e.0 > t => entries.partition_point(|e| e.0 <= t),
                _ => entries.len(),
            };
            entries.insert(pos, (t, slot, row as u32));
            if t < self.scheduled[k] {
                self.scheduled[k] = t;
                self.expiry.push(t, k);
            }
        }
        self.live_rows += batch.num_rows();
        self.slots[slot as usize] = Some(Buffered {
            live: batch.num_rows(),
            batch,
        });
    }

    /// Drop the entries of `keys` (from `due`) with `ts < threshold`.
    fn expire(&mut self, keys: &[usize], threshold: i64) {
        let slots = &mut self.slots;
        let free = &mut self.free;
        let matched = &mut self.matched;
        let mut removed = 0;
        for &k in keys {
            let entries = &mut self.index[k];
            let n = entries.partition_point(|e| e.0 < threshold);
            for &(_, slot, row) in &entries[..n] {
                if !matched.is_empty() {
                    matched.remove(&(slot, row));
                }
                let b = slots[slot as usize].as_mut().expect("indexed slot is live");
                b.live -= 1;
                if b.live == 0 {
                    slots[slot as usize] = None;
                    free.push(slot);
                }
            }
            removed += n;
            entries.drain(..n);
            match entries.first() {
                Some(&(ts, _, _)) => {
                    self.scheduled[k] = ts;
                    self.expiry.push(ts, k);
                }
                None => {
                    self.live_keys -= 1;
                    // A key gone for good must not pin its rows' memory.
                    *entries = Entries::new();
                }
            }
        }
        self.live_rows -= removed;
    }

    /// Move each key's rows to its id after a key-table compaction
    /// (`moved[old]`; `None`: the key had no rows on either side).
    fn renumber(&mut self, moved: &[Option<usize>]) {
        let len = moved.iter().flatten().max().map_or(0, |&m| m + 1);
        let mut index = Vec::with_capacity(len);
        index.resize_with(len, Entries::new);
        let mut scheduled = vec![i64::MAX; len];
        let mut expiry = Vec::with_capacity(self.live_keys);
        for (old, entries) in std::mem::take(&mut self.index).into_iter().enumerate() {
            if let (Some(&(ts, _, _)), Some(Some(new))) = (entries.first(), moved.get(old)) {
                scheduled[*new] = ts;
                expiry.push((ts, *new));
                index[*new] = entries;
            }
        }
        (self.index, self.scheduled) = (index, scheduled);
        self.expiry = expiry.into_iter().collect();
    }

    fn bytes(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .map(|b| b.batch.get_array_memory_size())
            .sum::<usize>()
            + self.live_rows * std::mem::size_of::<(i64, u32, u32)>()
            + self.index.len() * std::mem::size_of::<Entries>()
            + self.expiry.len() * std::mem::size_of::<(i64, usize)>()
    }
}

/// Keyed interval join of two inputs.
pub struct IntervalJoinOperator {
    name: String,
    lower: i64,
    upper: i64,
    sides: [Side; 2],
    keys: Box<dyn GroupValues>,
    /// The key columns' schema (the key table is rebuilt from it).
    key_schema: SchemaRef,
    output_schema: SchemaRef,
    batch_size: usize,
    watermark: i64,
    kind: weir_core::spec::JoinKind,
    key_ids: Vec<usize>,
    late_dropped: u64,
    state_bytes_max: u64,
    schemas: [SchemaRef; 2],
    filter: crate::KeyGroupFilter,
}

impl IntervalJoinOperator {
    /// Build the operator for one subtask.
    pub fn try_new(
        name: String,
        spec: &IntervalJoinSpec,
        output_schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let left = Side::new(
            &spec.left_schema,
            &spec.left_keys,
            &spec.left_rowtime,
            spec.kind.outer(0),
        )?;
        let right = Side::new(
            &spec.right_schema,
            &spec.right_keys,
            &spec.right_rowtime,
            spec.kind.outer(1),
        )?;
        let key_schema = Arc::new(spec.left_schema.project(&left.key_indices)?);
        Ok(Self {
            name,
            lower: spec.lower,
            upper: spec.upper,
            sides: [left, right],
            keys: crate::key_table::lasting(&key_schema)?,
            key_schema,
            output_schema,
            batch_size: ctx.config.batch_size,
            watermark: i64::MIN,
            kind: spec.kind,
            key_ids: Vec::new(),
            late_dropped: 0,
            state_bytes_max: 0,
            schemas: [
                Arc::clone(&spec.left_schema),
                Arc::clone(&spec.right_schema),
            ],
            filter: crate::KeyGroupFilter::new(ctx),
        })
    }

    /// Drop keys no side buffers rows of from the key table, so it cannot
    /// grow forever as rows expire: rebuilt when the dead keys outnumber
    /// the live ones (amortized O(1) per key).
    fn compact_keys(&mut self) -> Result<()> {
        let total = self.keys.len();
        let most_live = self.sides[0].live_keys + self.sides[1].live_keys;
        if !crate::key_table::due(total, most_live) {
            return Ok(());
        }
        let live: Vec<bool> = (0..total)
            .map(|k| {
                self.sides
                    .iter()
                    .any(|s| s.index.get(k).is_some_and(|e| !e.is_empty()))
            })
            .collect();
        let moved = crate::key_table::compact(&mut self.keys, &self.key_schema, &live)?;
        for side in &mut self.sides {
            side.renumber(&moved);
        }
        Ok(())
    }

    /// Buffer rows of `input` without joining them (a restore); an outer
    /// side's snapshot also says which rows had found a partner.
    fn buffer_rows(&mut self, input: usize, batch: RecordBatch) -> Result<()> {
        let width = self.schemas[input].fields().len();
        let batch =
            if batch.num_columns() == width + 1 && batch.schema().field(width).name() == MATCHED {
                let flags = batch.column(width).as_boolean().clone();
                let rows = RecordBatch::try_new(
                    Arc::clone(&self.schemas[input]),
                    batch.columns()[..width].to_vec(),
                )?;
                let slot = self.sides[input].next_slot();
                self.sides[input].matched.extend(
                    (0..flags.len())
                        .filter(|&r| flags.value(r))
                        .map(|r| (slot, r as u32)),
                );
                rows
            } else {
                batch
            };
        let side = &self.sides[input];
        let ts_name = batch.schema().field(side.ts_index).name().clone();
        let ts = timestamps(batch.column(side.ts_index), &ts_name)?.to_vec();
        let keys: Vec<ArrayRef> = side
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let mut key_ids = std::mem::take(&mut self.key_ids);
        self.keys.intern(&keys, &mut key_ids)?;
        self.sides[input].insert(batch, &key_ids, &ts);
        self.key_ids = key_ids;
        Ok(())
    }

    /// The live rows of side `input`, in timestamp order per key.
    fn live_rows(&self, input: usize) -> Result<RecordBatch> {
        let side = &self.sides[input];
        let schema = &self.schemas[input];
        let mut picks = Vec::with_capacity(side.live_rows);
        for entries in &side.index {
            picks.extend(entries.iter().map(|&(_, slot, row)| (slot, row)));
        }
        let mut columns = if picks.is_empty() {
            RecordBatch::new_empty(Arc::clone(schema))
                .columns()
                .to_vec()
        } else {
            side.gather(&picks, schema.fields().len())?
        };
        if !side.outer {
            return Ok(RecordBatch::try_new(Arc::clone(schema), columns)?);
        }
        // An outer side also keeps which rows found a partner.
        let mut fields: Vec<arrow::datatypes::Field> =
            schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(arrow::datatypes::Field::new(
            MATCHED,
            arrow::datatypes::DataType::Boolean,
            false,
        ));
        let matched: BooleanArray = picks
            .iter()
            .map(|p| Some(side.matched.contains(p)))
            .collect();
        columns.push(Arc::new(matched));
        Ok(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?)
    }

    /// Rows buffered on the left and on the right.
    pub fn buffered_rows(&self) -> (usize, usize) {
        (self.sides[0].live_rows, self.sides[1].live_rows)
    }

    fn process(&mut self, input: usize, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        crate::two_inputs(&self.name, input)?;
        let ts_name = batch
            .schema()
            .field(self.sides[input].ts_index)
            .name()
            .clone();
        // Flink's interval join: a row is late when ts < watermark.
        let batch = {
            let ts = timestamps(batch.column(self.sides[input].ts_index), &ts_name)?;
            let late = ts.iter().filter(|&&t| t < self.watermark).count();
            if late > 0 {
                self.late_dropped += late as u64;
                let wm = self.watermark;
                let keep: BooleanArray = ts.iter().map(|&t| Some(t >= wm)).collect();
                filter_record_batch(&batch, &keep)?
            } else {
                batch
            }
        };
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let ts = timestamps(batch.column(self.sides[input].ts_index), &ts_name)?.to_vec();
        let keys: Vec<ArrayRef> = self.sides[input]
            .key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let mut key_ids = std::mem::take(&mut self.key_ids);
        self.keys.intern(&keys, &mut key_ids)?;
        // Bounds on the other side's timestamp for a row at `t`.
        let (lo, hi) = if input == 0 {
            (self.lower, self.upper)
        } else {
            (-self.upper, -self.lower)
        };
        let other = &self.sides[1 - input];
        let mut this_rows: Vec<u32> = Vec::new();
        let mut other_rows: Vec<(u32, u32)> = Vec::new();
        for (row, (&k, &t)) in key_ids.iter().zip(&ts).enumerate() {
            let Some(entries) = other.index.get(k) else {
                continue;
            };
            let (from, to) = (t.saturating_add(lo), t.saturating_add(hi));
            let start = entries.partition_point(|e| e.0 < from);
            for &(et, slot, r) in &entries[start..] {
                if et > to {
                    break;
                }
                this_rows.push(row as u32);
                other_rows.push((slot, r));
            }
        }
        if !this_rows.is_empty() {
            self.emit(input, &batch, &this_rows, &other_rows, out)?;
            if self.sides[1 - input].outer {
                self.sides[1 - input]
                    .matched
                    .extend(other_rows.iter().copied());
            }
            if self.sides[input].outer {
                let slot = self.sides[input].next_slot();
                self.sides[input]
                    .matched
                    .extend(this_rows.iter().map(|&r| (slot, r)));
            }
        }
        self.sides[input].insert(batch, &key_ids, &ts);
        self.key_ids = key_ids;
        Ok(())
    }

    /// Rows of outer side `input` without a partner, with NULLs for the
    /// other side.
    fn emit_padded(&self, input: usize, rows: &RecordBatch, out: &mut dyn Output) -> Result<()> {
        let n = rows.num_rows();
        let nulls: Vec<ArrayRef> = self.schemas[1 - input]
            .fields()
            .iter()
            .map(|f| arrow::array::new_null_array(f.data_type(), n))
            .collect();
        let mine = rows.columns().to_vec();
        let columns = if input == 0 {
            [mine, nulls].concat()
        } else {
            [nulls, mine].concat()
        };
        let padded = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        crate::pane_buffer::emit_sliced(&padded, self.batch_size, out)
    }

    fn emit(
        &self,
        input: usize,
        batch: &RecordBatch,
        this_rows: &[u32],
        other_rows: &[(u32, u32)],
        out: &mut dyn Output,
    ) -> Result<()> {
        let other = &self.sides[1 - input];
        let this_idx = UInt32Array::from(this_rows.to_vec());
        let this_cols = batch
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &this_idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let other_cols = other.gather(other_rows, self.schemas[1 - input].fields().len())?;
        let columns = if input == 0 {
            [this_cols, other_cols].concat()
        } else {
            [other_cols, this_cols].concat()
        };
        let joined = RecordBatch::try_new(Arc::clone(&self.output_schema), columns)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        crate::pane_buffer::emit_sliced(&joined, self.batch_size, out)
    }
}

impl Operator for IntervalJoinOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.process(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Output,
    ) -> Result<()> {
        self.process(input, batch, out)
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        if watermark.0 <= self.watermark {
            return Ok(None);
        }
        self.watermark = watermark.0;
        let bytes = (self.sides[0].bytes() + self.sides[1].bytes()) as u64;
        self.state_bytes_max = self.state_bytes_max.max(bytes);
        // Left rows with ts + upper < wm, right rows with ts - lower < wm.
        let wm = self.watermark;
        let thresholds = [wm.saturating_sub(self.upper), wm.saturating_add(self.lower)];
        for (input, &threshold) in thresholds.iter().enumerate() {
            let due = self.sides[input].due(threshold);
            if let Some(rows) =
                self.sides[input].unmatched_before(&due, threshold, &self.schemas[input])?
            {
                self.emit_padded(input, &rows, out)?;
            }
            self.sides[input].expire(&due, threshold);
        }
        self.compact_keys()?;
        // The output keeps the left row's time (the right row's in a right
        // join), and a left row can still pair with a right row up to
        // `upper` after it (a right row with a left one `-lower` after it):
        // the watermark is held back that much so no output row is behind
        // it (as Flink delays its interval join's watermark).
        let delay = if self.kind == weir_core::spec::JoinKind::Right {
            self.lower.saturating_neg().max(0)
        } else {
            self.upper.max(0)
        };
        Ok(Some(Watermark(watermark.0.saturating_sub(delay))))
    }

    /// Tables `left` and `right` (the rows each side still buffers) and
    /// `meta` (the watermark).
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<crate::StateTable>> {
        let mut tables = Vec::new();
        for (input, name) in ["left", "right"].into_iter().enumerate() {
            let rows = self.live_rows(input)?;
            tables.push(
                crate::StateTable::new(name, rows)
                    .keyed(self.sides[input].key_indices.iter().copied()),
            );
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
            self.buffer_rows(input, rows)?;
        }
        if let Some(w) = watermark {
            self.watermark = w;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        vec![
            ("num_late_records_dropped".into(), self.late_dropped),
            ("state_bytes_max".into(), self.state_bytes_max),
            (
                "state_bytes".into(),
                (self.sides[0].bytes() + self.sides[1].bytes()) as u64,
            ),
            (
                "buffered_rows".into(),
                (self.sides[0].live_rows + self.sides[1].live_rows) as u64,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, Field, TimeUnit};
    use weir_core::config::WeirConfig;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
        ]))
    }

    fn batch(rows: &[(i64, i64)]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    rows.iter().map(|r| r.1),
                )),
            ],
        )
        .unwrap()
    }

    fn operator(lower: i64, upper: i64) -> IntervalJoinOperator {
        outer_operator(lower, upper, weir_core::spec::JoinKind::Inner)
    }

    fn outer_operator(
        lower: i64,
        upper: i64,
        kind: weir_core::spec::JoinKind,
    ) -> IntervalJoinOperator {
        let spec = IntervalJoinSpec {
            left_keys: vec!["k".into()],
            right_keys: vec!["k".into()],
            left_rowtime: "ts".into(),
            right_rowtime: "ts".into(),
            lower,
            upper,
            left_schema: schema(),
            right_schema: schema(),
            kind,
        };
        let outer = kind != weir_core::spec::JoinKind::Inner;
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let out = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, outer),
            Field::new("ts", ts.clone(), outer),
            Field::new("right_k", DataType::Int64, outer),
            Field::new("right_ts", ts, outer),
        ]));
        let ctx = OperatorContext::single("join", WeirConfig::default());
        IntervalJoinOperator::try_new("join".into(), &spec, out, &ctx).unwrap()
    }

    #[test]
    fn rows_stay_until_the_watermark_passes_their_last_match() {
        let mut op = operator(-5, 10);
        let mut out: Vec<RecordBatch> = Vec::new();
        op.process_input(0, batch(&[(1, 100)]), &mut out).unwrap();
        // Watermark at exactly ts + upper: a right row at 110 can still come.
        op.on_watermark(Watermark(110), &mut out).unwrap();
        assert_eq!(op.buffered_rows(), (1, 0));
        op.process_input(1, batch(&[(1, 110), (2, 110)]), &mut out)
            .unwrap();
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        // Past it, the left row is gone; the right rows wait for lefts up to
        // ts - lower = 115.
        op.on_watermark(Watermark(111), &mut out).unwrap();
        assert_eq!(op.buffered_rows(), (0, 2));
        op.on_watermark(Watermark(116), &mut out).unwrap();
        assert_eq!(op.buffered_rows(), (0, 0));
    }

    /// Many rows per key, some late, thousands sharing a time: after each
    /// watermark the left side holds exactly the rows it may still match.
    #[test]
    fn each_watermark_expires_exactly_the_rows_it_passes() {
        let mut op = operator(-5, 10);
        let mut out: Vec<RecordBatch> = Vec::new();
        let mut x: u64 = 7;
        let mut next = move |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        let mut kept: Vec<i64> = Vec::new();
        for step in 0..200i64 {
            let now = step * 10;
            let rows: Vec<(i64, i64)> = (0..50)
                .map(|_| {
                    let late = if next(5) == 0 { next(40) as i64 } else { 0 };
                    (next(20) as i64, now - late - (next(3) as i64))
                })
                .collect();
            kept.extend(rows.iter().map(|r| r.1));
            op.process_input(0, batch(&rows), &mut out).unwrap();
            // Behind every row still to come (none is late past 42).
            let watermark = now - 60 + next(7) as i64;
            op.on_watermark(Watermark(watermark), &mut out).unwrap();
            kept.retain(|&ts| ts + 10 >= watermark);
            assert_eq!(op.buffered_rows(), (kept.len(), 0), "step {step}");
        }
    }

    #[test]
    fn the_key_table_stays_flat_as_rows_expire_under_key_churn() {
        let mut op = operator(0, 10);
        let mut out: Vec<RecordBatch> = Vec::new();
        let mut biggest = 0;
        // New keys every second of event time; a row far ahead keeps the
        // state from ever being empty.
        op.process_input(0, batch(&[(-1, 1_000_000)]), &mut out)
            .unwrap();
        for second in 0..30i64 {
            let rows: Vec<(i64, i64)> = (0..1000)
                .map(|k| (second * 1000 + k, second * 1000))
                .collect();
            op.process_input(0, batch(&rows), &mut out).unwrap();
            op.process_input(1, batch(&rows), &mut out).unwrap();
            op.on_watermark(Watermark(second * 1000 + 20), &mut out)
                .unwrap();
            biggest = biggest.max(op.keys.len());
        }
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 30_000);
        assert!(biggest <= 4096 + 1001, "key table grew to {biggest}");
        assert_eq!(op.buffered_rows(), (1, 0));
        // The long-lived key still joins.
        out.clear();
        op.process_input(1, batch(&[(-1, 1_000_005)]), &mut out)
            .unwrap();
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    }

    /// Figures, not a check: few and many live keys, a watermark every
    /// batch.
    /// `cargo test --release -p weir-operators --lib interval_join_speed --
    /// --ignored --nocapture`.
    #[test]
    #[ignore]
    fn interval_join_speed() {
        // (keys, upper bound): about four rows of a key live per side.
        for (live_keys, upper) in [(1_000i64, 10), (100_000, 1_000)] {
            let mut op = operator(0, upper);
            let mut out: Vec<RecordBatch> = Vec::new();
            let (batches, rows) = (400i64, 4096i64);
            let start = std::time::Instant::now();
            let mut joined = 0;
            for b in 0..batches {
                // 10 ms of event time per batch; keys cycle through
                // `live_keys`, each both sides.
                let ts = b * 10;
                let rows: Vec<(i64, i64)> = (0..rows)
                    .map(|i| ((b * rows + i) * 7919 % live_keys, ts))
                    .collect();
                op.process_input(0, batch(&rows), &mut out).unwrap();
                op.process_input(1, batch(&rows), &mut out).unwrap();
                op.on_watermark(Watermark(ts - 1), &mut out).unwrap();
                joined += out.drain(..).map(|b| b.num_rows()).sum::<usize>();
            }
            let took = start.elapsed();
            println!(
                "{live_keys} keys, within {upper} ms: {} rows per side in {took:?}, {:.2} M rows/s, {joined} pairs",
                batches * rows,
                (2 * batches * rows) as f64 / took.as_secs_f64() / 1e6
            );
        }
    }

    #[test]
    fn rows_behind_the_watermark_are_dropped_and_counted() {
        let mut op = operator(0, 10);
        let mut out: Vec<RecordBatch> = Vec::new();
        op.process_input(0, batch(&[(1, 100)]), &mut out).unwrap();
        op.on_watermark(Watermark(105), &mut out).unwrap();
        // 104 < 105 is late although it would match; 105 is on time.
        op.process_input(1, batch(&[(1, 104), (1, 105)]), &mut out)
            .unwrap();
        let joined: usize = out.iter().map(|b| b.num_rows()).sum();
        assert_eq!(joined, 1);
        assert!(
            op.metrics()
                .contains(&("num_late_records_dropped".into(), 1))
        );
    }

    #[test]
    fn an_outer_side_emits_its_unmatched_rows_padded_when_the_watermark_passes_them() {
        let kind = weir_core::spec::JoinKind::Full;
        let mut op = outer_operator(0, 10, kind);
        let mut out: Vec<RecordBatch> = Vec::new();
        op.process_input(0, batch(&[(1, 100), (2, 100)]), &mut out)
            .unwrap();
        op.process_input(1, batch(&[(1, 105), (3, 50)]), &mut out)
            .unwrap();
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        // The snapshot keeps which rows found a partner.
        let tables = op.snapshot_state(1).unwrap();
        let mut op = outer_operator(0, 10, kind);
        op.restore_state(tables).unwrap();
        out.clear();
        // Right row (3, 50) can match no left row once the watermark passes
        // 50; left (2, 100) none once it passes 110; (1, 100) had a partner.
        let forwarded = op.on_watermark(Watermark(111), &mut out).unwrap();
        let padded: Vec<(Option<i64>, Option<i64>)> = out
            .iter()
            .flat_map(|b| {
                let l = b
                    .column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .clone();
                let r = b
                    .column(2)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .clone();
                (0..b.num_rows())
                    .map(move |i| {
                        (
                            l.is_valid(i).then(|| l.value(i)),
                            r.is_valid(i).then(|| r.value(i)),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(padded, [(Some(2), None), (None, Some(3))]);
        // The watermark is held back by the upper bound.
        assert_eq!(forwarded, Some(Watermark(101)));
    }
}
