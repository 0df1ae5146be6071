//! Turning a poll's messages into rows: the value (and key) payloads of
//! the whole poll decoded by their formats in one call each, the table's
//! columns assembled from both, and — for upsert-kafka — the changes
//! normalised against each key's latest value into a changelog.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Int32Array, Int64Array, MapBuilder, MapFieldNames, StringArray,
    StringBuilder, TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, SchemaRef};
use arrow::record_batch::RecordBatch;
use rdkafka::Timestamp;
use rdkafka::message::{Headers, Message};
use weir_core::changelog::RowKind;
use weir_core::connector::MetadataColumn;
use weir_core::connector::Options;
use weir_core::{Result, WeirError};
use weir_operators::formats::{FormatFactory, formats, produced_schema};

use super::{Change, KafkaSource, Origin};

impl KafkaSource {
    /// upsert-kafka: the changes of a poll as a changelog against the
    /// latest value of each key — a new key +I, a later value -U of the
    /// old and +U of the new, a tombstone -D of the old (of an unknown key:
    /// nothing) — as lines to decode, and their row kinds.
    pub(super) fn normalize(&mut self, polled: &mut Polled) -> Vec<RowKind> {
        let latest = self.latest.as_mut().expect("upsert");
        let mut kinds = vec![];
        let mut emit = |polled_values: &mut Records,
                        polled_keys: &mut Records,
                        origins: &mut Vec<Origin>,
                        key: &[u8],
                        value: &[u8],
                        origin: &Origin,
                        kind: RowKind| {
            polled_values.push(value);
            polled_keys.push(key);
            origins.push(origin.clone());
            kinds.push(kind);
        };
        for (key, value, origin) in std::mem::take(&mut polled.changes) {
            let old = match &value {
                Some(v) => latest.insert(key.clone(), (Arc::clone(&origin.0), origin.1, v.clone())),
                None => latest.remove(&key),
            };
            let (values, keys, origins) =
                (&mut polled.values, &mut polled.keys, &mut polled.origins);
            match (old, value) {
                (None, Some(v)) => emit(values, keys, origins, &key, &v, &origin, RowKind::Insert),
                (Some((_, _, o)), Some(v)) => {
                    emit(
                        values,
                        keys,
                        origins,
                        &key,
                        &o,
                        &origin,
                        RowKind::UpdateBefore,
                    );
                    emit(
                        values,
                        keys,
                        origins,
                        &key,
                        &v,
                        &origin,
                        RowKind::UpdateAfter,
                    );
                }
                (Some((_, _, o)), None) => {
                    emit(values, keys, origins, &key, &o, &origin, RowKind::Delete)
                }
                (None, None) => {}
            }
        }
        kinds
    }

    /// Decode the payloads of one poll: one call of the value format over
    /// all of them, each payload a line (likewise the keys with the key
    /// format); a payload that fails is named by topic, partition and
    /// offset. With metadata columns, when some payloads were skipped
    /// (`ignore-parse-errors`), also the messages the rows come from.
    pub(super) fn decode(
        &mut self,
        polled: &Polled,
        kinds: Option<Vec<RowKind>>,
    ) -> Result<(RecordBatch, Option<Vec<usize>>)> {
        let parts = self.parts()?;
        let value = self.decode_part(&parts.value, &polled.values, &polled.origins, "value")?;
        let changelog = weir_core::spec::is_changelog_schema(&value.schema());
        let key = match &parts.key {
            Some((fields, part)) => Some((
                fields,
                self.decode_part(part, &polled.keys, &polled.origins, "key")?,
            )),
            None => None,
        };
        if key.is_none()
            && kinds.is_none()
            && self.plan.metadata.is_empty()
            && parts.value_columns == self.plan.schema.fields().len()
        {
            return Ok((value, None));
        }
        if let Some((_, k)) = &key
            && k.num_rows() != value.num_rows()
        {
            return Err(self.fail(format!(
                "{} keys and {} values decoded from {} messages (a key or value was skipped \
                 as unparsable; with a key format both must parse)",
                k.num_rows(),
                value.num_rows(),
                polled.origins.len()
            )));
        }
        let mut columns = Vec::with_capacity(self.rows_schema.fields().len());
        for f in self.plan.schema.fields() {
            let from_value = value.column_by_name(f.name());
            let from_key = key
                .as_ref()
                .and_then(|(names, k)| names.contains(f.name()).then(|| k.column_by_name(f.name())))
                .flatten();
            match from_value.or(from_key) {
                Some(c) => columns.push(Arc::clone(c)),
                None => columns.push(arrow::array::new_null_array(
                    f.data_type(),
                    value.num_rows(),
                )),
            }
        }
        let mut kept = None;
        if !self.plan.metadata.is_empty() {
            if value.num_rows() != polled.origins.len() {
                kept = Some(self.kept_messages(polled)?);
            }
            columns.extend(polled.meta.columns(
                &self.plan.metadata,
                &polled.origins,
                kept.as_deref(),
            )?);
        }
        if changelog {
            columns.push(Arc::clone(value.column(value.num_columns() - 1)));
        }
        if let Some(kinds) = kinds {
            if kinds.len() != value.num_rows() {
                return Err(self.fail(format!(
                    "{} changes but {} values decoded (an unparsable value was skipped)",
                    kinds.len(),
                    value.num_rows()
                )));
            }
            columns.push(weir_core::changelog::row_kind_array(kinds));
        }
        Ok((
            RecordBatch::try_new(Arc::clone(&self.rows_schema), columns)?,
            kept,
        ))
    }

