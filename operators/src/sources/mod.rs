//! Sources: where batches enter a job.
//!
//! A source is split across the subtasks of its vertex; each subtask instance
//! produces only its share (generator chunks, Parquet row groups, CSV files).
//! Sources are pulled by the task; they never block on time themselves, but
//! say how long to wait ([`SourcePoll::Pending`]).

mod generator;
mod monitored;
mod nexmark;
mod parquet;
mod partitioned;
mod pieces;
mod read_ahead;
mod text;

use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use weir_core::graph::{StreamNode, StreamNodeKind};
use weir_core::spec::{ConnectorSource, SourceSpec};
use weir_core::{Result, WeirError};

pub use self::generator::GeneratorSource;
pub(crate) use self::monitored::{FileAccess, MonitoredSource};
pub(crate) use self::parquet::parquet_files_source;
pub use self::parquet::parquet_source;
pub use self::text::{CsvOptions, csv_source, format_source};
pub(crate) use self::{parquet::ParquetSource, partitioned::PartitionedSource, text::TextSource};
use crate::OperatorContext;

/// What a source has to offer right now.
#[derive(Debug)]
pub enum SourcePoll {
    /// A batch of records.
    Batch(RecordBatch),
    /// Nothing now (rate limit or no new data); ask again after this long.
    Pending(Duration),
    /// This subtask's share of the input is exhausted.
    Finished,
}

/// One subtask's reader of a source.
pub trait Source: Send {
    /// Next batch, a wait hint, or the end. Errors name the file and position.
    fn poll_next(&mut self) -> Result<SourcePoll>;

    /// Where the source stands, for checkpoint `checkpoint`: restoring it
    /// makes the source continue with exactly the next record. The default
    /// refuses, declining the checkpoint.
    fn snapshot_position(&mut self, _checkpoint: u64) -> Result<RecordBatch> {
        Err(WeirError::Execution(
            "this source does not support checkpoints yet".into(),
        ))
    }

    /// Continue from positions this source's snapshots wrote.
    fn restore_position(&mut self, _positions: Vec<RecordBatch>) -> Result<()> {
        Err(WeirError::Execution(
            "this source cannot restore a checkpointed position".into(),
        ))
    }

    /// Checkpoint `checkpoint` (and every one before it) completed: what
    /// its snapshot covered is durable, so a source may acknowledge it to
    /// whoever sent it (Flink's `notifyCheckpointComplete`).
    fn notify_checkpoint_complete(&mut self, _checkpoint: u64) -> Result<()> {
        Ok(())
    }

    /// Whether a restore hands every subtask the positions of all old
    /// subtasks (Flink's union list state) instead of its own: for sources
    /// whose input may reach any subtask.
    fn position_is_union(&self) -> bool {
        false
    }

    /// The splits (Kafka partitions) the rows of the batch last returned
    /// come from, as runs in row order — `(split, rows)`, covering the
    /// batch — when it names them: the task then keeps a watermark per
    /// split and emits their minimum (Flink's per-partition watermarks).
    fn splits_of_last_batch(&self) -> Option<&[(u64, usize)]> {
        None
    }

    /// The splits it reads now, when it names them (see
    /// [`Self::splits_of_last_batch`]): one that has not shown data holds
    /// the watermark back until it does or goes idle.
    fn active_splits(&self) -> Option<Vec<u64>> {
        None
    }

    /// Whether it has nothing to read and will not soon (a subtask assigned
    /// no partitions): the task marks it idle at once, so downstream
    /// watermarks do not wait for it.
    fn is_idle(&self) -> bool {
        false
    }

    /// How many records it is behind the newest it could read, when it
    /// knows (Kafka: records behind each partition's latest offset).
    fn lag(&self) -> Option<u64> {
        None
    }

    /// Splits (files, row groups, batches) this subtask has finished, of
    /// all it has: for a bounded source, how far it is.
    fn splits_done(&self) -> Option<(u64, u64)> {
        None
    }
}

/// Instantiate the source of a stream node for one subtask.
pub fn create_source(node: &StreamNode, ctx: &OperatorContext) -> Result<Box<dyn Source>> {
    let StreamNodeKind::Source { spec, .. } = &node.kind else {
        return Err(WeirError::Execution(format!(
            "'{}' is not a source",
            node.name
        )));
    };
    source_for(spec, ctx)
}

fn source_for(spec: &SourceSpec, ctx: &OperatorContext) -> Result<Box<dyn Source>> {
    Ok(match spec {
        SourceSpec::Computed(c) => Box::new(ComputedSource {
            inner: source_for(&c.inner, ctx)?,
            exprs: {
                let input = c.inner.schema();
                c.exprs
                    .iter()
                    .map(|(e, n)| (crate::decimal_arith::accelerate(e, &input), n.clone()))
                    .collect()
            },
            schema: c.schema()?,
        }),
        SourceSpec::Connector(c) => ctx.connectors.open_source(c, ctx)?,
    })
}

/// The `memory` connector's reader: the source's inline batches.
pub(crate) fn memory_source(source: &ConnectorSource, ctx: &OperatorContext) -> Box<dyn Source> {
    Box::new(MemorySource {
        cursor: SplitCursor::new(source.batches.len(), ctx),
        batches: source.batches.clone(),
        bounded: source.bounded,
    })
}

