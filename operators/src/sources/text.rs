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

use super::pieces::{MakeDecoder, PIECE, Pieces, Whole, skip_rows};
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

/// Reads the files assigned to one subtask (file `k` to subtask `k mod p`).
pub struct TextSource {
    spec: TextSourceSpec,
    cursor: SplitCursor,
    reader: OpenSplit<Skipping>,
    batch_size: usize,
    /// Files are decoded in pieces side by side ([`Pieces`]): the job's
    /// tasks in this process leave cores idle. Counting all of them, not
    /// the source's subtasks alone: Nexmark q16 (a source task and a
    /// busy aggregating one at parallelism 1, on 2 cores) took 5-20% longer
    /// in pieces, its aggregation losing the second core to parsing.
    pieces: bool,
}

impl TextSource {
    pub(crate) fn new(spec: TextSourceSpec, ctx: &OperatorContext) -> Self {
        Self {
            cursor: SplitCursor::new(spec.files.len(), ctx),
            spec,
            reader: None,
            batch_size: ctx.config.batch_size,
            pieces: super::read_ahead::worth_it(ctx.local_tasks),
        }
    }
}

/// A file's rows: decoded in one piece, or in pieces side by side.
enum FileRows {
    Whole(Whole),
    Pieces(Box<Pieces>),
}

impl FileRows {
    /// Open `path` (at `location`) for a reader of `spec`'s rows; in
    /// pieces when `pieces` and its format allows it and the file is not
    /// small.
    fn open(
        spec: &TextSourceSpec,
        batch_size: usize,
        path: &Path,
        location: &str,
        pieces: bool,
    ) -> Result<Self> {
        // A local file of under two pieces is read in one: nothing to
        // decode side by side.
        let small = !crate::storage::is_url(location)
            && std::fs::metadata(path).is_ok_and(|m| m.len() < 2 * PIECE as u64);
        if !pieces || small {
            return Ok(FileRows::Whole(read_whole(
                path,
                location,
                spec.decoder(batch_size)?,
            )?));
        }
        let owned = spec.clone();
        let make: MakeDecoder = Arc::new(move || owned.decoder(batch_size));
        if !super::pieces::possible(&make)? {
            return Ok(FileRows::Whole(read_whole(path, location, make()?)?));
        }
        let (again, path_again, location_again) =
            (Arc::clone(&make), path.to_path_buf(), location.to_string());
        let reopen = Box::new(move || read_whole(&path_again, &location_again, again()?));
        Ok(FileRows::Pieces(Box::new(Pieces::new(
            open_file(path, location)?,
            make,
            location,
            reopen,
        ))))
    }

    fn skipped(&self) -> u64 {
        match self {
            FileRows::Whole(r) => r.skipped(),
            FileRows::Pieces(p) => p.skipped(),
        }
    }
}

impl Iterator for FileRows {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            FileRows::Whole(r) => r.next(),
            FileRows::Pieces(p) => p.next(),
        }
    }
}

/// The file at `path` (`location`) read from its start by `decoder`.
fn read_whole(
    path: &Path,
    location: &str,
    decoder: Box<dyn crate::formats::RowDecoder>,
) -> Result<Whole> {
    Ok(DecodeReader::new(
        BufReader::with_capacity(1 << 20, open_file(path, location)?),
        decoder,
    ))
}

/// A local file or an object of a store, for reading from its start.
fn open_file(path: &Path, location: &str) -> Result<Box<dyn std::io::Read + Send>> {
    Ok(if crate::storage::is_url(location) {
        Box::new(crate::storage::ObjectReader::open(location)?)
    } else {
        Box::new(File::open(path).map_err(|e| WeirError::io(location.to_string(), e))?)
    })
}

/// A file's batches after the first `skip` rows (emitted before the
/// checkpoint this source restored).
pub(crate) struct Skipping {
    inner: FileRows,
    skip: u64,
    location: String,
}

impl Iterator for Skipping {
    type Item = std::result::Result<RecordBatch, arrow::error::ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let Some(next) = skip_rows(&mut self.inner, &mut self.skip) else {
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
        Some(next.map_err(|e| arrow::error::ArrowError::ExternalError(Box::new(e))))
    }
}

impl Source for TextSource {
    fn splits_done(&self) -> Option<(u64, u64)> {
        Some(self.cursor.done())
    }

    fn poll_next(&mut self) -> Result<SourcePoll> {
        let (spec, batch_size, pieces) = (&self.spec, self.batch_size, self.pieces);
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
                let reader = FileRows::open(spec, batch_size, path, &location, pieces)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use weir_core::config::WeirConfig;

    /// Every row of `source` as text, in order; `stop_after` batches, then
    /// the position it would checkpoint.
    fn drain(
        source: &mut TextSource,
        stop_after: Option<usize>,
    ) -> (Vec<String>, Option<RecordBatch>) {
        let mut rows = Vec::new();
        let mut batches = 0;
        loop {
            if stop_after == Some(batches) {
                return (rows, Some(source.snapshot_position(1).unwrap()));
            }
            match source.poll_next().unwrap() {
                SourcePoll::Batch(b) => {
                    batches += 1;
                    for r in 0..b.num_rows() {
                        rows.push(
                            b.columns()
                                .iter()
                                .map(|c| arrow::util::display::array_value_to_string(c, r).unwrap())
                                .collect::<Vec<_>>()
                                .join("|"),
                        );
                    }
                }
                SourcePoll::Pending(_) => {}
                SourcePoll::Finished => return (rows, None),
            }
        }
    }

    /// Files of several pieces, one whose quoted line breaks make some
    /// pieces start inside a record: read in pieces, they give the rows
    /// read in one piece, and a checkpoint taken midway restores to the
    /// next row.
    #[test]
    fn files_read_in_pieces_give_the_rows_and_positions_of_one_piece() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        // In the second file, past its first piece, most of a record's
        // bytes follow a quoted line break: a piece's last line break is
        // nearly always inside a record, found after rows were given (the
        // text is fixed, so the test reads the same cuts each run).
        for (name, quoted) in [("plain.csv", false), ("quoted.csv", true)] {
            let mut text = String::new();
            let mut k = 0u64;
            while text.len() < 3 * PIECE {
                let note = if quoted && text.len() > PIECE * 3 / 2 {
                    format!("\"{k}\nnext, \"\"quoted\"\" {}\"", "x".repeat(90))
                } else {
                    format!("note-{}", k * 7919 % 1000)
                };
                text.push_str(&format!("{k},name-{},{note}\n", k % 13));
                k += 1;
            }
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            files.push(path);
        }
        let spec = TextSourceSpec {
            format: "csv".into(),
            files,
            schema: Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("name", DataType::Utf8, true),
                Field::new("note", DataType::Utf8, true),
            ])),
            options: Options::new(),
            projection: None,
        };
        let ctx = OperatorContext::single("read", WeirConfig::default());
        let source = |pieces: bool| {
            let mut s = TextSource::new(spec.clone(), &ctx);
            s.pieces = pieces;
            s
        };
        let (expected, _) = drain(&mut source(false), None);
        assert!(expected.len() > 50_000, "{} rows", expected.len());
        let (got, _) = drain(&mut source(true), None);
        assert_eq!(got, expected);
        // Midway through the second file.
        let batches = expected.len() / ctx.config.batch_size * 3 / 4;
        let (before, position) = drain(&mut source(true), Some(batches));
        let mut resumed = source(true);
        resumed.restore_position(vec![position.unwrap()]).unwrap();
        let (after, _) = drain(&mut resumed, None);
        assert_eq!([before, after].concat(), expected);
    }
}
