//! The disk backend's updating aggregation: SQL's `GROUP BY` with more
//! state than the managed memory budget.
//!
//! Keys are split by a hash into [`PARTITIONS`] partitions, each an
//! ordinary [`GroupAggregateOperator`] (columnar state, vectorized
//! updates) while it is in memory. Past the budget the least recently
//! used partitions are spilled: their groups written as one Arrow IPC file
//! under the task's folder in `state.backend.local-dir`, the partition
//! dropped from memory. Rows are not looked up one by one: each
//! partition's rows wait in memory (pending) and go through together — a
//! partition in memory takes them [`RESIDENT_BATCH`] at a time; a spilled
//! one is read back whole when its pending rows take more than their
//! share of the budget. Every pending row goes through after a quiet
//! second of input and at the end of the input. So the state is read and written a
//! partition at a time, and the changelog of a cold key is sent when its
//! partition is merged (as Flink's mini-batch aggregation sends a batch's
//! changes at once); the final rows are the in-memory backend's.
//!
//! Snapshots hold every partition's groups as tables named `groups` and
//! the pending rows as `pending` (the in-memory operator's tables, so a
//! job can restore into either backend); restore routes rows back to their
//! partitions by the same hash.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::BatchCoalescer;
use arrow::datatypes::SchemaRef;
use weir_core::message::Watermark;
use weir_core::spec::GroupAggregateSpec;
use weir_core::{Result, WeirError};

use crate::group_aggregate::{GroupAggregateOperator, PENDING_TABLE};
use crate::memory::{StateMemory, StateReservation};
use crate::process::now_ms;
use crate::{KeyGroupFilter, Operator, OperatorContext, Output, StateTable};

/// Partitions of a subtask's keys: the unit read from and written to disk.
pub const PARTITIONS: usize = 64;

/// Rows a partition in memory gathers before they go through.
const RESIDENT_BATCH: usize = 8192;

/// Rows of the batches pending rows are gathered into.
const PENDING_BATCH: usize = 1024;

/// Most pending rows put through a partition in one batch.
const MERGE_ROWS: usize = 65_536;

/// How long the input must be quiet before every pending row goes through.
const QUIET_MS: i64 = 1000;

/// Input rows waiting for their partition, gathered into batches of
/// [`PENDING_BATCH`] rows as they come (a 64th of a batch each time would
/// cost more in array headers than in rows).
#[derive(Default)]
struct Pending {
    building: Option<BatchCoalescer>,
    full: Vec<RecordBatch>,
    full_bytes: usize,
    rows: usize,
    /// Bytes a row takes, as the last input batch had them.
    row_bytes: usize,
}

impl Pending {
    /// Rows `rows` of `batch`.
    fn push(&mut self, batch: &RecordBatch, rows: UInt32Array) -> Result<()> {
        self.rows += rows.len();
        self.row_bytes = batch.get_array_memory_size() / batch.num_rows().max(1);
        let c = self
            .building
            .get_or_insert_with(|| BatchCoalescer::new(batch.schema(), PENDING_BATCH));
        if rows.len() == batch.num_rows() {
            c.push_batch(batch.clone())?;
        } else {
            c.push_batch_with_indices(batch.clone(), &rows)?;
        }
        while let Some(done) = c.next_completed_batch() {
            self.full_bytes += done.get_array_memory_size();
            self.full.push(done);
        }
        Ok(())
    }

    /// Bytes of the rows held (the batch being gathered counted by its
    /// rows, not the capacity it set aside: that is headroom's part).
    fn bytes(&self) -> usize {
        let building = self.building.as_ref().map_or(0, |c| c.get_buffered_rows());
        self.full_bytes + building * self.row_bytes
    }

    /// Every row, in batches (what is being gathered, finished).
    fn batches(&mut self) -> Result<&[RecordBatch]> {
        if let Some(c) = &mut self.building
            && c.get_buffered_rows() > 0
        {
            c.finish_buffered_batch()?;
            while let Some(done) = c.next_completed_batch() {
                self.full_bytes += done.get_array_memory_size();
                self.full.push(done);
            }
        }
        Ok(&self.full)
    }

    /// Every row, in batches, leaving none.
    fn take(&mut self) -> Result<Vec<RecordBatch>> {
        self.batches()?;
        self.rows = 0;
        self.full_bytes = 0;
        Ok(std::mem::take(&mut self.full))
    }
}

