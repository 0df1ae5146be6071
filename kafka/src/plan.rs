//! A Kafka table as planned: Flink's `kafka` options read once, checked,
//! and carried to every subtask as JSON.

use std::collections::BTreeMap;

use arrow::datatypes::{Schema, SchemaRef};
use weir_core::connector::{
    ConnectorOption, MetadataColumn, MetadataKey, OptionKind, Options, TableDescriptor,
};
use weir_core::{Result, WeirError};
use weir_operators::formats::formats;

/// Where a source starts reading a partition it has no checkpointed
/// offset for (`scan.startup.mode`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Startup {
    /// The first retained offset.
    EarliestOffset,
    /// The end: only messages produced from now on.
    LatestOffset,
    /// The group's committed offset (`properties.group.id`), else the
    /// earliest (as Flink with `auto.offset.reset` = earliest).
    GroupOffsets,
    /// The first message at or after a time (ms since the epoch).
    Timestamp(i64),
    /// Given offsets per partition; others from the earliest.
    SpecificOffsets(BTreeMap<i32, i64>),
}

/// Where a bounded source stops (`scan.bounded.mode`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bounded {
    /// Never: the source is unbounded.
    Unbounded,
    /// The end offsets when the source starts.
    LatestOffset,
    /// The group's committed offsets when the source starts.
    GroupOffsets,
    /// Messages before a time (ms since the epoch).
    Timestamp(i64),
    /// Given (exclusive) end offsets per partition.
    SpecificOffsets(BTreeMap<i32, i64>),
}

/// What goes into the key of a message and comes out of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeyPlan {
    /// The key's format.
    pub format: String,
    /// Its options (prefix `key.` removed: `json.ignore-parse-errors`).
    pub options: Options,
    /// The table's columns the key holds, in key order.
    pub fields: Vec<String>,
}

/// A planned Kafka table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KafkaPlan {
    /// Topics read or written (a sink writes the first).
    pub topics: Vec<String>,
    /// `topic-pattern`: read every topic whose whole name matches.
    pub topic_pattern: Option<String>,
    /// `METADATA` columns: read after the physical ones; the persisted
    /// ones written (`timestamp`, `headers`).
    pub metadata: Vec<MetadataColumn>,
    /// Client properties (`properties.*` without the prefix).
    pub properties: BTreeMap<String, String>,
    /// The value's format and its options (`json.…`).
    pub format: String,
    /// Options of the value format.
    pub format_options: Options,
    /// The key, when `key.format` is given.
    pub key: Option<KeyPlan>,
    /// The columns the value holds (all, or all but the key's with
    /// `value.fields-include` = `EXCEPT_KEY`).
    pub value_fields: Vec<String>,
    /// The table's physical columns.
    pub schema: SchemaRef,
    /// Where reading starts.
    pub startup: Startup,
    /// Where reading ends.
    pub bounded: Bounded,
    /// How often new partitions are looked for (ms); `None`: never.
    pub discovery_ms: Option<u64>,
    /// `none`, `at-least-once` or `exactly-once`.
    pub delivery: String,
    /// Prefix of the sink's transactional ids.
    pub transactional_id_prefix: String,
    /// `default`, `fixed` or `round-robin`.
    pub partitioner: String,
    /// An upsert table (`upsert-kafka`): its primary key.
    pub upsert_key: Vec<String>,
}

