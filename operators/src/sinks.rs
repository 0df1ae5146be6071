//! Sinks: Parquet and CSV files, print, blackhole and collect (opened by
//! their connectors' factories, `crate::connectors`).
//!
//! File sinks write each subtask's output to a hidden in-progress file and
//! rename it to `part-<subtask>.<ext>` when the input ends, so a reader never
//! sees a half-written file and a failed job leaves only hidden files behind.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use weir_core::spec::CollectHandle;
use weir_core::{Result, WeirError};

use crate::StateTable;
use crate::{Operator, OperatorContext, Output};

/// A sink printing rows as `+I[v1, v2, …]`, prefixed by the subtask when
/// parallel.
pub(crate) fn print_sink(name: String, ctx: &OperatorContext) -> Box<dyn Operator> {
    Box::new(PrintSink {
        name,
        prefix: if ctx.parallelism > 1 {
            format!("{}> ", ctx.subtask + 1)
        } else {
            String::new()
        },
    })
}

/// A sink discarding rows, no faster than `rows_per_second` when given.
pub(crate) fn blackhole_sink(
    name: String,
    rows_per_second: Option<u64>,
) -> Result<Box<dyn Operator>> {
    Ok(match rows_per_second {
        None => Box::new(BlackholeSink { name }),
        Some(0) => return Err(WeirError::plan("a throttled sink needs a positive rate")),
        Some(rate) => Box::new(ThrottledSink {
            name,
            rate,
            rows: 0,
            started: None,
        }),
    })
}

/// A sink keeping batches in `handle`.
pub(crate) fn collect_sink(name: String, handle: CollectHandle) -> Box<dyn Operator> {
    Box::new(CollectSink { name, handle })
}

/// How a file sink encodes rows.
#[derive(Clone)]
pub(crate) enum FileFormat {
    Parquet,
    /// A row format of the registry (`csv`, `json`, `raw`) with its options.
    Rows {
        format: String,
        options: weir_core::connector::Options,
    },
}

/// When a file sink starts a new part file before the next checkpoint
/// (Flink's `sink.rolling-policy.*`): once the open file holds `file_size`
/// bytes, or has been open `rollover_ms`. Files also roll at every
/// checkpoint (each is published when its checkpoint completes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RollingPolicy {
    /// Bytes after which the open file is closed.
    pub file_size: u64,
    /// Milliseconds after which the open file is closed.
    pub rollover_ms: i64,
}

impl Default for RollingPolicy {
    /// Flink's defaults: 128 MiB, 30 minutes.
    fn default() -> Self {
        Self {
            file_size: 128 * 1024 * 1024,
            rollover_ms: 30 * 60 * 1000,
        }
    }
}

enum FileWriter {
    Parquet(Box<ArrowWriter<File>>),
    Rows {
        out: BufWriter<File>,
        encoder: Box<dyn crate::formats::RowEncoder>,
        buffer: Vec<u8>,
    },
}

/// The column a changelog written to files in retract mode has its row
/// kind in, as Flink's short strings (`+I`, `-U`, `+U`, `-D`).
pub const WRITTEN_ROW_KIND: &str = "op";

/// Writes the rows of one subtask into files made visible atomically, with
/// two-phase commit when the job checkpoints:
///
/// * rows go to a hidden in-progress file (`.part-SSSS[-N].ext.inprogress`);
/// * at a checkpoint barrier the file is closed and becomes *pending* — its
///   name is part of the snapshot (table `pending`);
/// * when the checkpoint completes, pending files are renamed to
///   `part-SSSS[-N].ext` (the first file of a subtask has no `-N`);
/// * on restore, the pending files of the restored checkpoint are committed
///   and every other in-progress file of the subtask (written after it) is
///   deleted, so output is exactly once;
/// * at the end of input the last file is committed directly.
pub(crate) struct FileSink {
    name: String,
    /// Where files are written: the folder itself, or for an object store
    /// a local staging folder whose closed files are uploaded.
    dir: PathBuf,
    /// The object-store folder files are published in, if not local.
    remote: Option<crate::storage::RemoteFolder>,
    subtask: usize,
    parallelism: usize,
    format: FileFormat,
    /// The schema of the rows written (a changelog's row kind as text).
    schema: SchemaRef,
    /// For a changelog written to a format without row kinds: rows get
    /// their kind as text in a final column [`WRITTEN_ROW_KIND`].
    kinds_as_text: bool,
    /// Sequence number of the next file.
    pub(crate) seq: u64,
    /// The open file: (in-progress path, final path, writer).
    current: Option<(PathBuf, PathBuf, FileWriter)>,
    /// When the open file was opened, and the bytes of rows written to it.
    opened: (std::time::Instant, u64),
    rolling: RollingPolicy,
    /// Files the rolling policy closed since the last checkpoint.
    rolled: Vec<(PathBuf, PathBuf)>,
    /// Closed files awaiting their checkpoint: (checkpoint, in-progress, final).
    pending: Vec<(u64, PathBuf, PathBuf)>,
    /// Whether any file was ever committed or is pending.
    pub(crate) wrote_any: bool,
}