/// One partition of the keys.
struct Partition {
    /// In memory: the partition's aggregation.
    resident: Option<GroupAggregateOperator>,
    /// On disk: its groups (`rows` of them), when it was spilled.
    spilled: Option<(PathBuf, usize)>,
    /// Input rows waiting for the partition to be read back.
    pending: Pending,
    /// Bytes of the resident state, as last measured.
    bytes: usize,
    /// When it was last used (a counter): the least recent is spilled first.
    used: u64,
}

/// The disk backend's `GROUP BY` operator of one subtask.
pub struct SpillingGroupAggregate {
    name: String,
    spec: GroupAggregateSpec,
    schema: SchemaRef,
    /// The context partitions are made with (their memory unaccounted:
    /// this operator holds the reservation for all of them).
    inner: OperatorContext,
    key_indices: Vec<usize>,
    key_groups: KeyGroupFilter,
    partitions: Vec<Partition>,
    dir: PathBuf,
    memory: StateReservation,
    tick: u64,
    last_input: i64,
    hashes: Vec<u64>,
    /// Counters: partitions written to and read from disk, their bytes.
    spills: u64,
    loads: u64,
    spilled_bytes: u64,
}

impl SpillingGroupAggregate {
    /// The operator of one subtask, spilling under `ctx`'s local dir.
    pub fn try_new(
        name: String,
        spec: &GroupAggregateSpec,
        schema: SchemaRef,
        ctx: &OperatorContext,
    ) -> Result<Self> {
        let mut inner = ctx.clone();
        inner.memory = StateMemory::default();
        let key_indices = crate::column_indices(&spec.input_schema, &spec.keys)?;
        let dir = task_dir(ctx.memory.spill_root(), &name, ctx.subtask)?;
        let mut this = Self {
            memory: ctx.memory.reserve(&name, true),
            name,
            spec: spec.clone(),
            schema,
            inner,
            key_indices,
            key_groups: KeyGroupFilter::new(ctx),
            partitions: Vec::with_capacity(PARTITIONS),
            dir,
            tick: 0,
            last_input: now_ms(),
            hashes: vec![],
            spills: 0,
            loads: 0,
            spilled_bytes: 0,
        };
        for _ in 0..PARTITIONS {
            this.partitions.push(Partition {
                resident: None,
                spilled: None,
                pending: Pending::default(),
                bytes: 0,
                used: 0,
            });
        }
        Ok(this)
    }

    fn new_partition(&self) -> Result<GroupAggregateOperator> {
        GroupAggregateOperator::try_new(
            self.name.clone(),
            &self.spec,
            Arc::clone(&self.schema),
            &self.inner,
        )
    }

