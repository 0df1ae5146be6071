//! The disk backend: keyed state beyond the managed memory budget.
//!
//! Any operator whose state is all keyed (but for its clocks) declares its
//! inputs' key columns ([`Operator::spill_keys`]): the updating `GROUP BY`,
//! the regular join, streaming Top-N and deduplication, and the window and
//! session aggregates, which also say when their output waits on time
//! ([`Operator::watermark_timers`], see `time.rs`: a spilled partition is
//! read back only when one of its timers, or one its pending rows may set,
//! is due). Under `state.backend.type = 'disk'`
//! such an operator runs as [`PARTITIONS`] instances of itself, keys split
//! among them by a hash — each an ordinary columnar operator (vectorized
//! updates) while it is in memory. Past the budget the least recently used
//! partitions are spilled: the tables of their snapshot written as Arrow
//! IPC files under the task's folder in `state.backend.local-dir`, the
//! partition dropped from memory, and restored from those files when it is
//! needed again. Rows are not looked up one by one: each partition's rows
//! wait in memory (pending, in arrival order across inputs) and go through
//! together — a partition in memory takes them [`RESIDENT_BATCH`] at a
//! time; a spilled one is read back whole when its pending rows take more
//! than their share of the budget. Every pending row goes through after a
//! quiet second of input and at the end of the input. So state is read
//! and written a partition at a time, and the changes of a cold key are
//! sent when its partition is merged (as Flink's mini-batch operators send
//! a batch's changes at once); the final rows are the in-memory backend's.
//!
//! Snapshots hold every partition's tables under the operator's own names
//! and the pending rows of input `i` as [`pending_table`]`(i)`, so a job
//! restores into either backend (the in-memory operators put restored
//! pending rows through before their next input, [`Replay`]); restore
//! routes rows back to their partitions by the same hash of their key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use weir_core::message::Watermark;
use weir_core::{Result, WeirError};

use crate::memory::StateReservation;
use crate::process::now_ms;
use crate::{KeyGroupFilter, Operator, OperatorContext, Output, StateTable};

mod files;
mod pending;
mod time;

use files::{read_ipc, task_dir, write_ipc};
pub(crate) use pending::Replay;
use pending::{Pending, Run};
pub use pending::{pending_input, pending_table};

/// Partitions of a subtask's keys: the unit read from and written to disk.
pub const PARTITIONS: usize = 64;

/// Rows a partition in memory gathers before they go through.
const RESIDENT_BATCH: usize = 8192;

/// Most pending rows put through a partition in one batch.
const MERGE_ROWS: usize = 65_536;

/// How long the input must be quiet before every pending row goes through.
const QUIET_MS: i64 = 1000;

/// Makes one partition's operator (an in-memory one, its memory counted
/// by the spilling operator).
pub type MakeOperator = Box<dyn Fn() -> Result<Box<dyn Operator>> + Send>;

/// A table of a spilled partition's snapshot, on disk.
struct SpilledTable {
    name: String,
    keys: Option<Vec<usize>>,
    path: PathBuf,
    rows: usize,
}

/// One partition of the keys.
struct Partition {
    /// In memory: the partition's operator.
    resident: Option<Box<dyn Operator>>,
    /// On disk: its snapshot's tables, when it was spilled.
    spilled: Vec<SpilledTable>,
    /// Input rows waiting for the partition, in arrival order.
    pending: Vec<Run>,
    /// Rows pending, over every run.
    pending_rows: usize,
    /// Bytes of the resident state, as last measured.
    bytes: usize,
    /// When it was last used (a counter): the least recent is spilled first.
    used: u64,
    /// The watermark its operator has seen.
    seen: i64,
    /// The earliest event time of its pending rows (the least when an
    /// input's rows may set any timer), for operators that wait on time.
    min_rowtime: i64,
    /// Spilled: the watermark and clock at which its timers are due.
    event_due: Option<i64>,
    clock_due: Option<i64>,
}

