//! Formats: how a connector that carries bytes (files, and message queues
//! next) turns them into rows and back — a second registry beside the
//! connectors', selected by `'format' = '…'` with options under the
//! format's prefix (`csv.field-delimiter`, `json.ignore-parse-errors`).
//!
//! Row formats decode byte streams into Arrow batches through a
//! [`RowDecoder`] (fed any chunks: a record may span two) and encode
//! batches into bytes through a [`RowEncoder`]. Built in: `csv` and `json`
//! as Flink writes and reads them (`csv.rs`, `json.rs`, values in
//! `text.rs`), `debezium-json` (change events as a changelog,
//! `debezium.rs`) and `raw` (one string or bytes column per record). Parquet
//! is a file format of the filesystem connector (row groups, footers), not
//! a row format.

mod avro;
mod csv;
mod csv_columns;
mod csv_records;
mod csv_scan;
mod debezium;
mod flat_json;
mod json;
mod json_lexer;
mod raw;
mod sql_time;
pub mod text;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_core::connector::{ConnectorOption, Options, TableDescriptor, near_matches};
use weir_core::{Result, WeirError};

/// Turns bytes into rows of a schema. Contract: `decode` consumes a
/// prefix of `bytes` (all of them unless a batch filled up: take it with
/// `next_batch` and call again with the rest; a record may span calls);
/// `next_batch` gives a full batch when one is ready; `finish`, at the end
/// of input, gives the rest (call it until it gives `None`). Errors name
/// the line and column; the caller adds the file.
pub trait RowDecoder: Send {
    /// Decode from `bytes`; the number of bytes consumed.
    fn decode(&mut self, bytes: &[u8]) -> Result<usize>;
    /// A full batch, if one is ready.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>>;
    /// At the end of input: the rows decoded and not yet taken.
    fn finish(&mut self) -> Result<Option<RecordBatch>>;
    /// Records skipped (or fields nulled) for errors, with
    /// `*.ignore-parse-errors`.
    fn skipped(&self) -> u64 {
        0
    }
    /// Decode whole records given as one buffer and the end of each
    /// (Kafka messages of a poll), in one call; take the rows with
    /// `next_batch` and `finish`. For formats framed by message
    /// ([`FormatFactory::message_framed`]); line formats take the records
    /// as lines through [`Self::decode`].
    fn decode_records(&mut self, _bytes: &[u8], _ends: &[usize]) -> Result<()> {
        Err(WeirError::Execution(
            "this format reads lines; give it the records through decode".into(),
        ))
    }
    /// For a file decoded in pieces side by side: read a piece that
    /// starts at a record in the middle of the file (so no header line
    /// there). `false` when the format cannot: a record of it may span
    /// line breaks in ways a line search does not see, or rows depend on
    /// the records before them. The file is then decoded in one piece.
    fn start_mid_file(&mut self) -> bool {
        false
    }
    /// Whether the bytes given to [`Self::decode`] so far ended exactly
    /// at the end of a record (none of one held back for more bytes).
    fn between_records(&self) -> bool {
        false
    }
}

/// Turns rows into bytes.
pub trait RowEncoder: Send {
    /// Append the encoding of `batch` to `out`.
    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()>;

    /// Append the encoding of `batch` to `out`, one record per row, and
    /// the end of each row's bytes (its line break included) to `ends`:
    /// for connectors whose records are messages (Kafka).
    fn encode_records(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<()> {
        for row in 0..batch.num_rows() {
            self.encode(&batch.slice(row, 1), out)?;
            ends.push(out.len());
        }
        Ok(())
    }
}

/// One format: its name, options and codecs.
pub trait FormatFactory: Send + Sync {
    /// The `'format'` value.
    fn identifier(&self) -> &str;
    /// What it is, in a line.
    fn description(&self) -> &str;
    /// Its options, by full key (`csv.field-delimiter`).
    fn options(&self) -> Vec<ConnectorOption>;
    /// The usual file extension (`csv`).
    fn extension(&self) -> &str;
    /// Whether it carries a changelog: its decoder's rows end with the row
    /// kind and its encoder takes one (`debezium-json`).
    fn changelog(&self) -> bool {
        false
    }
    /// Whether a record is a whole message rather than a line (a binary
    /// format, `avro`): its decoder takes messages with
    /// [`RowDecoder::decode_records`], its encoder's records end with no
    /// line break, and files of it are not a line stream.
    fn message_framed(&self) -> bool {
        false
    }
    /// Whether its decoder takes whole records (Kafka messages) with
    /// [`RowDecoder::decode_records`], so a record may hold line breaks:
    /// true of every format framed by message, and of `raw`.
    fn reads_records(&self) -> bool {
        self.message_framed()
    }
    /// Whether records handed over together are each followed by a line
    /// break (within the record's range for [`RowDecoder::decode_records`]):
    /// true of line formats and of `json` (whitespace between documents,
    /// so a poll decodes in one pass), false of `raw` and `avro`.
    fn separates_records(&self) -> bool {
        !self.reads_records()
    }
    /// A decoder of rows of `schema` with the table's options.
    fn decoder(
        &self,
        schema: &SchemaRef,
        options: &Options,
        batch_size: usize,
    ) -> Result<Box<dyn RowDecoder>>;
    /// A decoder of rows of `schema` that produces only the columns
    /// `projection` (indices of `schema`, in that order) and spends nothing
    /// on the others, as Flink's formats convert only the projected
    /// fields; `None` when the format decodes whole rows (its source then
    /// reads every column and a projection after it picks).
    fn projected_decoder(
        &self,
        _schema: &SchemaRef,
        _projection: &[usize],
        _options: &Options,
        _batch_size: usize,
    ) -> Result<Option<Box<dyn RowDecoder>>> {
        Ok(None)
    }
    /// An encoder of rows of `schema` with the table's options.
    fn encoder(&self, schema: &SchemaRef, options: &Options) -> Result<Box<dyn RowEncoder>>;
}

/// The formats a program knows, by identifier.
#[derive(Clone)]
pub struct Formats {
    factories: Arc<BTreeMap<String, Arc<dyn FormatFactory>>>,
}

impl Default for Formats {
    fn default() -> Self {
        let mut f = Self {
            factories: Arc::new(BTreeMap::new()),
        };
        f.register(Arc::new(csv::Csv));
        f.register(Arc::new(json::Json));
        f.register(Arc::new(debezium::DebeziumJson));
        f.register(Arc::new(raw::Raw));
        f.register(Arc::new(avro::Avro));
        f
    }
}

impl std::fmt::Debug for Formats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.factories.keys()).finish()
    }
}

