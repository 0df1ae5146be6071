//! The `csv` format as Flink has it: no header row, values as Jackson
//! writes them (`text.rs`), text quoted only when Jackson would quote it,
//! and Flink's options. Split into text columns (`csv_records.rs`), then
//! converted column by column to the declared types, so a bad value
//! names its line and column (or, with `csv.ignore-parse-errors`, becomes
//! NULL and is counted).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, StringArray};
use arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use weir_core::connector::{ConnectorOption, OptionKind, Options};
use weir_core::{Result, WeirError};

use super::csv_columns::{Read, Taken, plain_integer};
use super::csv_records::{CsvRecords, Dialect};
use super::sql_time;
use super::text::{TextStyle, TimestampStyle, is_textual, write_scalar};
use super::{FormatFactory, RowDecoder, RowEncoder, char_option, flag};

/// `'format' = 'csv'`.
pub(super) struct Csv;

impl FormatFactory for Csv {
    fn identifier(&self) -> &str {
        "csv"
    }

    fn description(&self) -> &str {
        "comma-separated values as Flink writes them (no header, SQL timestamps)"
    }

    fn extension(&self) -> &str {
        "csv"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        use OptionKind::{Boolean, Text};
        vec![
            ConnectorOption::optional(
                "csv.field-delimiter",
                Text,
                Some(","),
                "one character, or \\t",
            ),
            ConnectorOption::optional(
                "csv.quote-character",
                Text,
                Some("\""),
                "the quote character",
            ),
            ConnectorOption::optional(
                "csv.disable-quote-character",
                Boolean,
                Some("false"),
                "no quoting at all",
            ),
            ConnectorOption::optional(
                "csv.allow-comments",
                Boolean,
                Some("false"),
                "skip lines starting with #",
            ),
            ConnectorOption::optional(
                "csv.ignore-parse-errors",
                Boolean,
                Some("false"),
                "a value that does not parse becomes NULL (counted) instead of failing",
            ),
            ConnectorOption::optional(
                "csv.null-literal",
                Text,
                None,
                "the text of NULL (default: an empty field)",
            ),
            ConnectorOption::optional(
                "csv.write-bigdecimal-in-scientific-notation",
                Boolean,
                Some("true"),
                "DECIMAL 100 as 1E+2 (Java's form) or plain",
            ),
            ConnectorOption::optional(
                "csv.header",
                Boolean,
                Some("false"),
                "files start with a header line (Weir's; Flink has none)",
            ),
        ]
    }

    fn decoder(
        &self,
        schema: &SchemaRef,
        options: &Options,
        batch_size: usize,
    ) -> Result<Box<dyn RowDecoder>> {
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        Ok(Box::new(csv_decoder(schema, &all, options, batch_size)?))
    }

    /// The fields not asked for are counted (a record's arity is still
    /// checked) but neither copied nor converted.
    fn projected_decoder(
        &self,
        schema: &SchemaRef,
        projection: &[usize],
        options: &Options,
        batch_size: usize,
    ) -> Result<Option<Box<dyn RowDecoder>>> {
        Ok(Some(Box::new(csv_decoder(
            schema, projection, options, batch_size,
        )?)))
    }

    fn encoder(&self, schema: &SchemaRef, options: &Options) -> Result<Box<dyn RowEncoder>> {
        for f in schema.fields() {
            if f.data_type().is_nested() {
                return Err(WeirError::plan(format!(
                    "format 'csv' cannot write column '{}' of type {} (use 'json' for nested values)",
                    f.name(),
                    f.data_type()
                )));
            }
        }
        let delimiter = char_option(options, "csv.field-delimiter", b',')?;
        let quote = (!flag(options, "csv.disable-quote-character", false))
            .then(|| char_option(options, "csv.quote-character", b'"'))
            .transpose()?;
        // Jackson quotes a text value holding any character below this
        // one (the delimiter, the quote, a line break, a space …) or
        // longer than 24 characters.
        let min_safe = delimiter.max(quote.unwrap_or(0)).max(b'\n') + 1;
        Ok(Box::new(CsvEncoder {
            delimiter,
            quote,
            min_safe,
            null_literal: options.get("csv.null-literal").cloned().unwrap_or_default(),
            header: flag(options, "csv.header", false).then(|| Arc::clone(schema)),
            style: TextStyle {
                timestamps: TimestampStyle::Sql,
                plain_decimals: !flag(options, "csv.write-bigdecimal-in-scientific-notation", true),
            },
            value: String::new(),
        }))
    }
}

