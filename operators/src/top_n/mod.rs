//! Top-N per key (and deduplication, N = 1): SQL's `ROW_NUMBER() OVER
//! (PARTITION BY k ORDER BY …) <= N`.
//!
//! Column at a time: keys are interned to dense ids (DataFusion's group
//! table, vectorized) and the order columns row-encoded once per batch, so
//! rows rank by comparing bytes (the arrival number breaks ties: earlier
//! rows rank first, as in Flink, or later ones for keep-last
//! deduplication). Each key keeps a short list of its rows in rank order
//! (sort key, arrival, slot); the rows themselves live in one shared row
//! store ([`RowStore`]), appended a batch at a time. A batch's rows are
//! grouped by key with a counting sort and ranked into each key's list
//! without copying a row; the changes of every key are then gathered in
//! one `interleave` into one output batch, and the rows that entered are
//! stored with one `take`. The changelog compares old and new kept rows as
//! multisets: a row that left is `-D` (or `-U` when the same row stays at
//! another position), one that entered is `+I` (or `+U`). With a
//! row-number column, a row whose position changed is retracted and
//! re-emitted with its new number ([`ranks`]).
//!
//! Final rows ([`FinalRows`]) emit no changelog. A window Top-N (the key
//! includes the window end): each window's kept rows leave once, numbered,
//! when the watermark passes `window_end - 1`, and rows of a window already
//! emitted are late, as Flink's WindowRankOperator does. Keep-first
//! deduplication by rowtime: a key's earliest row leaves when the watermark
//! reaches its rowtime, rows behind the watermark are late, and an emitted
//! key drops every later row, as Flink's RowTimeDeduplicateKeepFirstRow-
//! Function does. Late rows are counted in `num_late_records_dropped`.
//!
//! Snapshots: table `rows` (every kept row, keyed by the key columns); with
//! final rows also `meta` (the watermark, as the window operators) and, for
//! keep-first, `emitted` (the key columns of every key emitted).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion_physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion_physical_plan::aggregates::order::GroupOrdering;
use weir_core::changelog::RowKind;
use weir_core::spec::{FinalRows, TopNSpec};
use weir_core::{Result, WeirError};

use crate::process::now_ms;
use crate::row_store::{Ref, RowStore};
use crate::{KeyGroupFilter, Operator, OperatorContext, Output, StateTable};

mod changes;
mod ranks;
mod state;

use changes::{Changes, arrival_order, rows_equal};
use ranks::{Change, Kept, Rule, Src};

/// Rows per output batch of a whole-state emit (batch mode's end).
const EMIT_ROWS: usize = 8192;

/// The Top-N operator of one subtask.
pub struct TopNOperator {
    name: String,
    key_indices: Vec<usize>,
    order_indices: Vec<usize>,
    rule: Rule,
    changelog: bool,
    /// Upsert mode: no `-U` rows ([`TopNSpec::upsert`]).
    upsert: bool,
    input_schema: SchemaRef,
    schema: SchemaRef,
    key_schema: SchemaRef,
    /// Keys interned to dense ids (vectorized).
    keys: Box<dyn GroupValues>,
    /// Row-encodes keys: keep-first's emitted keys.
    key_rows: RowConverter,
    /// Row-encodes the order columns, sort options applied: bytes compare
    /// as rows rank.
    order_rows: RowConverter,
    /// Each key's kept rows in rank order, by key id.
    ranks: Vec<Vec<Kept>>,
    /// Keys with kept rows.
    live_keys: usize,
    /// Kept rows (by slot), gathered column at a time.
    store: RowStore,
    free_slots: Vec<u32>,
    /// Slots handed out so far.
    next_slot: u32,
    /// Kept rows and the bytes of their order keys.
    kept_rows: usize,
    order_bytes: usize,
    /// Arrival number of the next input row.
    seq: u64,
    /// Per key id: its place among the keys of the batch going through.
    scratch: Vec<u32>,
    key_groups: KeyGroupFilter,
    /// Rows final once the watermark passes a time column (its index).
    final_rows: Option<Final>,
    /// Final rows: each key's due time (ms), and keys by due time (stale
    /// entries are skipped: a key's time is the one in `due`).
    due: Vec<i64>,
    timers: BinaryHeap<Reverse<(i64, u32)>>,
    /// The last watermark (final rows).
    watermark: i64,
    late: u64,
    /// Restored input rows the disk backend held back.
    replay: crate::spill::Replay,
    /// Keep-first by rowtime: the keys emitted (row-encoded), with when
    /// (processing time, ms).
    emitted: HashMap<Box<[u8]>, i64>,
    /// `table.exec.state.ttl` (ms), for every kind but window Top-N (whose
    /// windows leave with the watermark): a key not written for this long
    /// is forgotten, without output, as Flink's state TTL.
    ttl: Option<i64>,
    /// With a TTL: when each key was last written (ms), by key id.
    written: Vec<i64>,
    last_sweep: i64,
    /// The latest processing time seen (ms): when keys are emitted.
    clock: i64,
}

