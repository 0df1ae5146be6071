//! Table connectors as SQL sees them: a table's `WITH` options planned
//! through the program's connector registry (`weir_operators::connectors`,
//! the process-wide one of `weir_worker`), and what the SQL layer adds on
//! top — the source's columns cast to the declared types, ROW fields
//! matched by name.
//!
//! The built-in connectors and how to write one live with the runtime;
//! `weir connectors` lists them with their options.

use std::sync::Arc;

use arrow::datatypes::{DataType, Schema};
use datafusion_common::{Column, DFSchema};
use datafusion_expr::{Expr, cast, lit, when};
use weir_core::connector::TableDescriptor;
use weir_core::spec::{ComputedSourceSpec, MemorySourceSpec, SinkSpec, SourceSpec};
use weir_core::{Result, WeirError};
use weir_operators::connectors::{ConnectorFactory, Connectors};

use crate::catalog::TableEntry;
use crate::lower::physical;

pub(crate) use weir_core::connector::parse_duration_ms;

/// The connectors SQL tables can name: the process's registry, read when
/// a table is planned (so a connector registered later is seen).
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectorRegistry;

impl ConnectorRegistry {
    /// Add (or replace) a connector for every session and job of this
    /// process ([`weir_worker::register_connector`]).
    pub fn register(&self, factory: Arc<dyn ConnectorFactory>) {
        weir_worker::register_connector(factory);
    }

    /// The registry as it is now.
    pub fn connectors(&self) -> Connectors {
        weir_worker::connectors()
    }

    /// Every connector with its options, as `weir connectors` prints them.
    pub fn describe(&self) -> String {
        self.connectors().describe()
    }

    /// Check a table's connector and options without touching files.
    pub(crate) fn validate(&self, t: &TableEntry) -> Result<()> {
        self.connectors().validate(&descriptor(t))
    }

    /// The source a table reads from, producing its physical columns in
    /// order; `filters` (the query's, applied after it) let the connector
    /// skip what it can prove fails them.
    ///
    /// `projection` (indices of `t.scan_schema`, ascending) asks for only
    /// those columns, which a connector may honour or not: the source
    /// produces either those or all the columns (its schema tells which).
    pub(crate) fn source(
        &self,
        t: &TableEntry,
        filters: &[Expr],
        projection: Option<&[usize]>,
    ) -> Result<SourceSpec> {
        let mut table = descriptor(t);
        // Only predicates over physical columns mean anything to it.
        table.filters = if t.has_computed_columns() {
            vec![]
        } else {
            filters.to_vec()
        };
        let want = match projection {
            Some(cols) if !t.has_computed_columns() => {
                let names: Vec<String> = cols
                    .iter()
                    .map(|&i| t.scan_schema.field(i).name().clone())
                    .collect();
                table.projection = Some(names);
                Arc::new(t.scan_schema.project(cols)?)
            }
            _ => Arc::clone(&t.scan_schema),
        };
        let spec = self.connectors().source(&table)?;
        // A connector that ignored the projection produces every column.
        let have = spec.schema();
        let width = have.fields().len() - usize::from(spec.changelog_mode().is_updating());
        let honoured = want.fields().len() == width
            && want
                .fields()
                .iter()
                .zip(have.fields())
                .all(|(w, h)| w.name() == h.name());
        let want = if honoured {
            want
        } else {
            Arc::clone(&t.scan_schema)
        };
        conform_source(t, &want, spec)
    }

    /// The sink a table writes to.
    pub(crate) fn sink(&self, t: &TableEntry) -> Result<SinkSpec> {
        self.connectors().sink(&descriptor(t))
    }

    /// Whether a sink table takes a changelog.
    pub(crate) fn accepts_changelog(&self, t: &TableEntry) -> Result<bool> {
        self.connectors().accepts_changelog(&descriptor(t))
    }

    pub(crate) fn sink_upsert_key(&self, t: &TableEntry) -> Result<Option<Vec<String>>> {
        self.connectors().sink_upsert_key(&descriptor(t))
    }

    /// Whether a sink table uses a changelog's `-U` rows.
    pub(crate) fn sink_uses_update_before(&self, t: &TableEntry) -> Result<bool> {
        self.connectors().sink_uses_update_before(&descriptor(t))
    }

    /// All rows of a bounded table (a lookup join's side table).
    pub(crate) fn read_all(&self, t: &TableEntry) -> Result<MemorySourceSpec> {
        self.connectors().read_all(&descriptor(t))
    }
}

/// A catalog table as connectors see it.
pub(crate) fn descriptor(t: &TableEntry) -> TableDescriptor {
    TableDescriptor {
        name: t.definition.name.to_string(),
        options: t.definition.options.iter().cloned().collect(),
        schema: Some(Arc::clone(&t.schema)),
        primary_key: t
            .definition
            .primary_key
            .iter()
            .map(|i| i.value.clone())
            .collect(),
        partition_keys: t
            .definition
            .partitioned_by
            .iter()
            .map(|i| i.value.clone())
            .collect(),
        filters: vec![],
        projection: None,
        metadata: t.metadata.clone(),
    }
}

fn table_err(t: &TableEntry, msg: impl std::fmt::Display) -> WeirError {
    WeirError::plan(format!("table '{}': {msg}", t.definition.name))
}

/// Reads `inner` and yields the table's physical columns by name, cast to
/// the declared types (ROW fields matched by name, extra ones dropped).
fn conform_source(t: &TableEntry, want: &Schema, inner: SourceSpec) -> Result<SourceSpec> {
    let have = inner.schema();
    // A changelog format's sources end with the row kind, kept last.
    let changelog = inner.changelog_mode().is_updating();
    let width = have.fields().len() - usize::from(changelog);
    if have.fields()[..width] == want.fields()[..] {
        return Ok(inner);
    }
    let df = DFSchema::try_from(have.as_ref().clone())?;
    let mut exprs = want
        .fields()
        .iter()
        .map(|want| {
            let Ok(idx) = have.index_of(want.name()) else {
                return Err(table_err(
                    t,
                    format!(
                        "column '{}' is declared but the {} source has none; it has: {}",
                        want.name(),
                        inner.connector().connector,
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
    if changelog {
        let op = Expr::Column(Column::new_unqualified(weir_core::spec::ROW_KIND_COLUMN));
        exprs.push((
            physical(&op, &df)?,
            weir_core::spec::ROW_KIND_COLUMN.to_string(),
        ));
    }
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
