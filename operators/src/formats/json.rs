//! The `json` format as Flink has it: one object per line, fields in
//! schema order, NULLs written as `null`, values as Jackson writes them
//! (`text.rs`), nested `ROW`, `ARRAY` and `MAP` as objects and arrays.
//! Read by the flat-object fast path (`flat_json.rs`) where it applies,
//! else arrow-json's columnar decoder; when a chunk of lines does not
//! decode, its lines are decoded one by one to name the bad one (or skip
//! and count it, with `json.ignore-parse-errors`).

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::json::reader::Decoder;
use arrow::record_batch::RecordBatch;
use weir_core::connector::{ConnectorOption, OptionKind, Options};
use weir_core::{Result, WeirError};

use super::flat_json::FlatJson;
use super::text::{TextStyle, TimestampStyle, is_textual, write_scalar};
use super::{FormatFactory, RowDecoder, RowEncoder, flag};

/// `'format' = 'json'`.
pub(super) struct Json;

impl FormatFactory for Json {
    fn identifier(&self) -> &str {
        "json"
    }

    fn description(&self) -> &str {
        "one JSON object per line, as Flink writes it"
    }

    fn extension(&self) -> &str {
        "json"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        use OptionKind::{Boolean, OneOf};
        vec![
            ConnectorOption::optional(
                "json.fail-on-missing-field",
                Boolean,
                Some("false"),
                "a line without a declared field fails (else the field is NULL)",
            ),
            ConnectorOption::optional(
                "json.ignore-parse-errors",
                Boolean,
                Some("false"),
                "a line that does not parse is skipped (counted) instead of failing",
            ),
            ConnectorOption::optional(
                "json.timestamp-format.standard",
                OneOf(&["SQL", "ISO-8601"]),
                Some("SQL"),
                "timestamps written as 2023-11-14 22:13:20.123 or 2023-11-14T22:13:20.123",
            ),
            ConnectorOption::optional(
                "json.encode.decimal-as-plain-number",
                Boolean,
                Some("false"),
                "DECIMAL 100 as 100 rather than Java's 1E+2",
            ),
            ConnectorOption::optional(
                "json.map-null-key.mode",
                OneOf(&["FAIL", "DROP", "LITERAL"]),
                Some("FAIL"),
                "accepted for Flink's DDL; map keys are never NULL in Weir",
            ),
        ]
    }

    fn reads_records(&self) -> bool {
        true
    }

    fn separates_records(&self) -> bool {
        true
    }

    fn decoder(
        &self,
        schema: &SchemaRef,
        options: &Options,
        batch_size: usize,
    ) -> Result<Box<dyn RowDecoder>> {
        let fail_on_missing = flag(options, "json.fail-on-missing-field", false);
        Ok(Box::new(JsonDecoder {
            inner: new_decoder(schema, batch_size)?,
            flat: FlatJson::new(schema, fail_on_missing),
            schema: Arc::clone(schema),
            batch_size,
            pending: Vec::new(),
            ready: VecDeque::new(),
            lines: 0,
            ignore_errors: flag(options, "json.ignore-parse-errors", false),
            fail_on_missing,
            skipped: 0,
        }))
    }

    /// A decoder of the projected columns alone: other fields are skipped
    /// as undeclared ones are (Flink's JSON format deserializes only the
    /// projected fields, so `json.fail-on-missing-field` and bad values
    /// concern those alone).
    fn projected_decoder(
        &self,
        schema: &SchemaRef,
        projection: &[usize],
        options: &Options,
        batch_size: usize,
    ) -> Result<Option<Box<dyn RowDecoder>>> {
        let read = Arc::new(schema.project(projection)?);
        self.decoder(&read, options, batch_size).map(Some)
    }

    fn encoder(&self, _schema: &SchemaRef, options: &Options) -> Result<Box<dyn RowEncoder>> {
        let iso = options
            .get("json.timestamp-format.standard")
            .is_some_and(|v| v.eq_ignore_ascii_case("ISO-8601"));
        Ok(Box::new(JsonEncoder {
            style: TextStyle {
                timestamps: if iso {
                    TimestampStyle::Iso
                } else {
                    TimestampStyle::Sql
                },
                plain_decimals: flag(options, "json.encode.decimal-as-plain-number", false),
            },
            text: String::new(),
        }))
    }
}

fn new_decoder(schema: &SchemaRef, batch_size: usize) -> Result<Decoder> {
    Ok(arrow::json::ReaderBuilder::new(Arc::clone(schema))
        .with_batch_size(batch_size)
        .build_decoder()?)
}

struct JsonDecoder {
    inner: Decoder,
    /// The fast path, when every column's type has one.
    flat: Option<FlatJson>,
    schema: SchemaRef,
    batch_size: usize,
    /// The start of a line not yet complete.
    pending: Vec<u8>,
    ready: VecDeque<RecordBatch>,
    /// Lines fed so far (for line numbers).
    lines: u64,
    ignore_errors: bool,
    fail_on_missing: bool,
    skipped: u64,
}

