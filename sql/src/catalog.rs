//! The tables and views a script declares, by name.

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use sqlparser::ast::ObjectName;
use weir_core::connector::MetadataColumn;

use crate::{CreateTable, SqlError, physical_schema};

/// How a table's watermark follows its rowtime column:
/// `WATERMARK FOR column AS column - INTERVAL 'delay'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkDef {
    /// The rowtime column.
    pub column: String,
    /// The delay subtracted, ms (0 for `WATERMARK FOR c AS c`).
    pub delay_ms: i64,
}

/// A declared table: its definition, the Arrow schema of its physical
/// columns, and every column (physical and computed) as an expression over
/// the physical ones.
#[derive(Debug, Clone)]
pub struct TableEntry {
    /// The `CREATE TABLE` as written.
    pub definition: CreateTable,
    /// Physical columns as Arrow fields.
    pub schema: SchemaRef,
    /// `METADATA` columns, in declared order.
    pub metadata: Vec<MetadataColumn>,
    /// What the source produces: the physical columns, then the metadata
    /// ones (the columns' expressions are over it).
    pub scan_schema: SchemaRef,
    /// All columns, in declared order.
    pub full_schema: SchemaRef,
    /// Each column of `full_schema` as an expression over `scan_schema`.
    pub columns: Vec<(String, datafusion_expr::Expr)>,
    /// The watermark, when declared.
    pub watermark: Option<WatermarkDef>,
}

impl TableEntry {
    /// The columns an `INSERT` writes: the physical ones, then the
    /// persisted (not `VIRTUAL`) metadata ones.
    pub fn sink_schema(&self) -> SchemaRef {
        let persisted: Vec<MetadataColumn> = self
            .metadata
            .iter()
            .filter(|m| !m.is_virtual)
            .cloned()
            .collect();
        crate::types::scan_schema(&self.schema, &persisted)
    }

    /// Whether any column is computed or metadata.
    pub fn has_computed_columns(&self) -> bool {
        self.full_schema.fields().len() != self.schema.fields().len()
            || self
                .columns
                .iter()
                .any(|(_, e)| !matches!(e, datafusion_expr::Expr::Column(_)))
    }

