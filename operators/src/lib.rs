//! # weir-operators
//!
//! The [`Operator`] and [`Source`] traits and every built-in operator: filter
//! and projection over DataFusion physical expressions, user batch functions,
//! the vectorized keyed window aggregation, partitioners, sources (generator,
//! Parquet, CSV) and sinks (Parquet, CSV, print, blackhole, collect).
//!
//! Operators see whole Arrow batches. The runtime (`weir-worker`) owns
//! channels, input gates, the watermark minimum and barrier alignment; an
//! operator only reacts to batches and to the watermark it is handed.
#![warn(missing_docs)]

/// The checkpoint hook of an operator without state: nothing to snapshot.
macro_rules! stateless {
    () => {
        fn snapshot_state(
            &mut self,
            _checkpoint: u64,
        ) -> weir_core::Result<Vec<$crate::StateTable>> {
            Ok(vec![])
        }
    };
}

pub mod basic;
mod batch_rows;
mod case_lookup;
pub mod connectors;
pub mod count_window;
mod decimal_arith;
mod decimal_cast;
mod dense_groups;
mod distinct_sets;
mod filter_parts;
pub mod formats;
pub mod group_aggregate;
pub mod join;
mod join_side;
mod key_table;
pub mod lateral;
pub mod local_aggregate;
pub mod lookup_join;
mod match_nfa;
pub mod match_recognize;
pub mod memory;
pub mod nexmark;
pub mod over;
mod pane_buffer;
pub mod partition;
pub mod partitioned_sink;
pub mod process;
pub mod regular_join;
mod row_store;
pub mod session;
pub mod session_join;
pub mod session_process;
mod sessions;
mod short_min_max;
mod short_strings;
pub mod sinks;
mod sort;
mod sort_runs;
pub mod sources;
pub mod spill;
pub mod storage;
pub mod temporal_join;
mod time_queue;
pub mod top_n;
pub mod window;
pub mod window_join;
pub mod window_process;

use arrow::record_batch::RecordBatch;
use weir_core::config::WeirConfig;
use weir_core::graph::{StreamNode, StreamNodeKind};
use weir_core::keys::KeyGroupRange;
use weir_core::message::Watermark;
use weir_core::{Result, WeirError};

/// Where an operator puts the batches it produces.
pub trait Output {
    /// Emit one batch downstream (to the next chained operator or the task's
    /// network outputs).
    fn collect(&mut self, batch: RecordBatch) -> Result<()>;

    /// Emit one batch to the side output `tag` (Flink's `OutputTag`). The
    /// operator must have declared the tag when the job was built.
    fn collect_side(&mut self, tag: &str, batch: RecordBatch) -> Result<()>;
}

/// Collects main-output batches; side outputs are an error. For tests and
/// for driving an operator by hand.
impl Output for Vec<RecordBatch> {
    fn collect(&mut self, batch: RecordBatch) -> Result<()> {
        self.push(batch);
        Ok(())
    }

    fn collect_side(&mut self, tag: &str, _batch: RecordBatch) -> Result<()> {
        Err(WeirError::Execution(format!(
            "side output '{tag}' emitted where no side output is connected"
        )))
    }
}

/// Facts about the subtask an operator instance runs in.
#[derive(Debug, Clone)]
pub struct OperatorContext {
    /// Subtask name, `vertex (i/p)`.
    pub task_name: String,
    /// Subtask index.
    pub subtask: usize,
    /// Parallelism of the operator.
    pub parallelism: usize,
    /// Key groups owned by this subtask.
    pub key_groups: KeyGroupRange,
    /// Job configuration.
    pub config: WeirConfig,
    /// The connectors sources and sinks open through.
    pub connectors: connectors::Connectors,
    /// The managed-memory budget keyed state draws from (one per job in
    /// each process).
    pub memory: memory::StateMemory,
    /// Subtasks of the job in this process (each a thread): whether cores
    /// are left for work a task hands to rayon's pool.
    pub local_tasks: usize,
}

