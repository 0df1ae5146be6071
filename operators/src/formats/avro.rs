//! The `avro` format: each record one Avro binary datum of a schema
//! derived from the table, as Flink's `avro` format writes Kafka messages
//! (no header, no schema id: the reader knows the schema). Records are
//! whole messages, so this format frames by message, not by line.
//!
//! The schema is derived as Flink derives it: a record named `record`, a
//! nullable column a union `["null", T]` (null first, default null),
//! `TINYINT`/`SMALLINT`/`INT` as `int`, `BIGINT` as `long`, `DATE` as an
//! `int` of logical type `date`, `TIMESTAMP(3)` and `TIMESTAMP_LTZ(3)` as a
//! `long` of `timestamp-millis`, `DECIMAL` as `bytes` of `decimal`, `ARRAY`
//! as `array`, `MAP<STRING, V>` as `map`, `ROW` as a nested record.
//! Decoding and encoding are arrow-avro's, a batch of messages at a time.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use arrow_avro::reader::{Decoder, ReaderBuilder};
use arrow_avro::schema::{
    AvroSchema, Fingerprint, FingerprintAlgorithm, SCHEMA_METADATA_KEY, SINGLE_OBJECT_MAGIC,
    SchemaStore,
};
use arrow_avro::writer::format::AvroBinaryFormat;
use arrow_avro::writer::{Encoder, WriterBuilder};
use serde_json::{Value, json};
use weir_core::connector::{ConnectorOption, Options};
use weir_core::{Result, WeirError};

use super::{FormatFactory, RowDecoder, RowEncoder};

/// `'format' = 'avro'`.
pub(super) struct Avro;

impl FormatFactory for Avro {
    fn identifier(&self) -> &str {
        "avro"
    }

    fn description(&self) -> &str {
        "each record an Avro binary datum of a schema derived from the table (Kafka messages)"
    }

    fn extension(&self) -> &str {
        "avro"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![]
    }

    fn message_framed(&self) -> bool {
        true
    }

    fn decoder(
        &self,
        schema: &SchemaRef,
        _options: &Options,
        batch_size: usize,
    ) -> Result<Box<dyn RowDecoder>> {
        let avro = AvroSchema::new(avro_schema(schema)?.to_string());
        let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Rabin);
        let fingerprint = store.register(avro.clone()).map_err(avro_err)?;
        let Fingerprint::Rabin(fp) = fingerprint else {
            return Err(WeirError::Execution("avro: unexpected fingerprint".into()));
        };
        let mut prefix = SINGLE_OBJECT_MAGIC.to_vec();
        prefix.extend_from_slice(&fp.to_le_bytes());
        let decoder = ReaderBuilder::new()
            .with_batch_size(batch_size.max(1))
            .with_reader_schema(avro)
            .with_writer_schema_store(store)
            .with_active_fingerprint(fingerprint)
            .build_decoder()
            .map_err(avro_err)?;
        Ok(Box::new(AvroDecoder {
            schema: Arc::clone(schema),
            decoder,
            prefix,
            framed: Vec::new(),
            ready: Vec::new(),
            records: 0,
        }))
    }

    fn encoder(&self, schema: &SchemaRef, _options: &Options) -> Result<Box<dyn RowEncoder>> {
        let native = native_schema(schema);
        let mut metadata = HashMap::new();
        metadata.insert(
            SCHEMA_METADATA_KEY.to_string(),
            avro_schema(schema)?.to_string(),
        );
        let with_schema = Schema::new_with_metadata(native.fields().clone(), metadata);
        let encoder = WriterBuilder::new(with_schema)
            .build_encoder::<AvroBinaryFormat>()
            .map_err(|e| WeirError::plan(format!("avro: {e}")))?;
        Ok(Box::new(AvroEncoder {
            native: Arc::new(native),
            encoder,
        }))
    }
}

fn avro_err(e: impl std::fmt::Display) -> WeirError {
    WeirError::plan(format!("avro: {e}"))
}

