//! Connectors as data: what a job's sources and sinks are, independent of
//! how any one connector works.
//!
//! A source or sink is a connector name, its options and a schema (Flink's
//! `'connector' = '…'` with its `WITH` options). The factories that plan
//! and run connectors live with the runtime (`weir_operators::connectors`);
//! this crate holds only what the job graph carries — [`ConnectorSource`]
//! and [`SinkSpec`] — and the declarations factories make of their options
//! ([`ConnectorOption`]), checked here by [`check_options`] so every entry
//! point (SQL, the DataStream API, a job graph sent as JSON) refuses the
//! same mistakes with the same words.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};

/// The type of an option's value, checked before a factory reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// Any text.
    Text,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A Flink duration (`500 ms`, `5 s`, `1 min`) or plain milliseconds.
    Duration,
    /// `2023-11-14 22:13:20[.123]` (UTC) or ms since the epoch.
    Timestamp,
    /// A Flink memory size (`128 mb`, `1 gb`, `4096`): bytes.
    MemorySize,
    /// One of these words (any case).
    OneOf(&'static [&'static str]),
}

impl OptionKind {
    /// The kind as the listing names it.
    pub fn describe(&self) -> String {
        match self {
            OptionKind::Text => "text".into(),
            OptionKind::Integer => "integer".into(),
            OptionKind::Boolean => "boolean".into(),
            OptionKind::Duration => "duration".into(),
            OptionKind::Timestamp => "timestamp".into(),
            OptionKind::MemorySize => "memory size".into(),
            OptionKind::OneOf(words) => words.join(" | "),
        }
    }

    /// Why `value` is not of this kind, if it is not.
    pub fn check(&self, value: &str) -> Option<String> {
        let v = value.trim();
        let ok = match self {
            OptionKind::Text => true,
            OptionKind::Integer => v.parse::<i64>().is_ok() || v.parse::<u64>().is_ok(),
            OptionKind::Boolean => {
                v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false")
            }
            OptionKind::Duration => parse_duration_ms(v).is_some(),
            OptionKind::Timestamp => parse_timestamp_ms(v).is_some(),
            OptionKind::MemorySize => parse_memory_size(v).is_some(),
            OptionKind::OneOf(words) => words.iter().any(|w| w.eq_ignore_ascii_case(v)),
        };
        (!ok).then(|| format!("expected {}", self.describe()))
    }
}

/// One option a connector (or format) takes.
#[derive(Debug, Clone)]
pub struct ConnectorOption {
    /// The option's name; for a prefix option, the prefix (`fields.`).
    pub key: &'static str,
    /// The type of its value.
    pub kind: OptionKind,
    /// Whether a table must give it.
    pub required: bool,
    /// Its value when not given, for the listing.
    pub default: Option<&'static str>,
    /// Whether `key` is a prefix every option starting with it matches.
    pub prefix: bool,
    /// What it does, in a line.
    pub description: &'static str,
}

impl ConnectorOption {
    /// An option a table must give.
    pub fn required(key: &'static str, kind: OptionKind, description: &'static str) -> Self {
        Self {
            key,
            kind,
            required: true,
            default: None,
            prefix: false,
            description,
        }
    }

    /// An option with a default (or none).
    pub fn optional(
        key: &'static str,
        kind: OptionKind,
        default: Option<&'static str>,
        description: &'static str,
    ) -> Self {
        Self {
            key,
            kind,
            required: false,
            default,
            prefix: false,
            description,
        }
    }

    /// Every option starting with `prefix` (the factory checks them).
    pub fn prefix(prefix: &'static str, description: &'static str) -> Self {
        Self {
            key: prefix,
            kind: OptionKind::Text,
            required: false,
            default: None,
            prefix: true,
            description,
        }
    }

    /// The option as a line of a listing (`weir connectors`).
    pub fn listing_line(&self) -> String {
        let key = if self.prefix {
            format!("{}*", self.key)
        } else {
            self.key.to_string()
        };
        let need = if self.required {
            "required".to_string()
        } else {
            match self.default {
                Some(d) => format!("default {d}"),
                None => "optional".to_string(),
            }
        };
        format!(
            "  {key:<36} {:<20} {need:<18} {}",
            self.kind.describe(),
            self.description
        )
    }
}

/// Options of a table as given (`WITH (…)`), by key.
pub type Options = BTreeMap<String, String>;