#[cfg(test)]
impl OperatorContext {
    /// The only subtask of a test operator, with `config`'s memory budget.
    pub(crate) fn single(task_name: &str, config: WeirConfig) -> Self {
        OperatorContext {
            task_name: task_name.into(),
            subtask: 0,
            parallelism: 1,
            key_groups: KeyGroupRange::for_subtask(0, 1, 128),
            memory: memory::StateMemory::new(&config.state),
            config,
            connectors: Default::default(),
            local_tasks: 1,
        }
    }
}

/// Refuse an input index beyond the two of a two-input operator.
pub(crate) fn two_inputs(name: &str, input: usize) -> Result<()> {
    if input > 1 {
        return Err(WeirError::Execution(format!("{name}: no input {input}")));
    }
    Ok(())
}

/// A single-input operator.
///
/// Contract: the runtime calls `process_batch` for every data batch in
/// arrival order, `on_watermark` whenever the input watermark advances (it
/// never goes back), and `finish` once after the final watermark when the
/// input has ended. Emitted batches are passed on before the call returns.
/// Errors fail the task with the operator's and subtask's names attached.
pub trait Operator: Send {
    /// Display name.
    fn name(&self) -> &str;

    /// Process one batch (of the first input).
    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()>;

    /// Process one batch of input `input`; two-input operators override this.
    /// Only the head of a chain can have more than one input.
    fn process_input(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut dyn Output,
    ) -> Result<()> {
        match input {
            0 => self.process_batch(batch, out),
            n => Err(WeirError::Execution(format!(
                "{} has one input but received input {n}",
                self.name()
            ))),
        }
    }

    /// The input watermark advanced to `watermark`; fire what it completes.
    /// Returns the watermark to forward (by default the same one).
    fn on_watermark(
        &mut self,
        watermark: Watermark,
        _out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        Ok(Some(watermark))
    }

    /// The earliest processing-time timer (ms since the epoch), if any: the
    /// runtime calls [`Self::on_processing_time`] when the clock reaches it.
    fn next_processing_timer(&self) -> Option<i64> {
        None
    }

    /// The wall clock reached `now` (ms since the epoch).
    fn on_processing_time(&mut self, _now: i64, _out: &mut dyn Output) -> Result<()> {
        Ok(())
    }

    /// The input ended (after the final watermark): flush and close.
    fn finish(&mut self, _out: &mut dyn Output) -> Result<()> {
        Ok(())
    }

    /// Operator-specific counters, reported when the task ends.
    fn metrics(&self) -> Vec<(String, u64)> {
        vec![]
    }

    /// Whether the operator holds its own reservation of the managed
    /// memory budget ([`memory::StateReservation`]). Otherwise the task
    /// sizes one for it from its `state_bytes` counter, once a second.
    fn accounts_memory(&self) -> bool {
        false
    }

    /// The key columns of each input, when every table of the operator's
    /// state is keyed (but a `meta` table of its clocks): the disk backend
    /// can then run it as partitions of its keys and spill the partitions
    /// it does not use ([`spill::SpillingKeyed`]). An operator whose output
    /// waits on the watermark must also say when it does
    /// ([`Self::watermark_timers`]). None keeps the operator in memory
    /// under either backend.
    fn spill_keys(&self) -> Option<Vec<Vec<usize>>> {
        None
    }

    /// The names and key columns of the keyed tables its snapshots may
    /// hold, for those an empty operator's snapshot leaves out (the disk
    /// backend splits restored tables by them).
    fn keyed_tables(&self) -> Vec<(String, Vec<usize>)> {
        Vec::new()
    }

    /// For an operator whose output waits on the watermark (or on the
    /// clock): its earliest timers, and which column of each input bounds
    /// the timers a row can set. `None`: it emits as rows come, never
    /// because time passed. The disk backend reads a spilled partition
    /// back only when one of these is due.
    fn watermark_timers(&self) -> Option<WatermarkTimers> {
        None
    }

