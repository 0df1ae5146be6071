//! The generator connectors: `datagen` (Flink's) and `nexmark` (the
//! benchmark's events).
//!
//! Datagen timestamps are deterministic: row `n` of a `TIMESTAMP` column
//! is at `fields.F.start` (default: when the job is planned) plus
//! `n / rows-per-second` seconds, moved back by a pseudo-random lag of up
//! to `fields.F.max-past`; so replays after a failure repeat the same rows.

use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::{Column, DFSchema};
use datafusion_expr::{Expr, cast, lit};
use weir_core::Result;
use weir_core::connector::{
    ConnectorOption, ConnectorSource, OptionKind, TableDescriptor, parse_duration_ms,
    parse_timestamp_ms,
};
use weir_core::spec::{ComputedSourceSpec, SourceSpec};

use super::specs::{ColumnGen, GeneratorSpec};
use super::{ConnectorFactory, physical, planned_or};
use crate::OperatorContext;
use crate::nexmark::NexmarkConfig;
use crate::sources::{GeneratorSource, Source};

/// `'connector' = 'datagen'`.
pub(super) struct Datagen;

impl ConnectorFactory for Datagen {
    fn identifier(&self) -> &str {
        "datagen"
    }

    fn is_source(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "generated rows: sequences and random values per column, at a rate"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        vec![
            ConnectorOption::optional(
                "number-of-rows",
                OptionKind::Integer,
                None,
                "rows in all; unbounded without it (a sequence bounds it too)",
            ),
            ConnectorOption::optional(
                "rows-per-second",
                OptionKind::Text,
                Some("10000"),
                "the table's rate over all subtasks, or 'unlimited'",
            ),
            ConnectorOption::optional(
                "seed",
                OptionKind::Integer,
                Some("0"),
                "seed of the random columns",
            ),
            ConnectorOption::prefix(
                "fields.",
                "per column: fields.F.kind ('random' | 'sequence'), .start, .end, .min, .max, .length, .max-past",
            ),
        ]
    }

    fn plan_source(&self, table: &TableDescriptor) -> Option<Result<SourceSpec>> {
        Some(datagen(table))
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        generator_of(source)?.validate()
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        Some(open_generator(source, ctx))
    }
}

/// `'connector' = 'nexmark'`.
pub(super) struct Nexmark;

impl ConnectorFactory for Nexmark {
    fn identifier(&self) -> &str {
        "nexmark"
    }

    fn is_source(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "the Nexmark benchmark's Person, Auction and Bid events"
    }

    fn options(&self) -> Vec<ConnectorOption> {
        use OptionKind::{Boolean, Duration, Integer, MemorySize, Text, Timestamp};
        vec![
            ConnectorOption::optional(
                "events.num",
                Integer,
                None,
                "events in all; unbounded without it",
            ),
            ConnectorOption::optional(
                "first-event.rate",
                Integer,
                Some("10000"),
                "events per second of event time",
            ),
            ConnectorOption::optional(
                "next-event.rate",
                Integer,
                None,
                "accepted for Flink's DDL; the rate is first-event.rate",
            ),
            ConnectorOption::optional(
                "tps",
                Integer,
                None,
                "events per second (Flink's older name)",
            ),
            ConnectorOption::optional(
                "max-emit-speed",
                Boolean,
                Some("false"),
                "generate as fast as possible",
            ),
            ConnectorOption::optional(
                "person.proportion",
                Integer,
                Some("1"),
                "share of Person events",
            ),
            ConnectorOption::optional(
                "auction.proportion",
                Integer,
                Some("3"),
                "share of Auction events",
            ),
            ConnectorOption::optional("bid.proportion", Integer, Some("46"), "share of Bid events"),
            ConnectorOption::optional(
                "bid.hot-ratio.auctions",
                Integer,
                Some("2"),
                "a bid goes to a hot auction with probability 1 - 1/ratio",
            ),
            ConnectorOption::optional(
                "bid.hot-ratio.bidders",
                Integer,
                Some("4"),
                "a bid comes from a hot bidder with probability 1 - 1/ratio",
            ),
            ConnectorOption::optional(
                "auction.hot-ratio.sellers",
                Integer,
                Some("4"),
                "an auction is a hot seller's with probability 1 - 1/ratio",
            ),
            ConnectorOption::optional(
                "person.avg-size",
                MemorySize,
                Some("200b"),
                "average size a person's extra pads to",
            ),
            ConnectorOption::optional(
                "auction.avg-size",
                MemorySize,
                Some("500b"),
                "average size an auction's extra pads to",
            ),
            ConnectorOption::optional(
                "bid.avg-size",
                MemorySize,
                Some("100b"),
                "average size a bid's extra pads to",
            ),
            ConnectorOption::optional(
                "delayed-event.probability",
                Text,
                Some("0"),
                "Weir's own: share of events whose time lags their place (the Java generator has none)",
            ),
            ConnectorOption::optional(
                "delayed-event.max-delay",
                Duration,
                Some("3 s"),
                "Weir's own: the largest lag of a delayed event",
            ),
            ConnectorOption::optional(
                "base-time",
                Timestamp,
                None,
                "event time of the first event",
            ),
            ConnectorOption::optional("keep-alive", Text, None, "accepted for Flink's DDL"),
            ConnectorOption::optional("stop-at", Text, None, "accepted for Flink's DDL"),
        ]
    }