#[derive(Clone, Copy)]
enum Final {
    WindowEnd(usize),
    FirstByRowtime(usize),
}

impl TopNOperator {
    /// The operator of one subtask.
    pub fn try_new(
        name: String,
        spec: &TopNSpec,
        schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let input = &spec.input_schema;
        let key_indices = crate::column_indices(input, &spec.keys)?;
        let mut order_indices = vec![];
        let mut order_fields = vec![];
        for (c, desc, nulls_first) in &spec.order {
            let i = input.index_of(c)?;
            order_indices.push(i);
            order_fields.push(SortField::new_with_options(
                input.field(i).data_type().clone(),
                SortOptions {
                    descending: *desc,
                    nulls_first: *nulls_first,
                },
            ));
        }
        let fields_of = |indices: &[usize]| -> Vec<SortField> {
            indices
                .iter()
                .map(|&i| SortField::new(input.field(i).data_type().clone()))
                .collect()
        };
        let key_schema = Arc::new(Schema::new(
            key_indices
                .iter()
                .map(|&i| Arc::clone(&input.fields()[i]))
                .collect::<Vec<_>>(),
        ));
        Ok(Self {
            name,
            rule: Rule {
                limit: spec.limit,
                later_wins_ties: spec.later_wins_ties,
                row_number: spec.row_number.is_some(),
            },
            changelog: spec.changelog,
            upsert: spec.upsert.is_some(),
            input_schema: Arc::clone(input),
            schema,
            keys: new_group_values(Arc::clone(&key_schema), &GroupOrdering::None)?,
            key_schema,
            key_rows: RowConverter::new(fields_of(&key_indices))?,
            order_rows: RowConverter::new(order_fields)?,
            key_indices,
            order_indices,
            ranks: vec![],
            live_keys: 0,
            store: RowStore::new(Arc::clone(input)),
            free_slots: vec![],
            next_slot: 0,
            kept_rows: 0,
            order_bytes: 0,
            seq: 0,
            scratch: vec![],
            key_groups: KeyGroupFilter::new(ctx),
            final_rows: match &spec.final_rows {
                None => None,
                Some(FinalRows::WindowEnd(c)) => Some(Final::WindowEnd(input.index_of(c)?)),
                Some(FinalRows::FirstByRowtime(c)) => {
                    Some(Final::FirstByRowtime(input.index_of(c)?))
                }
            },
            due: vec![],
            timers: BinaryHeap::new(),
            watermark: i64::MIN,
            replay: Default::default(),
            late: 0,
            emitted: HashMap::new(),
            ttl: ctx
                .config
                .state
                .ttl
                .filter(|_| !matches!(spec.final_rows, Some(FinalRows::WindowEnd(_))))
                .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            written: vec![],
            last_sweep: now_ms(),
            clock: now_ms(),
        })
    }

    /// The times in `column` of `rows`, in milliseconds.
    fn times(&self, rows: &RecordBatch, column: usize) -> Result<Vec<Option<i64>>> {
        let ends = arrow::compute::cast(
            rows.column(column),
            &arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
        )?;
        let ends = ends.as_primitive::<arrow::datatypes::TimestampMillisecondType>();
        Ok(ends.iter().collect())
    }