    /// Snapshot the operator's state at a checkpoint barrier (between two
    /// batches): named tables whose schemas the operator documents. Stateless
    /// operators return none. The default refuses, so an operator whose
    /// state cannot be snapshotted yet declines the checkpoint instead of
    /// losing state on restore.
    fn snapshot_state(&mut self, _checkpoint: u64) -> Result<Vec<StateTable>> {
        Err(WeirError::Execution(format!(
            "{} does not support checkpoints yet",
            self.name()
        )))
    }

    /// Restore from tables this operator's snapshots wrote — of one subtask,
    /// or, after a rescale, of every subtask whose key groups overlap this
    /// one's (rows of other key groups must be ignored).
    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        if tables.is_empty() {
            return Ok(());
        }
        Err(WeirError::Execution(format!(
            "{} cannot restore checkpointed state",
            self.name()
        )))
    }

    /// Every task has acknowledged checkpoint `checkpoint`: publish what it
    /// covers (two-phase-commit sinks).
    fn notify_checkpoint_complete(&mut self, _checkpoint: u64) -> Result<()> {
        Ok(())
    }
}

/// When an operator's output waits on time ([`Operator::watermark_timers`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatermarkTimers {
    /// The lowest watermark at which it would emit or drop state.
    pub event: Option<i64>,
    /// The earliest wall-clock time at which it would emit (not counting
    /// housekeeping such as state TTL sweeps).
    pub processing: Option<i64>,
    /// For each input, the column holding a row's event time when a row at
    /// time `t` sets no timer before `t` (windows, sessions); `None` when a
    /// row may set any timer, so rows of that input must go through before
    /// the next watermark.
    pub rowtime: Vec<Option<usize>>,
}

/// One named state table of an operator snapshot.
#[derive(Debug, Clone)]
pub struct StateTable {
    /// Table name, unique within the operator (`panes`, `meta`, `pending` …).
    pub name: String,
    /// The rows.
    pub batch: RecordBatch,
    /// The key columns of keyed state: incremental checkpoints store such
    /// a table in chunks of key groups, each reused while it is unchanged.
    pub key_columns: Option<Vec<usize>>,
}

impl StateTable {
    /// A table named `name`.
    pub fn new(name: impl Into<String>, batch: RecordBatch) -> Self {
        Self {
            name: name.into(),
            batch,
            key_columns: None,
        }
    }

    /// Mark columns `keys` as the key of each row (keyed state).
    pub fn keyed(mut self, keys: impl IntoIterator<Item = usize>) -> Self {
        let keys: Vec<usize> = keys.into_iter().collect();
        if !keys.is_empty() {
            self.key_columns = Some(keys);
        }
        self
    }
}

/// Which rows of restored keyed state a subtask keeps: those whose key
/// falls in its key groups (all of them unless the job was rescaled).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyGroupFilter {
    range: KeyGroupRange,
    max_parallelism: u32,
}

impl KeyGroupFilter {
    pub(crate) fn new(ctx: &OperatorContext) -> Self {
        Self {
            range: ctx.key_groups,
            max_parallelism: ctx.config.max_parallelism,
        }
    }

    /// The rows of `batch` whose key (columns `keys`) is this subtask's.
    pub(crate) fn keep(&self, batch: RecordBatch, keys: &[usize]) -> Result<RecordBatch> {
        if keys.is_empty() {
            return Ok(batch);
        }
        crate::window::keep_key_groups(batch, keys, self.range, self.max_parallelism)
    }
}

/// The snapshot of rows an operator buffers (joins, full-window
/// functions): one table `name` of the rows as they arrived, keyed by
/// columns `keys`. Restoring feeds them back through the operator's
/// buffering path.
pub(crate) fn buffered_rows_table<'a>(
    name: &str,
    schema: &arrow::datatypes::SchemaRef,
    batches: impl IntoIterator<Item = &'a RecordBatch>,
    keys: &[usize],
) -> Result<StateTable> {
    let batch = arrow::compute::concat_batches(schema, batches)?;
    Ok(StateTable::new(name, batch).keyed(keys.iter().copied()))
}

