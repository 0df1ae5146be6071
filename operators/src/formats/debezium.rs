//! The `debezium-json` format as Flink has it: Debezium's change events,
//! one JSON object per line, `{"before": {…}, "after": {…}, "op": "c"}`
//! (wrapped in `{"schema": …, "payload": {…}}` with
//! `'debezium-json.schema-include' = 'true'`), decoded into a changelog:
//! `c` and `r` (snapshot reads) → `+I` of `after`, `u` → `-U` of `before`
//! and `+U` of `after`, `d` → `-D` of `before`. Written back as Flink
//! writes it: `+I`/`+U` as `{"before":null,"after":{…},"op":"c"}`, `-U`/`-D`
//! as `{"before":{…},"after":null,"op":"d"}`.
//!
//! The envelope is decoded by the `json` format's columnar decoder (the
//! row under `before` and `after` is the table's); the events are then
//! turned into rows with one `interleave` per column.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_core::connector::{ConnectorOption, OptionKind, Options};
use weir_core::spec::{RowKind, is_changelog_schema, row_kind_field};
use weir_core::{Result, WeirError};

use super::{FormatFactory, RowDecoder, RowEncoder, flag};

/// `'format' = 'debezium-json'`.
pub(super) struct DebeziumJson;

const PREFIX: &str = "debezium-json.";

/// The `json.*` options the envelope is decoded and encoded with.
fn json_options(options: &Options) -> Options {
    options
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(PREFIX)
                .filter(|rest| *rest != "schema-include")
                .map(|rest| (format!("json.{rest}"), v.clone()))
        })
        .collect()
}

fn row_type(schema: &Schema) -> DataType {
    DataType::Struct(schema.fields().clone())
}

/// `{before, after, op}` over rows of `schema`.
fn envelope(schema: &Schema) -> Fields {
    Fields::from(vec![
        Field::new("before", row_type(schema), true),
        Field::new("after", row_type(schema), true),
        Field::new("op", DataType::Utf8, true),
    ])
}

impl FormatFactory for DebeziumJson {
    fn identifier(&self) -> &str {
        "debezium-json"
    }

    fn description(&self) -> &str {
        "Debezium's JSON change events, read and written as a changelog"
    }

    fn extension(&self) -> &str {
        "json"
    }

    fn changelog(&self) -> bool {
        true
    }

    fn options(&self) -> Vec<ConnectorOption> {
        use OptionKind::{Boolean, OneOf};
        vec![
            ConnectorOption::optional(
                "debezium-json.schema-include",
                Boolean,
                Some("false"),
                "events are wrapped as {\"schema\": …, \"payload\": …} (Kafka Connect's JSON converter)",
            ),
            ConnectorOption::optional(
                "debezium-json.ignore-parse-errors",
                Boolean,
                Some("false"),
                "an event that does not parse is skipped (counted) instead of failing",
            ),
            ConnectorOption::optional(
                "debezium-json.timestamp-format.standard",
                OneOf(&["SQL", "ISO-8601"]),
                Some("SQL"),
                "timestamps as 2023-11-14 22:13:20.123 or 2023-11-14T22:13:20.123",
            ),
            ConnectorOption::optional(
                "debezium-json.encode.decimal-as-plain-number",
                Boolean,
                Some("false"),
                "DECIMAL 100 as 100 rather than Java's 1E+2",
            ),
            ConnectorOption::optional(
                "debezium-json.map-null-key.mode",
                OneOf(&["FAIL", "DROP", "LITERAL"]),
                Some("FAIL"),
                "accepted for Flink's DDL; map keys are never NULL in Weir",
            ),
        ]
    }