impl FileSink {
    pub(crate) fn new(
        name: String,
        dir: &Path,
        (subtask, parallelism): (usize, usize),
        format: FileFormat,
        schema: SchemaRef,
    ) -> Result<Self> {
        let kinds_as_text = weir_core::spec::is_changelog_schema(&schema)
            && !matches!(&format, FileFormat::Rows { format, .. }
                if crate::formats::formats().get(format).is_ok_and(|f| f.changelog()));
        let schema = if kinds_as_text {
            if schema.index_of(WRITTEN_ROW_KIND).is_ok() {
                return Err(WeirError::plan(format!(
                    "{name}: a changelog file has its row kind in a column '{WRITTEN_ROW_KIND}'; \
                     the rows already have a column of that name"
                )));
            }
            weir_core::changelog::short_string_schema(&schema, WRITTEN_ROW_KIND)
        } else {
            schema
        };
        let (dir, remote) = crate::storage::RemoteFolder::for_sink(dir)?;
        std::fs::create_dir_all(&dir).map_err(|e| WeirError::io(dir.display().to_string(), e))?;
        Ok(Self {
            kinds_as_text,
            name,
            dir,
            remote,
            subtask,
            parallelism,
            format,
            schema,
            seq: 0,
            current: None,
            opened: (std::time::Instant::now(), 0),
            rolling: RollingPolicy::default(),
            rolled: Vec::new(),
            pending: Vec::new(),
            wrote_any: false,
        })
    }

    /// Roll files by `policy` (besides at checkpoints).
    pub(crate) fn with_rolling(mut self, policy: RollingPolicy) -> Self {
        self.rolling = policy;
        self
    }

    /// Close the open file into `rolled` when the rolling policy says so.
    fn roll_if_due(&mut self) -> Result<()> {
        let Some((_, _, writer)) = &self.current else {
            return Ok(());
        };
        let size = match writer {
            FileWriter::Parquet(w) => (w.bytes_written() + w.in_progress_size()) as u64,
            FileWriter::Rows { .. } => self.opened.1,
        };
        let age = self.opened.0.elapsed().as_millis() as i64;
        if (size >= self.rolling.file_size || age >= self.rolling.rollover_ms)
            && let Some(closed) = self.close()?
        {
            self.rolled.push(closed);
        }
        Ok(())
    }

    fn ext(&self) -> String {
        match &self.format {
            FileFormat::Parquet => "parquet".into(),
            FileFormat::Rows { format, .. } => crate::formats::formats()
                .get(format)
                .map(|f| f.extension().to_string())
                .unwrap_or_else(|_| format.clone()),
        }
    }

    fn open(&mut self) -> Result<&mut FileWriter> {
        if self.current.is_none() {
            let (s, ext) = (self.subtask, self.ext());
            let stem = match self.seq {
                0 => format!("part-{s:04}"),
                n => format!("part-{s:04}-{n}"),
            };
            self.seq += 1;
            let final_path = self.dir.join(format!("{stem}.{ext}"));
            let tmp_path = self.dir.join(format!(".{stem}.{ext}.inprogress"));
            let file = File::create(&tmp_path)
                .map_err(|e| WeirError::io(tmp_path.display().to_string(), e))?;
            let location = tmp_path.display().to_string();
            let writer = match &self.format {
                FileFormat::Parquet => {
                    let props = WriterProperties::builder()
                        .set_compression(Compression::ZSTD(ZstdLevel::default()))
                        .build();
                    FileWriter::Parquet(Box::new(
                        ArrowWriter::try_new(file, Arc::clone(&self.schema), Some(props))
                            .map_err(|e| WeirError::bad_input(location, e.to_string()))?,
                    ))
                }
                FileFormat::Rows { format, options } => FileWriter::Rows {
                    out: BufWriter::new(file),
                    encoder: crate::formats::formats()
                        .get(format)?
                        .encoder(&self.schema, options)?,
                    buffer: Vec::new(),
                },
            };
            self.current = Some((tmp_path, final_path, writer));
            self.opened = (std::time::Instant::now(), 0);
            self.wrote_any = true;
        }
        Ok(&mut self.current.as_mut().expect("opened above").2)
    }