/// A decoder of rows of `schema` producing the columns `projection`.
fn csv_decoder(
    schema: &SchemaRef,
    projection: &[usize],
    options: &Options,
    batch_size: usize,
) -> Result<CsvDecoder> {
    let quote = if flag(options, "csv.disable-quote-character", false) {
        None
    } else {
        Some(char_option(options, "csv.quote-character", b'"')?)
    };
    let dialect = Dialect {
        delimiter: char_option(options, "csv.field-delimiter", b',')?,
        quote,
        comment: flag(options, "csv.allow-comments", false).then_some(b'#'),
    };
    let ignore_errors = flag(options, "csv.ignore-parse-errors", false);
    let null_literal = options.get("csv.null-literal").cloned();
    // BIGINT and TIMESTAMP fields are read into numbers as the records
    // arrive (the text path takes the values they do not read).
    let reads: Vec<Read> = projection
        .iter()
        .map(|&i| match schema.field(i).data_type() {
            DataType::Int64 => Read::Int64,
            DataType::Timestamp(unit, None) => Read::Timestamp(*unit),
            _ => Read::Text,
        })
        .collect();
    Ok(CsvDecoder {
        records: CsvRecords::new(
            dialect,
            schema.fields().iter().map(|f| f.name().clone()).collect(),
            projection.to_vec(),
            batch_size,
            flag(options, "csv.header", false),
            ignore_errors,
        )
        .with_reads(&reads, null_literal.as_deref()),
        schema: Arc::new(schema.project(projection)?),
        null_literal,
        ignore_errors,
        skipped: 0,
    })
}

struct CsvDecoder {
    records: CsvRecords,
    schema: SchemaRef,
    null_literal: Option<String>,
    ignore_errors: bool,
    skipped: u64,
}

impl RowDecoder for CsvDecoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize> {
        self.records.decode(bytes)
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.records.full() {
            self.take()
        } else {
            Ok(None)
        }
    }

    fn finish(&mut self) -> Result<Option<RecordBatch>> {
        self.records.end_of_input()?;
        self.take()
    }

    fn start_mid_file(&mut self) -> bool {
        self.records.start_mid_file();
        true
    }

    fn between_records(&self) -> bool {
        self.records.between_records()
    }

    fn skipped(&self) -> u64 {
        // Records with too few or too many fields, read anyway with
        // `csv.ignore-parse-errors` (as Flink: missing fields NULL, extra
        // ones dropped), count as mended.
        self.skipped + self.records.mended()
    }
}

impl CsvDecoder {
    /// The buffered records as a batch of the table's types.
    fn take(&mut self) -> Result<Option<RecordBatch>> {
        let Some(text) = self.records.take()? else {
            return Ok(None);
        };
        let schema = Arc::clone(&self.schema);
        let mut columns = schema
            .fields()
            .iter()
            .zip(&text.columns)
            .map(|(f, column)| self.convert(column, f, &text.lines))
            .collect::<Result<Vec<_>>>()?;
        if !text.missing.is_empty() {
            // Fields a short record lacked are NULL, whatever the type.
            for (c, column) in columns.iter_mut().enumerate() {
                if !text.missing.iter().any(|&(_, mc)| mc == c) {
                    continue;
                }
                let mut mask = vec![false; text.lines.len()];
                for &(r, _) in text.missing.iter().filter(|&&(_, mc)| mc == c) {
                    mask[r] = true;
                }
                *column = arrow::compute::nullif(column, &BooleanArray::from(mask))?;
            }
        }
        Ok(Some(RecordBatch::try_new(schema, columns)?))
    }

    /// One column as the declared type.
    fn convert(&mut self, column: &Taken, field: &Field, lines: &[u64]) -> Result<ArrayRef> {
        let converted = match column {
            Taken::Text(text) => self.convert_text(text, field, lines)?,
            Taken::Int64(numbers) if field.data_type() == &DataType::Int64 => {
                Arc::new(numbers.clone())
            }
            // Int64 to a timestamp reinterprets, copying nothing.
            Taken::Int64(numbers) => arrow::compute::cast(numbers, field.data_type())?,
        };
        if !field.is_nullable() && converted.null_count() > 0 {
            let r = (0..converted.len())
                .find(|&r| converted.is_null(r))
                .unwrap_or(0);
            return Err(WeirError::Execution(format!(
                "column '{}' is NOT NULL but is empty at line {}",
                field.name(),
                lines[r]
            )));
        }
        Ok(converted)
    }