/// The Avro schema of a table's columns, as Flink derives it.
pub(crate) fn avro_schema(schema: &Schema) -> Result<Value> {
    Ok(json!({
        "type": "record",
        "name": "record",
        "fields": fields(schema.fields(), "record")?,
    }))
}

fn fields(fields: &Fields, path: &str) -> Result<Vec<Value>> {
    fields
        .iter()
        .map(|f| {
            let t = avro_type(f.data_type(), &format!("{path}_{}", f.name()))?;
            Ok(if f.is_nullable() {
                json!({ "name": f.name(), "type": ["null", t], "default": null })
            } else {
                json!({ "name": f.name(), "type": t })
            })
        })
        .collect()
}

fn avro_type(t: &DataType, path: &str) -> Result<Value> {
    Ok(match t {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 => json!("string"),
        DataType::Binary | DataType::LargeBinary => json!("bytes"),
        DataType::Date32 => json!({ "type": "int", "logicalType": "date" }),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            json!({ "type": "long", "logicalType": "timestamp-millis" })
        }
        DataType::Decimal128(p, s) => {
            json!({ "type": "bytes", "logicalType": "decimal", "precision": p, "scale": s })
        }
        DataType::List(item) => {
            let t = avro_type(item.data_type(), path)?;
            json!({ "type": "array", "items": if item.is_nullable() { json!(["null", t]) } else { t } })
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 && kv[0].data_type() == &DataType::Utf8 => {
                let t = avro_type(kv[1].data_type(), path)?;
                json!({ "type": "map", "values": if kv[1].is_nullable() { json!(["null", t]) } else { t } })
            }
            _ => return Err(unsupported(t)),
        },
        DataType::Struct(children) => json!({
            "type": "record",
            "name": path,
            "fields": fields(children, path)?,
        }),
        other => return Err(unsupported(other)),
    })
}

fn unsupported(t: &DataType) -> WeirError {
    WeirError::plan(format!(
        "format 'avro' does not take columns of type {t} (Avro has int, long, float, double, \
         boolean, string, bytes, date, timestamp-millis, decimal, array, map of strings, record)"
    ))
}

/// The Arrow types arrow-avro reads and writes for the table's types:
/// narrower integers are Avro ints.
fn native_type(t: &DataType) -> DataType {
    match t {
        DataType::Int8 | DataType::Int16 => DataType::Int32,
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
        }
        DataType::List(item) => DataType::List(Arc::new(
            item.as_ref()
                .clone()
                .with_data_type(native_type(item.data_type())),
        )),
        DataType::Struct(children) => DataType::Struct(
            children
                .iter()
                .map(|f| {
                    f.as_ref()
                        .clone()
                        .with_data_type(native_type(f.data_type()))
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn native_schema(schema: &Schema) -> Schema {
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), native_type(f.data_type()), f.is_nullable()))
            .collect::<Vec<_>>(),
    )
}

/// `batch`'s columns cast to `schema`'s types where they differ.
fn cast_to(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(Arc::clone(c))
            } else {
                Ok(arrow::compute::cast(c, f.data_type())?)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

struct AvroDecoder {
    schema: SchemaRef,
    decoder: Decoder,
    /// The single-object prefix of the table's schema, put in front of
    /// each datum for arrow-avro's decoder.
    prefix: Vec<u8>,
    framed: Vec<u8>,
    ready: Vec<RecordBatch>,
    /// Records decoded so far (for numbering).
    records: u64,
}

impl AvroDecoder {
    fn flush(&mut self) -> Result<()> {
        if let Some(b) = self
            .decoder
            .flush()
            .map_err(|e| WeirError::Execution(format!("avro: {e}")))?
        {
            self.ready.push(cast_to(&b, &self.schema)?);
        }
        Ok(())
    }
}

impl RowDecoder for AvroDecoder {
    fn decode(&mut self, _bytes: &[u8]) -> Result<usize> {
        Err(WeirError::Execution(
            "format 'avro' reads whole messages (Kafka), not a byte stream".into(),
        ))
    }

    fn decode_records(&mut self, bytes: &[u8], ends: &[usize]) -> Result<()> {
        let mut start = 0;
        for &end in ends {
            self.records += 1;
            let n = self.records;
            self.framed.clear();
            self.framed.extend_from_slice(&self.prefix);
            self.framed.extend_from_slice(&bytes[start..end]);
            start = end;
            let bad = |what: String| {
                WeirError::Execution(format!(
                    "line {n}: not an Avro record of the table's schema: {what}"
                ))
            };
            let mut at = 0;
            while at < self.framed.len() {
                let used = self
                    .decoder
                    .decode(&self.framed[at..])
                    .map_err(|e| bad(e.to_string()))?;
                at += used;
                if self.decoder.batch_is_full() {
                    self.flush()?;
                } else if used == 0 {
                    return Err(bad("the datum ends early".into()));
                }
            }
        }
        Ok(())
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        Ok((!self.ready.is_empty()).then(|| self.ready.remove(0)))
    }

    fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if self.ready.is_empty() {
            self.flush()?;
        }
        self.next_batch()
    }
}