    /// Final rows: the rows of `batch` that are neither late (counted) nor
    /// of a key already emitted (keep-first; not counted).
    fn drop_late(&mut self, batch: RecordBatch) -> Result<RecordBatch> {
        let watermark = self.watermark;
        let (column, on_time): (usize, fn(i64, i64) -> bool) = match self.final_rows {
            None => return Ok(batch),
            Some(Final::WindowEnd(c)) => (c, |end, w| end - 1 > w),
            Some(Final::FirstByRowtime(c)) => (c, |t, w| t >= w),
        };
        let done = if self.emitted.is_empty() {
            None
        } else {
            let keys = self.key_rows.convert_columns(&self.key_columns(&batch))?;
            Some(
                keys.iter()
                    .map(|k| self.emitted.contains_key(k.data()))
                    .collect::<Vec<bool>>(),
            )
        };
        let mut keep = Vec::with_capacity(batch.num_rows());
        for (i, t) in self.times(&batch, column)?.into_iter().enumerate() {
            let fresh = t.is_some_and(|t| on_time(t, watermark));
            self.late += u64::from(!fresh);
            keep.push(fresh && !done.as_ref().is_some_and(|d| d[i]));
        }
        let keep = arrow::array::BooleanArray::from(keep);
        Ok(arrow::compute::filter_record_batch(&batch, &keep)?)
    }