impl RowDecoder for JsonDecoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize> {
        match bytes.iter().rposition(|&b| b == b'\n') {
            None => self.pending.extend_from_slice(bytes),
            Some(end) => {
                let mut chunk = std::mem::take(&mut self.pending);
                chunk.extend_from_slice(&bytes[..=end]);
                self.feed(&chunk)?;
                self.pending.extend_from_slice(&bytes[end + 1..]);
            }
        }
        Ok(bytes.len())
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        Ok(self.ready.pop_front())
    }

    fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if !self.pending.is_empty() {
            let mut last = std::mem::take(&mut self.pending);
            last.push(b'\n');
            self.feed(&last)?;
        }
        Ok(self.ready.pop_front())
    }

    fn skipped(&self) -> u64 {
        self.skipped
    }

    /// A document is one line (as the sequential path reads files too:
    /// whole lines at a time), so a piece may start at any line.
    fn start_mid_file(&mut self) -> bool {
        true
    }

    fn between_records(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whole messages, each one JSON document (line breaks inside allowed):
    /// all of them decoded in one go, or — when that fails — one at a
    /// time, to name (or skip) the bad ones by number.
    fn decode_records(&mut self, bytes: &[u8], ends: &[usize]) -> Result<()> {
        if !self.decode_chunk(bytes, Some(ends))? {
            let starts = std::iter::once(0).chain(ends.iter().copied());
            let records = starts.zip(ends).map(|(start, &end)| &bytes[start..end]);
            self.one_by_one(records, true)?;
        }
        self.lines += ends.len() as u64;
        Ok(())
    }
}

impl JsonDecoder {
    /// Decode whole lines; the decoder is empty before and after.
    fn feed(&mut self, chunk: &[u8]) -> Result<()> {
        let lines = memchr::memchr_iter(b'\n', chunk).count() as u64;
        if !self.decode_chunk(chunk, None)? {
            self.one_by_one(chunk.split(|&b| b == b'\n'), false)?;
        }
        self.lines += lines;
        Ok(())
    }

    /// Every document of `bytes` (with `ends`, one per record) in one pass:
    /// the flat fast path where it applies, else arrow-json's decoder.
    /// `false` (nothing decoded) when some document does not decode.
    fn decode_chunk(&mut self, bytes: &[u8], ends: Option<&[usize]>) -> Result<bool> {
        if let Some(flat) = &mut self.flat
            && flat.decode(bytes, ends, self.batch_size, &mut self.ready)
        {
            return Ok(true);
        }
        if self.fail_on_missing {
            return Ok(false);
        }
        let before = self.ready.len();
        let decoded = match ends {
            Some(ends) => self.decode_each(bytes, ends),
            None => self.decode_all(bytes),
        };
        if decoded.is_err() {
            self.ready.truncate(before);
            self.inner = new_decoder(&self.schema, self.batch_size)?;
        }
        Ok(decoded.is_ok())
    }

    /// Record by record (numbered from the next line), to name the bad one
    /// or skip and count it (`json.ignore-parse-errors`). Blank lines are
    /// passed over; a blank whole `message` is an error.
    fn one_by_one<'b>(
        &mut self,
        records: impl Iterator<Item = &'b [u8]>,
        messages: bool,
    ) -> Result<()> {
        let mut good = vec![];
        for (i, record) in records.enumerate() {
            let at = self.lines + i as u64 + 1;
            let blank = record.iter().all(u8::is_ascii_whitespace);
            if blank && !messages {
                continue;
            }
            let decoded = if blank {
                Err(WeirError::Execution("an empty message is not JSON".into()))
            } else {
                self.decode_line(record)
            };
            match decoded {
                Ok(Some(b)) => good.push(b),
                Ok(None) => {}
                Err(e) if self.ignore_errors => {
                    tracing::debug!("json record {at} skipped: {e}");
                    self.skipped += 1;
                    self.inner = new_decoder(&self.schema, self.batch_size)?;
                }
                Err(e) => return Err(WeirError::Execution(format!("line {at}: {e}"))),
            }
        }
        if !good.is_empty() {
            self.ready
                .push_back(arrow::compute::concat_batches(&self.schema, &good)?);
        }
        Ok(())
    }

    /// Every record through arrow-json's decoder in one pass (each ends
    /// with a line break, so documents never run together); an empty
    /// record is an error (it holds no document).
    fn decode_each(
        &mut self,
        bytes: &[u8],
        ends: &[usize],
    ) -> std::result::Result<(), arrow::error::ArrowError> {
        let mut start = 0;
        for &end in ends {
            if bytes[start..end].iter().all(u8::is_ascii_whitespace) {
                return Err(arrow::error::ArrowError::JsonError(
                    "an empty message".into(),
                ));
            }
            start = end;
        }
        if bytes.last().is_some_and(|b| *b != b'\n') {
            return Err(arrow::error::ArrowError::JsonError(
                "records must end with a line break".into(),
            ));
        }
        self.decode_all(bytes)
    }

    fn decode_all(&mut self, chunk: &[u8]) -> std::result::Result<(), arrow::error::ArrowError> {
        let mut pos = 0;
        while pos < chunk.len() {
            pos += self.inner.decode(&chunk[pos..])?;
            if let Some(b) = self.inner.flush()? {
                self.ready.push_back(b);
            }
        }
        Ok(())
    }

    fn decode_line(&mut self, line: &[u8]) -> Result<Option<RecordBatch>> {
        if self.fail_on_missing {
            let value: serde_json::Value = serde_json::from_slice(line)
                .map_err(|e| WeirError::Execution(format!("not JSON: {e}")))?;
            let Some(object) = value.as_object() else {
                return Err(WeirError::Execution("not a JSON object".into()));
            };
            if let Some(f) = self
                .schema
                .fields()
                .iter()
                .find(|f| !object.contains_key(f.name()))
            {
                return Err(WeirError::Execution(format!(
                    "field '{}' is missing ('json.fail-on-missing-field' is true)",
                    f.name()
                )));
            }
        }
        // A line of many documents fills the decoder's batch, and it takes
        // no more bytes until that batch is flushed.
        let mut parts = vec![];
        let mut pos = 0;
        while pos < line.len() {
            pos += self.inner.decode(&line[pos..])?;
            parts.extend(self.inner.flush()?);
        }
        self.inner.decode(b"\n")?;
        parts.extend(self.inner.flush()?);
        Ok(match parts.len() {
            0 => None,
            1 => parts.pop(),
            _ => Some(arrow::compute::concat_batches(&self.schema, &parts)?),
        })
    }
}

