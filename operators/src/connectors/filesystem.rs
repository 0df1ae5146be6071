//! The `filesystem` connector: Parquet and CSV files, read as a bounded
//! source (or whole, for a lookup join) and written exactly once.

use std::path::PathBuf;
use std::sync::Arc;

use weir_core::connector::{
    ConnectorOption, ConnectorSource, OptionKind, SinkSpec, TableDescriptor,
};
use weir_core::graph::StreamNode;
use weir_core::spec::{MemorySourceSpec, SourceSpec};
use weir_core::{Result, WeirError};

use super::specs::FilePlan;
use super::{ConnectorFactory, planned_or};
use crate::sinks::{FileFormat, FileSink};
use crate::sources::{CsvSource, ParquetSource};
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
        "Parquet or CSV files in a folder: a bounded source and an exactly-once sink"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        use OptionKind::{Boolean, Duration, OneOf, Text};
        vec![
            ConnectorOption::required("path", Text, "a file or folder"),
            ConnectorOption::required("format", OneOf(&["parquet", "csv"]), "how rows are encoded"),
            ConnectorOption::optional(
                "csv.field-delimiter",
                Text,
                Some(","),
                "one character, or \\t",
            ),
            ConnectorOption::optional(
                "csv.header",
                Boolean,
                Some("false"),
                "whether CSV files start with a header line",
            ),
            ConnectorOption::optional(
                "source.monitor-interval",
                Duration,
                None,
                "accepted; files are read once",
            ),
            ConnectorOption::optional(
                "sink.rolling-policy.file-size",
                Text,
                None,
                "accepted; a file per subtask and checkpoint",
            ),
            ConnectorOption::optional(
                "sink.changelog-mode",
                OneOf(&["append", "retract"]),
                Some("append"),
                "'retract' writes updates with their _op column",
            ),
        ]
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
            let dir = PathBuf::from(t.required("path")?);
            Ok(match format(t)?.as_str() {
                "parquet" => parquet_sink(dir),
                _ => csv_sink(dir),
            })
        })())
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        match file_plan(source)? {
            FilePlan::Parquet(p) => p.validate(),
            FilePlan::Csv(c) => c.validate(),
        }
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        Some(file_plan(source).map(|plan| -> Box<dyn Source> {
            match plan {
                FilePlan::Parquet(p) => Box::new(ParquetSource::new(p, ctx)),
                FilePlan::Csv(c) => Box::new(CsvSource::new(c, ctx)),
            }
        }))
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
                SinkPlan {
                    format: format(&t)?,
                    path: PathBuf::from(t.required("path")?),
                }
            } else {
                sink.planned_as()?
            };
            let format = match plan.format.as_str() {
                "parquet" => FileFormat::Parquet,
                "csv" => FileFormat::Csv,
                other => {
                    return Err(WeirError::plan(format!(
                        "filesystem sink: unknown format '{other}'"
                    )));
                }
            };
            Ok(Box::new(FileSink::new(
                node.name.clone(),
                &plan.path,
                (ctx.subtask, ctx.parallelism),
                format,
                Arc::clone(&node.schema),
            )?))
        })())
    }

    /// Only with `'sink.changelog-mode' = 'retract'` (default `append`).
    fn accepts_changelog(&self, t: &TableDescriptor) -> Result<bool> {
        Ok(t.option("sink.changelog-mode")
            .is_some_and(|m| m.eq_ignore_ascii_case("retract")))
    }

    fn read_bounded(&self, table: &TableDescriptor) -> Option<Result<MemorySourceSpec>> {
        Some(read_all(table))
    }
}

fn filesystem_source(t: &TableDescriptor) -> Result<SourceSpec> {
    let path = t.required("path")?;
    let context = |e: WeirError| t.error(e);
    match format(t)?.as_str() {
        "parquet" => crate::sources::parquet_source(&[path], None).map_err(context),
        _ => {
            let delimiter = match t.option("csv.field-delimiter") {
                None => b',',
                Some(d) if d.len() == 1 => d.as_bytes()[0],
                Some("\\t") => b'\t',
                Some(d) => {
                    return Err(t.error(format!(
                        "csv.field-delimiter must be one character, got '{d}'"
                    )));
                }
            };
            let header = t
                .option("csv.header")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let options = crate::sources::CsvOptions {
                schema: Some(t.declared_schema()?),
                has_header: header,
                delimiter,
            };
            crate::sources::csv_source(&[path], options).map_err(context)
        }
    }
}

/// All rows of a bounded table (a lookup join's side table): its files
/// read now, as the table's physical columns.
fn read_all(t: &TableDescriptor) -> Result<MemorySourceSpec> {
    let path = t.required("path")?;
    let schema = t.declared_schema()?;
    let context = |e: &dyn std::fmt::Display| t.error(format!("reading {path}: {e}"));
    let mut batches = vec![];
    let files: Vec<std::path::PathBuf> = if std::path::Path::new(path).is_dir() {
        let mut v: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| context(&e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        v.sort();
        v
    } else {
        vec![path.into()]
    };
    for f in files {
        let file = std::fs::File::open(&f).map_err(|e| context(&e))?;
        match format(t)?.as_str() {
            "parquet" => {
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .and_then(|b| b.build())
                        .map_err(|e| context(&e))?;
                for b in reader {
                    let b = b.map_err(|e| context(&e))?;
                    let columns = schema
                        .fields()
                        .iter()
                        .map(|want| {
                            let c = b.column_by_name(want.name()).ok_or_else(|| {
                                t.error(format!("{}: no column '{}'", f.display(), want.name()))
                            })?;
                            Ok(arrow::compute::cast(c, want.data_type())?)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    batches.push(arrow::record_batch::RecordBatch::try_new(
                        Arc::clone(&schema),
                        columns,
                    )?);
                }
            }
            _ => {
                let header = t
                    .option("csv.header")
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                let reader = arrow::csv::ReaderBuilder::new(Arc::clone(&schema))
                    .with_header(header)
                    .build(file)
                    .map_err(|e| context(&e))?;
                for b in reader {
                    batches.push(b.map_err(|e| t.error(format!("{}: {e}", f.display())))?);
                }
            }
        }
    }
    Ok(MemorySourceSpec::new(schema, batches))
}

fn format(t: &TableDescriptor) -> Result<String> {
    let f = t.required("format")?.to_ascii_lowercase();
    match f.as_str() {
        "parquet" | "csv" => Ok(f),
        "json" => Err(t.error("format 'json' is not supported yet; use 'parquet' or 'csv'")),
        other => Err(t.error(format!("unknown format '{other}'; supported: parquet, csv"))),
    }
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
}

fn file_sink(format: &str, dir: PathBuf) -> SinkSpec {
    let display = format!("{format}({})", dir.display());
    let plan = SinkPlan {
        format: format.into(),
        path: dir,
    };
    SinkSpec::new("filesystem", serde_json::to_value(plan).unwrap_or_default())
        .with_display(display)
}

/// Parquet files written into `dir`, one file per subtask and checkpoint,
/// made visible atomically (exactly once with checkpoints).
pub fn parquet_sink(dir: impl Into<PathBuf>) -> SinkSpec {
    file_sink("parquet", dir.into())
}

/// CSV files with a header row written into `dir`, as for Parquet.
pub fn csv_sink(dir: impl Into<PathBuf>) -> SinkSpec {
    file_sink("csv", dir.into())
}