    /// The messages of a poll whose value gave a row (some were skipped as
    /// unparsable): each decoded alone, as only a failing poll needs.
    fn kept_messages(&mut self, polled: &Polled) -> Result<Vec<usize>> {
        let value = &self.parts()?.value;
        let mut kept = vec![];
        for i in 0..polled.origins.len() {
            let record = polled.values.record(i);
            let mut decoder = value.factory.decoder(&value.schema, &value.options, 1)?;
            let mut rows = 0;
            if polled.values.framed {
                decoder.decode_records(record, &[record.len()])?;
            } else {
                let mut at = 0;
                while at < record.len() {
                    at += decoder.decode(&record[at..])?;
                    while let Some(b) = decoder.next_batch()? {
                        rows += b.num_rows();
                    }
                }
            }
            while let Some(b) = decoder.finish()? {
                rows += b.num_rows();
            }
            if rows > 0 {
                kept.push(i);
            }
        }
        Ok(kept)
    }

    /// The value and key sides of the table, found on first use.
    pub(super) fn parts(&mut self) -> Result<Arc<Parts>> {
        if let Some(p) = &self.parts {
            return Ok(Arc::clone(p));
        }
        let plan = &self.plan;
        let (value_idx, value_schema) = plan.project(&plan.value_fields)?;
        let value = Part::new(&plan.format, &plan.format_options, value_schema)?;
        // Key columns are decoded from the key only when the value does
        // not carry them all.
        let key = match &plan.key {
            Some(k) if k.fields.iter().any(|f| !plan.value_fields.contains(f)) => {
                let (_, key_schema) = plan.project(&k.fields)?;
                Some((
                    k.fields.clone(),
                    Part::new(&k.format, &k.options, key_schema)?,
                ))
            }
            _ => None,
        };
        let parts = Arc::new(Parts {
            value,
            value_columns: value_idx.len(),
            key,
        });
        self.parts = Some(Arc::clone(&parts));
        Ok(parts)
    }