/// Options both connectors take.
pub(crate) fn options(upsert: bool) -> Vec<ConnectorOption> {
    use OptionKind::{Duration, Integer, OneOf, Text};
    let mut o = vec![
        ConnectorOption::optional("topic", Text, None, "a topic, or several separated by ';'"),
        ConnectorOption::required(
            "properties.bootstrap.servers",
            Text,
            "the brokers, host:port[,host:port…]",
        ),
        ConnectorOption::optional(
            "properties.group.id",
            Text,
            None,
            "the consumer group offsets are committed to (and read by group-offsets)",
        ),
        ConnectorOption::prefix("properties.", "any other client property, passed on"),
        ConnectorOption::optional(
            "key.format",
            Text,
            None,
            "the key's format (json, csv, raw); its options prefixed by 'key.'",
        ),
        ConnectorOption::optional(
            "key.fields",
            Text,
            None,
            "the columns in the key, separated by ';'",
        ),
        ConnectorOption::optional(
            "value.fields-include",
            OneOf(&["ALL", "EXCEPT_KEY"]),
            Some("ALL"),
            "whether the value repeats the key's columns",
        ),
        ConnectorOption::prefix("key.", "options of the key's format (key.json.…)"),
        ConnectorOption::prefix("value.", "options of the value's format (value.json.…)"),
        ConnectorOption::optional(
            "sink.transactional-id-prefix",
            Text,
            None,
            "exactly-once: prefix of each subtask's transactional id (default: the table's name)",
        ),
        ConnectorOption::optional(
            "sink.parallelism",
            Integer,
            None,
            "accepted for Flink's DDL; the sink runs at the job's parallelism",
        ),
        ConnectorOption::optional(
            "scan.watermark.idle-timeout",
            Duration,
            None,
            "a partition without data for this long is idle: it holds no watermark back \
             (default: table.exec.source.idle-timeout)",
        ),
        ConnectorOption::optional(
            "scan.topic-partition-discovery.interval",
            Duration,
            None,
            "how often new partitions are looked for (default: only at start)",
        ),
    ];
    o.extend([
        ConnectorOption::optional(
            "scan.bounded.mode",
            OneOf(&[
                "unbounded",
                "latest-offset",
                "group-offsets",
                "timestamp",
                "specific-offsets",
            ]),
            Some("unbounded"),
            "where a bounded read ends",
        ),
        ConnectorOption::optional(
            "scan.bounded.timestamp-millis",
            Integer,
            None,
            "with 'timestamp': ms since the epoch",
        ),
        ConnectorOption::optional(
            "scan.bounded.specific-offsets",
            Text,
            None,
            "with 'specific-offsets': partition:0,offset:42;…",
        ),
    ]);
    if upsert {
        o.extend([
            ConnectorOption::required("value.format", Text, "the value's format (json, csv, raw)"),
            ConnectorOption::optional(
                "sink.buffer-flush.max-rows",
                Integer,
                None,
                "accepted for Flink's DDL; rows are flushed at every checkpoint",
            ),
            ConnectorOption::optional(
                "sink.buffer-flush.interval",
                Duration,
                None,
                "accepted for Flink's DDL; rows are flushed at every checkpoint",
            ),
        ]);
    } else {
        o.extend([
            ConnectorOption::optional(
                "format",
                Text,
                None,
                "the value's format (json, csv, raw, debezium-json); its options follow",
            ),
            ConnectorOption::optional("value.format", Text, None, "the value's format"),
            ConnectorOption::optional(
                "topic-pattern",
                Text,
                None,
                "a regular expression: read every topic whose whole name matches (found again by discovery)",
            ),
            ConnectorOption::optional(
                "scan.startup.mode",
                OneOf(&[
                    "earliest-offset",
                    "latest-offset",
                    "group-offsets",
                    "timestamp",
                    "specific-offsets",
                ]),
                Some("group-offsets"),
                "where a partition without a checkpointed offset starts",
            ),
            ConnectorOption::optional(
                "scan.startup.timestamp-millis",
                Integer,
                None,
                "with 'timestamp': ms since the epoch",
            ),
            ConnectorOption::optional(
                "scan.startup.specific-offsets",
                Text,
                None,
                "with 'specific-offsets': partition:0,offset:42;partition:1,offset:300",
            ),
            ConnectorOption::optional(
                "sink.delivery-guarantee",
                OneOf(&["none", "at-least-once", "exactly-once"]),
                Some("at-least-once"),
                "what the sink promises across failures",
            ),
            ConnectorOption::optional(
                "sink.partitioner",
                OneOf(&["default", "fixed", "round-robin"]),
                Some("default"),
                "which partition a row goes to (default: by key, else spread)",
            ),
        ]);
    }
    o.extend(formats().all_options());
    o
}

/// `partition:0,offset:42;partition:1,offset:300`.
fn specific_offsets(t: &TableDescriptor, key: &str) -> Result<BTreeMap<i32, i64>> {
    let text = t.required(key)?;
    let mut out = BTreeMap::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let mut partition = None;
        let mut offset = None;
        for kv in part.split(',') {
            match kv.trim().split_once(':') {
                Some(("partition", v)) => partition = v.trim().parse::<i32>().ok(),
                Some(("offset", v)) => offset = v.trim().parse::<i64>().ok(),
                _ => {}
            }
        }
        match (partition, offset) {
            (Some(p), Some(o)) if p >= 0 && o >= 0 => {
                out.insert(p, o);
            }
            _ => {
                return Err(t.error(format!("'{key}': '{part}' is not 'partition:N,offset:M'")));
            }
        }
    }
    Ok(out)
}

