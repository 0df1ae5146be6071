//! A filesystem source that stays open (`'source.monitor-interval'`): the
//! folder is listed every interval and each new file read once. A file
//! belongs to one subtask (by a stable hash of its name); its position —
//! the files it finished and how far into the current one it is — is the
//! checkpointed state, so a restore reads every file exactly once, again
//! at any parallelism.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, BooleanArray, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_core::{Result, WeirError};

use super::{Source, SourcePoll};
use crate::OperatorContext;
use crate::connectors::{FilePlan, MonitoredPlan};

/// How the source reaches its files: list the folder, plan one file, open
/// a file's plan (at parallelism 1: the file whole).
#[derive(Clone, Copy)]
pub(crate) struct FileAccess {
    pub(crate) list: fn(&MonitoredPlan) -> Result<Vec<String>>,
    pub(crate) plan_file: fn(&MonitoredPlan, &str) -> Result<FilePlan>,
    pub(crate) open: fn(FilePlan, &OperatorContext) -> Box<dyn Source>,
}

/// Reads the files of a folder as they appear, each once.
pub struct MonitoredSource {
    plan: MonitoredPlan,
    /// The rows it yields (the table's, and a changelog format's row kind).
    rows: SchemaRef,
    access: FileAccess,
    subtask: u64,
    parallelism: u64,
    /// A context for the single-file readers: one subtask of one.
    single: OperatorContext,
    /// Files finished (or given to a restored reader) by this subtask.
    done: BTreeSet<String>,
    queue: VecDeque<(String, u64)>,
    current: Option<(String, Box<dyn Source>, u64, u64)>,
    next_scan: Instant,
}

/// FNV-1a: the same on every worker and after a restart.
fn owner(file: &str, parallelism: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in file.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % parallelism.max(1)
}

impl MonitoredSource {
    pub(crate) fn new(plan: MonitoredPlan, ctx: &OperatorContext, access: FileAccess) -> Self {
        let mut single = ctx.clone();
        single.subtask = 0;
        single.parallelism = 1;
        Self {
            rows: crate::formats::produced_schema(&plan.format, &plan.schema),
            plan,
            access,
            subtask: ctx.subtask as u64,
            parallelism: ctx.parallelism as u64,
            single,
            done: BTreeSet::new(),
            queue: VecDeque::new(),
            current: None,
            next_scan: Instant::now(),
        }
    }

    /// List the folder; queue this subtask's files not read yet.
    fn scan(&mut self) -> Result<()> {
        let files = (self.access.list)(&self.plan)?;
        let queued: BTreeSet<String> = self.queue.iter().map(|(f, _)| f.clone()).collect();
        let current = self.current.as_ref().map(|c| c.0.clone());
        for f in files {
            if owner(&f, self.parallelism) == self.subtask
                && !self.done.contains(&f)
                && !queued.contains(&f)
                && current.as_ref() != Some(&f)
            {
                self.queue.push_back((f, 0));
            }
        }
        Ok(())
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some((file, skip)) = self.queue.pop_front() else {
            return Ok(false);
        };
        let plan = (self.access.plan_file)(&self.plan, &file)?;
        let reader = (self.access.open)(plan, &self.single);
        self.current = Some((file, reader, 0, skip));
        Ok(true)
    }
}

/// `b` as the table's columns: found by name, cast to the declared types
/// (a Parquet file's own types may be narrower).
fn conform(schema: &SchemaRef, b: RecordBatch, file: &str) -> Result<RecordBatch> {
    if b.schema().fields() == schema.fields() {
        return Ok(b);
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let c = b.column_by_name(f.name()).ok_or_else(|| {
                WeirError::bad_input(file.to_string(), format!("no column '{}'", f.name()))
            })?;
            Ok(arrow::compute::cast(c, f.data_type())?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

fn position_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("file", DataType::Utf8, false),
        Field::new("rows_read", DataType::UInt64, false),
        Field::new("finished", DataType::Boolean, false),
    ]))
}

