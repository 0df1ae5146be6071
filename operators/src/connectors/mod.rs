//! Connectors: the factories that plan and run a job's sources and sinks,
//! resolved by name through a registry (Flink's factory model).
//!
//! A [`ConnectorFactory`] names itself (the `'connector'` value), declares
//! its options — required or optional, with a type, a default and a line of
//! description — plans the source or sink of a table when the job is
//! planned (SQL, the DataStream API's `from_connector`), and opens it in
//! every subtask when the job runs. The [`Connectors`] registry checks a
//! table's options against the declaration before the factory sees them, so
//! an unknown option is refused with the near names wherever it comes from.
//!
//! Built in here: `datagen`, `nexmark` (`generators.rs`), `filesystem`
//! (`filesystem.rs`), `print`, `blackhole`, `memory` and `collect`
//! (`basic.rs`); `weir-flight` adds `flight`. A program adds its own with
//! [`Connectors::register`] (the process-wide registry is
//! `weir_worker::register_connector`).

mod basic;
mod filesystem;
mod generators;
pub(crate) mod pruning;
pub(crate) use self::pruning::{row_groups_to_read, rows_to_read};
mod specs;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use datafusion_common::DFSchema;
use datafusion_expr::Expr;
use datafusion_physical_expr::PhysicalExpr;
use weir_core::connector::{
    ConnectorOption, ConnectorPlanner, ConnectorSource, MetadataKey, SinkSpec, TableDescriptor,
    check_options, near_matches,
};
use weir_core::graph::StreamNode;
use weir_core::spec::{MemorySourceSpec, SourceSpec};
use weir_core::{Result, WeirError};

pub use self::basic::{blackhole, collect, print, throttled};
pub use self::filesystem::{csv_sink, format_sink, parquet_sink};
pub use self::specs::{
    ColumnGen, FilePlan, GeneratorSpec, MonitoredPlan, ParquetSourceSpec, PartitionFiles,
    PartitionedPlan, TextSourceSpec,
};
use crate::{Operator, OperatorContext, Source};

/// Plans and runs the sources and sinks of one connector (Flink's
/// `DynamicTableSourceFactory` and `DynamicTableSinkFactory` in one).
///
/// Contract: the registry has checked the table's options against
/// [`Self::options`] (names, required ones present, value types) before any
/// `plan_*` call. A factory returns `None` from what it does not do (a
/// sink-only connector from `plan_source`); errors name the table
/// ([`TableDescriptor::error`]) and the option. `open_*` run in the
/// subtasks, on any worker, from the spec the plan produced (its options
/// and `planned` form), so they must not depend on the planning process.
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
    /// Whether its sources end by themselves (for the listing).
    fn is_bounded(&self) -> bool {
        false
    }
    /// Whether its tables may be `PARTITIONED BY` columns.
    fn supports_partitions(&self) -> bool {
        false
    }
    /// What a sink of it guarantees: `exactly-once`, `at-least-once`, `none`.
    fn delivery(&self) -> &str {
        "none"
    }
    /// The metadata keys its tables may declare as `METADATA` columns.
    fn metadata(&self) -> Vec<MetadataKey> {
        vec![]
    }
    /// The source reading `table`: the table's declared physical columns
    /// in order when it declares them, then its metadata columns (the SQL layer casts what differs),
    /// the connector's own otherwise.
    fn plan_source(&self, _table: &TableDescriptor) -> Option<Result<SourceSpec>> {
        None
    }
    /// The sink writing `table` (its columns are the written stream's).
    fn plan_sink(&self, _table: &TableDescriptor) -> Option<Result<SinkSpec>> {
        None
    }
    /// Whether its sink takes a changelog (updating results with their
    /// row kinds); append-only by default.
    fn accepts_changelog(&self, _table: &TableDescriptor) -> Result<bool> {
        Ok(false)
    }
    /// The key its sink writes updates by, when it is an upsert sink (an
    /// upsert table's PRIMARY KEY): the planner then asks the query for an
    /// upserting stream by that key (no `-U` rows) where it can produce one.
    fn sink_upsert_key(&self, _table: &TableDescriptor) -> Result<Option<Vec<String>>> {
        Ok(None)
    }
    /// Whether its sink uses a changelog's `-U` rows. One that drops them
    /// (Flink's blackhole declares the same) lets the planner make the
    /// query upserting by whatever key its updating operator has, as
    /// Flink's planner then asks for `+U` rows only.
    fn sink_uses_update_before(&self, _table: &TableDescriptor) -> Result<bool> {
        Ok(true)
    }
    /// All rows of a bounded table, read now (a lookup join's side table).
    fn read_bounded(&self, _table: &TableDescriptor) -> Option<Result<MemorySourceSpec>> {
        None
    }
    /// Check a planned source before the job runs (its planned form reads
    /// back and makes sense); options are checked by the registry.
    fn check_source(&self, _source: &ConnectorSource) -> Result<()> {
        Ok(())
    }
    /// One subtask's reader of `source`.
    fn open_source(
        &self,
        _source: &ConnectorSource,
        _ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Source>>> {
        None
    }
    /// One subtask's writer of `sink`, for the sink node `node` (whose
    /// schema is the rows').
    fn open_sink(
        &self,
        _sink: &SinkSpec,
        _node: &StreamNode,
        _ctx: &OperatorContext,
    ) -> Option<Result<Box<dyn Operator>>> {
        None
    }
}