    fn decoder(
        &self,
        schema: &SchemaRef,
        options: &Options,
        batch_size: usize,
    ) -> Result<Box<dyn RowDecoder>> {
        let include = flag(options, "debezium-json.schema-include", false);
        let fields = envelope(schema);
        let outer = if include {
            Schema::new(vec![Field::new("payload", DataType::Struct(fields), true)])
        } else {
            Schema::new(fields)
        };
        let inner =
            super::json::Json.decoder(&Arc::new(outer), &json_options(options), batch_size)?;
        let mut out: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        out.push(row_kind_field());
        Ok(Box::new(DebeziumDecoder {
            inner,
            include,
            schema: Arc::new(Schema::new(out)),
            ignore_errors: flag(options, "debezium-json.ignore-parse-errors", false),
            events: 0,
            skipped: 0,
        }))
    }

    fn encoder(&self, schema: &SchemaRef, options: &Options) -> Result<Box<dyn RowEncoder>> {
        if flag(options, "debezium-json.schema-include", false) {
            return Err(WeirError::plan(
                "'debezium-json.schema-include' = 'true' is read, not written, by Weir",
            ));
        }
        let changelog = is_changelog_schema(schema);
        let width = schema.fields().len() - usize::from(changelog);
        let data = Schema::new(schema.fields()[..width].to_vec());
        let events = Arc::new(Schema::new(envelope(&data)));
        Ok(Box::new(DebeziumEncoder {
            inner: super::json::Json.encoder(&events, &json_options(options))?,
            envelope: events,
            row: data.fields().clone(),
            width,
            changelog,
        }))
    }
}

struct DebeziumDecoder {
    inner: Box<dyn RowDecoder>,
    include: bool,
    /// The table's columns and the row kind.
    schema: SchemaRef,
    ignore_errors: bool,
    /// Events decoded so far (for error messages).
    events: u64,
    skipped: u64,
}

impl RowDecoder for DebeziumDecoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize> {
        self.inner.decode(bytes)
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let next = self.inner.next_batch()?;
        next.map(|b| self.changes(&b)).transpose()
    }

    fn finish(&mut self) -> Result<Option<RecordBatch>> {
        let next = self.inner.finish()?;
        next.map(|b| self.changes(&b)).transpose()
    }

    fn skipped(&self) -> u64 {
        self.inner.skipped() + self.skipped
    }

    /// Each change event stands alone: its rows depend on no other.
    fn start_mid_file(&mut self) -> bool {
        self.inner.start_mid_file()
    }

    fn between_records(&self) -> bool {
        self.inner.between_records()
    }
}

impl DebeziumDecoder {
    /// The rows a batch of events stands for.
    fn changes(&mut self, events: &RecordBatch) -> Result<RecordBatch> {
        let envelope: StructArray = if self.include {
            let payload = events.column(0).as_struct();
            // An event without a payload has no change in it.
            payload.clone()
        } else {
            events.clone().into()
        };
        let before = envelope.column(0).as_struct();
        let after = envelope.column(1).as_struct();
        let op = envelope.column(2).as_string::<i32>();
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(envelope.len());
        let mut kinds: Vec<RowKind> = Vec::with_capacity(envelope.len());
        for r in 0..envelope.len() {
            let event = self.events + r as u64 + 1;
            let bad = |m: String| WeirError::Execution(format!("change event {event}: {m}"));
            let present = |side: &StructArray| envelope.is_valid(r) && side.is_valid(r);
            let code = if envelope.is_valid(r) && op.is_valid(r) {
                op.value(r)
            } else {
                ""
            };
            let outcome = match code {
                "c" | "r" if present(after) => Ok(vec![((1, r), RowKind::Insert)]),
                "u" if present(before) && present(after) => Ok(vec![
                    ((0, r), RowKind::UpdateBefore),
                    ((1, r), RowKind::UpdateAfter),
                ]),
                "u" if !present(before) => Err(bad(
                    "the \"before\" field of an update is null; a Postgres source table needs \
                     REPLICA IDENTITY FULL"
                        .into(),
                )),
                "d" if present(before) => Ok(vec![((0, r), RowKind::Delete)]),
                "d" => Err(bad(
                    "the \"before\" field of a delete is null; a Postgres source table needs \
                     REPLICA IDENTITY FULL"
                        .into(),
                )),
                "c" | "r" | "u" => Err(bad(format!("the \"after\" field of op '{code}' is null"))),
                "" => Err(bad("no \"op\" field".into())),
                other => Err(bad(format!("unknown \"op\" value \"{other}\""))),
            };
            match outcome {
                Ok(rows) => {
                    for (pick, kind) in rows {
                        picks.push(pick);
                        kinds.push(kind);
                    }
                }
                Err(e) if self.ignore_errors => {
                    tracing::debug!("{e}; skipped");
                    self.skipped += 1;
                }
                Err(e) => return Err(e),
            }
        }
        self.events += envelope.len() as u64;
        let width = self.schema.fields().len() - 1;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(width + 1);
        for i in 0..width {
            let sides: [&dyn Array; 2] = [before.column(i).as_ref(), after.column(i).as_ref()];
            columns.push(arrow::compute::interleave(&sides, &picks)?);
        }
        columns.push(weir_core::changelog::row_kind_array(kinds));
        RecordBatch::try_new(Arc::clone(&self.schema), columns).map_err(|e| {
            // A NOT NULL column given null in an event.
            WeirError::Execution(format!(
                "change events {}..{}: {e}",
                self.events - envelope.len() as u64 + 1,
                self.events
            ))
        })
    }
}