    /// Row indices of `batch` by partition (columns `keys` are the key).
    fn route(&mut self, batch: &RecordBatch, keys: &[usize]) -> Result<Vec<(usize, UInt32Array)>> {
        let columns: Vec<ArrayRef> = keys.iter().map(|&k| Arc::clone(batch.column(k))).collect();
        if columns.is_empty() {
            let all = UInt32Array::from_iter_values(0..batch.num_rows() as u32);
            return Ok(vec![(0, all)]);
        }
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

    /// Rows of `batch` by partition.
    fn split(&mut self, batch: &RecordBatch, keys: &[usize]) -> Result<Vec<(usize, RecordBatch)>> {
        self.route(batch, keys)?
            .into_iter()
            .map(|(p, idx)| {
                let rows = if idx.len() == batch.num_rows() {
                    batch.clone()
                } else {
                    arrow::compute::take_record_batch(batch, &idx)?
                };
                Ok((p, rows))
            })
            .collect()
    }

    fn path(&self, p: usize) -> PathBuf {
        self.dir.join(format!("partition-{p:03}.arrow"))
    }

    /// Bytes held in memory: resident partitions and pending rows.
    fn held(&self) -> usize {
        self.partitions
            .iter()
            .map(|p| p.bytes + p.pending.bytes())
            .sum()
    }

    fn pending_bytes(&self) -> usize {
        self.partitions.iter().map(|p| p.pending.bytes()).sum()
    }

    /// Write partition `p`'s groups to disk and drop it from memory.
    fn spill(&mut self, p: usize) -> Result<()> {
        let Some(op) = self.partitions[p].resident.take() else {
            return Ok(());
        };
        let groups = op.groups()?;
        let rows = groups.num_rows();
        let path = self.path(p);
        if rows > 0 {
            let bytes = write_ipc(&path, &groups).map_err(|e| self.io_error("write", &path, e))?;
            self.spilled_bytes += bytes;
        } else {
            let _ = std::fs::remove_file(&path);
        }
        self.spills += 1;
        let part = &mut self.partitions[p];
        part.spilled = (rows > 0).then_some((path, rows));
        part.bytes = 0;
        Ok(())
    }

    /// Partition `p` in memory: read back from disk when it was spilled.
    fn load(&mut self, p: usize) -> Result<()> {
        if self.partitions[p].resident.is_some() {
            return Ok(());
        }
        let mut op = self.new_partition()?;
        if let Some((path, _)) = self.partitions[p].spilled.take() {
            for batch in read_ipc(&path).map_err(|e| self.io_error("read", &path, e))? {
                op.restore_groups(batch)?;
            }
            let _ = std::fs::remove_file(&path);
            self.loads += 1;
        }
        let part = &mut self.partitions[p];
        part.bytes = op.state_size();
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
    fn merge(&mut self, p: usize, now: i64, out: &mut dyn Output) -> Result<()> {
        self.load(p)?;
        self.tick += 1;
        let part = &mut self.partitions[p];
        part.used = self.tick;
        let op = part.resident.as_mut().expect("loaded");
        // Pending rows in arrival order, in batches of up to MERGE_ROWS (a
        // key's changes within one batch go out as one update).
        let pending = part.pending.take()?;
        let mut from = 0;
        while from < pending.len() {
            let mut to = from;
            let mut rows = 0;
            while to < pending.len() && (to == from || rows + pending[to].num_rows() <= MERGE_ROWS)
            {
                rows += pending[to].num_rows();
                to += 1;
            }
            let batch = if to - from == 1 {
                pending[from].clone()
            } else {
                arrow::compute::concat_batches(&pending[from].schema(), &pending[from..to])?
            };
            op.process_batch_at(batch, now, out)?;
            from = to;
        }
        part.bytes = op.state_size();
        Ok(())
    }

    /// Bring the state within the budget: merge the partition with the
    /// most pending rows while pending rows take more than half of what is
    /// held, and spill the least recently used partitions while over it.
    fn fit(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        self.fit_with(true, now, out)
    }

    /// [`Self::fit`], merging pending rows only when `merging` (a restore
    /// emits nothing: it only spills).
    fn fit_with(&mut self, merging: bool, now: i64, out: &mut dyn Output) -> Result<()> {
        loop {
            let held = self.held();
            if self.memory.resize(with_headroom(held))? {
                return Ok(());
            }
            if merging
                && self.pending_bytes() * 2 > held
                && let Some(p) = (0..PARTITIONS)
                    .filter(|&p| self.partitions[p].pending.rows > 0)
                    .max_by_key(|&p| self.partitions[p].pending.bytes())
            {
                // Make room first, so the merge does not push others out
                // while it reads.
                if let Some(victim) = self.least_recent(Some(p)) {
                    self.spill(victim)?;
                }
                self.merge(p, now, out)?;
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
    fn merge_all(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        for p in 0..PARTITIONS {
            if self.partitions[p].pending.rows > 0 {
                self.merge(p, now, out)?;
                self.fit(now, out)?;
            }
        }
        Ok(())
    }

    fn process(&mut self, batch: RecordBatch, now: i64, out: &mut dyn Output) -> Result<()> {
        self.last_input = now;
        let keys = self.key_indices.clone();
        for (p, rows) in self.route(&batch, &keys)? {
            let part = &mut self.partitions[p];
            part.pending.push(&batch, rows)?;
            // A partition in memory (or new) takes its rows a few thousand
            // at a time: columnar updates want batches, not a 64th of one.
            let in_memory = part.resident.is_some() || part.spilled.is_none();
            if in_memory && part.pending.rows >= RESIDENT_BATCH {
                self.merge(p, now, out)?;
            }
        }
        self.fit(now, out)
    }
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

/// A folder of the task's own under `root`, empty: named by the start of
/// the operator's name (a chain's name can be longer than a file name may
/// be), the subtask, the process and the time.
fn task_dir(root: &Path, task: &str, subtask: usize) -> Result<PathBuf> {
    let safe: String = task
        .chars()
        .take(40)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = root.join(format!("{safe}-{subtask}-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| {
        WeirError::Execution(format!(
            "state.backend.local-dir: cannot create {}: {e}",
            dir.display()
        ))
    })?;
    Ok(dir)
}

/// A file's I/O or decoding failure, named by the caller with its path.
type IoResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn write_ipc(path: &Path, batch: &RecordBatch) -> IoResult<u64> {
    let tmp = path.with_extension("tmp");
    {
        let file = std::io::BufWriter::new(File::create(&tmp)?);
        let mut w = arrow::ipc::writer::FileWriter::try_new(file, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(std::fs::metadata(path)?.len())
}

fn read_ipc(path: &Path) -> IoResult<Vec<RecordBatch>> {
    let file = std::io::BufReader::new(File::open(path)?);
    let reader = arrow::ipc::reader::FileReader::try_new(file, None)?;
    Ok(reader.collect::<std::result::Result<Vec<_>, _>>()?)
}

impl Drop for SpillingGroupAggregate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Operator for SpillingGroupAggregate {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.process(batch, now_ms(), out)
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        let now = now_ms();
        for part in &mut self.partitions {
            if let Some(op) = &mut part.resident {
                op.on_watermark(watermark, out)?;
            }
        }
        self.quiet_flush(now, out)?;
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
            .any(|p| p.pending.rows > 0)
            .then_some(self.last_input + QUIET_MS);
        inner.into_iter().chain(quiet).min()
    }

    fn on_processing_time(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        for part in &mut self.partitions {
            if let Some(op) = &mut part.resident
                && op.next_processing_timer().is_some_and(|t| t <= now)
            {
                op.on_processing_time(now, out)?;
                part.bytes = op.state_size();
            }
        }
        self.quiet_flush(now, out)
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        self.merge_all(now_ms(), out)
    }

    fn accounts_memory(&self) -> bool {
        true
    }

    fn metrics(&self) -> Vec<(String, u64)> {
        let mut groups = 0u64;
        let mut on_disk = 0u64;
        for p in &self.partitions {
            if let Some(op) = &p.resident {
                groups += op
                    .metrics()
                    .iter()
                    .find(|(k, _)| k == "groups")
                    .map_or(0, |(_, v)| *v);
            }
            if let Some((_, rows)) = &p.spilled {
                on_disk += *rows as u64;
            }
        }
        vec![
            ("groups".into(), groups + on_disk),
            ("groups_on_disk".into(), on_disk),
            ("state_bytes".into(), self.held() as u64),
            ("partitions_spilled".into(), self.spills),
            ("partitions_loaded".into(), self.loads),
            ("spilled_bytes".into(), self.spilled_bytes),
        ]
    }

    fn snapshot_state(&mut self, checkpoint: u64) -> Result<Vec<StateTable>> {
        let key_width = self.spec.keys.len();
        let mut tables = Vec::new();
        for p in 0..PARTITIONS {
            if let Some(op) = &mut self.partitions[p].resident {
                tables.extend(op.snapshot_state(checkpoint)?);
            }
            if let Some((path, _)) = &self.partitions[p].spilled {
                for batch in read_ipc(path).map_err(|e| self.io_error("read", path, e))? {
                    tables.push(StateTable::new("groups", batch).keyed(0..key_width));
                }
            }
            for rows in self.partitions[p].pending.batches()? {
                tables.push(
                    StateTable::new(PENDING_TABLE, rows.clone())
                        .keyed(self.key_indices.iter().copied()),
                );
            }
        }
        Ok(tables)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        let key_width = self.spec.keys.len();
        let own_keys: Vec<usize> = (0..key_width).collect();
        for t in tables {
            match t.name.as_str() {
                "groups" => {
                    let batch = self.key_groups.keep(t.batch, &own_keys)?;
                    for (p, rows) in self.split(&batch, &own_keys)? {
                        self.load(p)?;
                        let part = &mut self.partitions[p];
                        let op = part.resident.as_mut().expect("loaded");
                        op.restore_groups(rows)?;
                        part.bytes = op.state_size();
                        // Restoring emits nothing: spill, never merge.
                        self.fit_with(false, 0, &mut Vec::<RecordBatch>::new())?;
                    }
                }
                PENDING_TABLE => {
                    let probe = self.new_partition()?;
                    probe.check_input_layout(&t.batch)?;
                    let keys = self.key_indices.clone();
                    let batch = self.key_groups.keep(t.batch, &keys)?;
                    for (p, rows) in self.route(&batch, &keys)? {
                        self.partitions[p].pending.push(&batch, rows)?;
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
        // Pending rows go through when their partition is next merged.
        Ok(())
    }
}

impl SpillingGroupAggregate {
    /// After a quiet second, every pending row goes through.
    fn quiet_flush(&mut self, now: i64, out: &mut dyn Output) -> Result<()> {
        if now - self.last_input >= QUIET_MS && self.partitions.iter().any(|p| p.pending.rows > 0) {
            self.merge_all(now, out)?;
        }
        Ok(())
    }
}