/// The options of `format` given with `prefix` (`key.`, `value.`, or
/// none), keyed as the format knows them (`json.…`).
fn prefixed_format_options(t: &TableDescriptor, prefix: &str, format: &str) -> Options {
    let own = format!("{format}.");
    t.options
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix(prefix)?;
            rest.starts_with(&own)
                .then(|| (rest.to_string(), v.clone()))
        })
        .collect()
}

fn list(v: &str) -> Vec<String> {
    v.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Read and check a table's options.
pub(crate) fn plan(t: &TableDescriptor, upsert: bool) -> Result<KafkaPlan> {
    let schema = t.declared_schema()?;
    let topics = t.option("topic").map(list).unwrap_or_default();
    let topic_pattern = t.option("topic-pattern").map(str::to_string);
    match (&topic_pattern, topics.is_empty()) {
        (Some(_), false) => {
            return Err(t.error("'topic' and 'topic-pattern' cannot both be given"));
        }
        (Some(p), true) => {
            topic_matcher(p).map_err(|e| t.error(format!("'topic-pattern': {e}")))?;
        }
        (None, true) => {
            return Err(t.error(
                "'topic' or 'topic-pattern' is required (one topic, or several separated by ';')",
            ));
        }
        (None, false) => {}
    }
    if upsert && topic_pattern.is_some() {
        return Err(t.error("upsert-kafka takes 'topic', not 'topic-pattern'"));
    }
    if upsert && !t.metadata.is_empty() {
        return Err(t.error(
            "METADATA columns on upsert-kafka tables are not supported yet (the kafka connector has them)",
        ));
    }
    let properties: BTreeMap<String, String> = t
        .options
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("properties.")?.to_string(), v.clone())))
        .collect();
    let value_format = match (t.option("format"), t.option("value.format")) {
        (Some(_), Some(_)) => {
            return Err(t.error("give 'format' or 'value.format', not both"));
        }
        (Some(f), None) => (f.to_ascii_lowercase(), ""),
        (None, Some(f)) => (f.to_ascii_lowercase(), "value."),
        (None, None) => return Err(t.error("'format' (or 'value.format') is required")),
    };
    let (format, value_prefix) = value_format;
    let all = formats();
    let factory = all.get(&format).map_err(|e| t.error(e))?;
    if upsert && factory.changelog() {
        return Err(t.error(format!(
            "upsert-kafka's value format cannot be the changelog format '{format}'"
        )));
    }
    let format_options = prefixed_format_options(t, value_prefix, &format);
    let key_fields = t.option("key.fields").map(list).unwrap_or_default();
    let upsert_key = if upsert {
        if t.primary_key.is_empty() {
            return Err(
                t.error("upsert-kafka needs a PRIMARY KEY (…) NOT ENFORCED: the message key")
            );
        }
        t.primary_key.clone()
    } else {
        vec![]
    };
    let key = match t.option("key.format") {
        Some(kf) => {
            let kf = kf.to_ascii_lowercase();
            formats().get(&kf).map_err(|e| t.error(e))?;
            let fields = if upsert {
                upsert_key.clone()
            } else {
                key_fields
            };
            if fields.is_empty() {
                return Err(t.error("'key.format' needs 'key.fields' (the key's columns)"));
            }
            for f in &fields {
                if schema.index_of(f).is_err() {
                    return Err(t.error(format!("key field '{f}' is not a column")));
                }
            }
            Some(KeyPlan {
                options: prefixed_format_options(t, "key.", &kf),
                format: kf,
                fields,
            })
        }
        None if upsert => {
            return Err(t.error("upsert-kafka needs 'key.format'"));
        }
        None if !key_fields.is_empty() => {
            return Err(t.error("'key.fields' needs 'key.format'"));
        }
        None => None,
    };
    let except_key = t
        .option("value.fields-include")
        .is_some_and(|v| v.eq_ignore_ascii_case("EXCEPT_KEY"));
    let value_fields: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| !(except_key && key.as_ref().is_some_and(|k| k.fields.contains(n))))
        .collect();
    // upsert-kafka reads the whole topic: the table is its latest values.
    let default_startup = if upsert {
        "earliest-offset"
    } else {
        "group-offsets"
    };
    let startup = match t.option("scan.startup.mode").unwrap_or(default_startup) {
        "earliest-offset" => Startup::EarliestOffset,
        "latest-offset" => Startup::LatestOffset,
        "group-offsets" => Startup::GroupOffsets,
        "timestamp" => {
            Startup::Timestamp(t.number("scan.startup.timestamp-millis")?.ok_or_else(|| {
                t.error("'scan.startup.mode' = 'timestamp' needs 'scan.startup.timestamp-millis'")
            })?)
        }
        _ => Startup::SpecificOffsets(specific_offsets(t, "scan.startup.specific-offsets")?),
    };
    let bounded = match t.option("scan.bounded.mode").unwrap_or("unbounded") {
        "unbounded" => Bounded::Unbounded,
        "latest-offset" => Bounded::LatestOffset,
        "group-offsets" => Bounded::GroupOffsets,
        "timestamp" => {
            Bounded::Timestamp(t.number("scan.bounded.timestamp-millis")?.ok_or_else(|| {
                t.error("'scan.bounded.mode' = 'timestamp' needs 'scan.bounded.timestamp-millis'")
            })?)
        }
        _ => Bounded::SpecificOffsets(specific_offsets(t, "scan.bounded.specific-offsets")?),
    };
    if matches!(startup, Startup::GroupOffsets) || matches!(bounded, Bounded::GroupOffsets) {
        // Group offsets without a group: Flink fails the same way.
        if !properties.contains_key("group.id") && t.option("scan.startup.mode").is_some() {
            return Err(t.error("'group-offsets' needs 'properties.group.id'"));
        }
    }
    let delivery = t
        .option("sink.delivery-guarantee")
        .unwrap_or("at-least-once")
        .to_ascii_lowercase();
    Ok(KafkaPlan {
        topics,
        topic_pattern,
        metadata: t.metadata.clone(),
        properties,
        format,
        format_options,
        key,
        value_fields,
        schema,
        startup,
        bounded,
        discovery_ms: t
            .duration_ms("scan.topic-partition-discovery.interval")?
            .filter(|ms| *ms > 0)
            .map(|ms| ms as u64),
        delivery,
        transactional_id_prefix: t
            .option("sink.transactional-id-prefix")
            .unwrap_or(&t.name)
            .to_string(),
        partitioner: t
            .option("sink.partitioner")
            .unwrap_or("default")
            .to_string(),
        upsert_key,
    })
}