struct DebeziumEncoder {
    inner: Box<dyn RowEncoder>,
    envelope: SchemaRef,
    row: Fields,
    width: usize,
    changelog: bool,
}

impl RowEncoder for DebeziumEncoder {
    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        let events = self.events(batch)?;
        self.inner.encode(&events, out)
    }

    fn encode_records(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<()> {
        let events = self.events(batch)?;
        self.inner.encode_records(&events, out, ends)
    }
}

impl DebeziumEncoder {
    /// One change event per row.
    fn events(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let n = batch.num_rows();
        // Insert-like rows (+I, +U) are "c" events, retractions "d".
        let inserts: Vec<bool> = if self.changelog {
            let kinds = weir_core::changelog::row_kinds(batch)?;
            weir_core::changelog::additions(kinds)
                .values()
                .iter()
                .collect()
        } else {
            vec![true; n]
        };
        let columns = batch.columns()[..self.width].to_vec();
        let side = |present: NullBuffer| -> Result<ArrayRef> {
            Ok(Arc::new(StructArray::try_new(
                self.row.clone(),
                columns.clone(),
                Some(present),
            )?))
        };
        let after = side(NullBuffer::from(inserts.clone()))?;
        let before = side(NullBuffer::from(
            inserts.iter().map(|i| !i).collect::<Vec<_>>(),
        ))?;
        let op: ArrayRef = Arc::new(StringArray::from_iter_values(
            inserts.iter().map(|&i| if i { "c" } else { "d" }),
        ));
        Ok(RecordBatch::try_new(
            Arc::clone(&self.envelope),
            vec![before, after, op],
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn decode(text: &str, options: &[(&str, &str)]) -> Result<Vec<RecordBatch>> {
        let options: Options = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut d = DebeziumJson.decoder(&schema(), &options, 1024)?;
        let mut out = vec![];
        let mut bytes = text.as_bytes();
        while !bytes.is_empty() {
            let n = d.decode(bytes)?;
            bytes = &bytes[n..];
            while let Some(b) = d.next_batch()? {
                out.push(b);
            }
        }
        while let Some(b) = d.finish()? {
            out.push(b);
        }
        Ok(out)
    }

    fn rows(batches: &[RecordBatch]) -> Vec<String> {
        let mut out = vec![];
        for b in batches {
            let ids = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
            let names = b.column(1).as_string::<i32>();
            let kinds = b.column(2).as_primitive::<arrow::datatypes::Int8Type>();
            for r in 0..b.num_rows() {
                let name = if names.is_null(r) {
                    "null"
                } else {
                    names.value(r)
                };
                let kind = RowKind::from_i8(kinds.value(r)).unwrap();
                out.push(format!("{kind}[{}, {name}]", ids.value(r)));
            }
        }
        out
    }

    const EVENTS: &str = r#"{"before":null,"after":{"id":1,"name":"a"},"op":"c"}
{"before":null,"after":{"id":2,"name":"b"},"op":"r","source":{"db":"inventory"},"ts_ms":1}
{"before":{"id":1,"name":"a"},"after":{"id":1,"name":"A"},"op":"u"}
{"before":{"id":2,"name":"b"},"after":null,"op":"d"}
"#;

    #[test]
    fn events_become_a_changelog() {
        assert_eq!(
            rows(&decode(EVENTS, &[]).unwrap()),
            ["+I[1, a]", "+I[2, b]", "-U[1, a]", "+U[1, A]", "-D[2, b]"]
        );
        let wrapped: String = EVENTS
            .lines()
            .map(|l| format!("{{\"schema\":{{\"type\":\"struct\"}},\"payload\":{l}}}\n"))
            .collect();
        assert_eq!(
            rows(&decode(&wrapped, &[("debezium-json.schema-include", "true")]).unwrap()),
            ["+I[1, a]", "+I[2, b]", "-U[1, a]", "+U[1, A]", "-D[2, b]"]
        );
    }

    #[test]
    fn bad_events_name_themselves_or_are_skipped_when_asked() {
        let text = "{\"before\":null,\"after\":{\"id\":1,\"name\":\"a\"},\"op\":\"c\"}\n\
                    {\"before\":null,\"after\":{\"id\":1,\"name\":\"b\"},\"op\":\"u\"}\n\
                    {\"after\":{\"id\":3,\"name\":\"c\"},\"op\":\"x\"}\n";
        let e = decode(text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("change event 2") && e.contains("REPLICA IDENTITY FULL"),
            "{e}"
        );
        let batches = decode(text, &[("debezium-json.ignore-parse-errors", "true")]).unwrap();
        assert_eq!(rows(&batches), ["+I[1, a]"]);
        let e = decode("{\"after\":{\"id\":3},\"op\":\"x\"}\n", &[]).unwrap_err();
        assert!(e.to_string().contains("unknown \"op\" value \"x\""), "{e}");
    }

    #[test]
    fn a_changelog_is_written_as_flink_writes_it_and_reads_back() {
        let mut fields: Vec<Field> = schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(row_kind_field());
        let with_kind = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(
            Arc::clone(&with_kind),
            vec![
                Arc::new(Int64Array::from(vec![1, 1, 1, 1])),
                Arc::new(StringArray::from(vec![Some("a"), Some("a"), None, None])),
                weir_core::changelog::row_kind_array([
                    RowKind::Insert,
                    RowKind::UpdateBefore,
                    RowKind::UpdateAfter,
                    RowKind::Delete,
                ]),
            ],
        )
        .unwrap();
        let mut out = vec![];
        DebeziumJson
            .encoder(&with_kind, &Options::new())
            .unwrap()
            .encode(&batch, &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"before\":null,\"after\":{\"id\":1,\"name\":\"a\"},\"op\":\"c\"}\n\
             {\"before\":{\"id\":1,\"name\":\"a\"},\"after\":null,\"op\":\"d\"}\n\
             {\"before\":null,\"after\":{\"id\":1,\"name\":null},\"op\":\"c\"}\n\
             {\"before\":{\"id\":1,\"name\":null},\"after\":null,\"op\":\"d\"}\n"
        );
        assert_eq!(
            rows(&decode(&text, &[]).unwrap()),
            ["+I[1, a]", "-D[1, a]", "+I[1, null]", "-D[1, null]"]
        );
    }
}