/// A source whose batches get computed columns (SQL's `name AS expr`)
/// before the task reads event time from them.
struct ComputedSource {
    inner: Box<dyn Source>,
    exprs: Vec<(
        std::sync::Arc<dyn datafusion_physical_expr::PhysicalExpr>,
        String,
    )>,
    schema: arrow::datatypes::SchemaRef,
}

impl Source for ComputedSource {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        Ok(match self.inner.poll_next()? {
            SourcePoll::Batch(b) => {
                let columns = self
                    .exprs
                    .iter()
                    .map(|(e, n)| {
                        e.evaluate(&b)
                            .and_then(|v| v.into_array(b.num_rows()))
                            .map_err(|err| {
                                WeirError::Execution(format!("computed column '{n}' ({e}): {err}"))
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                SourcePoll::Batch(RecordBatch::try_new(
                    std::sync::Arc::clone(&self.schema),
                    columns,
                )?)
            }
            other => other,
        })
    }

    fn snapshot_position(&mut self, checkpoint: u64) -> Result<RecordBatch> {
        self.inner.snapshot_position(checkpoint)
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        self.inner.restore_position(positions)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        self.inner.notify_checkpoint_complete(checkpoint)
    }

    fn position_is_union(&self) -> bool {
        self.inner.position_is_union()
    }

    fn splits_of_last_batch(&self) -> Option<&[(u64, usize)]> {
        self.inner.splits_of_last_batch()
    }

    fn active_splits(&self) -> Option<Vec<u64>> {
        self.inner.active_splits()
    }

    fn is_idle(&self) -> bool {
        self.inner.is_idle()
    }

    fn lag(&self) -> Option<u64> {
        self.inner.lag()
    }

    fn splits_done(&self) -> Option<(u64, u64)> {
        self.inner.splits_done()
    }
}

/// Replays the in-memory batches assigned to one subtask (batch `k` to
/// subtask `k mod parallelism`); each batch is a split of the position.
struct MemorySource {
    batches: Vec<RecordBatch>,
    cursor: SplitCursor,
    bounded: bool,
}

impl Source for MemorySource {
    fn splits_done(&self) -> Option<(u64, u64)> {
        Some(self.cursor.done())
    }

    fn poll_next(&mut self) -> Result<SourcePoll> {
        while let Some((k, skip)) = self.cursor.next_split() {
            let b = self.batches.get(k).ok_or_else(|| {
                WeirError::Execution(format!("checkpointed batch {k} is not in this source"))
            })?;
            let skip = (skip as usize).min(b.num_rows());
            if skip < b.num_rows() {
                let rest = b.slice(skip, b.num_rows() - skip);
                self.cursor.advanced(rest.num_rows());
                return Ok(SourcePoll::Batch(rest));
            }
        }
        Ok(if self.bounded {
            SourcePoll::Finished
        } else {
            SourcePoll::Pending(Duration::from_millis(5))
        })
    }

    fn snapshot_position(&mut self, _: u64) -> Result<RecordBatch> {
        self.cursor.snapshot()
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        self.cursor.restore(positions)
    }
}

/// The splits one subtask of a file source reads — split `k` (a file, a
/// row group) belongs to subtask `k mod parallelism` — and how far it got,
/// which is the source's checkpointed position: one row per split not yet
/// finished, `split` and `rows_read` (rows of it already emitted). Restored
/// at any parallelism by the same rule, so splits move on rescale and a
/// split half read continues after its last emitted row.
#[derive(Debug, Default)]
pub(crate) struct SplitCursor {
    todo: std::collections::VecDeque<(u64, u64)>,
    open: Option<(u64, u64)>,
    subtask: u64,
    parallelism: u64,
    /// Splits this subtask reads in all.
    mine: u64,
}

impl SplitCursor {
    /// The first read of `total` splits by subtask `ctx.subtask`.
    pub(crate) fn new(total: usize, ctx: &OperatorContext) -> Self {
        let (subtask, parallelism) = (ctx.subtask as u64, ctx.parallelism as u64);
        let todo: std::collections::VecDeque<(u64, u64)> = (0..total as u64)
            .filter(|k| k % parallelism == subtask)
            .map(|k| (k, 0))
            .collect();
        Self {
            mine: todo.len() as u64,
            todo,
            open: None,
            subtask,
            parallelism,
        }
    }

    /// Splits finished, of all this subtask reads.
    pub(crate) fn done(&self) -> (u64, u64) {
        let left = self.todo.len() as u64 + u64::from(self.open.is_some());
        (self.mine.saturating_sub(left), self.mine)
    }

    /// Open the next split: its index and the rows to skip.
    pub(crate) fn next_split(&mut self) -> Option<(usize, u64)> {
        self.open = self.todo.pop_front();
        self.open.map(|(k, skip)| (k as usize, skip))
    }

    /// The split this subtask opens after the open one, when it starts
    /// from its first row.
    pub(crate) fn following(&self) -> Option<usize> {
        self.todo
            .front()
            .filter(|(_, skip)| *skip == 0)
            .map(|&(k, _)| k as usize)
    }

    /// `rows` more rows of the open split were emitted.
    pub(crate) fn advanced(&mut self, rows: usize) {
        if let Some((_, read)) = &mut self.open {
            *read += rows as u64;
        }
    }

    pub(crate) fn snapshot(&self) -> Result<RecordBatch> {
        use arrow::array::UInt64Array;
        use arrow::datatypes::{DataType, Field, Schema};
        let rows: Vec<(u64, u64)> = self.open.iter().chain(&self.todo).copied().collect();
        Ok(RecordBatch::try_new(
            std::sync::Arc::new(Schema::new(vec![
                Field::new("split", DataType::UInt64, false),
                Field::new("rows_read", DataType::UInt64, false),
            ])),
            vec![
                std::sync::Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))),
                std::sync::Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )?)
    }

    pub(crate) fn restore(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        use arrow::array::AsArray;
        use arrow::datatypes::UInt64Type;
        let mut mine = Vec::new();
        for b in positions {
            let col = |n: &str| {
                b.column_by_name(n)
                    .and_then(|c| c.as_primitive_opt::<UInt64Type>())
                    .ok_or_else(|| {
                        WeirError::Execution(format!("file source position lacks '{n}'"))
                    })
            };
            let (split, read) = (col("split")?, col("rows_read")?);
            for r in 0..b.num_rows() {
                if split.value(r) % self.parallelism == self.subtask {
                    mine.push((split.value(r), read.value(r)));
                }
            }
        }
        mine.sort_unstable();
        self.todo = mine.into();
        self.open = None;
        Ok(())
    }
}

/// The reader of the split being read, with its location for errors.
pub(crate) type OpenSplit<R> = Option<(R, String)>;

/// Read the current split to its end, then open the cursor's next one with
/// `open(split, rows to skip, the split after it)`, keeping the cursor's
/// position. Reader errors are turned into bad-input errors naming the
/// split by `describe_error`.
pub(crate) fn poll_splits<R, E>(
    current: &mut OpenSplit<R>,
    cursor: &mut SplitCursor,
    mut open: impl FnMut(usize, u64, Option<usize>) -> Result<(R, String)>,
    describe_error: impl Fn(&E) -> String,
) -> Result<SourcePoll>
where
    R: Iterator<Item = std::result::Result<RecordBatch, E>>,
{
    // Files are read by third-party decoders (parquet, arrow's CSV reader)
    // that panic on some damaged input: a panic there is bad input at the
    // split being read.
    use weir_core::error::guard_decoder;
    loop {
        if let Some((reader, location)) = current {
            let next = guard_decoder(|| location.clone(), || Ok(reader.next()))?;
            match next {
                Some(Ok(batch)) => {
                    cursor.advanced(batch.num_rows());
                    return Ok(SourcePoll::Batch(batch));
                }
                Some(Err(e)) => {
                    return Err(WeirError::bad_input(location.clone(), describe_error(&e)));
                }
                None => *current = None,
            }
        }
        match cursor.next_split() {
            Some((k, skip)) => {
                let following = cursor.following();
                *current = Some(guard_decoder(
                    || format!("split {k} of the source"),
                    || open(k, skip, following),
                )?)
            }
            None => return Ok(SourcePoll::Finished),
        }
    }
}

/// Expand files and directories into a sorted list of files — in a
/// directory, those with `extension` (all of them without one, as Flink's
/// filesystem source reads a folder). Hidden files (`.…`, `_…`: in-progress
/// sink output, `_SUCCESS` markers) are skipped.
pub(crate) fn expand_paths(paths: &[PathBuf], extension: Option<&str>) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if let Some(url) = p.to_str().filter(|u| crate::storage::is_url(u)) {
            // An object, or the objects under a folder of a store.
            let found: Vec<PathBuf> = crate::storage::list_objects(url)?
                .into_iter()
                .map(|(u, _)| PathBuf::from(u))
                .filter(|f| extension.is_none_or(|e| f.extension().is_some_and(|x| x == e)))
                .collect();
            if found.is_empty() {
                return Err(WeirError::bad_input(
                    url,
                    "no files of the source's kind here",
                ));
            }
            files.extend(found);
            continue;
        }
        let p = &PathBuf::from(
            p.to_str()
                .and_then(|s| s.strip_prefix("file://"))
                .map_or(p.as_path(), std::path::Path::new),
        );
        let meta = std::fs::metadata(p).map_err(|e| WeirError::io(p.display().to_string(), e))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| WeirError::io(p.display().to_string(), e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    extension.is_none_or(|e| f.extension().is_some_and(|x| x == e))
                        && !is_hidden(f)
                        && f.is_file()
                })
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(WeirError::bad_input(
                    p.display().to_string(),
                    match extension {
                        Some(e) => format!("directory contains no .{e} files"),
                        None => "directory contains no files".to_string(),
                    },
                ));
            }
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    if files.is_empty() {
        return Err(WeirError::plan("source has no input paths"));
    }
    Ok(files)
}

fn is_hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') || n.starts_with('_'))
}