    fn plan_source(&self, table: &TableDescriptor) -> Option<Result<SourceSpec>> {
        Some(nexmark(table))
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        generator_of(source)?.validate()
    }

    fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        Some(open_generator(source, ctx))
    }
}

fn nexmark(t: &TableDescriptor) -> Result<SourceSpec> {
    let mut c = NexmarkConfig {
        events: t.number::<u64>("events.num")?.filter(|&n| n > 0),
        ..Default::default()
    };
    if let Some(tps) = t.number::<u64>("tps")?.or(t.number("first-event.rate")?) {
        c.tps = tps;
    }
    let max_speed = t
        .option("max-emit-speed")
        .map(|v| v.eq_ignore_ascii_case("true"))
        .unwrap_or(false);
    c.rate = (!max_speed).then_some(c.tps);
    if let Some(p) = t.number("person.proportion")? {
        c.person_proportion = p;
    }
    if let Some(p) = t.number("auction.proportion")? {
        c.auction_proportion = p;
    }
    if let Some(p) = t.number("bid.proportion")? {
        c.bid_proportion = p;
    }
    for (key, ratio) in [
        ("bid.hot-ratio.auctions", &mut c.hot_auction_ratio),
        ("bid.hot-ratio.bidders", &mut c.hot_bidder_ratio),
        ("auction.hot-ratio.sellers", &mut c.hot_seller_ratio),
    ] {
        if let Some(r) = t.number(key)? {
            *ratio = r;
        }
    }
    for (key, size) in [
        ("person.avg-size", &mut c.avg_person_bytes),
        ("auction.avg-size", &mut c.avg_auction_bytes),
        ("bid.avg-size", &mut c.avg_bid_bytes),
    ] {
        if let Some(v) = t.option(key) {
            *size = weir_core::connector::parse_memory_size(v)
                .ok_or_else(|| t.error(format!("option '{key}' = '{v}' is not a memory size")))?;
        }
    }
    if let Some(p) = t.number::<f64>("delayed-event.probability")? {
        c.prob_delayed_event = p;
    }
    if let Some(ms) = t.duration_ms("delayed-event.max-delay")? {
        c.occasional_delay_ms = ms;
    }
    if let Some(b) = t.option("base-time") {
        c.base_time_ms = parse_timestamp_ms(b)
            .ok_or_else(|| t.error(format!("option 'base-time' = '{b}' is not a timestamp")))?;
    }
    c.validate().map_err(|e| t.error(e))?;
    Ok(GeneratorSpec::nexmark(c).into_source())
}

