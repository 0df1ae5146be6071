//! The bounded source of text files (`csv`, `json`, `raw`): each file a
//! split, decoded by its format's [`RowDecoder`](crate::formats::RowDecoder).

use std::fs::File;
use std::io::{BufReader, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::csv::reader::Format;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_core::connector::Options;
use weir_core::spec::SourceSpec;
use weir_core::{Result, WeirError};

use super::{OpenSplit, Source, SourcePoll, SplitCursor, expand_paths, poll_splits};
use crate::OperatorContext;
use crate::connectors::TextSourceSpec;
use crate::formats::{DecodeReader, formats};

/// Options of a CSV source.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// The row schema; `None` infers it from the first file's first 1,000 rows.
    pub schema: Option<SchemaRef>,
    /// Whether files start with a header line. Default false, as Flink's
    /// csv format (which has none).
    pub has_header: bool,
    /// Field delimiter. Default `,`.
    pub delimiter: u8,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            schema: None,
            has_header: false,
            delimiter: b',',
        }
    }
}

/// Describe a CSV source: expands directories, checks the files exist and
/// resolves (or infers) the schema.
pub fn csv_source(paths: &[impl AsRef<Path>], options: CsvOptions) -> Result<SourceSpec> {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let files = expand_paths(&paths, Some("csv"))?;
    for f in &files {
        File::open(f).map_err(|e| WeirError::io(f.display().to_string(), e))?;
    }
    let schema = match options.schema {
        Some(s) => s,
        None => {
            let f = &files[0];
            let mut file = File::open(f).map_err(|e| WeirError::io(f.display().to_string(), e))?;
            let (schema, _) = Format::default()
                .with_header(options.has_header)
                .with_delimiter(options.delimiter)
                .infer_schema(&mut file, Some(1000))
                .map_err(|e| WeirError::bad_input(f.display().to_string(), e.to_string()))?;
            file.rewind()
                .map_err(|e| WeirError::io(f.display().to_string(), e))?;
            Arc::new(schema)
        }
    };
    let mut format_options = Options::new();
    format_options.insert("csv.header".into(), options.has_header.to_string());
    let delimiter = match options.delimiter {
        b'\t' => "\\t".to_string(),
        d => (d as char).to_string(),
    };
    format_options.insert("csv.field-delimiter".into(), delimiter);
    text_source("csv", files, schema, format_options, None)
}

/// Describe a source of `format` files (`csv`, `json`, `raw`) with the
/// given rows and format options; a directory is read whole (its files
/// but hidden ones, whatever their names), as Flink reads one.
///
/// `projection` (column names) asks for only those columns: a format that
/// can decode them alone (`csv`, `json`) reads just those, another every
/// column.
pub fn format_source(
    format: &str,
    paths: &[impl AsRef<Path>],
    schema: SchemaRef,
    options: Options,
    projection: Option<&[String]>,
) -> Result<SourceSpec> {
    let all = formats();
    let factory = all.get(format)?;
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let files = expand_paths(&paths, None)?;
    for f in &files {
        if !crate::storage::is_url(&f.to_string_lossy()) {
            File::open(f).map_err(|e| WeirError::io(f.display().to_string(), e))?;
        }
    }
    let projection = projection
        .map(|names| {
            names
                .iter()
                .map(|n| {
                    schema.index_of(n).map_err(|_| {
                        WeirError::plan(format!("no column '{n}' to read in {schema}"))
                    })
                })
                .collect::<Result<Vec<usize>>>()
        })
        .transpose()?;
    let projection = projection.filter(|p| {
        matches!(
            factory.projected_decoder(&schema, p, &options, 1),
            Ok(Some(_))
        )
    });
    text_source(factory.identifier(), files, schema, options, projection)
}