impl Default for Partition {
    fn default() -> Self {
        Self {
            resident: None,
            spilled: Vec::new(),
            pending: Vec::new(),
            pending_rows: 0,
            bytes: 0,
            used: 0,
            seen: i64::MIN,
            min_rowtime: i64::MAX,
            event_due: None,
            clock_due: None,
        }
    }
}

impl Partition {
    fn pending_bytes(&self) -> usize {
        self.pending.iter().map(|r| r.rows.bytes()).sum()
    }

    fn is_spilled(&self) -> bool {
        !self.spilled.is_empty()
    }

    /// Rows `rows` of input `input`'s `batch`, after those pending.
    fn push(&mut self, input: usize, batch: &RecordBatch, rows: UInt32Array) -> Result<()> {
        self.pending_rows += rows.len();
        if self.pending.last().is_none_or(|r| r.input != input) {
            self.pending.push(Run {
                input,
                rows: Pending::default(),
            });
        }
        self.pending
            .last_mut()
            .expect("pushed")
            .rows
            .push(batch, rows)
    }
}

/// The disk backend's form of a keyed operator, for one subtask.
pub struct SpillingKeyed {
    name: String,
    make: MakeOperator,
    /// Key columns of each input.
    input_keys: Vec<Vec<usize>>,
    /// Key columns of each table of a partition's snapshot (a restored
    /// table does not carry them).
    table_keys: Vec<(String, Vec<usize>)>,
    /// For an operator whose output waits on time: the event-time column
    /// of each input bounding the timers its rows set
    /// ([`crate::WatermarkTimers::rowtime`]).
    rowtime: Option<Vec<Option<usize>>>,
    /// The last watermark received.
    watermark: i64,
    /// Restored tables that are not keyed (an operator's clocks): every
    /// partition made afresh starts from them.
    shared: Vec<StateTable>,
    key_groups: KeyGroupFilter,
    partitions: Vec<Partition>,
    dir: PathBuf,
    memory: StateReservation,
    tick: u64,
    last_input: i64,
    hashes: Vec<u64>,
    /// Counters of partitions' operators at the time they were spilled (a
    /// partition read back starts counting from zero).
    retired: Vec<(String, u64)>,
    /// Counters: partitions written to and read from disk, their bytes.
    spills: u64,
    loads: u64,
    spilled_bytes: u64,
}

impl SpillingKeyed {
    /// The operator of one subtask: partitions made by `make`, keys in
    /// columns `input_keys[i]` of input `i`, spilled under `ctx`'s local
    /// dir within its budget.
    pub fn try_new(
        name: String,
        make: MakeOperator,
        input_keys: Vec<Vec<usize>>,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let dir = task_dir(ctx.memory.spill_root(), &name, ctx.subtask)?;
        // An empty partition's snapshot names its tables and their keys.
        let mut probe = make()?;
        let rowtime = probe.watermark_timers().map(|t| t.rowtime);
        let mut table_keys: Vec<(String, Vec<usize>)> = probe.keyed_tables();
        for t in probe.snapshot_state(0)? {
            if let Some(keys) = t.key_columns
                && !table_keys.iter().any(|(n, _)| *n == t.name)
            {
                table_keys.push((t.name, keys));
            }
        }
        Ok(Self {
            table_keys,
            rowtime,
            watermark: i64::MIN,
            shared: Vec::new(),
            memory: ctx.memory.reserve(&name, true),
            name,
            make,
            input_keys,
            key_groups: KeyGroupFilter::new(ctx),
            partitions: (0..PARTITIONS).map(|_| Partition::default()).collect(),
            dir,
            tick: 0,
            last_input: now_ms(),
            hashes: vec![],
            retired: Vec::new(),
            spills: 0,
            loads: 0,
            spilled_bytes: 0,
        })
    }