fn datagen(t: &TableDescriptor) -> Result<SourceSpec> {
    let rate = match t.option("rows-per-second") {
        Some(v) if v.eq_ignore_ascii_case("unlimited") => None,
        Some(_) => t.number::<u64>("rows-per-second")?,
        None => Some(10_000),
    };
    if rate == Some(0) {
        return Err(t.error("rows-per-second must be positive (or 'unlimited')"));
    }
    let mut rows: Option<u64> = t.number("number-of-rows")?;
    let mut spec = GeneratorSpec::new(None);
    spec.seed = t.number("seed")?.unwrap_or(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut exprs = vec![];
    let declared = t.declared_schema()?;
    for field in declared.fields() {
        let name = field.name();
        let opt = |k: &str| t.option(&format!("fields.{name}.{k}"));
        let num =
            |k: &str| -> Result<Option<f64>> { t.number::<f64>(&format!("fields.{name}.{k}")) };
        let kind = opt("kind").unwrap_or("random").to_ascii_lowercase();
        let ty = field.data_type();
        let generated = Expr::Column(Column::new_unqualified(name));
        let (generator, expr) = match (kind.as_str(), ty) {
            ("sequence", ty) if ty.is_integer() => {
                let start = num("start")?.ok_or_else(|| {
                    t.error(format!(
                        "fields.{name}.kind = 'sequence' needs fields.{name}.start and .end"
                    ))
                })? as i64;
                let end = num("end")?.ok_or_else(|| {
                    t.error(format!(
                        "fields.{name}.kind = 'sequence' needs fields.{name}.end"
                    ))
                })? as i64;
                if end < start {
                    return Err(
                        t.error(format!("fields.{name}: end {end} is before start {start}"))
                    );
                }
                // As wide integers: a sequence over the whole i64 range
                // must not overflow while counting its rows.
                let count = u64::try_from(end as i128 - start as i128 + 1).unwrap_or(u64::MAX);
                rows = Some(rows.map_or(count, |r| r.min(count)));
                (ColumnGen::Sequence, generated + lit(start))
            }
            ("sequence", DataType::Utf8 | DataType::LargeUtf8) => {
                let start = num("start")?.unwrap_or(0.0) as i64;
                if let Some(end) = num("end")? {
                    let count = u64::try_from((end as i64 as i128 - start as i128 + 1).max(0))
                        .unwrap_or(u64::MAX);
                    rows = Some(rows.map_or(count, |r| r.min(count)));
                }
                (ColumnGen::Sequence, generated + lit(start))
            }
            ("random", ty) if ty.is_integer() => {
                let (lo, hi) = integer_range(ty);
                let min = num("min")?.map_or(lo, |v| v as i64);
                let max = num("max")?.map_or(hi, |v| v as i64);
                if min > max {
                    return Err(t.error(format!("fields.{name}: min {min} is above max {max}")));
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
                    return Err(
                        t.error(format!("fields.{name}: min {min} must be below max {max}"))
                    );
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
                        t.error(format!("fields.{name}.start = '{v}' is not a timestamp"))
                    })?,
                    None => now,
                };
                let lag = match opt("max-past") {
                    Some(v) => parse_duration_ms(v).ok_or_else(|| {
                        t.error(format!("fields.{name}.max-past = '{v}' is not a duration"))
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
                return Err(t.error(format!(
                    "datagen cannot generate {kind} values of type {ty} (column '{name}')"
                )));
            }
            (k, _) => {
                return Err(t.error(format!(
                    "fields.{name}.kind = '{k}': datagen kinds are 'random' and 'sequence'"
                )));
            }
        };
        spec.columns.push((name.clone(), generator));
        exprs.push((expr, field));
    }
    spec.num_events = rows;
    spec.rate = rate;
    let inner = spec.into_source();
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

/// The generator a planned `datagen` or `nexmark` source runs.
fn generator_of(source: &ConnectorSource) -> Result<GeneratorSpec> {
    planned_or(source, |t| {
        // A job graph written by hand: plan the generator from its options.
        let spec = match source.connector.as_str() {
            "nexmark" => nexmark(t)?,
            _ => datagen(t)?,
        };
        let inner = match spec {
            SourceSpec::Computed(c) => *c.inner,
            other => other,
        };
        inner.connector().planned_as()
    })
}

fn open_generator(source: &ConnectorSource, ctx: &OperatorContext) -> Result<Box<dyn Source>> {
    let spec = generator_of(source)?;
    spec.validate()?;
    Ok(Box::new(GeneratorSource::new(spec, ctx)))
}
