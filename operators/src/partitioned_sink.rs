//! The filesystem sink of a `PARTITIONED BY` table: rows go to Hive-style
//! folders `col=value/…` (values escaped as Flink escapes them, NULL as
//! `partition.default-name`), the partition columns left out of the files,
//! each folder written exactly once by a [`FileSink`] of its own; with
//! `'sink.partition-commit.policy.kind' = 'success-file'` a `_SUCCESS`
//! file marks a partition complete once its files are published and its
//! time (by watermark, `partition-time`) or creation (`process-time`) is
//! `sink.partition-commit.delay` behind.
//!
//! Each subtask marks the partitions it wrote; a partition several
//! subtasks write is marked by the first whose files are published (the
//! others publish theirs at the same checkpoint's completion).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_core::message::Watermark;
use weir_core::{Result, WeirError};

use crate::formats::text::{TextStyle, TimestampStyle, write_scalar};
use crate::sinks::{FileFormat, FileSink, RollingPolicy};
use crate::{Operator, Output, StateTable};

/// When a partition is complete.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommitTrigger {
    /// Its creation, in processing time, is the delay behind now.
    ProcessTime,
    /// Its time (from its values) is the delay behind the watermark.
    PartitionTime,
}

/// How partitions are marked complete.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionCommit {
    /// When.
    pub trigger: CommitTrigger,
    /// How long after.
    pub delay_ms: i64,
    /// The marker's name.
    pub success_file: String,
    /// `$col` placeholders giving a partition's time (`$dt $hm:00`).
    pub timestamp_pattern: String,
    /// How that text reads (`yyyy-MM-dd HH:mm:ss` and the like).
    pub timestamp_formatter: String,
}

/// How a partitioned sink writes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionSpec {
    /// The partition columns, in folder order.
    pub keys: Vec<String>,
    /// The folder name of a NULL value.
    pub default_name: String,
    /// Success files, if any.
    pub commit: Option<PartitionCommit>,
}

struct Part {
    sink: FileSink,
    created_ms: i64,
    /// The partition's time, when its values give one.
    time_ms: Option<i64>,
}

pub(crate) struct PartitionedFileSink {
    name: String,
    dir: PathBuf,
    subtask: usize,
    parallelism: usize,
    format: FileFormat,
    data_schema: SchemaRef,
    key_columns: Vec<usize>,
    data_columns: Vec<usize>,
    spec: PartitionSpec,
    parts: BTreeMap<String, Part>,
    /// The next file number of this subtask, over all partitions (a
    /// partition written again after it was closed never reuses a name).
    next_seq: u64,
    watermark: i64,
    rolling: RollingPolicy,
}

/// A partition value as a folder name part, escaped as Flink (and Hive)
/// escape path names.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        let special = (c as u32) < 0x20
            || matches!(
                c,
                '"' | '#'
                    | '%'
                    | '\''
                    | '*'
                    | '/'
                    | ':'
                    | '='
                    | '?'
                    | '\\'
                    | '\u{7f}'
                    | '{'
                    | '['
                    | ']'
                    | '^'
            );
        if special {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn unescape(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(Ok(b)) = value.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16))
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `yyyy-MM-dd HH:mm:ss` (Java) as a chrono format.
fn chrono_format(java: &str) -> String {
    java.replace("yyyy", "%Y")
        .replace("MM", "%m")
        .replace("dd", "%d")
        .replace("HH", "%H")
        .replace("mm", "%M")
        .replace("ss", "%S")
}

