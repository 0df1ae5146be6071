//! The bounded CSV file source.

use std::fs::File;
use std::io::{BufReader, Seek};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::csv::reader::{BufReader as CsvReader, Format, ReaderBuilder};
use arrow::datatypes::SchemaRef;
use weir_core::spec::SourceSpec;
use weir_core::{Result, WeirError};

use super::{OpenSplit, Source, SourcePoll, SplitCursor, expand_paths, poll_splits};
use crate::OperatorContext;
use crate::connectors::CsvSourceSpec;

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
    Ok(CsvSourceSpec {
        files,
        schema,
        has_header: options.has_header,
        delimiter: options.delimiter,
    }
    .into_source())
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
            |e| file_line_numbers(&e.to_string(), &spec.schema),
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

/// Arrow's CSV decoder numbers lines from 0 (the header, when there is
/// one, included) and columns from 0; users look at the file, whose first
/// line is line 1, and know columns by name.
fn file_line_numbers(message: &str, schema: &arrow::datatypes::Schema) -> String {
    let mut out = shift_number(message, " at line ", 1);
    if let Some(name) = number_after(&out, " for column ")
        .and_then(|c| schema.fields().get(c as usize))
        .map(|f| f.name().clone())
    {
        out = out.replacen(
            &format!(
                " for column {}",
                number_after(&out, " for column ").unwrap_or(0)
            ),
            &format!(" for column '{name}'"),
            1,
        );
    }
    out
}

/// The number right after the first `mark` in `message`.
fn number_after(message: &str, mark: &str) -> Option<u64> {
    let start = message.find(mark)? + mark.len();
    let digits: String = message
        .get(start..)?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// `message` with the number after the first `mark` raised by `by`.
fn shift_number(message: &str, mark: &str, by: u64) -> String {
    match (message.find(mark), number_after(message, mark)) {
        (Some(pos), Some(n)) => {
            let start = pos + mark.len();
            let len = n.to_string().len();
            format!("{}{}{}", &message[..start], n + by, &message[start + len..])
        }
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_count_from_one_and_columns_are_named() {
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Int64, false),
        ]);
        assert_eq!(
            super::file_line_numbers(
                "Error while parsing value 'x' as type 'Int64' for column 1 at line 2. Row",
                &schema
            ),
            "Error while parsing value 'x' as type 'Int64' for column 'b' at line 3. Row"
        );
        assert_eq!(
            super::file_line_numbers("x at line 0", &schema),
            "x at line 1"
        );
        assert_eq!(
            super::file_line_numbers("no numbers", &schema),
            "no numbers"
        );
    }
}