/// A table as a connector sees it: its name (for messages), options, the
/// physical columns declared (if any: the DataStream API may leave them
/// to the connector, a Parquet file knowing its own), its primary key and
/// partition columns.
#[derive(Debug, Clone, Default)]
pub struct TableDescriptor {
    /// Name in messages (`table 'bids'`, `source 'events'`).
    pub name: String,
    /// The options, `connector` included.
    pub options: Options,
    /// Declared physical columns, in order.
    pub schema: Option<SchemaRef>,
    /// `PRIMARY KEY (…) NOT ENFORCED`.
    pub primary_key: Vec<String>,
    /// `PARTITIONED BY (…)`.
    pub partition_keys: Vec<String>,
    /// Predicates the query applies right after the source (over the
    /// declared columns). A connector may use them to skip data it can
    /// prove fails them (Parquet row groups by their statistics), never
    /// to drop a row it cannot: the query still filters every row.
    pub filters: Vec<datafusion_expr::Expr>,
    /// The declared physical columns the query reads, in declared order,
    /// when it reads fewer than all (projection pushdown, as Flink's
    /// `SupportsProjectionPushDown`). A connector may produce just these
    /// (a Parquet source then decodes no other column) or ignore it and
    /// produce every column.
    pub projection: Option<Vec<String>>,
    /// `METADATA` columns, in declared order: a source appends them, named
    /// as declared, after the physical columns; a sink receives the
    /// persisted (not `VIRTUAL`) ones after the physical columns.
    pub metadata: Vec<MetadataColumn>,
}

/// A table's column read from (or written to) what a connector knows
/// beside the payload: `name TYPE METADATA [FROM 'key'] [VIRTUAL]`, as a
/// Kafka message's topic, partition, offset, timestamp or headers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetadataColumn {
    /// The column's name.
    pub name: String,
    /// The connector's metadata key (the name when no `FROM`).
    pub key: String,
    /// The declared type (the connector's is cast to it).
    pub data_type: DataType,
    /// `VIRTUAL`: read only, not written by an `INSERT`.
    pub is_virtual: bool,
}

/// A metadata key a connector offers, with its type.
#[derive(Debug, Clone)]
pub struct MetadataKey {
    /// The key (`offset`, `timestamp`, …).
    pub key: &'static str,
    /// Its type as the connector produces (or takes) it.
    pub data_type: DataType,
    /// Whether a sink writes it (a persisted column of it).
    pub writable: bool,
    /// What it is, in a line.
    pub description: &'static str,
}

impl TableDescriptor {
    /// The metadata columns a sink receives (after the physical ones).
    pub fn persisted_metadata(&self) -> impl Iterator<Item = &MetadataColumn> {
        self.metadata.iter().filter(|m| !m.is_virtual)
    }

    /// Check the metadata columns against what a connector offers: a known
    /// key, a type the connector's casts to (and back, when written), a
    /// persisted column only of a writable key when `as_sink`.
    pub fn check_metadata(
        &self,
        connector: &str,
        offered: &[MetadataKey],
        as_sink: bool,
    ) -> Result<()> {
        for m in &self.metadata {
            let Some(k) = offered.iter().find(|k| k.key == m.key) else {
                return Err(self.error(format!(
                    "column '{}': connector '{connector}' has no metadata key '{}'{}",
                    m.name,
                    m.key,
                    if offered.is_empty() {
                        " (it has no metadata)".to_string()
                    } else {
                        format!(
                            "; its keys are {}",
                            offered.iter().map(|k| k.key).collect::<Vec<_>>().join(", ")
                        )
                    }
                )));
            };
            if !arrow::compute::can_cast_types(&k.data_type, &m.data_type) {
                return Err(self.error(format!(
                    "column '{}': metadata '{}' is {} and cannot be read as {}",
                    m.name, m.key, k.data_type, m.data_type
                )));
            }
            if as_sink && !m.is_virtual {
                if !k.writable {
                    return Err(self.error(format!(
                        "column '{}': metadata '{}' of connector '{connector}' cannot be written; declare it VIRTUAL",
                        m.name, m.key
                    )));
                }
                if !arrow::compute::can_cast_types(&m.data_type, &k.data_type) {
                    return Err(self.error(format!(
                        "column '{}': {} cannot be written as metadata '{}' ({})",
                        m.name, m.data_type, m.key, k.data_type
                    )));
                }
            }
        }
        Ok(())
    }
}

impl TableDescriptor {
    /// A table with options and, maybe, declared columns.
    pub fn new(name: impl Into<String>, options: Options, schema: Option<SchemaRef>) -> Self {
        Self {
            name: name.into(),
            options,
            schema,
            ..Self::default()
        }
    }

    /// The option `key`, if given.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }

    /// The lower-case connector name.
    pub fn connector(&self) -> Result<String> {
        self.option("connector")
            .map(str::to_ascii_lowercase)
            .ok_or_else(|| self.error("no 'connector' option in WITH (…)"))
    }