/// The connectors a program knows, by identifier. Cloning is cheap.
#[derive(Clone)]
pub struct Connectors {
    factories: Arc<BTreeMap<String, Arc<dyn ConnectorFactory>>>,
}

impl Default for Connectors {
    /// The connectors of this crate.
    fn default() -> Self {
        let mut r = Self {
            factories: Arc::new(BTreeMap::new()),
        };
        r.register(Arc::new(generators::Datagen));
        r.register(Arc::new(generators::Nexmark));
        r.register(Arc::new(filesystem::Filesystem));
        r.register(Arc::new(basic::Print));
        r.register(Arc::new(basic::Blackhole));
        r.register(Arc::new(basic::Memory));
        r.register(Arc::new(basic::Collect));
        r
    }
}

impl std::fmt::Debug for Connectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.factories.keys()).finish()
    }
}

/// Internal connectors the listing leaves out (they carry rows of the
/// program itself, not a table's).
const INTERNAL: [&str; 2] = ["memory", "collect"];

impl Connectors {
    /// Add (or replace) a connector under its identifier.
    pub fn register(&mut self, factory: Arc<dyn ConnectorFactory>) {
        Arc::make_mut(&mut self.factories)
            .insert(factory.identifier().to_ascii_lowercase(), factory);
    }

    /// The connectors, by identifier.
    pub fn factories(&self) -> impl Iterator<Item = &Arc<dyn ConnectorFactory>> {
        self.factories.values()
    }

