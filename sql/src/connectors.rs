//! Table connectors: what `WITH ('connector' = …)` reads from and writes to.
//! Option names follow Flink's where Flink has the connector.
//!
//! | connector    | source | sink | options |
//! |--------------|--------|------|---------|
//! | `datagen`    | yes    |      | `number-of-rows`, `rows-per-second` (`unlimited` for no limit), `fields.F.kind` = `random`/`sequence`, `fields.F.start`/`end` (sequence), `fields.F.min`/`max`, `fields.F.length` (strings), `fields.F.max-past` (timestamps lag up to this), `seed` |
//! | `nexmark`    | yes    |      | `events.num`, `first-event.rate`/`tps`, `max-emit-speed`, `person.proportion`, `auction.proportion`, `bid.proportion`, `base-time` |
//! | `filesystem` | yes    | yes  | `path`, `format` = `parquet` / `csv`, `csv.field-delimiter`, `csv.header` |
//! | `print`      |        | yes  | |
//! | `blackhole`  |        | yes  | |
//! | `flight`     |        | yes  | `name` (what Flight clients list; default the table name) |
//!
//! Datagen timestamps are deterministic: row `n` of a `TIMESTAMP` column
//! is at `fields.F.start` (default: when the job is planned) plus
//! `n / rows-per-second` seconds, moved back by a pseudo-random lag of up
//! to `fields.F.max-past`; so replays after a failure repeat the same rows.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::{Column, DFSchema};
use datafusion_expr::{Expr, cast, lit, when};
use weir_core::nexmark::NexmarkConfig;
use weir_core::spec::{ColumnGen, ComputedSourceSpec, GeneratorSpec, SinkSpec, SourceSpec};
use weir_core::{Result, WeirError};

use crate::catalog::TableEntry;
use crate::lower::physical;

fn table_err(t: &TableEntry, msg: impl std::fmt::Display) -> WeirError {
    WeirError::plan(format!("table '{}': {msg}", t.definition.name))
}

fn connector(t: &TableEntry) -> Result<String> {
    t.option("connector")
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| table_err(t, "no 'connector' option in WITH (…)"))
}