    /// Close the open file (flushed and synced); returns its paths.
    fn close(&mut self) -> Result<Option<(PathBuf, PathBuf)>> {
        let Some((tmp, fin, writer)) = self.current.take() else {
            return Ok(None);
        };
        let location = tmp.display().to_string();
        match writer {
            FileWriter::Parquet(w) => {
                w.close()
                    .map_err(|e| WeirError::bad_input(location.clone(), e.to_string()))?;
            }
            FileWriter::Rows { out: mut inner, .. } => {
                inner
                    .flush()
                    .map_err(|e| WeirError::io(location.clone(), e))?;
                inner
                    .get_ref()
                    .sync_all()
                    .map_err(|e| WeirError::io(location.clone(), e))?;
            }
        }
        if let Some(remote) = &self.remote {
            // In progress in the store too (hidden), until published.
            remote.upload(&tmp)?;
        }
        Ok(Some((tmp, fin)))
    }

    /// Publish a closed file; already published (a restore committing it
    /// again) is fine.
    fn publish(&self, tmp: &Path, fin: &Path) -> Result<()> {
        if let Some(remote) = &self.remote {
            return remote.publish(tmp, fin);
        }
        match std::fs::rename(tmp, fin) {
            Ok(()) => Ok(()),
            Err(_) if fin.exists() && !tmp.exists() => Ok(()),
            Err(e) => Err(WeirError::io(fin.display().to_string(), e)),
        }
    }

    /// A file name read back from state as a path inside the sink's folder.
    /// Only this sink's own names are taken: a bare `.part-….inprogress`
    /// (in progress) or `part-…` (final) name, or — as checkpoints written
    /// before names became relative held — an absolute path directly inside
    /// the folder. Anything else (another folder, `..`, a symbolic link) is
    /// refused with the reason.
    fn file_in_folder(
        &self,
        value: &str,
        in_progress: bool,
    ) -> std::result::Result<PathBuf, String> {
        let given = Path::new(value);
        let name = if given.is_absolute() {
            if given.parent() != Some(self.dir.as_path()) {
                return Err(format!(
                    "which is outside the sink folder {}",
                    self.dir.display()
                ));
            }
            given
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
        } else {
            value
        };
        let own = if in_progress {
            name.starts_with(".part-") && name.ends_with(".inprogress")
        } else {
            name.starts_with("part-")
        };
        let plain = !name.contains('/') && !name.contains('\\') && !name.contains("..");
        if !own || !plain {
            return Err(format!(
                "which is not a file name this sink writes inside {}",
                self.dir.display()
            ));
        }
        let path = self.dir.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err("which is a symbolic link".into());
        }
        Ok(path)
    }

    /// Whether the folder holds a published file of this subtask: the
    /// output of a run this one resumes from a savepoint taken after this
    /// sink subtask had finished (finished subtasks are absent from it, so
    /// nothing was restored), which an empty result file must not replace.
    /// (Files are otherwise named by the restored sequence and written
    /// again on a replay: the same rows under the same names.)
    fn published_any(&self) -> Result<bool> {
        if self.remote.is_some() {
            return Ok(false);
        }
        let own = format!("part-{:04}", self.subtask);
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| WeirError::io(self.dir.display().to_string(), e))?;
        Ok(entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_prefix(&own)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-'))
        }))
    }

    /// Whether every file it wrote is published (none open, none pending).
    pub(crate) fn is_idle(&self) -> bool {
        self.current.is_none() && self.rolled.is_empty() && self.pending.is_empty()
    }

    fn pending_schema() -> SchemaRef {
        use arrow::datatypes::{DataType, Field, Schema};
        Arc::new(Schema::new(vec![
            Field::new("subtask", DataType::UInt64, false),
            Field::new("checkpoint", DataType::UInt64, false),
            Field::new("in_progress", DataType::Utf8, false),
            Field::new("final", DataType::Utf8, false),
            Field::new("next_seq", DataType::UInt64, false),
        ]))
    }
}