    /// One text column as the declared type: NULL for the null literal
    /// (and, but for strings, an empty field); a value that does not parse
    /// fails naming its line, or is NULL and counted. `text` has NULL where
    /// a field was empty (arrow's decoder without a null pattern).
    fn convert_text(
        &mut self,
        text: &StringArray,
        field: &Field,
        lines: &[u64],
    ) -> Result<ArrayRef> {
        let is_string = matches!(
            field.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        );
        // The values as given, NULL where the null literal (or, without
        // one, an empty non-string field) stands; no text is copied.
        let input: StringArray = match self.null_literal.as_deref() {
            None if is_string => empty_as_text(text)?,
            None | Some("") => text.clone(),
            Some(literal) => {
                let given = empty_as_text(text)?;
                let not_literal =
                    arrow::compute::kernels::cmp::neq(&given, &StringArray::new_scalar(literal))?;
                let (offsets, values, _) = given.into_parts();
                StringArray::try_new(offsets, values, Some(not_literal.values().clone().into()))?
            }
        };
        let converted = match field.data_type() {
            DataType::Decimal128(p, s) => Arc::new(
                input
                    .iter()
                    .map(|v| {
                        v.and_then(|v| {
                            arrow::compute::kernels::cast_utils::parse_decimal::<
                                arrow::datatypes::Decimal128Type,
                            >(v.trim(), *p, *s)
                            .ok()
                        })
                    })
                    .collect::<arrow::array::Decimal128Array>()
                    .with_precision_and_scale(*p, *s)?,
            ) as ArrayRef,
            DataType::Boolean => Arc::new(
                input
                    .iter()
                    .map(|v| {
                        v.and_then(|v| match v.trim() {
                            t if t.eq_ignore_ascii_case("true") => Some(true),
                            t if t.eq_ignore_ascii_case("false") => Some(false),
                            _ => None,
                        })
                    })
                    .collect::<arrow::array::BooleanArray>(),
            ) as ArrayRef,
            // The forms Flink writes, read in one pass; a padded or other
            // value leaves the column to arrow's cast below. Int64 to a
            // timestamp reinterprets, copying nothing.
            DataType::Timestamp(unit, None) if let Some(t) = sql_timestamps(&input, *unit) => {
                arrow::compute::cast(&t, field.data_type())?
            }
            DataType::Int64 if let Some(n) = plain_integers(&input) => Arc::new(n),
            other => {
                let opts = arrow::compute::CastOptions {
                    safe: true,
                    ..Default::default()
                };
                // Numbers and times may stand between spaces; copied
                // trimmed only when one does.
                let padded = |v: &str| {
                    v.starts_with(char::is_whitespace) || v.ends_with(char::is_whitespace)
                };
                let trimmed: StringArray = if is_string || !input.iter().flatten().any(padded) {
                    input.clone()
                } else {
                    input.iter().map(|v| v.map(str::trim)).collect()
                };
                arrow::compute::cast_with_options(&trimmed, other, &opts)?
            }
        };
        // Values given but not read (NULL converted from a value): bad
        // input. A conversion keeps every NULL, so equal counts mean none.
        let bad = (0..input.len()).filter(|&r| input.is_valid(r) && converted.is_null(r));
        let mut bad = bad.peekable();
        if converted.null_count() > input.null_count() && bad.peek().is_some() {
            if self.ignore_errors {
                self.skipped += bad.count() as u64;
            } else if let Some(r) = bad.next() {
                return Err(WeirError::Execution(format!(
                    "cannot read '{}' as {} for column '{}' at line {}",
                    input.value(r),
                    field.data_type(),
                    field.name(),
                    lines[r]
                )));
            }
        }
        Ok(converted)
    }
}

/// The column as BIGINTs when every value is `-?[0-9]{1,18}` (what Flink
/// and Weir write; no such value overflows): one tight pass instead of
/// arrow's general parser, which read Nexmark's bids at a seventh of
/// their decoding cost. `None` for anything else, left to arrow.
fn plain_integers(text: &StringArray) -> Option<arrow::array::Int64Array> {
    let offsets = text.value_offsets();
    let bytes = text.value_data();
    let mut out = Vec::with_capacity(text.len());
    for r in 0..text.len() {
        if text.is_null(r) {
            out.push(0);
            continue;
        }
        out.push(plain_integer(
            &bytes[offsets[r] as usize..offsets[r + 1] as usize],
        )?);
    }
    Some(arrow::array::Int64Array::new(
        out.into(),
        text.nulls().cloned(),
    ))
}

/// `text` with its NULLs (empty fields) as empty strings, the text
/// itself shared.
fn empty_as_text(text: &StringArray) -> Result<StringArray> {
    if text.null_count() == 0 {
        return Ok(text.clone());
    }
    let (offsets, values, _) = text.clone().into_parts();
    Ok(StringArray::try_new(offsets, values, None)?)
}