    fn key_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        self.key_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect()
    }

    /// A final row's due time: when the watermark makes it final.
    fn due_time(&self, time: Option<i64>) -> i64 {
        match (self.final_rows, time) {
            (_, None) | (None, _) => i64::MIN,
            (Some(Final::WindowEnd(_)), Some(end)) => end.saturating_sub(1),
            (Some(Final::FirstByRowtime(_)), Some(t)) => t,
        }
    }

    /// Final rows: emit and forget every key the watermark made final —
    /// a closed window's rows, or a key's first row (remembered as
    /// emitted) — earlier times first, all in one batch.
    fn emit_final(&mut self, out: &mut dyn Output) -> Result<()> {
        let Some(mode) = self.final_rows else {
            return Ok(());
        };
        let mut due = vec![];
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if t > self.watermark {
                break;
            }
            self.timers.pop();
            let k = id as usize;
            if self.due[k] == t && !self.ranks[k].is_empty() {
                // Taken: a second entry of the same time is stale.
                self.due[k] = i64::MAX;
                due.push(k);
            }
        }
        if due.is_empty() {
            return Ok(());
        }
        let mut refs = vec![];
        let mut numbers = vec![];
        let mut firsts = vec![];
        for &k in &due {
            firsts.push(refs.len());
            for (n, kept) in self.ranks[k].iter().enumerate() {
                refs.push(Ref::Stored(kept.slot as usize));
                numbers.push(n as u64 + 1);
            }
        }
        let columns = self.store.gather_refs(&refs, None)?;
        let rows = RecordBatch::try_new(Arc::clone(&self.input_schema), columns)?;
        if matches!(mode, Final::FirstByRowtime(_)) {
            let keys = self.key_rows.convert_columns(&self.key_columns(&rows))?;
            for &f in &firsts {
                self.emitted.insert(keys.row(f).data().into(), self.clock);
            }
        }
        for k in due {
            self.forget(k);
        }
        out.collect(self.output(&rows, numbers, None)?)
    }

    /// Drop key `k`'s kept rows.
    fn forget(&mut self, k: usize) {
        let kept = std::mem::take(&mut self.ranks[k]);
        if kept.is_empty() {
            return;
        }
        self.live_keys -= 1;
        self.kept_rows -= kept.len();
        for row in kept {
            self.order_bytes -= row.order.len();
            self.store.remove(row.slot as usize);
            self.free_slots.push(row.slot);
        }
    }

    /// Output rows: the input columns, the row number, the change kind.
    fn output(
        &self,
        rows: &RecordBatch,
        numbers: Vec<u64>,
        kinds: Option<&[RowKind]>,
    ) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        if self.rule.row_number {
            columns.push(Arc::new(UInt64Array::from(numbers)));
        }
        if let Some(kinds) = kinds {
            columns.push(weir_core::changelog::row_kind_array(kinds.iter().copied()));
        }
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    /// Make room for key ids up to the key table's size.
    fn grow(&mut self) {
        let n = self.keys.len();
        if self.ranks.len() < n {
            self.ranks.resize_with(n, Vec::new);
            self.scratch.resize(n, u32::MAX);
            if self.final_rows.is_some() {
                self.due.resize(n, i64::MIN);
            }
            if self.ttl.is_some() {
                self.written.resize(n, 0);
            }
        }
    }

    /// Rank a batch in: the rows of each key it touches, in arrival order,
    /// against the key's kept rows; one gather of every change's rows.
    fn process(&mut self, batch: &RecordBatch, now: i64, out: &mut dyn Output) -> Result<()> {
        self.clock = self.clock.max(now);
        let n = batch.num_rows();
        let mut ids = Vec::with_capacity(n);
        self.keys.intern(&self.key_columns(batch), &mut ids)?;
        self.grow();
        let order_columns: Vec<ArrayRef> = self
            .order_indices
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        let order = self.order_rows.convert_columns(&order_columns)?;
        let times = match self.final_rows {
            Some(Final::WindowEnd(c) | Final::FirstByRowtime(c)) => Some(self.times(batch, c)?),
            None => None,
        };
        // Rows by key (keys in order of first appearance), by a counting
        // sort over each key's place.
        let mut touched: Vec<usize> = vec![];
        let mut place = Vec::with_capacity(n);
        for &id in &ids {
            let p = &mut self.scratch[id];
            if *p == u32::MAX {
                *p = touched.len() as u32;
                touched.push(id);
            }
            place.push(*p as usize);
        }
        let mut starts = vec![0usize; touched.len() + 1];
        for &p in &place {
            starts[p + 1] += 1;
        }
        for g in 0..touched.len() {
            starts[g + 1] += starts[g];
        }
        let mut fill = starts.clone();
        let mut by_key = vec![0u32; n];
        for (r, &p) in place.iter().enumerate() {
            by_key[fill[p]] = r as u32;
            fill[p] += 1;
        }
        for &id in &touched {
            self.scratch[id] = u32::MAX;
        }
        let first_seq = self.seq;
        self.seq += n as u64;
        let keep_last = self.changelog && self.rule.limit == 1 && self.rule.later_wins_ties;
        let mut changes = Changes::default();
        // Whether each key's changes of new rows are in arrival order.
        let mut keys_in_arrival = true;
        let mut key_changes: Vec<Change> = vec![];
        // Per-key scratch, reused: no allocation per key touched.
        let mut ranking: Vec<Src> = vec![];
        let mut kept: Vec<Kept> = vec![];
        let mut puts: Vec<(usize, u32)> = vec![];
        let mut freed: Vec<u32> = vec![];
        for (g, &id) in touched.iter().enumerate() {
            let rows = &by_key[starts[g]..starts[g + 1]];
            let mut old = std::mem::take(&mut self.ranks[id]);
            let order_of = |s: Src| -> (&[u8], u64) {
                match s {
                    Src::Old(i) => (&old[i as usize].order, old[i as usize].seq),
                    Src::New(r) => (order.row(r as usize).data(), first_seq + u64::from(r)),
                }
            };
            key_changes.clear();
            ranking.clear();
            if keep_last {
                ranking.extend(self.rule.keep_last(
                    !old.is_empty(),
                    rows,
                    &order_of,
                    &mut key_changes,
                ));
            } else {
                ranking.extend((0..old.len() as u32).map(Src::Old));
                self.rule.rank_in(&mut ranking, rows, &order_of);
                if self.changelog {
                    let store = &self.store;
                    let mut same = |a: Src, b: Src| -> Result<bool> {
                        let at = |s: Src| match s {
                            Src::Old(i) => store.row(old[i as usize].slot as usize),
                            Src::New(r) => (batch, r as usize),
                        };
                        rows_equal(at(a), at(b))
                    };
                    self.rule.changes(
                        old.len(),
                        &ranking,
                        &order_of,
                        &mut same,
                        &mut key_changes,
                    )?;
                }
            }
            let mut last_new = None;
            for c in &key_changes {
                if self.upsert && c.kind == RowKind::UpdateBefore {
                    continue;
                }
                if let Src::New(r) = c.src {
                    keys_in_arrival &= last_new.is_none_or(|l| l < r);
                    last_new = Some(r);
                }
                changes.refs.push(match c.src {
                    Src::Old(i) => Ref::Stored(old[i as usize].slot as usize),
                    Src::New(r) => Ref::Extra(r as usize),
                });
                changes.numbers.push(c.number);
                changes.kinds.push(c.kind);
            }
            let head_before = old.first().map(|k| k.seq);
            let was_empty = old.is_empty();
            for s in &ranking {
                kept.push(match *s {
                    Src::Old(i) => {
                        let o = &mut old[i as usize];
                        let row = Kept {
                            order: std::mem::take(&mut o.order),
                            seq: o.seq,
                            slot: o.slot,
                        };
                        o.slot = u32::MAX;
                        row
                    }
                    Src::New(r) => {
                        let slot = self.free_slots.pop().unwrap_or_else(|| {
                            self.next_slot += 1;
                            self.next_slot - 1
                        });
                        puts.push((slot as usize, r));
                        let order = Box::<[u8]>::from(order.row(r as usize).data());
                        self.order_bytes += order.len();
                        Kept {
                            order,
                            seq: first_seq + u64::from(r),
                            slot,
                        }
                    }
                });
            }
            for o in &old {
                if o.slot != u32::MAX {
                    self.order_bytes -= o.order.len();
                    freed.push(o.slot);
                }
            }
            self.kept_rows = self.kept_rows + kept.len() - old.len();
            // The key's list takes the new rows in the old list's place.
            old.clear();
            old.append(&mut kept);
            let kept = old;
            match (was_empty, kept.is_empty()) {
                (true, false) => self.live_keys += 1,
                (false, true) => self.live_keys -= 1,
                _ => {}
            }
            if let (Some(times), Some(head)) = (&times, kept.first())
                && head_before != Some(head.seq)
                && head.seq >= first_seq
            {
                let r = (head.seq - first_seq) as usize;
                let t = self.due_time(times[r]);
                if was_empty || self.due[id] != t {
                    self.due[id] = t;
                    self.timers.push(Reverse((t, id as u32)));
                }
            }
            if self.ttl.is_some() {
                self.written[id] = now;
            }
            self.ranks[id] = kept;
        }
        // The changed rows: when they are all rows of this batch (a
        // deduplication keeping the latest row: each change is a new row),
        // they leave in arrival order, which keeps each key's changes in
        // theirs, and come from the batch alone — as it is, when every row
        // changed.
        if keys_in_arrival && let Some(order) = arrival_order(&changes.refs, batch.num_rows()) {
            changes.reorder(&order);
        }
        let fresh: Option<Vec<u32>> = changes
            .refs
            .iter()
            .map(|r| match *r {
                Ref::Extra(row) => Some(row as u32),
                Ref::Stored(_) => None,
            })
            .collect();
        let mut changed: Option<RecordBatch> = None;
        if !changes.refs.is_empty() {
            let columns = match &fresh {
                Some(rows) => crate::batch_rows::rows_of(batch.columns(), batch.num_rows(), rows)?,
                None => self.store.gather_refs(&changes.refs, Some(batch))?,
            };
            changed = Some(RecordBatch::try_new(
                Arc::clone(&self.input_schema),
                columns,
            )?);
        }
        // The store copies the rows that stay, or keeps the whole batch
        // when most of its rows do.
        self.store
            .put_rows(puts.iter().copied(), batch.columns().to_vec())?;
        if let Some(rows) = changed {
            out.collect(self.output(&rows, changes.numbers, Some(&changes.kinds))?)?;
        }
        for slot in freed {
            self.store.remove(slot as usize);
            self.free_slots.push(slot);
        }
        self.compact_keys()
    }

    /// Rebuild the key table when dead keys (emitted, expired, or never
    /// kept) outnumber the live ones, moving per-key state along.
    fn compact_keys(&mut self) -> Result<()> {
        if !crate::key_table::due(self.keys.len(), self.live_keys) {
            return Ok(());
        }
        let live: Vec<bool> = self.ranks.iter().map(|r| !r.is_empty()).collect();
        let moved = crate::key_table::compact(&mut self.keys, &self.key_schema, &live)?;
        let mut ranks = Vec::with_capacity(self.live_keys);
        let mut due = vec![];
        let mut written = vec![];
        for (old, new) in moved.iter().enumerate() {
            if let Some(new) = *new {
                debug_assert_eq!(new, ranks.len());
                ranks.push(std::mem::take(&mut self.ranks[old]));
                if self.final_rows.is_some() {
                    due.push(self.due[old]);
                }
                if self.ttl.is_some() {
                    written.push(self.written[old]);
                }
            }
        }
        self.ranks = ranks;
        self.due = due;
        self.written = written;
        self.scratch = vec![u32::MAX; self.ranks.len()];
        if self.final_rows.is_some() {
            self.timers = self
                .due
                .iter()
                .enumerate()
                .map(|(k, &t)| Reverse((t, k as u32)))
                .collect();
        }
        Ok(())
    }

    /// Forget keys (kept rows, and keys emitted by keep-first) not written
    /// within the TTL, at most every tenth of it.
    fn sweep(&mut self, now: i64) {
        let Some(ttl) = self.ttl else { return };
        if now - self.last_sweep < (ttl / 10).max(10) {
            return;
        }
        self.last_sweep = now;
        self.clock = self.clock.max(now);
        let cutoff = now.saturating_sub(ttl);
        for k in 0..self.ranks.len() {
            if !self.ranks[k].is_empty() && self.written[k] < cutoff {
                self.forget(k);
            }
        }
        self.emitted.retain(|_, t| *t >= cutoff);
        if self.emitted.capacity() / 4 > self.emitted.len() {
            self.emitted.shrink_to_fit();
        }
    }
}