struct JsonEncoder {
    style: TextStyle,
    text: String,
}

impl RowEncoder for JsonEncoder {
    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        self.rows(batch, out, None)
    }

    fn encode_records(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<()> {
        self.rows(batch, out, Some(ends))
    }
}

impl JsonEncoder {
    fn rows(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        mut ends: Option<&mut Vec<usize>>,
    ) -> Result<()> {
        let schema = batch.schema();
        let names: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| {
                let mut s = String::new();
                escape(&mut s, f.name());
                s
            })
            .collect();
        for row in 0..batch.num_rows() {
            self.text.clear();
            self.text.push('{');
            for (i, column) in batch.columns().iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(&names[i]);
                self.text.push(':');
                write_value(&mut self.text, column, row, self.style)?;
            }
            self.text.push_str("}\n");
            out.extend_from_slice(self.text.as_bytes());
            if let Some(ends) = ends.as_deref_mut() {
                ends.push(out.len());
            }
        }
        Ok(())
    }
}

/// `array[row]` as JSON.
fn write_value(out: &mut String, array: &ArrayRef, row: usize, style: TextStyle) -> Result<()> {
    if array.is_null(row) {
        out.push_str("null");
        return Ok(());
    }
    match array.data_type() {
        DataType::Struct(fields) => {
            let s = array.as_struct();
            out.push('{');
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                escape(out, f.name());
                out.push(':');
                write_value(out, s.column(i), row, style)?;
            }
            out.push('}');
        }
        DataType::List(_) => write_list(out, &array.as_list::<i32>().value(row), style)?,
        DataType::LargeList(_) => write_list(out, &array.as_list::<i64>().value(row), style)?,
        DataType::FixedSizeList(_, _) => {
            write_list(out, &array.as_fixed_size_list().value(row), style)?
        }
        DataType::Map(_, _) => {
            let entries = array.as_map().value(row);
            out.push('{');
            for i in 0..entries.len() {
                if i > 0 {
                    out.push(',');
                }
                let mut key = String::new();
                write_scalar(&mut key, entries.column(0), i, style)?;
                escape(out, &key);
                out.push(':');
                write_value(out, entries.column(1), i, style)?;
            }
            out.push('}');
        }
        t if is_textual(t) => {
            let mut text = String::new();
            write_scalar(&mut text, array, row, style)?;
            escape(out, &text);
        }
        _ => {
            let mut text = String::new();
            write_scalar(&mut text, array, row, style)?;
            // Jackson writes the floats JSON has no number for as strings.
            if matches!(text.as_str(), "NaN" | "Infinity" | "-Infinity") {
                escape(out, &text);
            } else {
                out.push_str(&text);
            }
        }
    }
    Ok(())
}

fn write_list(out: &mut String, values: &ArrayRef, style: TextStyle) -> Result<()> {
    out.push('[');
    for i in 0..values.len() {
        if i > 0 {
            out.push(',');
        }
        write_value(out, values, i, style)?;
    }
    out.push(']');
    Ok(())
}

/// `s` as a JSON string, escaped as Jackson escapes (quote, backslash,
/// control characters; other characters as they are).
fn escape(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