impl Operator for FileSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        let location = || format!("{}: {}", self.name, self.dir.display());
        let location = location();
        let batch = if self.kinds_as_text {
            weir_core::changelog::with_short_string_kinds(&batch, WRITTEN_ROW_KIND)?
        } else {
            batch
        };
        let written = match self.open()? {
            FileWriter::Parquet(w) => {
                w.write(&batch)
                    .map_err(|e| WeirError::bad_input(location, e.to_string()))?;
                0
            }
            FileWriter::Rows {
                out,
                encoder,
                buffer,
            } => {
                buffer.clear();
                encoder.encode(&batch, buffer)?;
                out.write_all(buffer)
                    .map_err(|e| WeirError::io(location, e))?;
                buffer.len() as u64
            }
        };
        self.opened.1 += written;
        self.roll_if_due()
    }

    fn finish(&mut self, _out: &mut dyn Output) -> Result<()> {
        if !self.wrote_any && !self.published_any()? {
            // An empty result is still a file (with the schema or header).
            self.open()?;
        }
        if let Some(closed) = self.close()? {
            self.rolled.push(closed);
        }
        for (_, tmp, fin) in std::mem::take(&mut self.pending) {
            self.publish(&tmp, &fin)?;
        }
        for (tmp, fin) in std::mem::take(&mut self.rolled) {
            self.publish(&tmp, &fin)?;
        }
        Ok(())
    }

    /// Table `pending`: one row per file awaiting its checkpoint
    /// (`subtask`, `checkpoint`, `in_progress` path, `final` path,
    /// `next_seq`); a subtask with none writes one row with empty paths so
    /// its file sequence survives.
    fn snapshot_state(&mut self, checkpoint: u64) -> Result<Vec<StateTable>> {
        if let Some(closed) = self.close()? {
            self.rolled.push(closed);
        }
        for (tmp, fin) in std::mem::take(&mut self.rolled) {
            self.pending.push((checkpoint, tmp, fin));
        }
        // Names relative to the sink's folder: state never names a path a
        // restore could be steered outside the folder by.
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default()
        };
        let mut rows: Vec<(u64, String, String)> = self
            .pending
            .iter()
            .map(|(c, t, f)| (*c, name(t), name(f)))
            .collect();
        if rows.is_empty() {
            rows.push((checkpoint, String::new(), String::new()));
        }
        let n = rows.len();
        let batch = RecordBatch::try_new(
            Self::pending_schema(),
            vec![
                Arc::new(arrow::array::UInt64Array::from(vec![
                    self.subtask as u64;
                    n
                ])),
                Arc::new(arrow::array::UInt64Array::from_iter_values(
                    rows.iter().map(|r| r.0),
                )),
                Arc::new(arrow::array::StringArray::from_iter_values(
                    rows.iter().map(|r| &r.1),
                )),
                Arc::new(arrow::array::StringArray::from_iter_values(
                    rows.iter().map(|r| &r.2),
                )),
                Arc::new(arrow::array::UInt64Array::from(vec![self.seq; n])),
            ],
        )?;
        Ok(vec![StateTable::new("pending", batch)])
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(c, _, _)| *c <= checkpoint);
        self.pending = waiting;
        for (_, tmp, fin) in done {
            self.publish(&tmp, &fin)?;
        }
        Ok(())
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        use arrow::array::AsArray;
        use arrow::datatypes::UInt64Type;
        let mut committed = std::collections::HashSet::new();
        for t in tables.iter().filter(|t| t.name == "pending") {
            let b = &t.batch;
            let malformed =
                || WeirError::Execution(format!("{}: malformed pending state", self.name));
            let subtask = b
                .column(0)
                .as_primitive_opt::<UInt64Type>()
                .ok_or_else(malformed)?;
            let tmp = b.column(2).as_string_opt::<i32>().ok_or_else(malformed)?;
            let fin = b.column(3).as_string_opt::<i32>().ok_or_else(malformed)?;
            let next = b
                .column(4)
                .as_primitive_opt::<UInt64Type>()
                .ok_or_else(malformed)?;
            for row in 0..b.num_rows() {
                if subtask.value(row) == self.subtask as u64 {
                    self.seq = self.seq.max(next.value(row));
                }
                if tmp.value(row).is_empty() {
                    continue;
                }
                // The checkpoint completed: its pending files are part of
                // the output, whoever restores them.
                let entry = |what: &str, value: &str, in_progress: bool| {
                    self.file_in_folder(value, in_progress).map_err(|why| {
                        WeirError::Execution(format!(
                            "{}: restored state names {what} file '{value}' (row {row} of table \
                             'pending'), {why}; refusing to touch it",
                            self.name
                        ))
                    })
                };
                let tmp_path = entry("in-progress", tmp.value(row), true)?;
                let fin_path = entry("final", fin.value(row), false)?;
                self.publish(&tmp_path, &fin_path)?;
                committed.insert(fin.value(row).to_string());
                self.wrote_any = true;
            }
        }
        // Files written after the restored checkpoint are not part of it:
        // each subtask deletes its own; subtask 0 also those of subtasks
        // beyond the current parallelism (after a rescale down).
        if let Some(remote) = &self.remote {
            return remote.remove_in_progress(self.subtask, self.parallelism, false);
        }
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| WeirError::io(self.dir.display().to_string(), e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if crate::storage::own_in_progress(&name, self.subtask, self.parallelism) {
                std::fs::remove_file(entry.path())
                    .map_err(|e| WeirError::io(entry.path().display().to_string(), e))?;
            }
        }
        Ok(())
    }
}