impl TopNOperator {
    /// Restored pending rows first: their changes go out before the next
    /// input's.
    fn put_through_replay(&mut self, out: &mut dyn Output) -> Result<()> {
        for (_, batch) in self.replay.drain() {
            let now = now_ms();
            self.process(&batch, now, out)
                .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))?;
        }
        Ok(())
    }
}

impl Operator for TopNOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        let batch = self.drop_late(batch)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let now = now_ms();
        self.sweep(now);
        self.process(&batch, now, out)
            .map_err(|e| WeirError::Execution(format!("{}: {e}", self.name)))
    }

    /// A streaming Top-N (and keep-last deduplication) spills by its key;
    /// final rows wait on the watermark, so they stay in memory.
    fn spill_keys(&self) -> Option<Vec<Vec<usize>>> {
        (self.changelog && self.final_rows.is_none()).then(|| vec![self.key_indices.clone()])
    }

    fn next_processing_timer(&self) -> Option<i64> {
        // With a TTL, sweep while no input comes too.
        self.ttl.map(|t| self.last_sweep + (t / 10).max(10))
    }

    fn on_processing_time(&mut self, now: i64, _out: &mut dyn Output) -> Result<()> {
        self.sweep(now);
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: weir_core::message::Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<weir_core::message::Watermark>> {
        self.put_through_replay(out)?;
        if self.final_rows.is_some() {
            self.watermark = self.watermark.max(watermark.0);
            self.emit_final(out)?;
        }
        Ok(Some(watermark))
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.put_through_replay(out)?;
        // Streaming Top-N emitted its changes; final rows leave at the
        // final watermark, and rows not final at a stop with a savepoint
        // stay in its state.
        if self.changelog || self.final_rows.is_some() {
            return Ok(());
        }
        if self.kept_rows == 0 {
            return Ok(());
        }
        for (rows, numbers) in self.all_kept(EMIT_ROWS)? {
            out.collect(self.output(&rows, numbers, None)?)?;
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        let bytes = self.store.bytes()
            + self.keys.size()
            + self.order_bytes
            + self.kept_rows * std::mem::size_of::<Kept>()
            + self.ranks.len() * std::mem::size_of::<Vec<Kept>>();
        let mut m = vec![
            ("keys".into(), self.live_keys as u64),
            ("state_bytes".into(), bytes as u64),
        ];
        if self.final_rows.is_some() {
            m.push(("num_late_records_dropped".into(), self.late));
        }
        m
    }

    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        self.snapshot()
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        self.restore(tables)
    }
}

#[cfg(test)]
mod tests;