/// Timestamps without a zone in the fixed form Flink writes, read by
/// [`sql_time`]; `None` when a value is in another form, for arrow's
/// general parser to read the column.
fn sql_timestamps(text: &StringArray, unit: TimeUnit) -> Option<arrow::array::Int64Array> {
    let mut values = Vec::with_capacity(text.len());
    let mut reader = sql_time::TimeReader::default();
    for v in text.iter() {
        values.push(match v {
            Some(v) => reader.parse_in(v.as_bytes(), unit)?,
            None => 0,
        });
    }
    Some(arrow::array::Int64Array::new(
        values.into(),
        text.nulls().cloned(),
    ))
}

struct CsvEncoder {
    delimiter: u8,
    quote: Option<u8>,
    min_safe: u8,
    null_literal: String,
    header: Option<SchemaRef>,
    style: TextStyle,
    value: String,
}

impl RowEncoder for CsvEncoder {
    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        self.write(batch, out, None)
    }

    fn encode_records(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<()> {
        self.write(batch, out, Some(ends))
    }
}

impl CsvEncoder {
    /// The rows of `batch` as lines; where each ends, when asked.
    fn write(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        mut ends: Option<&mut Vec<usize>>,
    ) -> Result<()> {
        if let Some(schema) = self.header.take() {
            for (i, f) in schema.fields().iter().enumerate() {
                if i > 0 {
                    out.push(self.delimiter);
                }
                self.value.clear();
                self.value.push_str(f.name());
                self.push_text(out, true);
            }
            out.push(b'\n');
        }
        let textual: Vec<bool> = batch
            .columns()
            .iter()
            .map(|c| is_textual(c.data_type()))
            .collect();
        for row in 0..batch.num_rows() {
            for (i, column) in batch.columns().iter().enumerate() {
                if i > 0 {
                    out.push(self.delimiter);
                }
                if column.is_null(row) {
                    out.extend_from_slice(self.null_literal.as_bytes());
                    continue;
                }
                self.value.clear();
                write_scalar(&mut self.value, column, row, self.style)?;
                self.push_text(out, textual[i]);
            }
            out.push(b'\n');
            if let Some(ends) = ends.as_deref_mut() {
                ends.push(out.len());
            }
        }
        Ok(())
    }

    /// The value in `self.value`, quoted as Jackson quotes text.
    fn push_text(&self, out: &mut Vec<u8>, textual: bool) {
        let v = self.value.as_bytes();
        let needs_quotes = textual
            && self.quote.is_some()
            && ((v.len() > 24 && self.value.encode_utf16().count() > 24)
                || v.iter().any(|&b| b < self.min_safe));
        match self.quote {
            Some(q) if needs_quotes => {
                out.push(q);
                for &b in v {
                    if b == q {
                        out.push(q);
                    }
                    out.push(b);
                }
                out.push(q);
            }
            _ => out.extend_from_slice(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::Schema;

    proptest::proptest! {
        /// Where the plain reading takes a column, it reads what arrow's
        /// parser reads.
        #[test]
        fn plain_integers_read_as_arrow(values in proptest::collection::vec(
            proptest::option::of("-?[0-9]{0,20}|[+ x]?[0-9]{1,3}"), 0..20)
        ) {
            let text: StringArray = values.iter().map(|v| v.as_deref()).collect();
            if let Some(n) = plain_integers(&text) {
                let arrow = arrow::compute::cast(&text, &DataType::Int64).unwrap();
                proptest::prop_assert_eq!(&n as &dyn Array, arrow.as_ref());
            } else {
                let unplain = values.iter().flatten().any(|v| {
                    let digits = v.strip_prefix('-').unwrap_or(v);
                    digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit())
                });
                proptest::prop_assert!(unplain);
            }
        }
    }

    /// Rows of (STRING, BIGINT, TIMESTAMP(3)) through the decoder with
    /// its typed columns, or all columns read as text: the batches (one
    /// per `batch` rows, fed `chunk` bytes at a time), the skipped count,
    /// or the error.
    fn decode_all(
        text: &[u8],
        options: &Options,
        chunk: usize,
        batch: usize,
        typed: bool,
    ) -> std::result::Result<(Vec<RecordBatch>, u64), String> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        let mut decoder = csv_decoder(&schema, &[0, 1, 2], options, batch).unwrap();
        if !typed {
            decoder = CsvDecoder {
                records: decoder.records.with_reads(
                    &[Read::Text; 3],
                    options.get("csv.null-literal").map(String::as_str),
                ),
                ..decoder
            };
        }
        let mut batches = Vec::new();
        let mut run = || -> Result<()> {
            let mut pos = 0;
            while pos < text.len() {
                let end = (pos + chunk).min(text.len());
                pos += decoder.decode(&text[pos..end])?;
                while let Some(b) = decoder.next_batch()? {
                    batches.push(b);
                }
            }
            batches.extend(decoder.finish()?);
            Ok(())
        };
        run().map_err(|e| e.to_string())?;
        Ok((batches, decoder.skipped()))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// BIGINT and TIMESTAMP columns read as numbers give what reading
        /// them as text gives: values, NULLs, skipped counts and errors,
        /// whatever the mix of plain and other forms within a batch.
        #[test]
        fn typed_columns_read_as_text_does(
            rows in proptest::collection::vec((
                "[a-c]{0,2}",
                "-?[0-9]{1,19}|  7 |N|x|\\+3|",
                "2023-11-14 22:13:2[0-9](\\.[0-9]{1,4})?|2023-11-14T22:13:20|2023-02-30 00:00:00|2023-11-14|N|",
            ), 0..40),
            literal in proptest::option::of(proptest::prop_oneof![proptest::prelude::Just(""), proptest::prelude::Just("N")]),
            lenient in proptest::bool::ANY,
            chunk in 1usize..200,
            batch in 1usize..12,
        ) {
            let text: String = rows.iter().map(|(s, n, t)| format!("{s},{n},{t}\n")).collect();
            let mut options = Options::new();
            if let Some(l) = literal {
                options.insert("csv.null-literal".into(), l.into());
            }
            if lenient {
                options.insert("csv.ignore-parse-errors".into(), "true".into());
            }
            let typed = decode_all(text.as_bytes(), &options, chunk, batch, true);
            let as_text = decode_all(text.as_bytes(), &options, chunk, batch, false);
            proptest::prop_assert_eq!(typed, as_text);
        }
    }

    fn read(text: &str, options: &[(&str, &str)]) -> Result<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        let options: Options = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut decoder = Csv.decoder(&schema, &options, 1024)?;
        decoder.decode(text.as_bytes())?;
        Ok(decoder.finish()?.expect("rows"))
    }