    fn decode_part(
        &mut self,
        part: &Part,
        records: &Records,
        origins: &[Origin],
        what: &str,
    ) -> Result<RecordBatch> {
        let mut decoder = part
            .factory
            .decoder(&part.schema, &part.options, self.batch_size)?;
        let out_schema = &part.out_schema;
        let mut out = vec![];
        let mut at = 0;
        let name = self.name.clone();
        let located = |e: WeirError| -> WeirError {
            let text = match &e {
                WeirError::Execution(m) => m.clone(),
                other => other.to_string(),
            };
            // The format names the line: the n-th message of the poll.
            let origin = text
                .split("line ")
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| origins.get(n.saturating_sub(1)));
            WeirError::Execution(match origin {
                Some((t, p, o)) => {
                    format!(
                        "Kafka source '{name}': topic '{t}' partition {p} offset {o}: {what}: {text}"
                    )
                }
                None => format!("Kafka source '{name}': {what}: {text}"),
            })
        };
        if records.framed {
            decoder
                .decode_records(&records.bytes, &records.ends)
                .map_err(located)?;
        } else {
            let bytes = &records.bytes;
            while at < bytes.len() {
                at += decoder.decode(&bytes[at..]).map_err(located)?;
                while let Some(b) = decoder.next_batch().map_err(located)? {
                    out.push(b);
                }
            }
        }
        while let Some(b) = decoder.finish().map_err(located)? {
            out.push(b);
        }
        let skipped = decoder.skipped();
        if skipped > 0 {
            self.skipped += skipped;
            tracing::warn!(
                "Kafka source '{}': {skipped} messages did not parse and were skipped ({} so far)",
                self.name,
                self.skipped
            );
        }
        Ok(match out.len() {
            1 => out.pop().expect("one"),
            _ => arrow::compute::concat_batches(out_schema, &out)?,
        })
    }
}

/// What a poll's messages carry beside key and value, kept when the table
/// declares metadata columns.
#[derive(Default)]
pub(super) struct MessageMeta {
    timestamps: Vec<Option<i64>>,
    timestamp_types: Vec<&'static str>,
    /// Only when the table declares `headers`: each message's headers end
    /// at `header_ends[i]` in `headers`, whose keys and values are ranges
    /// of `header_bytes` (no allocation per message).
    with_headers: bool,
    header_ends: Vec<usize>,
    headers: Vec<(Range<usize>, Option<Range<usize>>)>,
    header_bytes: Vec<u8>,
}

impl MessageMeta {
    fn new(metadata: &[MetadataColumn]) -> Self {
        Self {
            with_headers: metadata.iter().any(|m| m.key.as_str() == "headers"),
            ..Self::default()
        }
    }

    pub(super) fn push<M: Message>(&mut self, m: &M) {
        let (ts, kind) = match m.timestamp() {
            Timestamp::NotAvailable => (None, "NoTimestampType"),
            Timestamp::CreateTime(t) => (Some(t), "CreateTime"),
            Timestamp::LogAppendTime(t) => (Some(t), "LogAppendTime"),
        };
        self.timestamps.push(ts);
        self.timestamp_types.push(kind);
        if self.with_headers {
            for h in m.headers().iter().flat_map(|h| h.iter()) {
                let mut range = |bytes: &[u8]| {
                    let start = self.header_bytes.len();
                    self.header_bytes.extend_from_slice(bytes);
                    start..self.header_bytes.len()
                };
                let key = range(h.key.as_bytes());
                let value = h.value.map(range);
                self.headers.push((key, value));
            }
            self.header_ends.push(self.headers.len());
        }
    }

    /// Message `i`'s headers: key and value bytes.
    fn headers_of(&self, i: usize) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        let start = if i == 0 { 0 } else { self.header_ends[i - 1] };
        self.headers[start..self.header_ends[i]]
            .iter()
            .map(|(k, v)| {
                (
                    &self.header_bytes[k.clone()],
                    v.clone().map(|v| &self.header_bytes[v]),
                )
            })
    }

    /// The metadata columns, in declared order, of the messages `kept`
    /// (all when `None`).
    fn columns(
        &self,
        metadata: &[MetadataColumn],
        origins: &[Origin],
        kept: Option<&[usize]>,
    ) -> Result<Vec<ArrayRef>> {
        let rows: Vec<usize> = match kept {
            Some(k) => k.to_vec(),
            None => (0..origins.len()).collect(),
        };
        metadata
            .iter()
            .map(|m| -> Result<ArrayRef> {
                Ok(match m.key.as_str() {
                    "topic" => Arc::new(StringArray::from_iter_values(
                        rows.iter().map(|&i| &*origins[i].0),
                    )),
                    "partition" => Arc::new(Int32Array::from_iter_values(
                        rows.iter().map(|&i| origins[i].1),
                    )),
                    "offset" => Arc::new(Int64Array::from_iter_values(
                        rows.iter().map(|&i| origins[i].2),
                    )),
                    "timestamp" => Arc::new(
                        TimestampMillisecondArray::from_iter(
                            rows.iter().map(|&i| self.timestamps[i]),
                        )
                        .with_timezone("UTC"),
                    ),
                    "timestamp-type" => Arc::new(StringArray::from_iter_values(
                        rows.iter().map(|&i| self.timestamp_types[i]),
                    )),
                    "headers" => {
                        let names = MapFieldNames {
                            entry: "entries".into(),
                            key: "key".into(),
                            value: "value".into(),
                        };
                        let mut b = MapBuilder::new(
                            Some(names),
                            StringBuilder::new(),
                            BinaryBuilder::new(),
                        )
                        .with_keys_field(Arc::new(Field::new(
                            "key",
                            DataType::Utf8,
                            false,
                        )));
                        for &i in &rows {
                            for (k, v) in self.headers_of(i) {
                                // Header keys are Rust strings in rdkafka.
                                b.keys().append_value(String::from_utf8_lossy(k));
                                b.values().append_option(v);
                            }
                            b.append(true)?;
                        }
                        Arc::new(b.finish())
                    }
                    other => {
                        return Err(WeirError::plan(format!(
                            "column '{}': the kafka connector has no metadata '{other}'",
                            m.name
                        )));
                    }
                })
            })
            .collect()
    }
}