    /// Every connector with its options, as `weir connectors` prints them.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for f in self
            .factories
            .values()
            .filter(|f| !INTERNAL.contains(&f.identifier()))
        {
            let roles = match (f.is_source(), f.is_sink()) {
                (true, true) => "source and sink",
                (true, false) => "source",
                _ => "sink",
            };
            let _ = writeln!(out, "{} ({roles}): {}", f.identifier(), f.description());
            for o in f.options() {
                let _ = writeln!(out, "{}", o.listing_line());
            }
            for m in f.metadata() {
                let _ = writeln!(
                    out,
                    "  METADATA {} ({}{}): {}",
                    m.key,
                    m.data_type,
                    if m.writable { ", writable" } else { "" },
                    m.description
                );
            }
        }
        out
    }

    /// The factory called `name`; an unknown name is refused with the near
    /// ones and the list.
    pub fn get(&self, name: &str) -> Result<&Arc<dyn ConnectorFactory>> {
        self.lookup(name).map_err(WeirError::plan)
    }

    fn lookup(&self, name: &str) -> std::result::Result<&Arc<dyn ConnectorFactory>, String> {
        let key = name.to_ascii_lowercase();
        self.factories.get(&key).ok_or_else(|| {
            let near = near_matches(&key, self.factories.keys().map(String::as_str));
            format!(
                "unknown connector '{name}'{}; the connectors are {}",
                match near.as_slice() {
                    [] => String::new(),
                    n => format!(" (did you mean {}?)", n.join(", ")),
                },
                self.factories
                    .keys()
                    .filter(|k| !INTERNAL.contains(&k.as_str()))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// The factory of `t`'s connector, its options checked against what
    /// the factory declares.
    fn factory(&self, t: &TableDescriptor) -> Result<&Arc<dyn ConnectorFactory>> {
        let f = self.lookup(&t.connector()?).map_err(|e| t.error(e))?;
        check_options(t, &f.options())?;
        t.check_metadata(f.identifier(), &f.metadata(), false)?;
        if !t.partition_keys.is_empty() && !f.supports_partitions() {
            return Err(t.error(format!(
                "connector '{}' does not take PARTITIONED BY",
                f.identifier()
            )));
        }
        Ok(f)
    }

    /// Check a table's connector and options without touching files (a
    /// filesystem table may be a sink whose folder does not exist yet);
    /// a source-only connector is also planned, as it reads nothing.
    pub fn validate(&self, t: &TableDescriptor) -> Result<()> {
        let f = self.factory(t)?;
        if f.is_sink() {
            return Ok(());
        }
        f.plan_source(t).transpose().map(drop)
    }

    /// The source reading a table.
    pub fn source(&self, t: &TableDescriptor) -> Result<SourceSpec> {
        let f = self.factory(t)?;
        let spec = f.plan_source(t).unwrap_or_else(|| {
            Err(t.error(format!(
                "connector '{}' is a sink; it cannot be read from",
                f.identifier()
            )))
        })?;
        Ok(match spec {
            SourceSpec::Connector(c) => SourceSpec::Connector(c.with_options(t.options.clone())),
            other => other,
        })
    }

    /// The sink writing a table.
    pub fn sink(&self, t: &TableDescriptor) -> Result<SinkSpec> {
        let f = self.factory(t)?;
        t.check_metadata(f.identifier(), &f.metadata(), true)?;
        let spec = f.plan_sink(t).unwrap_or_else(|| {
            Err(t.error(format!(
                "connector '{}' is a source; it cannot be written to",
                f.identifier()
            )))
        })?;
        Ok(spec.with_options(t.options.clone()))
    }

    /// Whether a sink table takes a changelog.
    pub fn accepts_changelog(&self, t: &TableDescriptor) -> Result<bool> {
        self.factory(t)?.accepts_changelog(t)
    }

    /// The key a sink table upserts by, if it is an upsert sink.
    pub fn sink_upsert_key(&self, t: &TableDescriptor) -> Result<Option<Vec<String>>> {
        self.factory(t)?.sink_upsert_key(t)
    }

    /// Whether a sink table uses a changelog's `-U` rows.
    pub fn sink_uses_update_before(&self, t: &TableDescriptor) -> Result<bool> {
        self.factory(t)?.sink_uses_update_before(t)
    }

    /// All rows of a bounded table (a lookup join's side table).
    pub fn read_all(&self, t: &TableDescriptor) -> Result<MemorySourceSpec> {
        let f = self.factory(t)?;
        f.read_bounded(t).unwrap_or_else(|| {
            Err(t.error(format!(
                "a lookup join reads a bounded table; connector '{}' cannot be read whole",
                f.identifier()
            )))
        })
    }

    /// One subtask's reader of a planned source.
    pub fn open_source(
        &self,
        source: &ConnectorSource,
        ctx: &OperatorContext,
    ) -> Result<Box<dyn Source>> {
        let f = self.get(&source.connector)?;
        f.open_source(source, ctx).unwrap_or_else(|| {
            Err(WeirError::plan(format!(
                "connector '{}' is a sink; it cannot be read from",
                f.identifier()
            )))
        })
    }

    /// One subtask's writer of a planned sink.
    pub fn open_sink(
        &self,
        sink: &SinkSpec,
        node: &StreamNode,
        ctx: &OperatorContext,
    ) -> Result<Box<dyn Operator>> {
        let f = self.get(&sink.connector)?;
        f.open_sink(sink, node, ctx).unwrap_or_else(|| {
            Err(WeirError::plan(format!(
                "connector '{}' is a source; it cannot be written to",
                f.identifier()
            )))
        })
    }
}

impl ConnectorPlanner for Connectors {
    fn plan_source(&self, table: &TableDescriptor) -> Result<SourceSpec> {
        self.source(table)
    }

    fn plan_sink(&self, table: &TableDescriptor) -> Result<SinkSpec> {
        self.sink(table)
    }

    fn check_source(&self, source: &ConnectorSource) -> Result<()> {
        let f = self.get(&source.connector)?;
        if !f.is_source() {
            return Err(WeirError::plan(format!(
                "connector '{}' is a sink; it cannot be read from",
                source.connector
            )));
        }
        check_options(
            &source.descriptor(&source.display),
            &declared_for(f.options(), &source.planned),
        )?;
        f.check_source(source)
    }

    fn check_sink(&self, sink: &SinkSpec) -> Result<()> {
        let f = self.get(&sink.connector)?;
        if !f.is_sink() {
            return Err(WeirError::plan(format!(
                "connector '{}' is a source; it cannot be written to",
                sink.connector
            )));
        }
        let schema = Arc::new(arrow::datatypes::Schema::empty());
        check_options(
            &sink.descriptor(&sink.display, schema),
            &declared_for(f.options(), &sink.planned),
        )
    }
}

/// The options to check a planned source or sink against: as declared,
/// but none required once the factory has planned it (a typed helper such
/// as `parquet_source` plans without options).
fn declared_for(
    mut declared: Vec<ConnectorOption>,
    planned: &serde_json::Value,
) -> Vec<ConnectorOption> {
    if !planned.is_null() {
        for o in &mut declared {
            o.required = false;
        }
    }
    declared
}

/// A planned expression over `schema` (computed columns a factory adds).
pub(crate) fn physical(expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
    datafusion_physical_expr::create_physical_expr(
        expr,
        schema,
        &datafusion_expr::execution_props::ExecutionProps::new(),
        &datafusion_expr::physical_planning_context::PhysicalPlanningContext::default(),
    )
    .map_err(|e| WeirError::plan(format!("expression `{expr}`: {e}")))
}

/// Read back a source's planned form, planning again from its options when
/// it has none (a job graph written by hand).
pub(crate) fn planned_or<T: serde::de::DeserializeOwned>(
    source: &ConnectorSource,
    plan: impl FnOnce(&TableDescriptor) -> Result<T>,
) -> Result<T> {
    if source.planned.is_null() {
        plan(&source.descriptor(&source.display))
    } else {
        source.planned_as()
    }
}