fn text_source(
    format: &str,
    files: Vec<PathBuf>,
    schema: SchemaRef,
    options: Options,
    projection: Option<Vec<usize>>,
) -> Result<SourceSpec> {
    let spec = TextSourceSpec {
        format: format.to_string(),
        files,
        schema,
        options,
        projection,
    };
    // The decoder is built once here so bad options fail when planned.
    spec.decoder(1)?;
    Ok(spec.into_source())
}

type Reader = DecodeReader<BufReader<Box<dyn std::io::Read + Send>>>;

/// Reads the files assigned to one subtask (file `k` to subtask `k mod p`).
pub struct TextSource {
    spec: TextSourceSpec,
    cursor: SplitCursor,
    reader: OpenSplit<Skipping>,
    batch_size: usize,
}

impl TextSource {
    pub(crate) fn new(spec: TextSourceSpec, ctx: &OperatorContext) -> Self {
        Self {
            cursor: SplitCursor::new(spec.files.len(), ctx),
            spec,
            reader: None,
            batch_size: ctx.config.batch_size,
        }
    }
}

/// A file's batches after the first `skip` rows (emitted before the
/// checkpoint this source restored).
pub(crate) struct Skipping {
    inner: Reader,
    skip: u64,
    location: String,
}

impl Iterator for Skipping {
    type Item = std::result::Result<RecordBatch, arrow::error::ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(next) = self.inner.next() else {
                let skipped = self.inner.skipped();
                if skipped > 0 {
                    // Never silently: the records the format's
                    // ignore-parse-errors let go are counted.
                    tracing::warn!(
                        "{}: {skipped} records (or fields) did not parse and were skipped",
                        self.location
                    );
                }
                return None;
            };
            let b = match next {
                Ok(b) => b,
                Err(e) => return Some(Err(arrow::error::ArrowError::ExternalError(Box::new(e)))),
            };
            if self.skip == 0 {
                return Some(Ok(b));
            }
            let n = b.num_rows() as u64;
            if n <= self.skip {
                self.skip -= n;
                continue;
            }
            let rest = b.slice(self.skip as usize, (n - self.skip) as usize);
            self.skip = 0;
            return Some(Ok(rest));
        }
    }
}

impl Source for TextSource {
    fn splits_done(&self) -> Option<(u64, u64)> {
        Some(self.cursor.done())
    }

    fn poll_next(&mut self) -> Result<SourcePoll> {
        let (spec, batch_size) = (&self.spec, self.batch_size);
        poll_splits(
            &mut self.reader,
            &mut self.cursor,
            |k, skip, _| {
                let path = spec.files.get(k).ok_or_else(|| {
                    WeirError::Execution(format!(
                        "checkpointed file {k} is not in this source ({} files)",
                        spec.files.len()
                    ))
                })?;
                let location = path.display().to_string();
                let file: Box<dyn std::io::Read + Send> = if crate::storage::is_url(&location) {
                    Box::new(crate::storage::ObjectReader::open(&location)?)
                } else {
                    Box::new(File::open(path).map_err(|e| WeirError::io(location.clone(), e))?)
                };
                let decoder = spec.decoder(batch_size)?;
                let reader = DecodeReader::new(BufReader::with_capacity(1 << 20, file), decoder);
                Ok((
                    Skipping {
                        inner: reader,
                        skip,
                        location: location.clone(),
                    },
                    location,
                ))
            },
            |e| match e {
                arrow::error::ArrowError::ExternalError(inner) => {
                    match inner.downcast_ref::<WeirError>() {
                        Some(WeirError::Execution(m)) => m.clone(),
                        _ => inner.to_string(),
                    }
                }
                other => other.to_string(),
            },
        )
    }

    /// `split` (file `k`) and `rows_read` of each file not yet finished
    /// (see [`SplitCursor`]).
    fn snapshot_position(&mut self, _checkpoint: u64) -> Result<RecordBatch> {
        self.cursor.snapshot()
    }

    fn restore_position(&mut self, positions: Vec<RecordBatch>) -> Result<()> {
        self.reader = None;
        self.cursor.restore(positions)
    }
}