/// Options a connector knows; others are rejected with the known list.
fn check_options(t: &TableEntry, known: &[&str], prefixes: &[&str]) -> Result<()> {
    for (k, _) in &t.definition.options {
        if k == "connector"
            || known.contains(&k.as_str())
            || prefixes.iter().any(|p| k.starts_with(p))
        {
            continue;
        }
        let near = crate::catalog::near_matches(k, known.iter().copied());
        return Err(table_err(
            t,
            format!(
                "unknown option '{k}' for connector '{}'{}; known options: {}",
                connector(t)?,
                match near.as_slice() {
                    [] => String::new(),
                    n => format!(" (did you mean {}?)", n.join(", ")),
                },
                known.join(", ")
            ),
        ));
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

/// Check a table's connector and options without touching files (a
/// filesystem table may be a sink whose folder does not exist yet).
pub(crate) fn validate(t: &TableEntry) -> Result<()> {
    match connector(t)?.as_str() {
        "datagen" | "nexmark" => source(t).map(drop),
        "filesystem" => {
            check_options(t, FILESYSTEM_OPTIONS, &[])?;
            required(t, "path")?;
            format(t).map(drop)
        }
        _ => sink(t).map(drop),
    }
}

const FILESYSTEM_OPTIONS: &[&str] = &[
    "path",
    "format",
    "csv.field-delimiter",
    "csv.header",
    "source.monitor-interval",
    "sink.rolling-policy.file-size",
    "sink.changelog-mode",
];

/// Whether a sink table takes a changelog (updating results, with their
/// `_op` column): print, blackhole and flight do; a filesystem table only
/// with `'sink.changelog-mode' = 'retract'` (default `append`).
pub(crate) fn accepts_changelog(t: &TableEntry) -> Result<bool> {
    Ok(match connector(t)?.as_str() {
        "filesystem" => match t
            .option("sink.changelog-mode")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("append") => false,
            Some("retract") => true,
            Some(other) => {
                return Err(table_err(
                    t,
                    format!("sink.changelog-mode = '{other}': expected 'append' or 'retract'"),
                ));
            }
        },
        _ => true,
    })
}

/// The source a table reads from, producing its physical columns in order.
pub(crate) fn source(t: &TableEntry) -> Result<SourceSpec> {
    match connector(t)?.as_str() {
        "datagen" => datagen(t),
        "nexmark" => nexmark(t),
        "filesystem" => filesystem_source(t),
        c @ ("print" | "blackhole" | "flight") => Err(table_err(
            t,
            format!("connector '{c}' is a sink; it cannot be read from"),
        )),
        other => Err(unknown_connector(t, other)),
    }
}

fn unknown_connector(t: &TableEntry, name: &str) -> WeirError {
    let known = [
        "datagen",
        "nexmark",
        "filesystem",
        "print",
        "blackhole",
        "flight",
    ];
    let near = crate::catalog::near_matches(name, known.iter().copied());
    table_err(
        t,
        format!(
            "unknown connector '{name}'{}; Weir's connectors are {}",
            match near.as_slice() {
                [] => String::new(),
                n => format!(" (did you mean {}?)", n.join(", ")),
            },
            known.join(", ")
        ),
    )
}

/// The sink a table writes to.
pub(crate) fn sink(t: &TableEntry) -> Result<SinkSpec> {
    match connector(t)?.as_str() {
        "print" => {
            check_options(t, &[], &[])?;
            Ok(SinkSpec::Print)
        }
        "blackhole" => {
            check_options(t, &[], &[])?;
            Ok(SinkSpec::Blackhole)
        }
        "flight" => {
            check_options(t, &["name"], &[])?;
            Ok(SinkSpec::Flight {
                name: t
                    .option("name")
                    .map(str::to_string)
                    .unwrap_or_else(|| t.definition.name.to_string()),
            })
        }
        "filesystem" => {
            check_options(t, FILESYSTEM_OPTIONS, &[])?;
            let dir = std::path::PathBuf::from(required(t, "path")?);
            match format(t)?.as_str() {
                "parquet" => Ok(SinkSpec::Parquet { dir }),
                "csv" => Ok(SinkSpec::Csv { dir }),
                _ => unreachable!("format() checks"),
            }
        }
        c @ ("datagen" | "nexmark") => Err(table_err(
            t,
            format!("connector '{c}' is a source; it cannot be written to"),
        )),
        other => Err(unknown_connector(t, other)),
    }
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

/// All rows of a bounded table (a lookup join's side table): its files
/// read now, as the table's physical columns.
pub(crate) fn read_all(t: &TableEntry) -> Result<weir_core::spec::MemorySourceSpec> {
    if connector(t)? != "filesystem" {
        return Err(table_err(
            t,
            "a lookup join reads a bounded table: connector 'filesystem'",
        ));
    }
    let path = required(t, "path")?;
    let context = |e: &dyn std::fmt::Display| table_err(t, format!("reading {path}: {e}"));
    let mut batches = vec![];
    let files: Vec<std::path::PathBuf> = if std::path::Path::new(path).is_dir() {
        let mut v: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| context(&e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        v.sort();
        v
    } else {
        vec![path.into()]
    };
    for f in files {
        let file = std::fs::File::open(&f).map_err(|e| context(&e))?;
        match format(t)?.as_str() {
            "parquet" => {
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .and_then(|b| b.build())
                        .map_err(|e| context(&e))?;
                for b in reader {
                    let b = b.map_err(|e| context(&e))?;
                    let columns = t
                        .schema
                        .fields()
                        .iter()
                        .map(|want| {
                            let c = b.column_by_name(want.name()).ok_or_else(|| {
                                table_err(
                                    t,
                                    format!("{}: no column '{}'", f.display(), want.name()),
                                )
                            })?;
                            Ok(arrow::compute::cast(c, want.data_type())?)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    batches.push(arrow::record_batch::RecordBatch::try_new(
                        Arc::clone(&t.schema),
                        columns,
                    )?);
                }
            }
            _ => {
                let header = t
                    .option("csv.header")
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                let reader = arrow::csv::ReaderBuilder::new(Arc::clone(&t.schema))
                    .with_header(header)
                    .build(file)
                    .map_err(|e| context(&e))?;
                for b in reader {
                    batches.push(b.map_err(|e| table_err(t, format!("{}: {e}", f.display())))?);
                }
            }
        }
    }
    Ok(weir_core::spec::MemorySourceSpec::new(
        Arc::clone(&t.schema),
        batches,
    ))
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

fn nexmark(t: &TableEntry) -> Result<SourceSpec> {
    check_options(
        t,
        &[
            "events.num",
            "first-event.rate",
            "next-event.rate",
            "tps",
            "max-emit-speed",
            "person.proportion",
            "auction.proportion",
            "bid.proportion",
            "base-time",
            "keep-alive",
            "stop-at",
        ],
        &[],
    )?;
    let mut c = NexmarkConfig {
        events: option_num::<u64>(t, "events.num")?.filter(|&n| n > 0),
        ..Default::default()
    };
    if let Some(tps) = option_num::<u64>(t, "tps")?.or(option_num(t, "first-event.rate")?) {
        c.tps = tps;
    }
    let max_speed = t
        .option("max-emit-speed")
        .map(|v| v.eq_ignore_ascii_case("true"))
        .unwrap_or(false);
    c.rate = (!max_speed).then_some(c.tps);
    if let Some(p) = option_num(t, "person.proportion")? {
        c.person_proportion = p;
    }
    if let Some(p) = option_num(t, "auction.proportion")? {
        c.auction_proportion = p;
    }
    if let Some(p) = option_num(t, "bid.proportion")? {
        c.bid_proportion = p;
    }
    if let Some(b) = t.option("base-time") {
        c.base_time_ms = parse_timestamp_ms(b).ok_or_else(|| {
            table_err(t, format!("option 'base-time' = '{b}' is not a timestamp"))
        })?;
    }
    c.validate().map_err(|e| table_err(t, e))?;
    conform_source(t, SourceSpec::Generator(GeneratorSpec::nexmark(c)))
}

fn filesystem_source(t: &TableEntry) -> Result<SourceSpec> {
    check_options(t, FILESYSTEM_OPTIONS, &[])?;
    let path = required(t, "path")?;
    let context = |e: WeirError| table_err(t, e);
    match format(t)?.as_str() {
        "parquet" => {
            let spec = weir_operators::sources::parquet_source(&[path], None).map_err(context)?;
            conform_source(t, spec)
        }
        _ => {
            let delimiter = match t.option("csv.field-delimiter") {
                None => b',',
                Some(d) if d.len() == 1 => d.as_bytes()[0],
                Some("\\t") => b'\t',
                Some(d) => {
                    return Err(table_err(
                        t,
                        format!("csv.field-delimiter must be one character, got '{d}'"),
                    ));
                }
            };
            let header = t
                .option("csv.header")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let options = weir_operators::sources::CsvOptions {
                schema: Some(Arc::clone(&t.schema)),
                has_header: header,
                delimiter,
            };
            weir_operators::sources::csv_source(&[path], options).map_err(context)
        }
    }
}

fn datagen(t: &TableEntry) -> Result<SourceSpec> {
    check_options(
        t,
        &["number-of-rows", "rows-per-second", "seed"],
        &["fields."],
    )?;
    let rate = match t.option("rows-per-second") {
        Some(v) if v.eq_ignore_ascii_case("unlimited") => None,
        Some(v) => Some(parse_num::<u64>(t, "rows-per-second", v)?),
        None => Some(10_000),
    };
    if rate == Some(0) {
        return Err(table_err(
            t,
            "rows-per-second must be positive (or 'unlimited')",
        ));
    }
    let mut rows: Option<u64> = option_num(t, "number-of-rows")?;
    let mut spec = GeneratorSpec::new(None);
    spec.seed = option_num(t, "seed")?.unwrap_or(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut exprs = vec![];
    for field in t.schema.fields() {
        let name = field.name();
        let opt = |k: &str| t.option(&format!("fields.{name}.{k}"));
        let num = |k: &str| -> Result<Option<f64>> {
            opt(k)
                .map(|v| parse_num::<f64>(t, &format!("fields.{name}.{k}"), v))
                .transpose()
        };
        let kind = opt("kind").unwrap_or("random").to_ascii_lowercase();
        let ty = field.data_type();
        let generated = Expr::Column(Column::new_unqualified(name));
        let (generator, expr) = match (kind.as_str(), ty) {
            ("sequence", ty) if ty.is_integer() => {
                let start = num("start")?.ok_or_else(|| {
                    table_err(
                        t,
                        format!(
                            "fields.{name}.kind = 'sequence' needs fields.{name}.start and .end"
                        ),
                    )
                })? as i64;
                let end = num("end")?.ok_or_else(|| {
                    table_err(
                        t,
                        format!("fields.{name}.kind = 'sequence' needs fields.{name}.end"),
                    )
                })? as i64;
                if end < start {
                    return Err(table_err(
                        t,
                        format!("fields.{name}: end {end} is before start {start}"),
                    ));
                }
                let count = (end - start + 1) as u64;
                rows = Some(rows.map_or(count, |r| r.min(count)));
                (ColumnGen::Sequence, generated + lit(start))
            }
            ("sequence", DataType::Utf8 | DataType::LargeUtf8) => {
                let start = num("start")?.unwrap_or(0.0) as i64;
                if let Some(end) = num("end")? {
                    let count = (end as i64 - start + 1).max(0) as u64;
                    rows = Some(rows.map_or(count, |r| r.min(count)));
                }
                (ColumnGen::Sequence, generated + lit(start))
            }
            ("random", ty) if ty.is_integer() => {
                let (lo, hi) = integer_range(ty);
                let min = num("min")?.map_or(lo, |v| v as i64);
                let max = num("max")?.map_or(hi, |v| v as i64);
                if min > max {
                    return Err(table_err(
                        t,
                        format!("fields.{name}: min {min} is above max {max}"),
                    ));
                }
                (ColumnGen::UniformInt { min, max }, generated)
            }
            (
                "random",
                DataType::Float32
                | DataType::Float64
                | DataType::Decimal128(..)
                | DataType::Decimal256(..),
            ) => {
                let min = num("min")?.unwrap_or(0.0);
                let max = num("max")?.unwrap_or(1.0);
                if min.partial_cmp(&max) != Some(std::cmp::Ordering::Less) {
                    return Err(table_err(
                        t,
                        format!("fields.{name}: min {min} must be below max {max}"),
                    ));
                }
                (ColumnGen::UniformFloat { min, max }, generated)
            }
            ("random", DataType::Boolean) => (ColumnGen::UniformInt { min: 0, max: 1 }, generated),
            ("random", DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => {
                let length = num("length")?.unwrap_or(100.0) as usize;
                (ColumnGen::RandomString { length }, generated)
            }
            ("random", DataType::Timestamp(_, _)) => {
                let start = match opt("start") {
                    Some(v) => parse_timestamp_ms(v).ok_or_else(|| {
                        table_err(t, format!("fields.{name}.start = '{v}' is not a timestamp"))
                    })?,
                    None => now,
                };
                let lag = match opt("max-past") {
                    Some(v) => parse_duration_ms(v).ok_or_else(|| {
                        table_err(
                            t,
                            format!("fields.{name}.max-past = '{v}' is not a duration"),
                        )
                    })?,
                    None => 0,
                };
                (
                    ColumnGen::EventTime {
                        start_ms: start,
                        events_per_second: rate.unwrap_or(1000),
                        max_out_of_orderness_ms: lag,
                    },
                    generated,
                )
            }
            (k, ty) if k == "random" || k == "sequence" => {
                return Err(table_err(
                    t,
                    format!("datagen cannot generate {kind} values of type {ty} (column '{name}')"),
                ));
            }
            (k, _) => {
                return Err(table_err(
                    t,
                    format!(
                        "fields.{name}.kind = '{k}': datagen kinds are 'random' and 'sequence'"
                    ),
                ));
            }
        };
        spec.columns.push((name.clone(), generator));
        exprs.push((expr, field));
    }
    spec.num_events = rows;
    spec.rate = rate;
    let inner = SourceSpec::Generator(spec);
    let gen_schema: SchemaRef = inner.schema();
    let df = DFSchema::try_from(gen_schema.as_ref().clone())?;
    let exprs = exprs
        .into_iter()
        .map(|(e, field)| {
            use datafusion_expr::ExprSchemable;
            let e = if &e.get_type(&df)? == field.data_type() {
                e
            } else {
                cast(e, field.data_type().clone())
            };
            Ok((physical(&e, &df)?, field.name().clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(SourceSpec::Computed(ComputedSourceSpec {
        inner: Box::new(inner),
        exprs,
    }))
}

fn integer_range(t: &DataType) -> (i64, i64) {
    match t {
        DataType::Int8 => (i8::MIN as i64, i8::MAX as i64),
        DataType::Int16 => (i16::MIN as i64, i16::MAX as i64),
        DataType::Int32 => (i32::MIN as i64, i32::MAX as i64),
        DataType::UInt8 => (0, u8::MAX as i64),
        DataType::UInt16 => (0, u16::MAX as i64),
        DataType::UInt32 => (0, u32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
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