/// Prints rows as `+I[v1, v2, …]`, prefixed by the subtask when parallel.
struct PrintSink {
    name: String,
    prefix: String,
}

impl Operator for PrintSink {
    stateless!();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        let options = FormatOptions::default().with_null("NULL");
        // A changelog prints its row kind in front, as Flink's print does
        // (`-U[0, 1]`), not as a value.
        let kinds = weir_core::spec::is_changelog_schema(&batch.schema())
            .then(|| weir_core::changelog::row_kinds(&batch))
            .transpose()?;
        let width = batch.num_columns() - usize::from(kinds.is_some());
        let formatters = batch.columns()[..width]
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        for row in 0..batch.num_rows() {
            let values: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            let kind = match kinds {
                Some(k) => weir_core::changelog::row_kind_at(k, row)?,
                None => weir_core::spec::RowKind::Insert,
            };
            // A closed stdout (piped into `head`) must not fail the job.
            let _ = writeln!(lock, "{}{kind}[{}]", self.prefix, values.join(", "));
        }
        Ok(())
    }
}

/// Discards everything.
struct BlackholeSink {
    name: String,
}

impl Operator for BlackholeSink {
    stateless!();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, _batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        Ok(())
    }
}

/// Discards rows no faster than `rate` per second.
struct ThrottledSink {
    name: String,
    rate: u64,
    rows: u64,
    started: Option<std::time::Instant>,
}

impl Operator for ThrottledSink {
    stateless!();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        let started = *self.started.get_or_insert_with(std::time::Instant::now);
        self.rows += batch.num_rows() as u64;
        let due = std::time::Duration::from_secs_f64(self.rows as f64 / self.rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            // Each task has its own thread: sleeping holds back only this
            // task, and through full channels its producers.
            std::thread::sleep(wait);
        }
        Ok(())
    }
}

/// Keeps batches in memory.
struct CollectSink {
    name: String,
    handle: CollectHandle,
}

impl Operator for CollectSink {
    stateless!();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, _out: &mut dyn Output) -> Result<()> {
        self.handle.push(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn sink(dir: &Path) -> FileSink {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        FileSink::new(
            "sink".into(),
            dir,
            (0, 1),
            FileFormat::Rows {
                format: "csv".into(),
                options: Default::default(),
            },
            schema,
        )
        .unwrap()
    }

    fn rows(sink: &FileSink, v: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            Arc::clone(&sink.schema),
            vec![Arc::new(Int64Array::from(v.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn a_resumed_sink_that_had_finished_writes_no_empty_file_over_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let mut out: Vec<RecordBatch> = vec![];
        // A first run publishes two files, then its sink finishes.
        let mut first = sink(dir.path());
        first.restore_state(vec![]).unwrap();
        first
            .process_batch(rows(&first, &[1, 2]), &mut out)
            .unwrap();
        first.snapshot_state(1).unwrap();
        first.notify_checkpoint_complete(1).unwrap();
        first.process_batch(rows(&first, &[3]), &mut out).unwrap();
        first.finish(&mut out).unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert_eq!(read("part-0000.csv"), "1\n2\n");
        assert_eq!(read("part-0000-1.csv"), "3\n");
        // Resumed with no state for it (it had finished) and no rows: it
        // writes no empty file over them.
        let mut resumed = sink(dir.path());
        resumed.restore_state(vec![]).unwrap();
        resumed.finish(&mut out).unwrap();
        assert_eq!(read("part-0000.csv"), "1\n2\n");
    }
}