/// Payloads (or keys) of a poll's messages in one buffer: a line each for
/// a line format, back to back for one that takes whole records (`avro`,
/// `raw`: a message may hold line breaks).
#[derive(Default)]
pub(super) struct Records {
    bytes: Vec<u8>,
    /// Where each record ends (after its line break).
    ends: Vec<usize>,
    /// Decoded as whole records (`decode_records`), not as lines.
    framed: bool,
    /// Each record followed by a line break.
    separated: bool,
    /// Kept at all (keys are not when no column is decoded from them).
    used: bool,
}

impl Records {
    fn new(part: Option<&Part>, capacity: usize) -> Self {
        Self {
            framed: part.is_some_and(|p| p.framed),
            separated: part.is_none_or(|p| p.separated),
            used: part.is_some(),
            bytes: Vec::with_capacity(if part.is_some() { capacity } else { 0 }),
            ends: vec![],
        }
    }

    /// Bytes held.
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }

    pub(super) fn push(&mut self, record: &[u8]) {
        if !self.used {
            return;
        }
        self.bytes.extend_from_slice(record);
        if self.separated {
            self.bytes.push(b'\n');
        }
        self.ends.push(self.bytes.len());
    }

    /// Record `i`, with its line break.
    fn record(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// The messages of one poll: payloads and keys, and where they come from.
pub(super) struct Polled {
    pub(super) values: Records,
    pub(super) keys: Records,
    pub(super) origins: Vec<Origin>,
    /// Timestamps and headers, with metadata columns.
    pub(super) meta: MessageMeta,
    /// upsert-kafka: (key, value or tombstone, origin) in order.
    pub(super) changes: Vec<Change>,
}

/// A side of the table (value or key) as its format decodes it.
pub(super) struct Part {
    factory: Arc<dyn FormatFactory>,
    options: Options,
    schema: SchemaRef,
    out_schema: SchemaRef,
    framed: bool,
    separated: bool,
}

impl Part {
    fn new(format: &str, options: &Options, schema: SchemaRef) -> Result<Self> {
        let factory = Arc::clone(formats().get(format)?);
        Ok(Self {
            framed: factory.reads_records(),
            separated: factory.separates_records(),
            out_schema: produced_schema(format, &schema),
            factory,
            options: options.clone(),
            schema,
        })
    }
}

/// The value side, its number of columns, and the key side when some
/// columns come from the key alone.
pub(super) struct Parts {
    value: Part,
    value_columns: usize,
    key: Option<(Vec<String>, Part)>,
}

impl Polled {
    /// Nothing polled yet; about `capacity` payload bytes expected.
    pub(super) fn new(parts: &Parts, metadata: &[MetadataColumn], capacity: usize) -> Self {
        Self {
            values: Records::new(Some(&parts.value), capacity),
            keys: Records::new(parts.key.as_ref().map(|(_, k)| k), capacity / 4),
            origins: vec![],
            changes: vec![],
            meta: MessageMeta::new(metadata),
        }
    }
}