struct AvroEncoder {
    native: SchemaRef,
    encoder: Encoder,
}

impl RowEncoder for AvroEncoder {
    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        let mut ends = vec![];
        self.encode_records(batch, out, &mut ends)
    }

    fn encode_records(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<()> {
        let batch = cast_to(batch, &self.native)?;
        self.encoder
            .encode(&batch)
            .map_err(|e| WeirError::Execution(format!("avro: {e}")))?;
        let rows = self.encoder.flush();
        let base = out.len();
        out.extend_from_slice(rows.bytes());
        ends.extend(rows.offsets().iter().skip(1).map(|o| base + o));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Int64Array, StringArray};
    use arrow::datatypes::Int64Type;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    /// The bytes Flink's avro format writes for `{id: 1, name: "ab"}` and
    /// `{id: -2, name: null}`: zig-zag longs, the union's branch index
    /// (null first), a length-prefixed string.
    const FLINK: [&[u8]; 2] = [&[0x02, 0x02, 0x04, b'a', b'b'], &[0x03, 0x00]];

    #[test]
    fn encodes_and_decodes_flinks_bytes() {
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![1, -2])),
                Arc::new(StringArray::from(vec![Some("ab"), None])),
            ],
        )
        .unwrap();
        let mut enc = Avro.encoder(&schema(), &Options::new()).unwrap();
        let (mut out, mut ends) = (vec![], vec![]);
        enc.encode_records(&batch, &mut out, &mut ends).unwrap();
        assert_eq!(ends, vec![5, 7]);
        assert_eq!(&out[..5], FLINK[0]);
        assert_eq!(&out[5..], FLINK[1]);

        let mut dec = Avro.decoder(&schema(), &Options::new(), 1).unwrap();
        dec.decode_records(&out, &ends).unwrap();
        let mut rows = vec![];
        while let Some(b) = dec.finish().unwrap() {
            for r in 0..b.num_rows() {
                let name = b.column(1).as_string::<i32>();
                rows.push((
                    b.column(0).as_primitive::<Int64Type>().value(r),
                    name.is_valid(r).then(|| name.value(r).to_string()),
                ));
            }
        }
        assert_eq!(rows, vec![(1, Some("ab".into())), (-2, None)]);
    }

    #[test]
    fn a_datum_that_ends_early_is_named() {
        let mut dec = Avro.decoder(&schema(), &Options::new(), 10).unwrap();
        let mut bytes = FLINK[0].to_vec();
        bytes.extend_from_slice(&[0x02, 0x02, 0x08, b'x']);
        let e = dec.decode_records(&bytes, &[5, 9]).unwrap_err().to_string();
        assert!(e.contains("line 2: not an Avro record"), "{e}");
    }

    #[test]
    fn unsupported_types_are_refused_when_planned() {
        let s = Arc::new(Schema::new(vec![Field::new(
            "t",
            DataType::Time64(TimeUnit::Microsecond),
            true,
        )]));
        let e = Avro.encoder(&s, &Options::new()).err().unwrap().to_string();
        assert!(e.contains("does not take columns of type"), "{e}");
    }
}