    /// Row indices of `batch` by partition (columns `keys` are the key).
    fn route(&mut self, batch: &RecordBatch, keys: &[usize]) -> Result<Vec<(usize, UInt32Array)>> {
        if keys.is_empty() {
            let all = UInt32Array::from_iter_values(0..batch.num_rows() as u32);
            return Ok(vec![(0, all)]);
        }
        let columns: Vec<ArrayRef> = keys.iter().map(|&k| Arc::clone(batch.column(k))).collect();
        weir_core::keys::hash_columns(&columns, &mut self.hashes)?;
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); PARTITIONS];
        for (r, &h) in self.hashes.iter().enumerate() {
            rows[partition_of(h)].push(r as u32);
        }
        Ok(rows
            .into_iter()
            .enumerate()
            .filter(|(_, picks)| !picks.is_empty())
            .map(|(p, picks)| (p, UInt32Array::from(picks)))
            .collect())
    }

    fn path(&self, p: usize, table: usize) -> PathBuf {
        self.dir.join(format!("partition-{p:03}-{table}.arrow"))
    }

    /// Bytes held in memory: resident partitions and pending rows.
    fn held(&self) -> usize {
        self.partitions
            .iter()
            .map(|p| p.bytes + p.pending_bytes())
            .sum()
    }

    fn pending_bytes(&self) -> usize {
        self.partitions.iter().map(Partition::pending_bytes).sum()
    }

    /// Write partition `p`'s state to disk and drop it from memory.
    fn spill(&mut self, p: usize) -> Result<()> {
        let Some(mut op) = self.partitions[p].resident.take() else {
            return Ok(());
        };
        let mut spilled = Vec::new();
        for (i, t) in op.snapshot_state(0)?.into_iter().enumerate() {
            if t.batch.num_rows() == 0 {
                continue;
            }
            let path = self.path(p, i);
            let bytes = write_ipc(&path, &t.batch).map_err(|e| self.io_error("write", &path, e))?;
            self.spilled_bytes += bytes;
            spilled.push(SpilledTable {
                name: t.name,
                keys: t.key_columns,
                rows: t.batch.num_rows(),
                path,
            });
        }
        self.spills += 1;
        let counters = op.metrics().into_iter();
        add_counters(
            &mut self.retired,
            counters.filter(|(k, _)| !k.starts_with("state_")).collect(),
        );
        let timers = op.watermark_timers().unwrap_or_default();
        let part = &mut self.partitions[p];
        part.spilled = spilled;
        part.bytes = 0;
        part.event_due = timers.event;
        part.clock_due = timers.processing;
        Ok(())
    }

    /// The tables of spilled partition `p`, read back.
    fn read_spilled(&self, p: usize) -> Result<Vec<StateTable>> {
        let mut tables = Vec::new();
        for t in &self.partitions[p].spilled {
            for batch in read_ipc(&t.path).map_err(|e| self.io_error("read", &t.path, e))? {
                let mut table = StateTable::new(t.name.clone(), batch);
                table.key_columns = t.keys.clone();
                tables.push(table);
            }
        }
        Ok(tables)
    }

    /// Partition `p` in memory: read back from disk when it was spilled.
    fn load(&mut self, p: usize) -> Result<()> {
        if self.partitions[p].resident.is_some() {
            return Ok(());
        }
        let mut op = (self.make)()?;
        if self.partitions[p].is_spilled() {
            op.restore_state(self.read_spilled(p)?)?;
            for t in std::mem::take(&mut self.partitions[p].spilled) {
                let _ = std::fs::remove_file(&t.path);
            }
            self.loads += 1;
        } else if !self.shared.is_empty() {
            op.restore_state(self.shared.clone())?;
        }
        let part = &mut self.partitions[p];
        part.bytes = state_bytes(op.as_ref());
        part.resident = Some(op);
        Ok(())
    }

    fn io_error(&self, what: &str, path: &Path, e: impl std::fmt::Display) -> WeirError {
        WeirError::Execution(format!(
            "{}: cannot {what} spilled state {}: {e}",
            self.name,
            path.display()
        ))
    }

    /// Partition `p` read back with its pending rows put through.
    fn merge(&mut self, p: usize, out: &mut dyn Output) -> Result<()> {
        self.load(p)?;
        self.tick += 1;
        let part = &mut self.partitions[p];
        part.used = self.tick;
        part.pending_rows = 0;
        part.min_rowtime = i64::MAX;
        let op = part.resident.as_mut().expect("loaded");
        // A partition left out of watermarks had nothing due at them, and
        // its pending rows are not late at them: it sees the last one
        // before they go through.
        if self.rowtime.is_some() && part.seen < self.watermark {
            op.on_watermark(Watermark(self.watermark), out)?;
            part.seen = self.watermark;
        }
        // Pending rows in arrival order, in batches of up to MERGE_ROWS (a
        // key's changes within one batch go out as one update).
        for mut run in std::mem::take(&mut part.pending) {
            let pending = run.rows.take()?;
            let mut from = 0;
            while from < pending.len() {
                let mut to = from;
                let mut rows = 0;
                while to < pending.len()
                    && (to == from || rows + pending[to].num_rows() <= MERGE_ROWS)
                {
                    rows += pending[to].num_rows();
                    to += 1;
                }
                let batch = if to - from == 1 {
                    pending[from].clone()
                } else {
                    arrow::compute::concat_batches(&pending[from].schema(), &pending[from..to])?
                };
                op.process_input(run.input, batch, out)?;
                from = to;
            }
        }
        part.bytes = state_bytes(op.as_ref());
        Ok(())
    }

    /// Bring the state within the budget: merge the partition with the
    /// most pending rows while pending rows take more than half of what is
    /// held, and spill the least recently used partitions while over it.
    fn fit(&mut self, out: &mut dyn Output) -> Result<()> {
        self.fit_with(true, out)
    }

    /// [`Self::fit`], merging pending rows only when `merging` (a restore
    /// emits nothing: it only spills).
    fn fit_with(&mut self, merging: bool, out: &mut dyn Output) -> Result<()> {
        loop {
            let held = self.held();
            if self.memory.resize(with_headroom(held))? {
                return Ok(());
            }
            if merging
                && self.pending_bytes() * 2 > held
                && let Some(p) = (0..PARTITIONS)
                    .filter(|&p| self.partitions[p].pending_rows > 0)
                    .max_by_key(|&p| self.partitions[p].pending_bytes())
            {
                // Make room first, so the merge does not push others out
                // while it reads.
                if let Some(victim) = self.least_recent(Some(p)) {
                    self.spill(victim)?;
                }
                self.merge(p, out)?;
                continue;
            }
            match self.least_recent(None) {
                Some(victim) => self.spill(victim)?,
                // Nothing left to spill: a partition alone is over budget.
                None => {
                    self.memory.force(with_headroom(held));
                    return Ok(());
                }
            }
        }
    }

    /// The resident partition used least recently (not `except`).
    fn least_recent(&self, except: Option<usize>) -> Option<usize> {
        (0..PARTITIONS)
            .filter(|&p| Some(p) != except && self.partitions[p].resident.is_some())
            .min_by_key(|&p| self.partitions[p].used)
    }

    /// Every pending row through (quiet input, end of input).
    fn merge_all(&mut self, out: &mut dyn Output) -> Result<()> {
        for p in 0..PARTITIONS {
            if self.partitions[p].pending_rows > 0 {
                self.merge(p, out)?;
                self.fit(out)?;
            }
        }
        Ok(())
    }

    fn process(&mut self, input: usize, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let Some(keys) = self.input_keys.get(input).cloned() else {
            return Err(WeirError::Execution(format!(
                "{} has {} inputs but received input {input}",
                self.name,
                self.input_keys.len()
            )));
        };
        self.last_input = now_ms();
        for (p, rows) in self.route(&batch, &keys)? {
            self.push(p, input, &batch, rows)?;
            let part = &mut self.partitions[p];
            // A partition in memory (or new) takes its rows a few thousand
            // at a time: columnar updates want batches, not a 64th of one.
            if !part.is_spilled() && part.pending_rows >= RESIDENT_BATCH {
                self.merge(p, out)?;
            }
        }
        self.fit(out)
    }

    /// After a quiet second, every pending row goes through.
    fn quiet_flush(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        if now - self.last_input >= QUIET_MS && self.partitions.iter().any(|p| p.pending_rows > 0) {
            self.merge_all(out)?;
        }
        Ok(())
    }

    /// Restore keyed table `t` into the partitions its rows belong to.
    fn restore_table(&mut self, t: StateTable) -> Result<()> {
        let known = self.table_keys.iter().find(|(n, _)| *n == t.name);
        let Some(keys) = known.map(|(_, k)| k.clone()).or(t.key_columns.clone()) else {
            return Err(WeirError::Execution(format!(
                "{}: state table '{}' is not keyed, so the disk backend cannot split it",
                self.name, t.name
            )));
        };
        let batch = self.key_groups.keep(t.batch, &keys)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        for (p, idx) in self.route(&batch, &keys)? {
            let rows = if idx.len() == batch.num_rows() {
                batch.clone()
            } else {
                arrow::compute::take_record_batch(&batch, &idx)?
            };
            self.load(p)?;
            let part = &mut self.partitions[p];
            let op = part.resident.as_mut().expect("loaded");
            op.restore_state(vec![StateTable {
                name: t.name.clone(),
                batch: rows,
                key_columns: Some(keys.clone()),
            }])?;
            part.bytes = state_bytes(op.as_ref());
            // Restoring emits nothing: spill, never merge.
            self.fit_with(false, &mut Vec::<RecordBatch>::new())?;
        }
        Ok(())
    }
}

