//! Changelogs as types: what a row does ([`RowKind`], Flink's byte values,
//! carried in a reserved Int8 column), and what a stream carries
//! ([`ChangelogMode`], declared by the operator that produces it).
//!
//! A changelog stream ends with [`ROW_KIND_COLUMN`]. The name is reserved:
//! sources and tables may not declare a column of that name, so a user
//! column called `_op` is just a column. Whether a stream is
//! updating is not read off its schema: every transformation declares its
//! output mode from its inputs' modes ([`crate::graph::TransformationKind::
//! changelog_mode`]), and graph validation checks that the layout agrees.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int8Array, RecordBatch};

use arrow::datatypes::{DataType, Field, Schema};

use crate::error::{Result, WeirError};

/// What one row of a changelog does — Flink's `RowKind`, with its byte
/// values (`RowKind.toByteValue()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum RowKind {
    /// `+I`: a new row.
    Insert = 0,
    /// `-U`: the old row of an update, taken back.
    UpdateBefore = 1,
    /// `+U`: the new row of an update.
    UpdateAfter = 2,
    /// `-D`: a row taken back for good.
    Delete = 3,
}

impl RowKind {
    /// Flink's byte value.
    pub fn as_i8(self) -> i8 {
        self as i8
    }

    /// The kind of Flink byte value `v`.
    pub fn from_i8(v: i8) -> Result<Self> {
        match v {
            0 => Ok(Self::Insert),
            1 => Ok(Self::UpdateBefore),
            2 => Ok(Self::UpdateAfter),
            3 => Ok(Self::Delete),
            _ => Err(WeirError::Execution(format!(
                "row kind {v} is not one of 0 (+I), 1 (-U), 2 (+U), 3 (-D)"
            ))),
        }
    }

    /// Flink's short string: `+I`, `-U`, `+U`, `-D`.
    pub fn short_string(self) -> &'static str {
        match self {
            Self::Insert => "+I",
            Self::UpdateBefore => "-U",
            Self::UpdateAfter => "+U",
            Self::Delete => "-D",
        }
    }

    /// The kind of a short string, if it is one.
    pub fn from_short_string(s: &str) -> Option<Self> {
        match s {
            "+I" => Some(Self::Insert),
            "-U" => Some(Self::UpdateBefore),
            "+U" => Some(Self::UpdateAfter),
            "-D" => Some(Self::Delete),
            _ => None,
        }
    }

    /// Whether the row is added (`+I`, `+U`) rather than taken back.
    pub fn is_addition(self) -> bool {
        matches!(self, Self::Insert | Self::UpdateAfter)
    }
}

impl std::fmt::Display for RowKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.short_string())
    }
}

/// The reserved name of the row-kind column a changelog stream ends with.
/// `$` cannot start an unquoted SQL identifier, and tables and sources may
/// not declare it.
pub const ROW_KIND_COLUMN: &str = "$row_kind";

/// The row-kind column: Int8, Flink's byte values, never null.
pub fn row_kind_field() -> Field {
    Field::new(ROW_KIND_COLUMN, DataType::Int8, false)
}

/// Whether `schema`'s layout is a changelog's (it ends with the row-kind
/// column). Plans ask the producing transformation's [`ChangelogMode`];
/// this is for runtime code handed a spec's schema.
pub fn is_changelog_schema(schema: &Schema) -> bool {
    schema
        .fields()
        .last()
        .is_some_and(|f| f.name() == ROW_KIND_COLUMN && *f.data_type() == DataType::Int8)
}

/// Refuses a user schema that declares the reserved row-kind column.
pub fn check_user_schema(schema: &Schema, what: &str) -> Result<()> {
    if schema.fields().iter().any(|f| f.name() == ROW_KIND_COLUMN) {
        return Err(WeirError::plan(format!(
            "{what}: the column name '{ROW_KIND_COLUMN}' is reserved for the row kind of a changelog"
        )));
    }
    Ok(())
}