/// A `topic-pattern` as a matcher of whole topic names (as Java's
/// `Pattern.matcher(topic).matches()` in Flink).
pub(crate) fn topic_matcher(pattern: &str) -> std::result::Result<regex::Regex, String> {
    regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())
}

/// The metadata a Kafka table may declare (Flink's keys and types).
pub(crate) fn metadata_keys() -> Vec<MetadataKey> {
    use arrow::datatypes::{DataType, TimeUnit};
    let key = |key, data_type, writable, description| MetadataKey {
        key,
        data_type,
        writable,
        description,
    };
    vec![
        key("topic", DataType::Utf8, false, "the message's topic"),
        key("partition", DataType::Int32, false, "its partition"),
        key(
            "offset",
            DataType::Int64,
            false,
            "its offset in the partition",
        ),
        key(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
            "its timestamp (TIMESTAMP_LTZ(3)); written as the message's timestamp",
        ),
        key(
            "timestamp-type",
            DataType::Utf8,
            false,
            "NoTimestampType, CreateTime or LogAppendTime",
        ),
        key(
            "headers",
            headers_type(),
            true,
            "its headers (MAP<STRING, BYTES>); written as the message's headers",
        ),
    ]
}

/// `MAP<STRING, BYTES>` as the SQL layer declares it.
pub(crate) fn headers_type() -> arrow::datatypes::DataType {
    use arrow::datatypes::{DataType, Field, Fields};
    DataType::Map(
        std::sync::Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Binary, true),
            ])),
            false,
        )),
        false,
    )
}

impl KafkaPlan {
    /// The columns of `schema` named by `names`, in that order.
    pub fn project(&self, names: &[String]) -> Result<(Vec<usize>, SchemaRef)> {
        let idx = names
            .iter()
            .map(|n| {
                self.schema.index_of(n).map_err(|_| {
                    WeirError::plan(format!("Kafka table: '{n}' is not one of its columns"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((
            idx.clone(),
            std::sync::Arc::new(Schema::new(
                idx.iter()
                    .map(|&i| self.schema.field(i).clone())
                    .collect::<Vec<_>>(),
            )),
        ))
    }
}
