//! The `filesystem` connector: Parquet and CSV files, read as a bounded
//! source (or whole, for a lookup join) and written exactly once.

use std::sync::Arc;

use weir_core::spec::{SinkSpec, SourceSpec};
use weir_core::{Result, WeirError};

use super::{
    ConnectorFactory, ConnectorOption, OptionKind, conform_source, format, required, table_err,
};
use crate::catalog::TableEntry;

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

    fn create_source(&self, table: &TableEntry) -> Option<Result<SourceSpec>> {
        Some(filesystem_source(table))
    }

    fn create_sink(&self, t: &TableEntry) -> Option<Result<SinkSpec>> {
        Some((|| {
            let dir = std::path::PathBuf::from(required(t, "path")?);
            match format(t)?.as_str() {
                "parquet" => Ok(SinkSpec::Parquet { dir }),
                _ => Ok(SinkSpec::Csv { dir }),
            }
        })())
    }

    /// Only with `'sink.changelog-mode' = 'retract'` (default `append`).
    fn accepts_changelog(&self, t: &TableEntry) -> Result<bool> {
        Ok(t.option("sink.changelog-mode")
            .is_some_and(|m| m.eq_ignore_ascii_case("retract")))
    }

    fn read_bounded(
        &self,
        table: &TableEntry,
    ) -> Option<Result<weir_core::spec::MemorySourceSpec>> {
        Some(read_all(table))
    }
}

fn filesystem_source(t: &TableEntry) -> Result<SourceSpec> {
    let path = required(t, "path")?;
    let context = |e: WeirError| table_err(t, e);
    match format(t)?.as_str() {
        "parquet" => {
            let spec = weir_operators::sources::parquet_source(&[path], None).map_err(context)?;
            conform_source(t, spec)
        }
        _ => {
            let delimiter = match t.option("csv.field-delimiter") {
                None => b',',
                Some(d) if d.len() == 1 => d.as_bytes()[0],
                Some("\\t") => b'\t',
                Some(d) => {
                    return Err(table_err(
                        t,
                        format!("csv.field-delimiter must be one character, got '{d}'"),
                    ));
                }
            };
            let header = t
                .option("csv.header")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let options = weir_operators::sources::CsvOptions {
                schema: Some(Arc::clone(&t.schema)),
                has_header: header,
                delimiter,
            };
            weir_operators::sources::csv_source(&[path], options).map_err(context)
        }
    }
}

/// All rows of a bounded table (a lookup join's side table): its files
/// read now, as the table's physical columns.
fn read_all(t: &TableEntry) -> Result<weir_core::spec::MemorySourceSpec> {
    let path = required(t, "path")?;
    let context = |e: &dyn std::fmt::Display| table_err(t, format!("reading {path}: {e}"));
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
                    let columns = t
                        .schema
                        .fields()
                        .iter()
                        .map(|want| {
                            let c = b.column_by_name(want.name()).ok_or_else(|| {
                                table_err(
                                    t,
                                    format!("{}: no column '{}'", f.display(), want.name()),
                                )
                            })?;
                            Ok(arrow::compute::cast(c, want.data_type())?)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    batches.push(arrow::record_batch::RecordBatch::try_new(
                        Arc::clone(&t.schema),
                        columns,
                    )?);
                }
            }
            _ => {
                let header = t
                    .option("csv.header")
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                let reader = arrow::csv::ReaderBuilder::new(Arc::clone(&t.schema))
                    .with_header(header)
                    .build(file)
                    .map_err(|e| context(&e))?;
                for b in reader {
                    batches.push(b.map_err(|e| table_err(t, format!("{}: {e}", f.display())))?);
                }
            }
        }
    }
    Ok(weir_core::spec::MemorySourceSpec::new(
        Arc::clone(&t.schema),
        batches,
    ))
}