    fn column(batch: &RecordBatch, i: usize) -> Vec<Option<String>> {
        let text = arrow::compute::cast(batch.column(i), &DataType::Utf8).unwrap();
        text.as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    }

    #[test]
    fn empty_fields_null_literals_padding_and_timestamps() {
        let text = "a,1,2023-11-14 22:13:20.123\n,, 2023-11-14T22:13:20 \n\"\",  7 ,\nN,N,N\n";
        let s = |v: &[Option<&str>]| v.iter().map(|v| v.map(str::to_string)).collect::<Vec<_>>();
        // No null literal: an empty STRING is '', other empty fields NULL.
        let b = read(text, &[("csv.ignore-parse-errors", "true")]).unwrap();
        assert_eq!(
            column(&b, 0),
            s(&[Some("a"), Some(""), Some(""), Some("N")])
        );
        assert_eq!(column(&b, 1), s(&[Some("1"), None, Some("7"), None]));
        assert_eq!(
            column(&b, 2),
            s(&[
                Some("2023-11-14T22:13:20.123"),
                Some("2023-11-14T22:13:20"),
                None,
                None
            ])
        );
        // 'N' is NULL; empty fields are then values: '' for the string,
        // unreadable for the number and the timestamp (counted).
        let b = read(
            text,
            &[
                ("csv.null-literal", "N"),
                ("csv.ignore-parse-errors", "true"),
            ],
        )
        .unwrap();
        assert_eq!(column(&b, 0), s(&[Some("a"), Some(""), Some(""), None]));
        assert_eq!(column(&b, 1), s(&[Some("1"), None, Some("7"), None]));
        // An empty null literal: every empty field is NULL, strings (and
        // a quoted empty string) too.
        let b = read(text.replace("N", "").as_str(), &[("csv.null-literal", "")]).unwrap();
        assert_eq!(column(&b, 0), s(&[Some("a"), None, None, None]));
        // Without ignoring errors, a bad value names its line and column;
        // a timestamp in another form than Flink's still reads.
        let err = read("a,x,\n", &[]).unwrap_err().to_string();
        assert!(
            err.contains("'x'") && err.contains("'n'") && err.contains("line 1"),
            "{err}"
        );
        // The last line needs no line break (arrow's decoder failed
        // "part way through record" there).
        let b = read("a,1,2023-11-14", &[]).unwrap();
        assert_eq!(column(&b, 2), s(&[Some("2023-11-14T00:00:00")]));
        let err = read("a,1,2023-02-30 00:00:00\n", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("2023-02-30") && err.contains("'t'"), "{err}");
    }
}