impl Source for MonitoredSource {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        loop {
            if let Some((file, reader, read, skip)) = &mut self.current {
                match reader.poll_next()? {
                    SourcePoll::Batch(b) => {
                        let n = b.num_rows() as u64;
                        let start = *read;
                        *read += n;
                        // Rows emitted before the checkpoint this restored.
                        if *read <= *skip {
                            continue;
                        }
                        let from = skip.saturating_sub(start) as usize;
                        let b = if from > 0 {
                            b.slice(from, b.num_rows() - from)
                        } else {
                            b
                        };
                        return Ok(SourcePoll::Batch(conform(&self.rows, b, file)?));
                    }
                    SourcePoll::Pending(d) => return Ok(SourcePoll::Pending(d)),
                    SourcePoll::Finished => {
                        self.done.insert(file.clone());
                        self.current = None;
                    }
                }
            }
            if self.open_next()? {
                continue;
            }
            let now = Instant::now();
            if now < self.next_scan {
                return Ok(SourcePoll::Pending(self.next_scan - now));
            }
            self.next_scan = now + Duration::from_millis(self.plan.interval_ms.max(1));
            self.scan()?;
            if self.queue.is_empty() {
                return Ok(SourcePoll::Pending(Duration::from_millis(
                    self.plan.interval_ms.max(1),
                )));
            }
        }
    }

    /// One row per file this subtask finished, plus the one it reads and
    /// those queued, with the rows of it already emitted.
    fn snapshot_position(&mut self, _checkpoint: u64) -> Result<RecordBatch> {
        let mut rows: Vec<(String, u64, bool)> =
            self.done.iter().map(|f| (f.clone(), 0, true)).collect();
        if let Some((f, _, read, skip)) = &self.current {
            rows.push((f.clone(), (*read).max(*skip), false));
        }
        rows.extend(self.queue.iter().map(|(f, skip)| (f.clone(), *skip, false)));
        Ok(RecordBatch::try_new(
            position_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.0.as_str()),
                )),
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(BooleanArray::from(
                    rows.iter().map(|r| r.2).collect::<Vec<_>>(),
                )),
            ],
        )?)
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        self.done.clear();
        self.queue.clear();
        self.current = None;
        for b in positions {
            let malformed = || WeirError::Execution("monitored source: malformed position".into());
            let files = b.column(0).as_string_opt::<i32>().ok_or_else(malformed)?;
            let read = b
                .column(1)
                .as_primitive_opt::<arrow::datatypes::UInt64Type>()
                .ok_or_else(malformed)?;
            let finished = b.column(2).as_boolean_opt().ok_or_else(malformed)?;
            for r in 0..b.num_rows() {
                let f = files.value(r).to_string();
                if owner(&f, self.parallelism) != self.subtask {
                    continue;
                }
                if finished.value(r) {
                    self.done.insert(f);
                } else {
                    self.queue.push_back((f, read.value(r)));
                }
            }
        }
        self.next_scan = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::Connectors;
    use arrow::datatypes::Int64Type;
    use weir_core::connector::TableDescriptor;
    use weir_core::spec::SourceSpec;

    fn ctx() -> OperatorContext {
        OperatorContext {
            task_name: "watch".into(),
            subtask: 0,
            parallelism: 1,
            key_groups: weir_core::keys::KeyGroupRange::for_subtask(0, 1, 128),
            config: weir_core::config::WeirConfig {
                batch_size: 10,
                ..Default::default()
            },
            connectors: Default::default(),
            memory: Default::default(),
            local_tasks: 1,
        }
    }

    fn drain(s: &mut dyn Source, limit: usize, out: &mut Vec<i64>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while out.len() < limit && Instant::now() < deadline {
            match s.poll_next().unwrap() {
                SourcePoll::Batch(b) => {
                    out.extend(b.column(0).as_primitive::<Int64Type>().values().iter())
                }
                SourcePoll::Pending(d) => std::thread::sleep(d.min(Duration::from_millis(5))),
                SourcePoll::Finished => break,
            }
        }
    }

    #[test]
    fn a_restore_reads_no_file_twice_and_resumes_inside_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.csv"),
            (0..25).map(|n| format!("{n}\n")).collect::<String>(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.csv"),
            (25..50).map(|n| format!("{n}\n")).collect::<String>(),
        )
        .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let options = [
            ("connector", "filesystem".to_string()),
            ("path", dir.path().display().to_string()),
            ("format", "csv".into()),
            ("source.monitor-interval", "10 ms".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let registry = Connectors::default();
        let SourceSpec::Connector(spec) = registry
            .source(&TableDescriptor::new("t", options, Some(schema)))
            .unwrap()
        else {
            panic!("a connector source")
        };
        let mut first = registry.open_source(&spec, &ctx()).unwrap();
        let mut got = vec![];
        // All of a.csv and a batch of b.csv, then a checkpoint.
        drain(first.as_mut(), 35, &mut got);
        let position = first.snapshot_position(1).unwrap();
        let mut second = registry.open_source(&spec, &ctx()).unwrap();
        second.restore_position(vec![position]).unwrap();
        std::fs::write(dir.path().join("c.csv"), "50\n51\n").unwrap();
        drain(second.as_mut(), 52, &mut got);
        got.sort_unstable();
        assert_eq!(got, (0..52).collect::<Vec<i64>>());
    }
}
