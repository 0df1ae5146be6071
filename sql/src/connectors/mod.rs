//! Table connectors: what `WITH ('connector' = …)` reads from and writes
//! to, resolved through a registry of factories (Flink's factory model).
//!
//! A [`ConnectorFactory`] names itself (the `'connector'` value), declares
//! its options — required or optional, with a type, a default and a line of
//! description — and builds the source or sink of a table. The registry
//! checks every table's options against that declaration before the
//! factory sees them (an unknown option is refused with the near names, a
//! value of the wrong type naming the option), `weir connectors` prints the
//! declarations, and a connector written in Rust is registered with
//! [`ConnectorRegistry::register`] (through `SqlSession::connectors_mut`)
//! and used from SQL like a built-in one. Option names follow Flink's
//! where Flink has the connector.
//!
//! Built in: `datagen`, `nexmark` (`generators.rs`), `filesystem`
//! (`filesystem.rs`), `print`, `blackhole`, `flight` (`sinks.rs`).

mod filesystem;
mod generators;
mod sinks;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion_common::{Column, DFSchema};
use datafusion_expr::{Expr, cast, lit, when};
use weir_core::spec::{ComputedSourceSpec, MemorySourceSpec, SinkSpec, SourceSpec};
use weir_core::{Result, WeirError};

use crate::catalog::TableEntry;
use crate::lower::physical;

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
    /// One of these words (any case).
    OneOf(&'static [&'static str]),
}

impl OptionKind {
    fn describe(&self) -> String {
        match self {
            OptionKind::Text => "text".into(),
            OptionKind::Integer => "integer".into(),
            OptionKind::Boolean => "boolean".into(),
            OptionKind::Duration => "duration".into(),
            OptionKind::Timestamp => "timestamp".into(),
            OptionKind::OneOf(words) => words.join(" | "),
        }
    }

    /// Why `value` is not of this kind, if it is not.
    fn check(&self, value: &str) -> Option<String> {
        let v = value.trim();
        let ok = match self {
            OptionKind::Text => true,
            OptionKind::Integer => v.parse::<i64>().is_ok() || v.parse::<u64>().is_ok(),
            OptionKind::Boolean => {
                v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false")
            }
            OptionKind::Duration => parse_duration_ms(v).is_some(),
            OptionKind::Timestamp => parse_timestamp_ms(v).is_some(),
            OptionKind::OneOf(words) => words.iter().any(|w| w.eq_ignore_ascii_case(v)),
        };
        (!ok).then(|| format!("expected {}", self.describe()))
    }
}

/// One option a connector takes.
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
}

/// Builds the sources and sinks of one connector (Flink's
/// `DynamicTableSourceFactory` and `DynamicTableSinkFactory` in one).
///
/// Contract: the registry has checked the table's options against
/// [`Self::options`] (names, required ones present, value types) before any
/// `create_*` call. A factory returns `None` from what it does not do (a
/// sink-only connector from `create_source`); errors name the table
/// (`table 'x': …`) and the option.
pub trait ConnectorFactory: Send + Sync {
    /// The `'connector'` value, lower case.
    fn identifier(&self) -> &str;
    /// What it reads or writes, in a line.
    fn description(&self) -> &str;
    /// The options it takes (besides `connector`).
    fn options(&self) -> Vec<ConnectorOption>;
    /// Whether tables of it can be read (it builds sources).
    fn is_source(&self) -> bool {
        false
    }
    /// Whether tables of it can be written (it builds sinks).
    fn is_sink(&self) -> bool {
        false
    }
    /// The source reading `table`, producing its physical columns in order.
    fn create_source(&self, _table: &TableEntry) -> Option<Result<SourceSpec>> {
        None
    }
    /// The sink writing `table`.
    fn create_sink(&self, _table: &TableEntry) -> Option<Result<SinkSpec>> {
        None
    }
    /// Whether its sink takes a changelog (updating results with their
    /// `_op` column); append-only by default.
    fn accepts_changelog(&self, _table: &TableEntry) -> Result<bool> {
        Ok(false)
    }
    /// All rows of a bounded table, read now (a lookup join's side table).
    fn read_bounded(&self, _table: &TableEntry) -> Option<Result<MemorySourceSpec>> {
        None
    }
}

/// The connectors a session knows, by identifier.
#[derive(Clone)]
pub struct ConnectorRegistry {
    factories: BTreeMap<String, Arc<dyn ConnectorFactory>>,
}

impl Default for ConnectorRegistry {
    /// Weir's built-in connectors.
    fn default() -> Self {
        let mut r = Self {
            factories: BTreeMap::new(),
        };
        r.register(Arc::new(generators::Datagen));
        r.register(Arc::new(generators::Nexmark));
        r.register(Arc::new(filesystem::Filesystem));
        r.register(Arc::new(sinks::Print));
        r.register(Arc::new(sinks::Blackhole));
        r.register(Arc::new(sinks::Flight));
        r
    }
}

