//! The tables and views a script declares, by name.

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use sqlparser::ast::ObjectName;

use crate::{CreateTable, SqlError, physical_schema};

/// A declared table: its definition and the Arrow schema of its physical
/// columns.
#[derive(Debug, Clone)]
pub struct TableEntry {
    /// The `CREATE TABLE` as written.
    pub definition: CreateTable,
    /// Physical columns as Arrow fields.
    pub schema: SchemaRef,
}

/// Tables declared so far (names compare case-insensitively, as Flink's
/// default catalog does for unquoted names).
#[derive(Debug, Default)]
pub struct Catalog {
    tables: BTreeMap<String, TableEntry>,
}

fn key(name: &ObjectName) -> String {
    name.to_string().to_ascii_lowercase()
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declare a table; a second table of the same name is an error unless
    /// the statement says `IF NOT EXISTS` (then the first stays).
    pub fn create_table(&mut self, table: CreateTable) -> Result<(), SqlError> {
        let k = key(&table.name);
        if self.tables.contains_key(&k) {
            if table.if_not_exists {
                return Ok(());
            }
            return Err(SqlError {
                line: None,
                column: None,
                message: format!("table '{}' already exists", table.name),
            });
        }
        let schema = physical_schema(&table)?;
        self.tables.insert(
            k,
            TableEntry {
                definition: table,
                schema,
            },
        );
        Ok(())
    }

    /// The table `name`; an unknown name says which known ones are close.
    pub fn table(&self, name: &ObjectName) -> Result<&TableEntry, SqlError> {
        self.tables.get(&key(name)).ok_or_else(|| {
            let wanted = key(name);
            let near = near_matches(&wanted, self.tables.keys().map(String::as_str));
            let hint = match near.as_slice() {
                [] => String::new(),
                names => format!(" (did you mean {}?)", names.join(", ")),
            };
            let at = name
                .0
                .first()
                .and_then(|p| p.as_ident())
                .map(|i| i.span.start)
                .filter(|l| l.line > 0);
            SqlError {
                line: at.map(|l| l.line),
                column: at.map(|l| l.column),
                message: format!("unknown table '{name}'{hint}"),
            }
        })
    }
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