    /// An error about this table: `table 'x': msg`.
    pub fn error(&self, msg: impl fmt::Display) -> WeirError {
        WeirError::plan(format!("table '{}': {msg}", self.name))
    }

    /// The option `key`, which the connector requires.
    pub fn required(&self, key: &str) -> Result<&str> {
        self.option(key).ok_or_else(|| {
            self.error(format!(
                "connector '{}' needs the option '{key}'",
                self.connector().unwrap_or_default()
            ))
        })
    }

    /// The option `key` parsed as a number.
    pub fn number<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        self.option(key)
            .map(|v| {
                v.trim().parse().map_err(|_| {
                    self.error(format!("option '{key}' = '{v}' is not a valid number"))
                })
            })
            .transpose()
    }

    /// The boolean option `key` (`default` when not given).
    pub fn flag(&self, key: &str, default: bool) -> bool {
        self.option(key)
            .map(|v| v.trim().eq_ignore_ascii_case("true"))
            .unwrap_or(default)
    }

    /// The duration option `key`, in ms.
    pub fn duration_ms(&self, key: &str) -> Result<Option<i64>> {
        self.option(key)
            .map(|v| {
                parse_duration_ms(v)
                    .ok_or_else(|| self.error(format!("option '{key}' = '{v}': expected duration")))
            })
            .transpose()
    }

    /// The declared columns, which this connector needs.
    pub fn declared_schema(&self) -> Result<SchemaRef> {
        self.schema.clone().ok_or_else(|| {
            self.error(format!(
                "connector '{}' needs the table's columns declared",
                self.connector().unwrap_or_default()
            ))
        })
    }
}

/// Check `table`'s options against what its connector declares: every
/// option known (others refused with the near names and the known list),
/// every required one given, every value of its declared kind.
pub fn check_options(table: &TableDescriptor, declared: &[ConnectorOption]) -> Result<()> {
    let connector = table.connector()?;
    let known: Vec<&str> = declared
        .iter()
        .filter(|o| !o.prefix)
        .map(|o| o.key)
        .collect();
    for (k, v) in &table.options {
        if k == "connector" {
            continue;
        }
        let option = declared.iter().find(|o| {
            if o.prefix {
                k.starts_with(o.key)
            } else {
                k == o.key
            }
        });
        let Some(option) = option else {
            let near = near_matches(k, known.iter().copied());
            let mut listed: Vec<String> = known.iter().map(|k| k.to_string()).collect();
            listed.extend(
                declared
                    .iter()
                    .filter(|o| o.prefix)
                    .map(|o| format!("{}*", o.key)),
            );
            return Err(table.error(format!(
                "unknown option '{k}' for connector '{connector}'{}; known options: {}",
                match near.as_slice() {
                    [] => String::new(),
                    n => format!(" (did you mean {}?)", n.join(", ")),
                },
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            )));
        };
        if let Some(why) = option.kind.check(v) {
            return Err(table.error(format!("option '{k}' = '{v}': {why}")));
        }
    }
    for o in declared.iter().filter(|o| o.required) {
        table.required(o.key)?;
    }
    Ok(())
}

/// A source that reads through a connector: what it is (name, options),
/// what it produces (schema, whether it ends) and what its factory worked
/// out when the job was planned (`planned`: a file listing, a generator's
/// configuration), which the factory reads back in every subtask.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConnectorSource {
    /// The connector's identifier.
    pub connector: String,
    /// Its options as given (`connector` excluded).
    #[serde(default)]
    pub options: Options,
    /// Schema of the batches it emits.
    pub schema: SchemaRef,
    /// Whether it ends by itself.
    pub bounded: bool,
    /// How plans show it (`parquet(a.parquet)`, `nexmark(1000 events)`).
    #[serde(default)]
    pub display: String,
    /// The factory's own plan-time description; `null` lets the factory
    /// plan again from `options` (a job graph written by hand).
    #[serde(default)]
    pub planned: serde_json::Value,
    /// Rows the job carries with it (an in-memory source).
    #[serde(default, with = "crate::wire::batches")]
    pub batches: Vec<RecordBatch>,
    /// What its rows carry: append-only, or a changelog (a CDC format, an
    /// upsert table) ending with the row kind.
    #[serde(default)]
    pub changelog: crate::changelog::ChangelogMode,
}

impl ConnectorSource {
    /// A source of `connector` with `schema`, planned as `planned`.
    pub fn new(
        connector: impl Into<String>,
        schema: SchemaRef,
        bounded: bool,
        planned: serde_json::Value,
    ) -> Self {
        let connector = connector.into();
        Self {
            display: connector.clone(),
            connector,
            options: Options::new(),
            schema,
            bounded,
            planned,
            batches: vec![],
            changelog: crate::changelog::ChangelogMode::Append,
        }
    }

