//! The `filesystem` connector: Parquet and CSV files, read as a bounded
//! source (or whole, for a lookup join) and written exactly once.

use std::path::PathBuf;
use std::sync::Arc;

use weir_core::connector::{
    ConnectorOption, ConnectorSource, OptionKind, Options, SinkSpec, TableDescriptor,
};
use weir_core::graph::StreamNode;
use weir_core::spec::{MemorySourceSpec, SourceSpec};
use weir_core::{Result, WeirError};

use super::specs::{FilePlan, MonitoredPlan, PartitionFiles, PartitionedPlan};
use super::{ConnectorFactory, planned_or};
use crate::formats::formats;
use crate::partitioned_sink::{CommitTrigger, PartitionCommit, PartitionSpec, PartitionedFileSink};
use crate::sinks::RollingPolicy;
use crate::sinks::{FileFormat, FileSink};
use crate::sources::{FileAccess, MonitoredSource, ParquetSource, PartitionedSource, TextSource};
use crate::{Operator, OperatorContext, Source};

/// `'connector' = 'filesystem'`.
pub(super) struct Filesystem;

impl ConnectorFactory for Filesystem {
    fn identifier(&self) -> &str {
        "filesystem"
    }

    fn is_source(&self) -> bool {
        true
    }

    fn is_sink(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Parquet, CSV, JSON or raw files in a folder: a bounded source and an exactly-once sink"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        use OptionKind::{Duration, OneOf, Text};
        let mut options = vec![
            ConnectorOption::required("path", Text, "a file or folder"),
            ConnectorOption::required(
                "format",
                OneOf(&["parquet", "csv", "json", "raw", "debezium-json"]),
                "how rows are encoded (its options follow, prefixed by its name)",
            ),
            ConnectorOption::optional(
                "source.monitor-interval",
                Duration,
                None,
                "keep the source open, listing the folder this often; each new file is read once",
            ),
            ConnectorOption::optional(
                "sink.rolling-policy.file-size",
                OptionKind::MemorySize,
                Some("128 mb"),
                "a part file rolls once it holds this much (files also roll at each checkpoint)",
            ),
            ConnectorOption::optional(
                "sink.changelog-mode",
                OneOf(&["append", "retract"]),
                Some("append"),
                "'retract' writes updates with their row kind (+I, -U, +U, -D) in a final column 'op'",
            ),
        ];
        options.extend([
            ConnectorOption::optional(
                "sink.partition-commit.policy.kind",
                OneOf(&["success-file"]),
                None,
                "mark a complete partition with a success file",
            ),
            ConnectorOption::optional(
                "sink.partition-commit.trigger",
                OneOf(&["process-time", "partition-time"]),
                Some("process-time"),
                "a partition is complete by its creation time or by watermark past its time",
            ),
            ConnectorOption::optional(
                "sink.partition-commit.delay",
                Duration,
                Some("0 s"),
                "how long after that",
            ),
            ConnectorOption::optional(
                "sink.partition-commit.success-file.name",
                Text,
                Some("_SUCCESS"),
                "the marker's name",
            ),
            ConnectorOption::optional(
                "partition.time-extractor.timestamp-pattern",
                Text,
                None,
                "a partition's time from its values, e.g. '$dt $hm:00' (default: the first column)",
            ),
            ConnectorOption::optional(
                "partition.time-extractor.timestamp-formatter",
                Text,
                Some("yyyy-MM-dd HH:mm:ss"),
                "how that text reads",
            ),
            ConnectorOption::optional(
                "partition.default-name",
                Text,
                Some("__DEFAULT_PARTITION__"),
                "the folder of a NULL partition value",
            ),
            ConnectorOption::optional(
                "sink.rolling-policy.rollover-interval",
                Duration,
                Some("30 min"),
                "a part file rolls once it has been open this long",
            ),
            ConnectorOption::optional(
                "sink.rolling-policy.check-interval",
                Duration,
                Some("1 min"),
                "accepted; time-based rolling is checked at every batch written",
            ),
        ]);
        options.extend(formats().all_options());
        options
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn delivery(&self) -> &str {
        "exactly-once"
    }

    fn plan_source(&self, table: &TableDescriptor) -> Option<Result<SourceSpec>> {
        Some(filesystem_source(table))
    }

    fn plan_sink(&self, t: &TableDescriptor) -> Option<Result<SinkSpec>> {
        Some((|| {
            let path = t.required("path")?;
            if crate::storage::is_url(path) {
                // A store the sink cannot open fails now, not in a task.
                crate::storage::store_for(path).map_err(|e| t.error(e))?;
            }
            let dir = PathBuf::from(path.strip_prefix("file://").unwrap_or(path));
            let f = format(t)?;
            if f != "parquet" {
                // Bad format options fail when planned, not in a task.
                let schema = t.declared_schema()?;
                formats()
                    .get(&f)?
                    .encoder(&schema, &format_options(t, &f))
                    .map_err(|e| t.error(e))?;
            }
            let mut sink = file_sink(&f, dir, format_options(t, &f));
            let mut plan: SinkPlan = sink.planned_as()?;
            plan.rolling = rolling_policy(t)?;
            sink.planned = serde_json::to_value(&plan).unwrap_or_default();
            if !t.partition_keys.is_empty() {
                plan.partition = Some(partition_spec(t)?);
                sink.planned = serde_json::to_value(plan).unwrap_or_default();
                sink.display = format!(
                    "{} partitioned by {}",
                    sink.display,
                    t.partition_keys.join(", ")
                );
            }
            Ok(sink)
        })())
    }

    fn supports_partitions(&self) -> bool {
        true
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        fn check(plan: &FilePlan) -> Result<()> {
            match plan {
                FilePlan::Parquet(p) => p.validate(),
                FilePlan::Text(c) => c.validate(),
                FilePlan::Partitioned(p) => p.parts.iter().try_for_each(|p| check(&p.files)),
                FilePlan::Monitored(_) => Ok(()),
            }
        }
        check(&file_plan(source)?)
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        fn open(plan: FilePlan, ctx: &OperatorContext) -> Box<dyn Source> {
            match plan {
                FilePlan::Parquet(p) => Box::new(ParquetSource::new(p, ctx)),
                FilePlan::Text(c) => Box::new(TextSource::new(c, ctx)),
                FilePlan::Partitioned(p) => Box::new(PartitionedSource::new(p, ctx, open)),
                FilePlan::Monitored(p) => Box::new(MonitoredSource::new(
                    p,
                    ctx,
                    FileAccess {
                        list: list_monitored,
                        plan_file: plan_monitored_file,
                        open,
                    },
                )),
            }
        }
        Some(file_plan(source).map(|plan| open(plan, ctx)))
    }

    fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        Some((|| -> Result<Box<dyn Operator>> {
            let plan: SinkPlan = if sink.planned.is_null() {
                // A job graph written by hand: plan from the options.
                let t = sink.descriptor(&node.name, Arc::clone(&node.schema));
                let f = format(&t)?;
                SinkPlan {
                    options: format_options(&t, &f),
                    format: f,
                    path: PathBuf::from(t.required("path")?),
                    partition: None,
                    rolling: rolling_policy(&t)?,
                }
            } else {
                sink.planned_as()?
            };
            let format = match plan.format.as_str() {
                "parquet" => FileFormat::Parquet,
                other => FileFormat::Rows {
                    format: formats().get(other)?.identifier().to_string(),
                    options: plan.options.clone(),
                },
            };
            if let Some(partition) = plan.partition {
                return Ok(Box::new(
                    PartitionedFileSink::new(
                        node.name.clone(),
                        &plan.path,
                        (ctx.subtask, ctx.parallelism),
                        format,
                        &node.schema,
                        partition,
                    )?
                    .with_rolling(plan.rolling),
                ));
            }
            Ok(Box::new(
                FileSink::new(
                    node.name.clone(),
                    &plan.path,
                    (ctx.subtask, ctx.parallelism),
                    format,
                    Arc::clone(&node.schema),
                )?
                .with_rolling(plan.rolling),
            ))
        })())
    }

