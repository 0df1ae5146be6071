//! The bounded CSV file source.

use std::fs::File;
use std::io::{BufReader, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::csv::reader::{BufReader as CsvReader, Format, ReaderBuilder};
use arrow::datatypes::SchemaRef;
use weir_core::spec::{CsvSourceSpec, SourceSpec};
use weir_core::{Result, WeirError};

use super::{OpenSplit, Source, SourcePoll, SplitCursor, expand_paths, poll_splits};
use crate::OperatorContext;

/// Options of a CSV source.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// The row schema; `None` infers it from the first file's first 1,000 rows.
    pub schema: Option<SchemaRef>,
    /// Whether files start with a header line. Default true.
    pub has_header: bool,
    /// Field delimiter. Default `,`.
    pub delimiter: u8,
}

impl Default for CsvOptions {
    fn default() -> Self {
        Self {
            schema: None,
            has_header: true,
            delimiter: b',',
        }
    }
}

/// Describe a CSV source: expands directories, checks the files exist and
/// resolves (or infers) the schema.
pub fn csv_source(paths: &[impl AsRef<Path>], options: CsvOptions) -> Result<SourceSpec> {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
    let files = expand_paths(&paths, "csv")?;
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
    Ok(SourceSpec::Csv(CsvSourceSpec {
        files,
        schema,
        has_header: options.has_header,
        delimiter: options.delimiter,
    }))
}

/// Reads the files assigned to one subtask (file `k` to subtask `k mod p`).
pub struct CsvSource {
    spec: CsvSourceSpec,
    cursor: SplitCursor,
    reader: OpenSplit<CsvReader<BufReader<File>>>,
    batch_size: usize,
}

impl CsvSource {
    pub(crate) fn new(spec: CsvSourceSpec, ctx: &OperatorContext) -> Self {
        Self {
            cursor: SplitCursor::new(spec.files.len(), ctx),
            spec,
            reader: None,
            batch_size: ctx.config.batch_size,
        }
    }
}

impl Source for CsvSource {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let (spec, batch_size) = (&self.spec, self.batch_size);
        poll_splits(
            &mut self.reader,
            &mut self.cursor,
            |k, skip| {
                let path = spec.files.get(k).ok_or_else(|| {
                    WeirError::Execution(format!(
                        "checkpointed file {k} is not in this source ({} files)",
                        spec.files.len()
                    ))
                })?;
                let location = path.display().to_string();
                let file = File::open(path).map_err(|e| WeirError::io(location.clone(), e))?;
                let mut builder = ReaderBuilder::new(Arc::clone(&spec.schema))
                    .with_header(spec.has_header)
                    .with_delimiter(spec.delimiter)
                    .with_batch_size(batch_size);
                if skip > 0 {
                    // Records already emitted before the checkpoint (the
                    // decoder adds the header line to both bounds).
                    builder = builder.with_bounds(skip as usize, usize::MAX / 2);
                }
                let reader = builder
                    .build_buffered(BufReader::new(file))
                    .map_err(|e| WeirError::bad_input(location.clone(), e.to_string()))?;
                Ok((reader, location))
            },
            |e| file_line_numbers(&e.to_string(), spec.has_header),
        )
    }

    /// `split` (file `k`) and `rows_read` of each file not yet finished
    /// (see [`SplitCursor`]).
    fn snapshot_position(&mut self) -> Result<arrow::record_batch::RecordBatch> {
        self.cursor.snapshot()
    }

    fn restore_position(&mut self, positions: Vec<arrow::record_batch::RecordBatch>) -> Result<()> {
        self.reader = None;
        self.cursor.restore(positions)
    }
}

/// The CSV decoder counts data rows from 1; users look at the file, where a
/// header shifts every row down by one line.
fn file_line_numbers(message: &str, has_header: bool) -> String {
    const MARK: &str = " at line ";
    let Some(pos) = message.find(MARK) else {
        return message.to_string();
    };
    let start = pos + MARK.len();
    let digits: String = message[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    match digits.parse::<u64>() {
        Ok(n) => format!(
            "{}{}{}",
            &message[..start],
            n + has_header as u64,
            &message[start + digits.len()..]
        ),
        Err(_) => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_numbers_count_the_header() {
        assert_eq!(
            super::file_line_numbers("bad value at line 2. Row", true),
            "bad value at line 3. Row"
        );
        assert_eq!(
            super::file_line_numbers("x at line 7", false),
            "x at line 7"
        );
    }
}