    /// The same source, declaring that its rows carry `mode`.
    pub fn with_changelog(mut self, mode: crate::changelog::ChangelogMode) -> Self {
        self.changelog = mode;
        self
    }

    /// Show it as `display` in plans.
    pub fn with_display(mut self, display: impl Into<String>) -> Self {
        self.display = display.into();
        self
    }

    /// Keep the options it was planned from (added to those it has).
    pub fn with_options(mut self, options: Options) -> Self {
        self.options.extend(options);
        self.options.remove("connector");
        self
    }

    /// The plan-time description as the factory's type.
    pub fn planned_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_value(self.planned.clone()).map_err(|e| {
            WeirError::plan(format!(
                "the {} source's planned form does not read back: {e}",
                self.connector
            ))
        })
    }

    /// The options as a table descriptor (for a factory planning again).
    pub fn descriptor(&self, name: &str) -> TableDescriptor {
        let mut options = self.options.clone();
        options.insert("connector".into(), self.connector.clone());
        TableDescriptor::new(name, options, Some(Arc::clone(&self.schema)))
    }
}

/// Something of this process a sink writes into (a collect sink's handle):
/// it cannot leave the process, so a job holding one runs only locally.
pub type LocalObject = Arc<dyn Any + Send + Sync>;

/// A sink of a job: a connector with options, planned like a source.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct SinkSpec {
    /// The connector's identifier.
    pub connector: String,
    /// Its options as given (`connector` excluded).
    #[serde(default)]
    pub options: Options,
    /// How plans show it.
    #[serde(default)]
    pub display: String,
    /// The factory's own plan-time description (see [`ConnectorSource`]).
    #[serde(default)]
    pub planned: serde_json::Value,
    /// An object of this process the sink writes into; never shipped.
    #[serde(skip)]
    pub local: Option<LocalObject>,
}

impl fmt::Debug for SinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkSpec")
            .field("connector", &self.connector)
            .field("options", &self.options)
            .field("planned", &self.planned)
            .field("local", &self.local.is_some())
            .finish()
    }
}

impl SinkSpec {
    /// A sink of `connector`, planned as `planned`.
    pub fn new(connector: impl Into<String>, planned: serde_json::Value) -> Self {
        let connector = connector.into();
        Self {
            display: connector.clone(),
            connector,
            options: Options::new(),
            planned,
            local: None,
        }
    }

    /// Show it as `display` in plans.
    pub fn with_display(mut self, display: impl Into<String>) -> Self {
        self.display = display.into();
        self
    }

    /// Keep the options it was planned from (added to those it has).
    pub fn with_options(mut self, options: Options) -> Self {
        self.options.extend(options);
        self.options.remove("connector");
        self
    }

    /// Write into `object` of this process.
    pub fn with_local(mut self, object: LocalObject) -> Self {
        self.local = Some(object);
        self
    }

    /// Short description for plans.
    pub fn describe(&self) -> String {
        self.display.clone()
    }

    /// The plan-time description as the factory's type.
    pub fn planned_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_value(self.planned.clone()).map_err(|e| {
            WeirError::plan(format!(
                "the {} sink's planned form does not read back: {e}",
                self.connector
            ))
        })
    }

    /// The local object as `T`, if it is one.
    pub fn local_as<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.local.as_deref().and_then(|o| o.downcast_ref::<T>())
    }

    /// The options as a table descriptor (for a factory planning again).
    pub fn descriptor(&self, name: &str, schema: SchemaRef) -> TableDescriptor {
        let mut options = self.options.clone();
        options.insert("connector".into(), self.connector.clone());
        TableDescriptor::new(name, options, Some(schema))
    }
}

/// Plans sources and sinks by connector name: the registry of factories a
/// program has (`weir_operators::connectors`), as the DataStream API and
/// the job graph's checks see it.
pub trait ConnectorPlanner: Send + Sync + fmt::Debug {
    /// The source reading `table` (a connector's, maybe with computed
    /// columns giving the declared types).
    fn plan_source(&self, table: &TableDescriptor) -> Result<crate::spec::SourceSpec>;
    /// The sink writing `table` (whose columns are the stream's).
    fn plan_sink(&self, table: &TableDescriptor) -> Result<SinkSpec>;
    /// Whether a source planned elsewhere (a job graph sent as JSON) names
    /// a connector this program has, with options it takes.
    fn check_source(&self, source: &ConnectorSource) -> Result<()>;
    /// As [`Self::check_source`], for a sink.
    fn check_sink(&self, sink: &SinkSpec) -> Result<()>;
}