impl PartitionedFileSink {
    pub(crate) fn new(
        name: String,
        dir: &Path,
        (subtask, parallelism): (usize, usize),
        format: FileFormat,
        schema: &SchemaRef,
        spec: PartitionSpec,
    ) -> Result<Self> {
        let key_columns = spec
            .keys
            .iter()
            .map(|k| {
                schema.index_of(k).map_err(|_| {
                    WeirError::plan(format!("{name}: partition column '{k}' is not a column"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let data_columns: Vec<usize> = (0..schema.fields().len())
            .filter(|i| !key_columns.contains(i))
            .collect();
        let data_schema = Arc::new(schema.project(&data_columns)?);
        if crate::storage::RemoteFolder::for_sink(dir)?.1.is_none() {
            std::fs::create_dir_all(dir)
                .map_err(|e| WeirError::io(dir.display().to_string(), e))?;
        }
        Ok(Self {
            name,
            dir: dir.to_path_buf(),
            subtask,
            parallelism,
            format,
            data_schema,
            key_columns,
            data_columns,
            spec,
            parts: BTreeMap::new(),
            next_seq: 0,
            watermark: i64::MIN,
            rolling: RollingPolicy::default(),
        })
    }

    /// Roll each partition's files by `policy` (besides at checkpoints).
    pub(crate) fn with_rolling(mut self, policy: RollingPolicy) -> Self {
        self.rolling = policy;
        self
    }

    /// The folder (relative) of each row.
    fn folders(&self, batch: &RecordBatch) -> Result<Vec<String>> {
        let style = TextStyle {
            timestamps: TimestampStyle::Sql,
            plain_decimals: true,
        };
        let columns: Vec<&ArrayRef> = self.key_columns.iter().map(|&i| batch.column(i)).collect();
        let mut out = Vec::with_capacity(batch.num_rows());
        let mut text = String::new();
        for row in 0..batch.num_rows() {
            let mut folder = String::new();
            for (k, column) in self.spec.keys.iter().zip(&columns) {
                if !folder.is_empty() {
                    folder.push('/');
                }
                folder.push_str(k);
                folder.push('=');
                if column.is_null(row) {
                    folder.push_str(&escape(&self.spec.default_name));
                } else {
                    text.clear();
                    write_scalar(&mut text, column, row, style)?;
                    folder.push_str(&escape(&text));
                }
            }
            out.push(folder);
        }
        Ok(out)
    }

    /// A folder read back from state, checked to be one this sink writes.
    fn checked_folder(&self, folder: &str) -> Result<()> {
        let parts: Vec<&str> = folder.split('/').collect();
        let ok = parts.len() == self.spec.keys.len()
            && parts.iter().zip(&self.spec.keys).all(|(p, k)| {
                p.strip_prefix(k.as_str())
                    .and_then(|r| r.strip_prefix('='))
                    .is_some_and(|v| !v.contains('\\') && !v.is_empty())
            });
        if ok {
            Ok(())
        } else {
            Err(WeirError::Execution(format!(
                "{}: restored state names partition folder '{folder}', which is not one this \
                 sink writes; refusing to touch it",
                self.name
            )))
        }
    }

    fn part(&mut self, folder: &str) -> Result<&mut Part> {
        if !self.parts.contains_key(folder) {
            let sink = FileSink::new(
                self.name.clone(),
                &self.dir.join(folder),
                (self.subtask, self.parallelism),
                self.format.clone(),
                Arc::clone(&self.data_schema),
            )?;
            let mut sink = sink.with_rolling(self.rolling);
            sink.seq = self.next_seq;
            let time_ms = self.partition_time(folder);
            self.parts.insert(
                folder.to_string(),
                Part {
                    sink,
                    created_ms: now_ms(),
                    time_ms,
                },
            );
        }
        Ok(self.parts.get_mut(folder).expect("inserted above"))
    }

    /// The time a partition stands for, from its values and the pattern.
    fn partition_time(&self, folder: &str) -> Option<i64> {
        let commit = self.spec.commit.as_ref()?;
        let mut text = commit.timestamp_pattern.clone();
        // Longest names first: `$dt` must not eat `$dth`.
        let mut values: Vec<(String, String)> = folder
            .split('/')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), unescape(v)))
            .collect();
        values.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
        for (k, v) in &values {
            text = text.replace(&format!("${k}"), v);
        }
        let f = chrono_format(&commit.timestamp_formatter);
        chrono::NaiveDateTime::parse_from_str(&text, &f)
            .ok()
            .or_else(|| {
                chrono::NaiveDate::parse_from_str(&text, &f)
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
            })
            .map(|t| t.and_utc().timestamp_millis())
    }

    /// Mark the partitions that are complete (all, at the end of input)
    /// and forget them.
    fn commit_partitions(&mut self, end: bool) -> Result<()> {
        let Some(commit) = self.spec.commit.clone() else {
            return Ok(());
        };
        let now = now_ms();
        let done: Vec<String> = self
            .parts
            .iter()
            .filter(|(_, p)| p.sink.is_idle())
            .filter(|(_, p)| {
                end || match commit.trigger {
                    CommitTrigger::ProcessTime => {
                        p.created_ms.saturating_add(commit.delay_ms) <= now
                    }
                    CommitTrigger::PartitionTime => p
                        .time_ms
                        .is_some_and(|t| t.saturating_add(commit.delay_ms) <= self.watermark),
                }
            })
            .map(|(f, _)| f.clone())
            .collect();
        for folder in done {
            match crate::storage::RemoteFolder::for_sink(&self.dir.join(&folder))? {
                (_, Some(remote)) => remote.write_marker(&commit.success_file)?,
                (local, None) => {
                    let marker = local.join(&commit.success_file);
                    std::fs::write(&marker, b"")
                        .map_err(|e| WeirError::io(marker.display().to_string(), e))?;
                }
            }
            self.parts.remove(&folder);
        }
        Ok(())
    }

    fn sync_seq(&mut self) {
        for p in self.parts.values() {
            self.next_seq = self.next_seq.max(p.sink.seq);
        }
    }
}

/// A file sink's `pending` rows with their partition folder as a column.
fn with_partition(batch: &RecordBatch, folder: &str) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(StringArray::from(vec![folder; batch.num_rows()])));
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("partition", DataType::Utf8, false));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Operator for PartitionedFileSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn process_batch(&mut self, batch: RecordBatch, out: &mut dyn Output) -> Result<()> {
        let folders = self.folders(&batch)?;
        let mut groups: HashMap<&str, Vec<u32>> = HashMap::new();
        for (row, f) in folders.iter().enumerate() {
            groups.entry(f.as_str()).or_default().push(row as u32);
        }
        let data = batch.project(&self.data_columns)?;
        for (folder, rows) in groups {
            let rows = if rows.len() == data.num_rows() {
                data.clone()
            } else {
                arrow::compute::take_record_batch(&data, &UInt32Array::from(rows))?
            };
            self.part(folder)?.sink.process_batch(rows, out)?;
        }
        self.sync_seq();
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        _out: &mut dyn Output,
    ) -> Result<Option<Watermark>> {
        self.watermark = self.watermark.max(watermark.0);
        Ok(Some(watermark))
    }