/// Add `metrics` into `sums` by name.
fn add_counters(sums: &mut Vec<(String, u64)>, metrics: Vec<(String, u64)>) {
    for (k, v) in metrics {
        match sums.iter_mut().find(|(n, _)| *n == k) {
            Some((_, sum)) => *sum += v,
            None => sums.push((k, v)),
        }
    }
}

/// The bytes an operator's state takes, as it counts them.
fn state_bytes(op: &dyn Operator) -> usize {
    op.metrics()
        .into_iter()
        .find(|(k, _)| k == "state_bytes")
        .map_or(0, |(_, v)| v as usize)
}

/// What state counted at `held` bytes takes from the budget: half as
/// much again, for what the count does not see — allocator slack, hash
/// tables while they grow, a partition's copy while it is written or read.
/// Measured on the GROUP BY benchmark: the process's resident set grew by
/// about 1.5 bytes per byte counted.
fn with_headroom(held: usize) -> usize {
    held.saturating_add(held / 2)
}

/// The partition of a key hash (bits the key group does not use alone).
fn partition_of(hash: u64) -> usize {
    (hash.rotate_left(29).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % PARTITIONS
}

impl Drop for SpillingKeyed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Operator for SpillingKeyed {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        self.process_input(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Output,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.process(input, batch, out)
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        if self.rowtime.is_some() {
            self.advance(watermark, out)?;
            self.quiet_flush(now_ms(), out)?;
            return Ok(Some(watermark));
        }
        // The partitions' output does not wait on the watermark; they see
        // it for what they keep of it.
        for part in &mut self.partitions {
            if let Some(op) = &mut part.resident {
                op.on_watermark(watermark, out)?;
            }
        }
        self.quiet_flush(now_ms(), out)?;
        Ok(Some(watermark))
    }

    fn next_processing_timer(&self) -> Option<i64> {
        let inner = self
            .partitions
            .iter()
            .filter_map(|p| p.resident.as_ref()?.next_processing_timer())
            .min();
        let quiet = self
            .partitions
            .iter()
            .any(|p| p.pending_rows > 0)
            .then_some(self.last_input + QUIET_MS);
        let spilled = self
            .rowtime
            .as_ref()
            .and_then(|_| self.partitions.iter().filter_map(|p| p.clock_due).min());
        inner.into_iter().chain(quiet).chain(spilled).min()
    }

    fn on_processing_time(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        if self.rowtime.is_some() {
            self.advance_clock(now, out)?;
            return self.quiet_flush(now, out);
        }
        for part in &mut self.partitions {
            if let Some(op) = &mut part.resident
                && op.next_processing_timer().is_some_and(|t| t <= now)
            {
                op.on_processing_time(now, out)?;
                part.bytes = state_bytes(op.as_ref());
            }
        }
        self.quiet_flush(now, out)
    }

    /// Every pending row goes through. The partitions have nothing else to
    /// send at the end: operators that spill send their changes as they
    /// come.
    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        if self.rowtime.is_some() {
            return self.finish_all(out);
        }
        self.merge_all(out)
    }

    fn accounts_memory(&self) -> bool {
        true
    }

    /// The partitions' counters summed (those of partitions in memory),
    /// `state_bytes` what is held in memory, and the spilling's own.
    fn metrics(&self) -> Vec<(String, u64)> {
        let mut sums = self.retired.clone();
        for op in self.partitions.iter().filter_map(|p| p.resident.as_ref()) {
            add_counters(&mut sums, op.metrics());
        }
        sums.retain(|(k, _)| k != "state_bytes" && k != "state_bytes_max");
        let on_disk: usize = self
            .partitions
            .iter()
            .flat_map(|p| &p.spilled)
            .map(|t| t.rows)
            .sum();
        sums.extend([
            ("state_bytes".into(), self.held() as u64),
            ("state_rows_on_disk".into(), on_disk as u64),
            ("partitions_spilled".into(), self.spills),
            ("partitions_loaded".into(), self.loads),
            ("spilled_bytes".into(), self.spilled_bytes),
        ]);
        sums
    }

    /// Every partition's own tables (one per partition and table name, so
    /// an incremental checkpoint reuses the files of partitions that did
    /// not change), then the pending rows: one table for a single input
    /// (thousands of small gathered batches would be thousands of files),
    /// else one per run of an input, in arrival order.
    fn snapshot_state(&mut self, checkpoint: u64) -> Result<Vec<StateTable>> {
        let mut tables = Vec::new();
        for p in 0..PARTITIONS {
            if let Some(op) = &mut self.partitions[p].resident {
                tables.extend(op.snapshot_state(checkpoint)?);
            }
            tables.extend(self.read_spilled(p)?);
        }
        // The partitions' clocks lag where nothing was due: the tables
        // that are not keyed come from one operator that saw the last
        // watermark.
        tables.retain(|t| self.is_keyed(t));
        tables.extend(self.clock_tables(checkpoint)?);
        let single = self.input_keys.len() == 1;
        let mut waiting: Vec<(usize, Vec<RecordBatch>)> = Vec::new();
        for part in &mut self.partitions {
            for run in &mut part.pending {
                let rows = run.rows.batches()?;
                if rows.is_empty() {
                    continue;
                }
                match waiting.last_mut() {
                    Some((_, all)) if single => all.extend(rows.iter().cloned()),
                    _ => waiting.push((run.input, rows.to_vec())),
                }
            }
        }
        for (input, rows) in waiting {
            let batch = arrow::compute::concat_batches(&rows[0].schema(), &rows)?;
            tables.push(
                StateTable::new(pending_table(input), batch)
                    .keyed(self.input_keys[input].iter().copied()),
            );
        }
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        // Tables that are not keyed are the operator's clocks: each
        // partition made afresh starts from them.
        let (keyed, shared): (Vec<_>, Vec<_>) = tables.into_iter().partition(|t| self.is_keyed(t));
        self.shared.extend(shared);
        for t in keyed {
            match pending_input(&t.name).filter(|&i| i < self.input_keys.len()) {
                Some(input) => {
                    let keys = self.input_keys[input].clone();
                    let batch = self.key_groups.keep(t.batch, &keys)?;
                    for (p, rows) in self.route(&batch, &keys)? {
                        self.push(p, input, &batch, rows)?;
                    }
                }
                None => self.restore_table(t)?,
            }
        }
        // Pending rows go through when their partition is next merged.
        Ok(())
    }
}

#[cfg(test)]
mod tests;