    /// With a changelog format (`debezium-json`), or with
    /// `'sink.changelog-mode' = 'retract'` (default `append`).
    fn accepts_changelog(&self, t: &TableDescriptor) -> Result<bool> {
        Ok(changelog_format(t)
            || t.option("sink.changelog-mode")
                .is_some_and(|m| m.eq_ignore_ascii_case("retract")))
    }

    fn read_bounded(&self, table: &TableDescriptor) -> Option<Result<MemorySourceSpec>> {
        Some(read_all(table))
    }
}

fn filesystem_source(t: &TableDescriptor) -> Result<SourceSpec> {
    if let Some(interval) = t.duration_ms("source.monitor-interval")? {
        return monitored_source(t, interval);
    }
    if !t.partition_keys.is_empty() {
        if changelog_format(t) {
            return Err(t.error(
                "reading a PARTITIONED BY table of a changelog format is not supported yet",
            ));
        }
        return partitioned_source(t);
    }
    let path = t.required("path")?;
    let context = |e: WeirError| t.error(e);
    match format(t)?.as_str() {
        "parquet" => {
            let projection: Option<Vec<&str>> = t
                .projection
                .as_ref()
                .map(|cols| cols.iter().map(String::as_str).collect());
            crate::sources::parquet_files_source(&[path], projection.as_deref(), None, &t.filters)
                .map_err(context)
        }
        f => crate::sources::format_source(
            f,
            &[path],
            t.declared_schema()?,
            format_options(t, f),
            t.projection.as_deref(),
        )
        .map_err(context),
    }
}