    fn finish(&mut self, out: &mut dyn Output) -> Result<()> {
        for p in self.parts.values_mut() {
            // A partition restored without rows since has nothing to write.
            if p.sink.wrote_any || !p.sink.is_idle() {
                p.sink.finish(out)?;
            }
        }
        self.commit_partitions(true)
    }

    /// Table `pending`: the file sink's rows of every open partition, with
    /// its folder (`partition`).
    fn snapshot_state(&mut self, checkpoint: u64) -> Result<Vec<StateTable>> {
        let mut batches = vec![];
        for (folder, p) in &mut self.parts {
            for t in p.sink.snapshot_state(checkpoint)? {
                batches.push(with_partition(&t.batch, folder)?);
            }
        }
        self.sync_seq();
        if batches.is_empty() {
            // No partition open: one row keeps the file sequence.
            let mut p = FileSink::new(
                self.name.clone(),
                &self.dir,
                (self.subtask, self.parallelism),
                self.format.clone(),
                Arc::clone(&self.data_schema),
            )?;
            p.seq = self.next_seq;
            for t in p.snapshot_state(checkpoint)? {
                batches.push(with_partition(&t.batch, "")?);
            }
        }
        let schema = batches[0].schema();
        let table = arrow::compute::concat_batches(&schema, &batches)?;
        Ok(vec![StateTable::new("pending", table)])
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: u64) -> Result<()> {
        for p in self.parts.values_mut() {
            p.sink.notify_checkpoint_complete(checkpoint)?;
        }
        self.commit_partitions(false)
    }

    fn restore_state(&mut self, tables: Vec<StateTable>) -> Result<()> {
        use arrow::array::AsArray;
        let mut by_folder: BTreeMap<String, Vec<RecordBatch>> = BTreeMap::new();
        for t in tables.into_iter().filter(|t| t.name == "pending") {
            let b = t.batch;
            let Some(folders) = b
                .column_by_name("partition")
                .and_then(|c| c.as_string_opt::<i32>())
            else {
                return Err(WeirError::Execution(format!(
                    "{}: malformed pending state (no partition column)",
                    self.name
                )));
            };
            let folders: Vec<String> = folders
                .iter()
                .map(|f| f.unwrap_or("").to_string())
                .collect();
            let width = b.num_columns() - 1;
            let inner = b.project(&(0..width).collect::<Vec<_>>())?;
            for (row, folder) in folders.iter().enumerate() {
                by_folder
                    .entry(folder.clone())
                    .or_default()
                    .push(inner.slice(row, 1));
            }
        }
        for (folder, rows) in by_folder {
            let tables = vec![StateTable::new(
                "pending",
                arrow::compute::concat_batches(&rows[0].schema(), &rows)?,
            )];
            if folder.is_empty() {
                // The sequence keeper: no files of its own.
                let mut p = FileSink::new(
                    self.name.clone(),
                    &self.dir,
                    (self.subtask, self.parallelism),
                    self.format.clone(),
                    Arc::clone(&self.data_schema),
                )?;
                p.restore_state(tables)?;
                self.next_seq = self.next_seq.max(p.seq);
                continue;
            }
            self.checked_folder(&folder)?;
            self.part(&folder)?.sink.restore_state(tables)?;
        }
        self.sync_seq();
        for p in self.parts.values_mut() {
            p.sink.seq = self.next_seq;
        }
        // Files in progress in partitions the checkpoint did not know (made
        // after it) are not part of it either.
        if let (_, Some(remote)) = crate::storage::RemoteFolder::for_sink(&self.dir)? {
            return remote.remove_in_progress(self.subtask, self.parallelism, true);
        }
        let mut stack = vec![self.dir.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let ft = entry
                    .file_type()
                    .map_err(|e| WeirError::io(dir.display().to_string(), e))?;
                let name = entry.file_name().to_string_lossy().to_string();
                if ft.is_dir() && !ft.is_symlink() {
                    if name.contains('=') {
                        stack.push(entry.path());
                    }
                    continue;
                }
                if crate::storage::own_in_progress(&name, self.subtask, self.parallelism)
                    && ft.is_file()
                {
                    std::fs::remove_file(entry.path())
                        .map_err(|e| WeirError::io(entry.path().display().to_string(), e))?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_escape_as_flink_escapes_path_names() {
        assert_eq!(escape("2023-11-14"), "2023-11-14");
        assert_eq!(escape("22:13"), "22%3A13");
        assert_eq!(escape("a/b=c"), "a%2Fb%3Dc");
        assert_eq!(unescape("22%3A13"), "22:13");
        assert_eq!(unescape(&escape("x%y#z")), "x%y#z");
    }
}