/// The row kinds of a changelog batch (its last column).
pub fn row_kinds(batch: &RecordBatch) -> Result<&Int8Array> {
    batch
        .columns()
        .last()
        .and_then(|c| c.as_any().downcast_ref::<Int8Array>())
        .filter(|_| is_changelog_schema(&batch.schema()))
        .ok_or_else(|| {
            WeirError::Execution(format!(
                "a changelog batch must end with '{ROW_KIND_COLUMN}' Int8; it has ({})",
                batch
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// The kind of row `i` of a row-kind column.
pub fn row_kind_at(kinds: &Int8Array, i: usize) -> Result<RowKind> {
    RowKind::from_i8(kinds.value(i))
}

/// Which rows of a row-kind column are additions (`+I`, `+U`: the even
/// byte values) rather than retractions.
pub fn additions(kinds: &Int8Array) -> arrow::array::BooleanArray {
    kinds.values().iter().map(|&k| Some(k & 1 == 0)).collect()
}

/// A row-kind column of `kinds`.
pub fn row_kind_array(kinds: impl IntoIterator<Item = RowKind>) -> ArrayRef {
    Arc::new(Int8Array::from_iter_values(
        kinds.into_iter().map(RowKind::as_i8),
    ))
}

/// A row-kind column of `n` rows of `kind`.
pub fn row_kind_repeat(kind: RowKind, n: usize) -> ArrayRef {
    Arc::new(Int8Array::from_value(kind.as_i8(), n))
}

/// `batch` with its row-kind column written as Flink's short strings
/// (`+I`, `-U`, `+U`, `-D`) in a Utf8 column `name`: how a changelog is
/// written to a format that has no row kind of its own.
pub fn with_short_string_kinds(batch: &RecordBatch, name: &str) -> Result<RecordBatch> {
    let kinds = row_kinds(batch)?;
    let text: arrow::array::StringArray = kinds
        .values()
        .iter()
        .map(|&k| RowKind::from_i8(k).map(|k| Some(k.short_string())))
        .collect::<Result<_>>()?;
    let schema = short_string_schema(&batch.schema(), name);
    let mut columns = batch.columns().to_vec();
    *columns.last_mut().expect("a row kind column") = Arc::new(text);
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A changelog `schema` with its row kind as the Utf8 column `name` (see
/// [`with_short_string_kinds`]).
pub fn short_string_schema(schema: &Schema, name: &str) -> Arc<Schema> {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    if let Some(last) = fields.last_mut() {
        *last = Field::new(name, DataType::Utf8, false);
    }
    Arc::new(Schema::new(fields))
}

/// What a stream carries — Flink's `ChangelogMode`, as a property of the
/// transformation producing it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChangelogMode {
    /// Inserts only; no row kind column.
    #[default]
    Append,
    /// Every kind: an update is `-U` then `+U`.
    Retract,
    /// Updates by key: `+I`, `+U` and `-D` for the key's row, no `-U` (a
    /// consumer keeps the latest row per key). For upsert sinks.
    Upsert {
        /// Key column names.
        key: Vec<String>,
    },
}

impl ChangelogMode {
    /// Whether rows may be updated or deleted (the stream ends with the
    /// row-kind column).
    pub fn is_updating(&self) -> bool {
        !matches!(self, Self::Append)
    }

    /// The mode of a stream merging streams of `modes`: the most general.
    pub fn merge<'a>(modes: impl IntoIterator<Item = &'a ChangelogMode>) -> ChangelogMode {
        let mut out = ChangelogMode::Append;
        for m in modes {
            out = match (&out, m) {
                (_, ChangelogMode::Retract) | (ChangelogMode::Retract, _) => ChangelogMode::Retract,
                (ChangelogMode::Append, m) => m.clone(),
                (a, ChangelogMode::Append) => a.clone(),
                (a, b) if a == b => a.clone(),
                _ => ChangelogMode::Retract,
            };
        }
        out
    }
}

impl std::fmt::Display for ChangelogMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Append => f.write_str("append-only"),
            Self::Retract => f.write_str("retracting"),
            Self::Upsert { key } => write!(f, "upserting by ({})", key.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_kinds_use_flinks_byte_values() {
        for (k, b, s) in [
            (RowKind::Insert, 0, "+I"),
            (RowKind::UpdateBefore, 1, "-U"),
            (RowKind::UpdateAfter, 2, "+U"),
            (RowKind::Delete, 3, "-D"),
        ] {
            assert_eq!(k.as_i8(), b);
            assert_eq!(RowKind::from_i8(b).unwrap(), k);
            assert_eq!(RowKind::from_short_string(s), Some(k));
            assert_eq!(k.to_string(), s);
        }
        assert!(RowKind::from_i8(4).is_err());
    }

    #[test]
    fn a_user_column_named_op_is_not_a_changelog() {
        let user = Schema::new(vec![Field::new("_op", DataType::Utf8, false)]);
        assert!(!is_changelog_schema(&user));
        let user = Schema::new(vec![Field::new("_op", DataType::Int8, false)]);
        assert!(!is_changelog_schema(&user));
        assert!(is_changelog_schema(&Schema::new(vec![row_kind_field()])));
        assert!(check_user_schema(&Schema::new(vec![row_kind_field()]), "t").is_err());
    }

    #[test]
    fn modes_are_declared_along_a_plan_and_checked_against_the_layout() {
        use crate::api::StreamExecutionEnvironment;
        use crate::spec::MemorySourceSpec;
        use crate::time::WatermarkStrategy;
        use datafusion_expr::col;
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("_op", DataType::Utf8, false),
        ]));
        let env = StreamExecutionEnvironment::new(Default::default());
        let rows = MemorySourceSpec::new(Arc::clone(&schema), vec![]);
        let plain = env
            .from_source(rows, WatermarkStrategy::no_watermarks(), "plain")
            .unwrap();
        // A user's `_op` column makes no changelog.
        assert_eq!(plain.changelog_mode(), ChangelogMode::Append);
        let counted = plain
            .key_by(&["k"])
            .unwrap()
            .group_aggregate(vec![crate::spec::AggregateSpec::count_star().alias("n")])
            .unwrap();
        assert_eq!(counted.changelog_mode(), ChangelogMode::Retract);
        // A projection passes the mode on; keeping the key, it can upsert.
        let kept = counted
            .project(vec![col("k"), col("n"), col(ROW_KIND_COLUMN)])
            .unwrap();
        assert_eq!(kept.changelog_mode(), ChangelogMode::Retract);
        assert_eq!(
            kept.upsert_by(&["k".into()]),
            ChangelogMode::Upsert {
                key: vec!["k".into()]
            }
        );
        assert_eq!(
            counted.changelog_mode(),
            ChangelogMode::Upsert {
                key: vec!["k".into()]
            }
        );
        kept.sink_to(crate::spec::CollectHandle::new(), "rows")
            .unwrap();
        env.job_graph("ok").unwrap();
        // Dropping the row kind of an updating stream is refused.
        let env = StreamExecutionEnvironment::new(Default::default());
        let rows = MemorySourceSpec::new(Arc::clone(&schema), vec![]);
        env.from_source(rows, WatermarkStrategy::no_watermarks(), "plain")
            .unwrap()
            .key_by(&["k"])
            .unwrap()
            .group_aggregate(vec![crate::spec::AggregateSpec::count_star().alias("n")])
            .unwrap()
            .project(vec![col("k"), col("n")])
            .unwrap()
            .sink_to(crate::spec::CollectHandle::new(), "rows")
            .unwrap();
        let e = env.job_graph("dropped").unwrap_err().to_string();
        assert!(e.contains("retracting, so they must end with"), "{e}");
    }

    #[test]
    fn merged_modes_take_the_most_general() {
        let up = ChangelogMode::Upsert {
            key: vec!["k".into()],
        };
        let a = ChangelogMode::Append;
        assert_eq!(ChangelogMode::merge([&a, &a]), a);
        assert_eq!(ChangelogMode::merge([&a, &up]), up);
        assert_eq!(
            ChangelogMode::merge([&up, &ChangelogMode::Retract]),
            ChangelogMode::Retract
        );
        let other = ChangelogMode::Upsert {
            key: vec!["j".into()],
        };
        assert_eq!(ChangelogMode::merge([&up, &other]), ChangelogMode::Retract);
    }
}