/// The table's options of format `f` (`csv.*` for csv).
fn format_options(t: &TableDescriptor, f: &str) -> Options {
    let prefix = format!("{f}.");
    t.options
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// All rows of a bounded table (a lookup join's side table): its files
/// read now by the source a query would read them with, as the table's
/// physical columns (Parquet columns found by name and cast).
fn read_all(t: &TableDescriptor) -> Result<MemorySourceSpec> {
    if changelog_format(t) {
        return Err(t.error(
            "a lookup join reads the rows of its table; a changelog format's events are not rows",
        ));
    }
    let schema = t.declared_schema()?;
    let spec = filesystem_source(t)?;
    let ctx = OperatorContext {
        task_name: format!("read {}", t.name),
        subtask: 0,
        parallelism: 1,
        key_groups: weir_core::keys::KeyGroupRange::for_subtask(0, 1, 1),
        config: Default::default(),
        connectors: Default::default(),
        memory: Default::default(),
        local_tasks: 1,
    };
    let mut source = match &spec {
        SourceSpec::Connector(c) => Filesystem
            .open_source(c, &ctx)
            .unwrap_or_else(|| Err(WeirError::plan("not a filesystem source")))?,
        SourceSpec::Computed(_) => {
            return Err(t.error("a filesystem table reads no computed source"));
        }
    };
    let mut batches = vec![];
    loop {
        match source.poll_next().map_err(|e| t.error(e))? {
            crate::SourcePoll::Batch(b) => {
                let columns = schema
                    .fields()
                    .iter()
                    .map(|want| {
                        let c = b.column_by_name(want.name()).ok_or_else(|| {
                            t.error(format!("{}: no column '{}'", spec.describe(), want.name()))
                        })?;
                        Ok(arrow::compute::cast(c, want.data_type())?)
                    })
                    .collect::<Result<Vec<_>>>()?;
                batches.push(arrow::record_batch::RecordBatch::try_new(
                    Arc::clone(&schema),
                    columns,
                )?);
            }
            crate::SourcePoll::Pending(d) => std::thread::sleep(d),
            crate::SourcePoll::Finished => break,
        }
    }
    Ok(MemorySourceSpec::new(schema, batches))
}

/// Whether the table's format carries a changelog.
fn changelog_format(t: &TableDescriptor) -> bool {
    t.option("format")
        .is_some_and(|f| formats().get(f).is_ok_and(|f| f.changelog()))
}

fn format(t: &TableDescriptor) -> Result<String> {
    let f = t.required("format")?.to_ascii_lowercase();
    if f != "parquet" {
        formats().check_table(t, &f)?;
        if formats().get(&f).is_ok_and(|f| f.message_framed()) {
            return Err(t.error(format!(
                "format '{f}' frames records by message (Kafka); files of it are not supported"
            )));
        }
    }
    Ok(f)
}

/// What a filesystem source reads, as planned (or planned again from its
/// options).
fn file_plan(source: &ConnectorSource) -> Result<FilePlan> {
    planned_or(source, |t| {
        filesystem_source(t).and_then(|s| s.connector().planned_as())
    })
}

/// What a filesystem sink writes, as planned.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct SinkPlan {
    format: String,
    path: PathBuf,
    #[serde(default)]
    options: Options,
    #[serde(default)]
    partition: Option<PartitionSpec>,
    #[serde(default)]
    rolling: RollingPolicy,
}