impl std::fmt::Debug for ConnectorRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.factories.keys()).finish()
    }
}

impl ConnectorRegistry {
    /// Add (or replace) a connector under its identifier.
    pub fn register(&mut self, factory: Arc<dyn ConnectorFactory>) {
        self.factories
            .insert(factory.identifier().to_ascii_lowercase(), factory);
    }

    /// The connectors, by identifier.
    pub fn factories(&self) -> impl Iterator<Item = &Arc<dyn ConnectorFactory>> {
        self.factories.values()
    }

    /// Every connector with its options, as `weir connectors` prints them.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for f in self.factories.values() {
            let roles = match (f.is_source(), f.is_sink()) {
                (true, true) => "source and sink",
                (true, false) => "source",
                _ => "sink",
            };
            let _ = writeln!(out, "{} ({roles}): {}", f.identifier(), f.description());
            for o in f.options() {
                let key = if o.prefix {
                    format!("{}*", o.key)
                } else {
                    o.key.to_string()
                };
                let need = if o.required {
                    "required".to_string()
                } else {
                    match o.default {
                        Some(d) => format!("default {d}"),
                        None => "optional".to_string(),
                    }
                };
                let _ = writeln!(
                    out,
                    "  {key:<32} {:<20} {need:<18} {}",
                    o.kind.describe(),
                    o.description
                );
            }
        }
        out
    }

    /// The factory of `t`'s connector, its options checked against what
    /// the factory declares.
    fn factory(&self, t: &TableEntry) -> Result<&Arc<dyn ConnectorFactory>> {
        let name = connector(t)?;
        let Some(f) = self.factories.get(&name) else {
            let near =
                crate::catalog::near_matches(&name, self.factories.keys().map(String::as_str));
            return Err(table_err(
                t,
                format!(
                    "unknown connector '{name}'{}; the connectors are {}",
                    match near.as_slice() {
                        [] => String::new(),
                        n => format!(" (did you mean {}?)", n.join(", ")),
                    },
                    self.factories
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        check_options(t, &f.options())?;
        Ok(f)
    }

    /// Check a table's connector and options without touching files (a
    /// filesystem table may be a sink whose folder does not exist yet);
    /// a source-only connector is also built, as it reads nothing.
    pub(crate) fn validate(&self, t: &TableEntry) -> Result<()> {
        let f = self.factory(t)?;
        if f.is_sink() {
            return Ok(());
        }
        f.create_source(t).transpose().map(drop)
    }

    /// The source a table reads from, producing its physical columns in order.
    pub(crate) fn source(&self, t: &TableEntry) -> Result<SourceSpec> {
        let f = self.factory(t)?;
        f.create_source(t).unwrap_or_else(|| {
            Err(table_err(
                t,
                format!(
                    "connector '{}' is a sink; it cannot be read from",
                    f.identifier()
                ),
            ))
        })
    }

    /// The sink a table writes to.
    pub(crate) fn sink(&self, t: &TableEntry) -> Result<SinkSpec> {
        let f = self.factory(t)?;
        f.create_sink(t).unwrap_or_else(|| {
            Err(table_err(
                t,
                format!(
                    "connector '{}' is a source; it cannot be written to",
                    f.identifier()
                ),
            ))
        })
    }

    /// Whether a sink table takes a changelog.
    pub(crate) fn accepts_changelog(&self, t: &TableEntry) -> Result<bool> {
        self.factory(t)?.accepts_changelog(t)
    }

    /// All rows of a bounded table (a lookup join's side table).
    pub(crate) fn read_all(&self, t: &TableEntry) -> Result<MemorySourceSpec> {
        let f = self.factory(t)?;
        f.read_bounded(t).unwrap_or_else(|| {
            Err(table_err(
                t,
                format!(
                    "a lookup join reads a bounded table; connector '{}' cannot be read whole",
                    f.identifier()
                ),
            ))
        })
    }
}

fn table_err(t: &TableEntry, msg: impl std::fmt::Display) -> WeirError {
    WeirError::plan(format!("table '{}': {msg}", t.definition.name))
}

fn connector(t: &TableEntry) -> Result<String> {
    t.option("connector")
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| table_err(t, "no 'connector' option in WITH (…)"))
}

/// A table's options against what its connector declares: every option
/// known (others refused with the near names and the known list), every
/// required one given, every value of its declared kind.
fn check_options(t: &TableEntry, declared: &[ConnectorOption]) -> Result<()> {
    let known: Vec<&str> = declared
        .iter()
        .filter(|o| !o.prefix)
        .map(|o| o.key)
        .collect();
    for (k, v) in &t.definition.options {
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
            let near = crate::catalog::near_matches(k, known.iter().copied());
            let mut listed: Vec<String> = known.iter().map(|k| k.to_string()).collect();
            listed.extend(
                declared
                    .iter()
                    .filter(|o| o.prefix)
                    .map(|o| format!("{}*", o.key)),
            );
            return Err(table_err(
                t,
                format!(
                    "unknown option '{k}' for connector '{}'{}; known options: {}",
                    connector(t)?,
                    match near.as_slice() {
                        [] => String::new(),
                        n => format!(" (did you mean {}?)", n.join(", ")),
                    },
                    if listed.is_empty() {
                        "none".to_string()
                    } else {
                        listed.join(", ")
                    }
                ),
            ));
        };
        if let Some(why) = option.kind.check(v) {
            return Err(table_err(t, format!("option '{k}' = '{v}': {why}")));
        }
    }
    for o in declared.iter().filter(|o| o.required) {
        required(t, o.key)?;
    }
    Ok(())
}

fn parse_num<T: std::str::FromStr>(t: &TableEntry, key: &str, v: &str) -> Result<T> {
    v.trim()
        .parse()
        .map_err(|_| table_err(t, format!("option '{key}' = '{v}' is not a valid number")))
}

fn option_num<T: std::str::FromStr>(t: &TableEntry, key: &str) -> Result<Option<T>> {
    t.option(key).map(|v| parse_num(t, key, v)).transpose()
}

/// Flink durations: `500 ms`, `5 s`, `10s`, `1 min`, `2 h`, `1 d`, or plain ms.
pub(crate) fn parse_duration_ms(v: &str) -> Option<i64> {
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

/// `2023-11-14 22:13:20[.123]` (UTC; `T` may separate date and time, the
/// time may be left out) or ms since the epoch. Dates and times that do not
/// exist (month 13, 25:00, February 30) are refused, not rolled over.
fn parse_timestamp_ms(v: &str) -> Option<i64> {
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

fn required<'t>(t: &'t TableEntry, key: &str) -> Result<&'t str> {
    t.option(key).ok_or_else(|| {
        table_err(
            t,
            format!(
                "connector '{}' needs the option '{key}'",
                connector(t).unwrap_or_default()
            ),
        )
    })
}

fn format(t: &TableEntry) -> Result<String> {
    let f = required(t, "format")?.to_ascii_lowercase();
    match f.as_str() {
        "parquet" | "csv" => Ok(f),
        "json" => Err(table_err(
            t,
            "format 'json' is not supported yet; use 'parquet' or 'csv'",
        )),
        other => Err(table_err(
            t,
            format!("unknown format '{other}'; supported: parquet, csv"),
        )),
    }
}

/// Reads `inner` and yields the table's physical columns by name, cast to
/// the declared types (ROW fields matched by name, extra ones dropped).
fn conform_source(t: &TableEntry, inner: SourceSpec) -> Result<SourceSpec> {
    let have = inner.schema();
    if have.fields() == t.schema.fields() {
        return Ok(inner);
    }
    let df = DFSchema::try_from(have.as_ref().clone())?;
    let exprs = t
        .schema
        .fields()
        .iter()
        .map(|want| {
            let Ok(idx) = have.index_of(want.name()) else {
                return Err(table_err(
                    t,
                    format!(
                        "column '{}' is declared but the {} source has none; it has: {}",
                        want.name(),
                        connector(t)?,
                        have.fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            };
            let e = Expr::Column(Column::new_unqualified(have.field(idx).name()));
            let e = conform_expr(
                t,
                e,
                have.field(idx).data_type(),
                want.data_type(),
                want.name(),
            )?;
            Ok((physical(&e, &df)?, want.name().clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(SourceSpec::Computed(ComputedSourceSpec {
        inner: Box::new(inner),
        exprs,
    }))
}

fn conform_expr(
    t: &TableEntry,
    e: Expr,
    from: &DataType,
    to: &DataType,
    path: &str,
) -> Result<Expr> {
    if from == to {
        return Ok(e);
    }
    match (from, to) {
        (DataType::Struct(have), DataType::Struct(want)) => {
            let mut args = vec![];
            for w in want {
                let Some((_, h)) = have.find(w.name()) else {
                    return Err(table_err(
                        t,
                        format!(
                            "field '{path}.{}' is declared but the source's ROW has none",
                            w.name()
                        ),
                    ));
                };
                let field =
                    datafusion_functions::core::expr_fn::get_field(e.clone(), w.name().as_str());
                args.push(lit(w.name().as_str()));
                args.push(conform_expr(
                    t,
                    field,
                    h.data_type(),
                    w.data_type(),
                    &format!("{path}.{}", w.name()),
                )?);
            }
            let row = datafusion_functions::core::expr_fn::named_struct(args);
            Ok(when(e.is_not_null(), row).end()?)
        }
        _ => Ok(cast(e, to.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_timestamps() {
        assert_eq!(parse_duration_ms("5 s"), Some(5000));
        assert_eq!(parse_duration_ms("10min"), Some(600_000));
        assert_eq!(parse_duration_ms("250"), Some(250));
        assert_eq!(parse_duration_ms("5 parsecs"), None);
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
}