    /// The `WITH` option `key`, if given.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.definition
            .options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A declared view: its planned query.
#[derive(Debug, Clone)]
pub struct ViewEntry {
    /// The view's name as written.
    pub name: String,
    /// Its logical plan.
    pub plan: datafusion_expr::LogicalPlan,
}

/// A table or a view.
#[derive(Debug, Clone, Copy)]
pub enum Relation<'a> {
    /// A table.
    Table(&'a TableEntry),
    /// A view.
    View(&'a ViewEntry),
}

/// Tables and views declared so far (names compare case-insensitively, as
/// Flink's default catalog does for unquoted names).
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    tables: BTreeMap<String, TableEntry>,
    views: BTreeMap<String, ViewEntry>,
}

fn key(name: &ObjectName) -> String {
    name.to_string().to_ascii_lowercase()
}

fn exists(name: &ObjectName) -> SqlError {
    let at = position(name);
    SqlError {
        line: at.map(|l| l.line),
        column: at.map(|l| l.column),
        message: format!("a table or view named '{name}' already exists"),
    }
}

fn position(name: &ObjectName) -> Option<sqlparser::tokenizer::Location> {
    name.0
        .first()
        .and_then(|p| p.as_ident())
        .map(|i| i.span.start)
        .filter(|l| l.line > 0)
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declare a table of physical columns only (computed columns and
    /// watermarks are planned by the SQL session, which then calls
    /// [`Self::insert_table`]).
    pub fn create_table(&mut self, table: CreateTable) -> Result<(), SqlError> {
        let schema = physical_schema(&table)?;
        let metadata = crate::types::metadata_columns(&table)?;
        let scan_schema = crate::types::scan_schema(&schema, &metadata);
        let columns = scan_schema
            .fields()
            .iter()
            .map(|f| {
                (
                    f.name().clone(),
                    datafusion_expr::col(datafusion_common::Column::new_unqualified(f.name())),
                )
            })
            .collect();
        self.insert_table(TableEntry {
            definition: table,
            full_schema: std::sync::Arc::clone(&scan_schema),
            schema,
            metadata,
            scan_schema,
            columns,
            watermark: None,
        })
    }

    /// Declare a fully planned table; a second table of the same name is an
    /// error unless the statement says `IF NOT EXISTS` (then the first stays).
    pub fn insert_table(&mut self, entry: TableEntry) -> Result<(), SqlError> {
        let k = key(&entry.definition.name);
        if self.tables.contains_key(&k) || self.views.contains_key(&k) {
            if entry.definition.if_not_exists {
                return Ok(());
            }
            return Err(exists(&entry.definition.name));
        }
        self.tables.insert(k, entry);
        Ok(())
    }

    /// Declare a view.
    pub fn create_view(
        &mut self,
        name: &ObjectName,
        plan: datafusion_expr::LogicalPlan,
        if_not_exists: bool,
        or_replace: bool,
    ) -> Result<(), SqlError> {
        let k = key(name);
        if self.tables.contains_key(&k) || (self.views.contains_key(&k) && !or_replace) {
            if if_not_exists {
                return Ok(());
            }
            return Err(exists(name));
        }
        self.views.insert(
            k,
            ViewEntry {
                name: name.to_string(),
                plan,
            },
        );
        Ok(())
    }

    /// The table `name`; an unknown name says which known ones are close.
    pub fn table(&self, name: &ObjectName) -> Result<&TableEntry, SqlError> {
        match self.relation(name)? {
            Relation::Table(t) => Ok(t),
            Relation::View(_) => {
                let at = position(name);
                Err(SqlError {
                    line: at.map(|l| l.line),
                    column: at.map(|l| l.column),
                    message: format!("'{name}' is a view; only tables can be written to"),
                })
            }
        }
    }

    /// The table or view `name`; an unknown name says which known ones are
    /// close.
    pub fn relation(&self, name: &ObjectName) -> Result<Relation<'_>, SqlError> {
        let k = key(name);
        if let Some(t) = self.tables.get(&k) {
            return Ok(Relation::Table(t));
        }
        if let Some(v) = self.views.get(&k) {
            return Ok(Relation::View(v));
        }
        let near = near_matches(
            &k,
            self.tables
                .keys()
                .chain(self.views.keys())
                .map(String::as_str),
        );
        let hint = match near.as_slice() {
            [] => String::new(),
            names => format!(" (did you mean {}?)", names.join(", ")),
        };
        let at = position(name);
        Err(SqlError {
            line: at.map(|l| l.line),
            column: at.map(|l| l.column),
            message: format!("unknown table '{name}'{hint}"),
        })
    }
}

pub use weir_core::connector::near_matches;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{WeirStatement, parse};

    fn create(catalog: &mut Catalog, sql: &str) -> Result<(), SqlError> {
        match parse(sql).unwrap().remove(0) {
            WeirStatement::CreateTable(t) => catalog.create_table(*t),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tables_are_found_and_unknown_ones_suggest_near_names() {
        let mut c = Catalog::new();
        create(
            &mut c,
            "CREATE TABLE Orders (id BIGINT) WITH ('connector' = 'datagen')",
        )
        .unwrap();
        create(&mut c, "CREATE TABLE persons (id BIGINT)").unwrap();
        let name = |n: &str| ObjectName::from(vec![sqlparser::ast::Ident::new(n)]);
        assert_eq!(c.table(&name("orders")).unwrap().schema.fields().len(), 1);
        let e = c.table(&name("order")).unwrap_err();
        assert_eq!(e.message, "unknown table 'order' (did you mean 'orders'?)");
        let e = c.table(&name("zzz")).unwrap_err();
        assert_eq!(e.message, "unknown table 'zzz'");
        let e = create(&mut c, "CREATE TABLE orders (x INT)").unwrap_err();
        assert!(e.message.contains("already exists"), "{e}");
        create(&mut c, "CREATE TABLE IF NOT EXISTS orders (x INT)").unwrap();
    }
}