/// The table's `sink.rolling-policy.*` (Flink's defaults for what it
/// leaves out).
fn rolling_policy(t: &TableDescriptor) -> Result<RollingPolicy> {
    let mut policy = RollingPolicy::default();
    if let Some(v) = t.option("sink.rolling-policy.file-size") {
        policy.file_size = weir_core::connector::parse_memory_size(v)
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                t.error(format!(
                    "'sink.rolling-policy.file-size' = '{v}' is not a positive memory size"
                ))
            })?;
    }
    if let Some(ms) = t.duration_ms("sink.rolling-policy.rollover-interval")? {
        if ms <= 0 {
            return Err(t.error("'sink.rolling-policy.rollover-interval' must be positive"));
        }
        policy.rollover_ms = ms;
    }
    Ok(policy)
}

fn file_sink(format: &str, dir: PathBuf, options: Options) -> SinkSpec {
    let display = format!("{format}({})", dir.display());
    let plan = SinkPlan {
        format: format.into(),
        path: dir,
        options,
        partition: None,
        rolling: RollingPolicy::default(),
    };
    SinkSpec::new("filesystem", serde_json::to_value(plan).unwrap_or_default())
        .with_display(display)
}

/// Parquet files written into `dir`, one file per subtask and checkpoint,
/// made visible atomically (exactly once with checkpoints).
pub fn parquet_sink(dir: impl Into<PathBuf>) -> SinkSpec {
    file_sink("parquet", dir.into(), Options::new())
}

/// CSV files as Flink's csv format writes them (no header), written into
/// `dir` as for Parquet.
pub fn csv_sink(dir: impl Into<PathBuf>) -> SinkSpec {
    file_sink("csv", dir.into(), Options::new())
}

/// Files of row format `format` (`csv`, `json`, `raw`) with its options,
/// written into `dir` as for Parquet.
pub fn format_sink(format: &str, dir: impl Into<PathBuf>, options: Options) -> SinkSpec {
    file_sink(format, dir.into(), options)
}