impl Formats {
    /// Add (or replace) a format.
    pub fn register(&mut self, factory: Arc<dyn FormatFactory>) {
        Arc::make_mut(&mut self.factories)
            .insert(factory.identifier().to_ascii_lowercase(), factory);
    }

    /// The formats, by identifier.
    pub fn factories(&self) -> impl Iterator<Item = &Arc<dyn FormatFactory>> {
        self.factories.values()
    }

    /// The format `name`, or an error listing the known ones.
    pub fn get(&self, name: &str) -> Result<&Arc<dyn FormatFactory>> {
        let key = name.to_ascii_lowercase();
        self.factories.get(&key).ok_or_else(|| {
            let near = near_matches(&key, self.factories.keys().map(String::as_str));
            WeirError::plan(format!(
                "unknown format '{name}'{}; the formats are {}",
                match near.as_slice() {
                    [] => String::new(),
                    n => format!(" (did you mean {}?)", n.join(", ")),
                },
                self.factories
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// Every format's options, for connectors that take a format: its
    /// options are declared with the connector's (all optional).
    pub fn all_options(&self) -> Vec<ConnectorOption> {
        self.factories
            .values()
            .flat_map(|f| f.options())
            .map(|mut o| {
                o.required = false;
                o
            })
            .collect()
    }

    /// Check that a table's format options belong to its format (a
    /// `json.*` option on a `csv` table is a mistake).
    pub fn check_table(&self, t: &TableDescriptor, format: &str) -> Result<()> {
        let f = self.get(format).map_err(|e| t.error(e))?;
        let own: Vec<&'static str> = f.options().iter().map(|o| o.key).collect();
        for key in t.options.keys() {
            let foreign = self
                .factories
                .values()
                .filter(|g| g.identifier() != f.identifier())
                .any(|g| g.options().iter().any(|o| o.key == key) && !own.contains(&key.as_str()));
            if foreign {
                return Err(t.error(format!(
                    "option '{key}' is not one of format '{format}' (its options: {})",
                    own.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// The formats of this program.
pub fn formats() -> Formats {
    Formats::default()
}

/// The rows a source of `format` yields for a table of `schema`: the
/// table's columns, and the row kind after them for a changelog format.
pub fn produced_schema(format: &str, schema: &SchemaRef) -> SchemaRef {
    if formats().get(format).is_ok_and(|f| f.changelog()) {
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        fields.push(Arc::new(weir_core::spec::row_kind_field()));
        Arc::new(arrow::datatypes::Schema::new(fields))
    } else {
        Arc::clone(schema)
    }
}

/// What a source of `format` yields: a changelog for a changelog format
/// (`debezium-json`), else rows to append.
pub fn produced_changelog(format: &str) -> weir_core::spec::ChangelogMode {
    if formats().get(format).is_ok_and(|f| f.changelog()) {
        weir_core::spec::ChangelogMode::Retract
    } else {
        weir_core::spec::ChangelogMode::Append
    }
}

/// Decode everything `reader` yields into batches with `decoder`.
pub struct DecodeReader<R> {
    reader: R,
    decoder: Box<dyn RowDecoder>,
    done: bool,
}

impl<R: BufRead> DecodeReader<R> {
    /// Read `reader` through `decoder`.
    pub fn new(reader: R, decoder: Box<dyn RowDecoder>) -> Self {
        Self {
            reader,
            decoder,
            done: false,
        }
    }

    /// Records skipped for errors so far.
    pub fn skipped(&self) -> u64 {
        self.decoder.skipped()
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.done {
            return Ok(None);
        }
        loop {
            if let Some(b) = self.decoder.next_batch()? {
                return Ok(Some(b));
            }
            let buf = self
                .reader
                .fill_buf()
                .map_err(|e| WeirError::Execution(format!("read: {e}")))?;
            if buf.is_empty() {
                // End of input: what is decoded, then nothing more.
                let last = self.decoder.finish()?;
                if last.is_none() {
                    self.done = true;
                }
                return Ok(last);
            }
            let used = self.decoder.decode(buf)?;
            self.reader.consume(used);
        }
    }
}

impl<R: BufRead> Iterator for DecodeReader<R> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_batch() {
            Ok(Some(b)) if b.num_rows() == 0 => self.next(),
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The single character of option `key` (`\t` for a tab), or `default`.
pub(crate) fn char_option(options: &Options, key: &str, default: u8) -> Result<u8> {
    match options.get(key).map(String::as_str) {
        None => Ok(default),
        Some("\\t") => Ok(b'\t'),
        Some(v) if v.len() == 1 => Ok(v.as_bytes()[0]),
        Some(v) => Err(WeirError::plan(format!(
            "option '{key}' must be one character, got '{v}'"
        ))),
    }
}

/// The boolean option `key`, or `default`.
pub(crate) fn flag(options: &Options, key: &str, default: bool) -> bool {
    options
        .get(key)
        .map(|v| v.trim().eq_ignore_ascii_case("true"))
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn read(format: &str, text: &str, options: &[(&str, &str)]) -> Result<(Vec<RecordBatch>, u64)> {
        let options: Options = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let decoder = formats().get(format)?.decoder(&schema(), &options, 2)?;
        let mut r = DecodeReader::new(std::io::Cursor::new(text.as_bytes().to_vec()), decoder);
        let batches = r.by_ref().collect::<Result<Vec<_>>>()?;
        Ok((batches, r.skipped()))
    }

    fn ids(batches: &[RecordBatch]) -> Vec<Option<i64>> {
        batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_primitive::<Int64Type>()
                    .iter()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn a_bad_value_names_its_line_and_column() {
        let e = read("csv", "1,a\n2,b\nx,c\n", &[]).unwrap_err().to_string();
        assert!(
            e.contains("'x'") && e.contains("column 'id'") && e.contains("line 3"),
            "{e}"
        );
        let e = read("json", "{\"id\":1}\n{\"id\":2}\n{\"id\":\"x\"}\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3"), "{e}");
        let e = read("json", "{\"id\":1}\n{\"id\":2,\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn ignored_errors_are_skipped_and_counted() {
        let (b, skipped) = read(
            "csv",
            "1,a\nx,b\n3,c\n",
            &[("csv.ignore-parse-errors", "true")],
        )
        .unwrap();
        assert_eq!(ids(&b), vec![Some(1), None, Some(3)]);
        assert_eq!(skipped, 1);
        let (b, skipped) = read(
            "json",
            "{\"id\":1}\nnot json\n{\"id\":3}\n",
            &[("json.ignore-parse-errors", "true")],
        )
        .unwrap();
        assert_eq!(ids(&b), vec![Some(1), Some(3)]);
        assert_eq!(skipped, 1);
    }

    #[test]
    fn csv_options_as_flink_has_them() {
        let (b, _) = read(
            "csv",
            "# a comment\n1;'x;y'\n2;NUL\n",
            &[
                ("csv.field-delimiter", ";"),
                ("csv.quote-character", "'"),
                ("csv.allow-comments", "true"),
                ("csv.null-literal", "NUL"),
            ],
        )
        .unwrap();
        assert_eq!(ids(&b), vec![Some(1), Some(2)]);
        let names: Vec<Option<&str>> = b
            .iter()
            .flat_map(|b| b.column(1).as_string::<i32>().iter().collect::<Vec<_>>())
            .collect();
        assert_eq!(names, vec![Some("x;y"), None]);
        // An empty field is NULL for numbers, '' for text (as in Flink).
        let (b, _) = read("csv", ",\n", &[]).unwrap();
        assert!(b[0].column(0).is_null(0));
        assert_eq!(b[0].column(1).as_string::<i32>().value(0), "");
    }

    #[test]
    fn json_missing_fields_fail_when_asked() {
        let (b, _) = read("json", "{\"id\":1}\n", &[]).unwrap();
        assert!(b[0].column(1).is_null(0));
        let e = read(
            "json",
            "{\"id\":1}\n",
            &[("json.fail-on-missing-field", "true")],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("field 'name' is missing") && e.contains("line 1"),
            "{e}"
        );
    }

    #[test]
    fn raw_lines_are_rows() {
        let schema = Arc::new(Schema::new(vec![Field::new("line", DataType::Utf8, true)]));
        let decoder = formats()
            .get("raw")
            .unwrap()
            .decoder(&schema, &Options::new(), 2)
            .unwrap();
        let r = DecodeReader::new(std::io::Cursor::new(b"a\r\nb\nc".to_vec()), decoder);
        let lines: Vec<String> = r
            .flat_map(|b| {
                let b = b.unwrap();
                b.column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(lines, ["a", "b", "c"]);
    }
}
