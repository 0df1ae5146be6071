//! Turning a poll's messages into rows: the value (and key) payloads of
//! the whole poll decoded by their formats in one call each, the table's
//! columns assembled from both, and — for upsert-kafka — the changes
//! normalised against each key's latest value into a changelog.

use std::sync::Arc;

use arrow::array::StringArray;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_core::{Result, WeirError};
use weir_operators::formats::formats;

use super::{Change, KafkaSource};

impl KafkaSource {
    /// upsert-kafka: the changes of a poll as a changelog against the
    /// latest value of each key — a new key +I, a later value -U of the
    /// old and +U of the new, a tombstone -D of the old (of an unknown key:
    /// nothing) — as lines to decode, and their row kinds.
    pub(super) fn normalize(&mut self, polled: &mut Polled) -> Vec<&'static str> {
        let latest = self.latest.as_mut().expect("upsert");
        let mut kinds = vec![];
        let mut emit = |polled_values: &mut Vec<u8>,
                        polled_keys: &mut Vec<u8>,
                        origins: &mut Vec<(String, i32, i64)>,
                        key: &[u8],
                        value: &[u8],
                        origin: &(String, i32, i64),
                        kind: &'static str| {
            polled_values.extend_from_slice(value);
            polled_values.push(b'\n');
            polled_keys.extend_from_slice(key);
            polled_keys.push(b'\n');
            origins.push(origin.clone());
            kinds.push(kind);
        };
        for (key, value, origin) in std::mem::take(&mut polled.changes) {
            let old = match &value {
                Some(v) => latest.insert(key.clone(), (origin.0.clone(), origin.1, v.clone())),
                None => latest.remove(&key),
            };
            let (values, keys, origins) =
                (&mut polled.values, &mut polled.keys, &mut polled.origins);
            match (old, value) {
                (None, Some(v)) => emit(values, keys, origins, &key, &v, &origin, "+I"),
                (Some((_, _, o)), Some(v)) => {
                    emit(values, keys, origins, &key, &o, &origin, "-U");
                    emit(values, keys, origins, &key, &v, &origin, "+U");
                }
                (Some((_, _, o)), None) => emit(values, keys, origins, &key, &o, &origin, "-D"),
                (None, None) => {}
            }
        }
        kinds
    }

    /// Decode the payloads of one poll: one call of the value format over
    /// all of them, each payload a line (likewise the keys with the key
    /// format); a payload that fails is named by topic, partition and
    /// offset.
    pub(super) fn decode(
        &mut self,
        polled: &Polled,
        kinds: Option<Vec<&'static str>>,
    ) -> Result<RecordBatch> {
        let (value_idx, value_schema) = self.plan.project(&self.plan.value_fields)?;
        let value_format = self.plan.format.clone();
        let value_options = self.plan.format_options.clone();
        let value = self.decode_part(
            &value_format,
            &value_options,
            &value_schema,
            &polled.values,
            &polled.origins,
            "value",
        )?;
        let changelog = weir_core::spec::is_changelog_schema(&value.schema());
        let key = match self.plan.key.clone() {
            Some(k) if k.fields.iter().any(|f| !self.plan.value_fields.contains(f)) => {
                let (_, key_schema) = self.plan.project(&k.fields)?;
                Some((
                    k.fields.clone(),
                    self.decode_part(
                        &k.format,
                        &k.options,
                        &key_schema,
                        &polled.keys,
                        &polled.origins,
                        "key",
                    )?,
                ))
            }
            _ => None,
        };
        if key.is_none() && kinds.is_none() && value_idx.len() == self.plan.schema.fields().len() {
            return Ok(value);
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
            columns.push(Arc::new(StringArray::from(kinds)));
        }
        Ok(RecordBatch::try_new(
            Arc::clone(&self.rows_schema),
            columns,
        )?)
    }

    fn decode_part(
        &mut self,
        format: &str,
        options: &weir_core::connector::Options,
        schema: &SchemaRef,
        bytes: &[u8],
        origins: &[(String, i32, i64)],
        what: &str,
    ) -> Result<RecordBatch> {
        let all = formats();
        let factory = all.get(format)?;
        let mut decoder = factory.decoder(schema, options, self.batch_size)?;
        let out_schema = weir_operators::formats::produced_schema(format, schema);
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
        while at < bytes.len() {
            at += decoder.decode(&bytes[at..]).map_err(located)?;
            while let Some(b) = decoder.next_batch().map_err(located)? {
                out.push(b);
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
            _ => arrow::compute::concat_batches(&out_schema, &out)?,
        })
    }
}

/// The messages of one poll: payloads and keys, a line each.
#[derive(Default)]
pub(super) struct Polled {
    pub(super) values: Vec<u8>,
    pub(super) keys: Vec<u8>,
    pub(super) origins: Vec<(String, i32, i64)>,
    /// upsert-kafka: (key, value or tombstone, origin) in order.
    pub(super) changes: Vec<Change>,
}