/// How a `PARTITIONED BY` table's sink writes and commits partitions.
fn partition_spec(t: &TableDescriptor) -> Result<PartitionSpec> {
    let schema = t.declared_schema()?;
    for k in &t.partition_keys {
        if schema.index_of(k).is_err() {
            return Err(t.error(format!("PARTITIONED BY names '{k}', which is not a column")));
        }
    }
    if t.partition_keys.len() == schema.fields().len() {
        return Err(t.error("PARTITIONED BY takes every column: no column is left for the files"));
    }
    let commit = match t.option("sink.partition-commit.policy.kind") {
        None => None,
        Some(_) => Some(PartitionCommit {
            trigger: match t.option("sink.partition-commit.trigger") {
                Some(v) if v.eq_ignore_ascii_case("partition-time") => CommitTrigger::PartitionTime,
                _ => CommitTrigger::ProcessTime,
            },
            delay_ms: t.duration_ms("sink.partition-commit.delay")?.unwrap_or(0),
            success_file: t
                .option("sink.partition-commit.success-file.name")
                .unwrap_or("_SUCCESS")
                .to_string(),
            timestamp_pattern: t
                .option("partition.time-extractor.timestamp-pattern")
                .map(str::to_string)
                .unwrap_or_else(|| format!("${}", t.partition_keys[0])),
            timestamp_formatter: t
                .option("partition.time-extractor.timestamp-formatter")
                .unwrap_or("yyyy-MM-dd HH:mm:ss")
                .to_string(),
        }),
    };
    Ok(PartitionSpec {
        keys: t.partition_keys.clone(),
        default_name: t
            .option("partition.default-name")
            .unwrap_or("__DEFAULT_PARTITION__")
            .to_string(),
        commit,
    })
}

/// The partition folders under `path`: (relative folder, values), sorted.
fn partition_folders(t: &TableDescriptor, path: &str) -> Result<Vec<(String, Vec<String>)>> {
    let keys = &t.partition_keys;
    let mut folders: Vec<String> = if crate::storage::is_url(path) {
        let base = path.trim_end_matches('/');
        crate::storage::list_objects(path)
            .map_err(|e| t.error(e))?
            .into_iter()
            .filter_map(|(url, _)| {
                let rel = url.strip_prefix(base)?.trim_start_matches('/');
                rel.rsplit_once('/').map(|(folder, _)| folder.to_string())
            })
            .collect()
    } else {
        let root = PathBuf::from(path.strip_prefix("file://").unwrap_or(path));
        let mut found = vec![];
        let mut stack = vec![(root.clone(), 0usize)];
        while let Some((dir, depth)) = stack.pop() {
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| t.error(WeirError::io(dir.display().to_string(), e)))?;
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let is_dir = e.file_type().is_ok_and(|f| f.is_dir());
                if is_dir && depth < keys.len() && name.starts_with(&format!("{}=", keys[depth])) {
                    if depth + 1 == keys.len() {
                        if let Ok(rel) = e.path().strip_prefix(&root) {
                            found.push(rel.display().to_string());
                        }
                    } else {
                        stack.push((e.path(), depth + 1));
                    }
                }
            }
        }
        found
    };
    folders.sort();
    folders.dedup();
    Ok(folders
        .into_iter()
        .filter_map(|folder| {
            let values: Option<Vec<String>> = folder
                .split('/')
                .zip(keys)
                .map(|(part, k)| {
                    part.strip_prefix(k.as_str())
                        .and_then(|r| r.strip_prefix('='))
                        .map(crate::partitioned_sink::unescape)
                })
                .collect();
            values
                .filter(|v| v.len() == keys.len())
                .map(|v| (folder, v))
        })
        .collect())
}