/// Restore an operator that buffers input rows: `meta` gives the watermark
/// (returned), and each table named `inputs[i].0` holds rows of input `i`
/// keyed by columns `inputs[i].1` — this subtask's are handed to `feed`.
pub(crate) fn restore_buffered_rows(
    operator: &str,
    tables: Vec<StateTable>,
    inputs: &[(&str, &[usize])],
    filter: KeyGroupFilter,
    mut feed: impl FnMut(usize, RecordBatch) -> Result<()>,
) -> Result<Option<i64>> {
    let mut watermark = None;
    for t in tables {
        if t.name == "meta" {
            crate::window::restore_meta(operator, &t.batch, &mut watermark)?;
            continue;
        }
        let Some(input) = inputs.iter().position(|(n, _)| *n == t.name) else {
            return Err(WeirError::Execution(format!(
                "{operator}: unknown state table '{}'",
                t.name
            )));
        };
        let rows = filter.keep(t.batch, inputs[input].1)?;
        if rows.num_rows() > 0 {
            feed(input, rows)?;
        }
    }
    Ok(watermark)
}

/// Restore a two-input operator that buffers rows (tables `left` and
/// `right`, keyed by `keys[0]` and `keys[1]`): this subtask's rows by
/// input, in order, and the watermark.
pub(crate) type RestoredRows = (Vec<(usize, RecordBatch)>, Option<i64>);

pub(crate) fn restore_two_inputs(
    operator: &str,
    tables: Vec<StateTable>,
    keys: [&[usize]; 2],
    filter: KeyGroupFilter,
) -> Result<RestoredRows> {
    let mut rows = Vec::new();
    let watermark = restore_buffered_rows(
        operator,
        tables,
        &[("left", keys[0]), ("right", keys[1])],
        filter,
        |input, batch| {
            rows.push((input, batch));
            Ok(())
        },
    )?;
    Ok((rows, watermark))
}

/// `array` as type `to` (itself when it already is).
pub(crate) fn cast_to(
    array: arrow::array::ArrayRef,
    to: &arrow::datatypes::DataType,
) -> Result<arrow::array::ArrayRef> {
    Ok(if array.data_type() == to {
        array
    } else {
        arrow::compute::cast(&array, to)?
    })
}

/// Indices of the named columns in `schema`.
pub(crate) fn column_indices(
    schema: &arrow::datatypes::Schema,
    names: &[String],
) -> Result<Vec<usize>> {
    Ok(names
        .iter()
        .map(|n| schema.index_of(n))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// Where records too late for every window go: a side output when the job
/// configured one, else they are dropped and counted
/// (`num_late_records_dropped`).
#[derive(Debug, Default)]
pub(crate) struct LateRecords {
    tag: Option<String>,
    dropped: u64,
}

impl LateRecords {
    pub(crate) fn new(tag: Option<String>) -> Self {
        Self { tag, dropped: 0 }
    }

    pub(crate) fn handle(&mut self, rows: &RecordBatch, out: &mut dyn Output) -> Result<()> {
        match &self.tag {
            Some(tag) => out.collect_side(tag, rows.clone()),
            None => {
                self.dropped += rows.num_rows() as u64;
                Ok(())
            }
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Instantiate the operator of a non-source stream node for one subtask.
pub fn create_operator(node: &StreamNode, ctx: &OperatorContext) -> Result<Box<dyn Operator>> {
    match &node.kind {
        StreamNodeKind::Operator(spec) => basic::create(node, spec, ctx),
        StreamNodeKind::Sink(spec) => ctx.connectors.open_sink(spec, node, ctx),
        StreamNodeKind::Source { .. } => Err(WeirError::Execution(format!(
            "'{}' is a source, not an operator",
            node.name
        ))),
    }
}

pub use sources::{Source, SourcePoll, create_source};