/// Known names within a small edit distance of `wanted`, closest first.
pub fn near_matches<'a>(wanted: &str, known: impl Iterator<Item = &'a str>) -> Vec<String> {
    let limit = (wanted.len() / 3).max(1);
    let mut close: Vec<(usize, &str)> = known
        .map(|k| (edit_distance(wanted, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= limit)
        .collect();
    close.sort();
    close
        .into_iter()
        .take(3)
        .map(|(_, k)| format!("'{k}'"))
        .collect()
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let keep = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = keep;
        }
    }
    row[b.len()]
}

/// Flink durations: `500 ms`, `5 s`, `10s`, `1 min`, `2 h`, `1 d`, or plain ms.
pub fn parse_duration_ms(v: &str) -> Option<i64> {
    let v = v.trim().to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: i64 = n.parse().ok()?;
    let factor = match unit.trim() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1000,
        "min" | "m" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// Flink memory sizes: `4096`, `64 kb`, `128mb`, `1 gb` (binary units), in bytes.
pub fn parse_memory_size(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "b" | "bytes" => 1,
        "k" | "kb" | "kibibytes" => 1 << 10,
        "m" | "mb" | "mebibytes" => 1 << 20,
        "g" | "gb" | "gibibytes" => 1 << 30,
        "t" | "tb" | "tebibytes" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// `2023-11-14 22:13:20[.123]` (UTC; `T` may separate date and time, the
/// time may be left out) or ms since the epoch. Dates and times that do not
/// exist (month 13, 25:00, February 30) are refused, not rolled over.
pub fn parse_timestamp_ms(v: &str) -> Option<i64> {
    use chrono::{NaiveDate, NaiveDateTime};
    let v = v.trim();
    if let Ok(ms) = v.parse::<i64>() {
        return Some(ms);
    }
    let parsed = ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(v, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(v, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })?;
    Some(parsed.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_sizes_and_timestamps() {
        assert_eq!(parse_duration_ms("5 s"), Some(5000));
        assert_eq!(parse_duration_ms("10min"), Some(600_000));
        assert_eq!(parse_duration_ms("250"), Some(250));
        assert_eq!(parse_duration_ms("5 parsecs"), None);
        assert_eq!(parse_memory_size("128 mb"), Some(128 << 20));
        assert_eq!(parse_memory_size("4096"), Some(4096));
        assert_eq!(parse_memory_size("1 parsec"), None);
        assert_eq!(
            parse_timestamp_ms("2023-11-14 22:13:20"),
            Some(1_700_000_000_000)
        );
        assert_eq!(parse_timestamp_ms("1970-01-01 00:00:01.5"), Some(1500));
        assert_eq!(parse_timestamp_ms("1700000000000"), Some(1_700_000_000_000));
        assert_eq!(parse_timestamp_ms("1970-01-02"), Some(86_400_000));
        assert_eq!(parse_timestamp_ms("1970-01-01T00:00:00.123"), Some(123));
        // Not a panic on a multi-byte fraction, and no roll-over of
        // impossible fields.
        assert_eq!(parse_timestamp_ms("2026-01-01 00:00:00.12\u{e9}"), None);
        assert_eq!(parse_timestamp_ms("2026-13-45 99:99:99"), None);
        assert_eq!(parse_timestamp_ms("2026-02-30 00:00:00"), None);
        assert_eq!(parse_timestamp_ms("2026-01-01 24:00:00"), None);
    }

    #[test]
    fn options_are_checked_against_the_declaration() {
        let declared = vec![
            ConnectorOption::required("path", OptionKind::Text, "a folder"),
            ConnectorOption::optional("rows", OptionKind::Integer, None, "how many"),
            ConnectorOption::prefix("fields.", "per column"),
        ];
        let table = |pairs: &[(&str, &str)]| {
            let mut o: Options = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            o.insert("connector".into(), "x".into());
            TableDescriptor::new("t", o, None)
        };
        assert!(
            check_options(&table(&[("path", "/a"), ("fields.a.kind", "x")]), &declared).is_ok()
        );
        let e = check_options(&table(&[("path", "/a"), ("rowz", "1")]), &declared)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown option 'rowz'") && e.contains("'rows'"),
            "{e}"
        );
        let e = check_options(&table(&[("path", "/a"), ("rows", "many")]), &declared)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("option 'rows' = 'many': expected integer"),
            "{e}"
        );
        let e = check_options(&table(&[]), &declared)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs the option 'path'"), "{e}");
    }
}