/// The source of a `PARTITIONED BY` table: each partition folder read by
/// the format's source, the partition columns added from the folder names;
/// folders a filter on partition columns rules out are left out.
fn partitioned_source(t: &TableDescriptor) -> Result<SourceSpec> {
    let path = t.required("path")?;
    let f = format(t)?;
    let schema = t.declared_schema()?;
    let default = t
        .option("partition.default-name")
        .unwrap_or("__DEFAULT_PARTITION__");
    let data_columns: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| !t.partition_keys.contains(schema.field(i).name()))
        .collect();
    let data_schema = Arc::new(schema.project(&data_columns)?);
    let folders = partition_folders(t, path)?;
    let all = folders.len();
    let mut parts = vec![];
    for (folder, values) in folders {
        let values: Vec<Option<String>> = values
            .into_iter()
            .map(|v| (v != default).then_some(v))
            .collect();
        if !crate::connectors::pruning::partition_may_pass(
            &t.partition_keys,
            &values,
            &schema,
            &t.filters,
        ) {
            continue;
        }
        let at = format!("{}/{folder}", path.trim_end_matches('/'));
        let spec = match f.as_str() {
            "parquet" => crate::sources::parquet_files_source(&[&at], None, None, &t.filters),
            other => crate::sources::format_source(
                other,
                &[&at],
                Arc::clone(&data_schema),
                format_options(t, other),
                None,
            ),
        }
        .map_err(|e| t.error(e))?;
        parts.push(PartitionFiles {
            folder,
            values,
            files: spec.connector().planned_as()?,
        });
    }
    let display = format!("{f}({path}) [{} of {all} partitions]", parts.len());
    let plan = PartitionedPlan {
        keys: t.partition_keys.clone(),
        schema: Arc::clone(&schema),
        all,
        parts,
    };
    Ok(SourceSpec::Connector(
        ConnectorSource::new(
            "filesystem",
            schema,
            true,
            serde_json::to_value(FilePlan::Partitioned(plan)).unwrap_or_default(),
        )
        .with_display(display),
    ))
}

/// A source that stays open, reading each new file of the folder once.
fn monitored_source(t: &TableDescriptor, interval_ms: i64) -> Result<SourceSpec> {
    if interval_ms <= 0 {
        return Err(t.error("source.monitor-interval must be positive"));
    }
    if !t.partition_keys.is_empty() {
        return Err(
            t.error("source.monitor-interval on a PARTITIONED BY table is not supported yet")
        );
    }
    let path = t.required("path")?.to_string();
    let f = format(t)?;
    let schema = t.declared_schema()?;
    let plan = MonitoredPlan {
        path: path.clone(),
        options: format_options(t, &f),
        format: f.clone(),
        schema: Arc::clone(&schema),
        interval_ms: interval_ms as u64,
    };
    // The folder must be there now; its files may come later.
    if !crate::storage::is_url(&path) {
        let local = path.strip_prefix("file://").unwrap_or(&path);
        std::fs::metadata(local).map_err(|e| t.error(WeirError::io(local, e)))?;
    }
    Ok(SourceSpec::Connector(
        ConnectorSource::new(
            "filesystem",
            crate::formats::produced_schema(&f, &schema),
            false,
            serde_json::to_value(FilePlan::Monitored(plan)).unwrap_or_default(),
        )
        .with_display(format!("{f}({path}) [watched every {interval_ms} ms]"))
        .with_changelog(crate::formats::produced_changelog(&f)),
    ))
}

/// The files of a watched folder now (none yet is no error).
fn list_monitored(plan: &MonitoredPlan) -> Result<Vec<String>> {
    let path = PathBuf::from(&plan.path);
    match crate::sources::expand_paths(&[path], None) {
        Ok(files) => Ok(files.iter().map(|f| f.display().to_string()).collect()),
        Err(WeirError::BadInput { .. }) => Ok(vec![]),
        Err(e) => Err(e),
    }
}

/// One file of a watched folder as the format's source reads it.
fn plan_monitored_file(plan: &MonitoredPlan, file: &str) -> Result<FilePlan> {
    let spec = match plan.format.as_str() {
        "parquet" => crate::sources::parquet_files_source(&[file], None, None, &[])?,
        other => crate::sources::format_source(
            other,
            &[file],
            Arc::clone(&plan.schema),
            plan.options.clone(),
            None,
        )?,
    };
    spec.connector().planned_as()
}
