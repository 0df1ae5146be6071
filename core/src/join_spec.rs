//! The regular join's plan: SQL's `[INNER | LEFT | RIGHT | FULL] JOIN … ON`
//! of any two inputs, append-only or changelogs, with no time bound (Flink's
//! `StreamingJoinOperator`).

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion_physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError};
use crate::spec::{is_changelog_schema, row_kind_field};

/// Which rows of a join are kept without a partner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum JoinKind {
    /// Only pairs.
    #[default]
    Inner,
    /// Pairs, and left rows without one (right columns NULL).
    Left,
    /// Pairs, and right rows without one (left columns NULL).
    Right,
    /// Pairs, and rows of either side without one.
    Full,
}

impl JoinKind {
    /// Whether unmatched rows of input `side` (0 left, 1 right) are kept.
    pub fn outer(self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinKind::Left, 0) | (JoinKind::Right, 1) | (JoinKind::Full, _)
        )
    }

    /// SQL's name.
    pub fn sql(self) -> &'static str {
        match self {
            JoinKind::Inner => "INNER",
            JoinKind::Left => "LEFT OUTER",
            JoinKind::Right => "RIGHT OUTER",
            JoinKind::Full => "FULL OUTER",
        }
    }
}

/// A regular equi-join: rows of the two inputs with equal, non-NULL keys
/// pair up for as long as both are in the inputs' tables (a changelog
/// input's `-U`/`-D` rows take their row back out, retracting its pairs).
/// Its output is a changelog unless it is an inner join of two
/// append-only inputs.
#[derive(Clone)]
pub struct RegularJoinSpec {
    /// Which unmatched rows are kept.
    pub kind: JoinKind,
    /// Key columns of the left input.
    pub left_keys: Vec<String>,
    /// Key columns of the right input (same types, same order).
    pub right_keys: Vec<String>,
    /// Schema of the left input (ending with the row kind if a changelog).
    pub left_schema: SchemaRef,
    /// Schema of the right input.
    pub right_schema: SchemaRef,
    /// A further condition on each pair, over [`Self::pair_schema`]: part
    /// of the join (a left row whose pairs it all rejects is unmatched).
    pub residual: Option<Arc<dyn PhysicalExpr>>,
    /// How long a row is kept after it was last written, in processing
    /// time (`table.exec.state.ttl`); `None` keeps rows forever.
    pub state_ttl_ms: Option<i64>,
    /// Batch mode: the inputs are bounded, and the join emits its pairs and
    /// unmatched rows once, when both have ended (append-only output).
    pub bounded: bool,
}

impl fmt::Debug for RegularJoinSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Join({}, keys [{}] = [{}]",
            self.kind.sql(),
            self.left_keys.join(", "),
            self.right_keys.join(", ")
        )?;
        if let Some(r) = &self.residual {
            write!(f, ", where {r}")?;
        }
        write!(f, ")")
    }
}

/// The fields of `schema` without the row kind of a changelog.
pub fn data_fields(schema: &Schema) -> Vec<Field> {
    let n = schema.fields().len() - usize::from(is_changelog_schema(schema));
    schema.fields()[..n]
        .iter()
        .map(|f| f.as_ref().clone())
        .collect()
}

/// The fields of a joined row: `left`'s data columns, then `right`'s (a
/// right column whose name is taken gets the prefix `right_`); the fields
/// of side `i` are nullable when `nullable[i]`.
pub fn pair_fields(left: &Schema, right: &Schema, nullable: [bool; 2]) -> Vec<Field> {
    let mut fields: Vec<Field> = data_fields(left)
        .into_iter()
        .map(|f| {
            if nullable[0] {
                f.with_nullable(true)
            } else {
                f
            }
        })
        .collect();
    for f in data_fields(right) {
        let name = if fields.iter().any(|x| x.name() == f.name()) {
            format!("right_{}", f.name())
        } else {
            f.name().clone()
        };
        let f = f.with_name(name);
        fields.push(if nullable[1] {
            f.with_nullable(true)
        } else {
            f
        });
    }
    fields
}

impl RegularJoinSpec {
    /// Whether input `side` is a changelog.
    pub fn changelog_input(&self, side: usize) -> bool {
        is_changelog_schema(if side == 0 {
            &self.left_schema
        } else {
            &self.right_schema
        })
    }

    /// Whether the output is a changelog: any outer join, or any updating
    /// input (Flink: an inner join of append-only inputs is append-only).
    pub fn updating(&self) -> bool {
        !self.bounded
            && (self.kind != JoinKind::Inner || self.changelog_input(0) || self.changelog_input(1))
    }

    /// A joined row without the row kind: the left input's columns, then
    /// the right's (a right column whose name is taken gets the prefix
    /// `right_`); the columns of a side that may be missing are nullable.
    pub fn pair_schema(&self) -> Schema {
        Schema::new(pair_fields(
            &self.left_schema,
            &self.right_schema,
            [self.kind.outer(1), self.kind.outer(0)],
        ))
    }

    /// The output: [`Self::pair_schema`], then the row kind if updating.
    pub fn output_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .pair_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        if self.updating() {
            fields.push(row_kind_field());
        }
        Arc::new(Schema::new(fields))
    }

    /// Check keys against the inputs.
    pub fn validate(&self) -> Result<()> {
        let plan = WeirError::plan;
        if self.left_keys.len() != self.right_keys.len() || self.left_keys.is_empty() {
            return Err(plan(format!(
                "join has {} left keys and {} right keys (at least one pair is needed)",
                self.left_keys.len(),
                self.right_keys.len()
            )));
        }
        for (l, r) in self.left_keys.iter().zip(&self.right_keys) {
            let lt = self.left_schema.field_with_name(l).map_err(|_| {
                plan(format!(
                    "join key '{l}' is not a column of the left input ({})",
                    crate::time::column_list(&self.left_schema)
                ))
            })?;
            let rt = self.right_schema.field_with_name(r).map_err(|_| {
                plan(format!(
                    "join key '{r}' is not a column of the right input ({})",
                    crate::time::column_list(&self.right_schema)
                ))
            })?;
            if lt.data_type() != rt.data_type() {
                return Err(plan(format!(
                    "join key '{l}' is {} on the left but '{r}' is {} on the right",
                    lt.data_type(),
                    rt.data_type()
                )));
            }
        }
        if let Some(ttl) = self.state_ttl_ms
            && ttl <= 0
        {
            return Err(plan(format!(
                "join state TTL must be positive, not {ttl} ms"
            )));
        }
        Ok(())
    }
}

/// An event-time temporal join (SQL's `JOIN v FOR SYSTEM_TIME AS OF
/// l.rowtime`): each left row joins the version of its key that the
/// versioned right input held at the left row's time — the latest right
/// row with a time not after it — once the watermark has passed that time
/// (Flink's `TemporalRowTimeJoinOperator`). The right input is a versioned
/// table: an append-only stream whose every row is its key's next version,
/// or an upsert changelog whose `-D` rows end a key's versions (`-U` rows
/// are ignored, as Flink's planner asks for updates without them). The
/// output is append-only and keeps the left row's time.
#[derive(Clone)]
pub struct TemporalJoinSpec {
    /// `Inner`, or `Left` to keep left rows without a version.
    pub kind: JoinKind,
    /// Key columns of the left input.
    pub left_keys: Vec<String>,
    /// Key columns of the right input (its primary key; same types).
    pub right_keys: Vec<String>,
    /// Event-time column of the left input (the `AS OF` time).
    pub left_rowtime: String,
    /// Event-time column of the right input (each version's start).
    pub right_rowtime: String,
    /// Schema of the left input (append-only).
    pub left_schema: SchemaRef,
    /// Schema of the right input (ending with the row kind if a changelog).
    pub right_schema: SchemaRef,
    /// A further condition on each pair, over [`Self::output_schema`]: a
    /// left row whose version fails it is unmatched.
    pub residual: Option<Arc<dyn PhysicalExpr>>,
}

impl fmt::Debug for TemporalJoinSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TemporalJoin({}, keys [{}] = [{}], as of {}",
            self.kind.sql(),
            self.left_keys.join(", "),
            self.right_keys.join(", "),
            self.left_rowtime
        )?;
        if let Some(r) = &self.residual {
            write!(f, ", where {r}")?;
        }
        write!(f, ")")
    }
}

impl TemporalJoinSpec {
    /// The output: the left input's columns, then the right's data columns
    /// (nullable in a left join; a taken name gets the prefix `right_`).
    pub fn output_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(pair_fields(
            &self.left_schema,
            &self.right_schema,
            [false, self.kind == JoinKind::Left],
        )))
    }

    /// Check keys, times and the join kind against the inputs.
    pub fn validate(&self) -> Result<()> {
        let plan = WeirError::plan;
        if !matches!(self.kind, JoinKind::Inner | JoinKind::Left) {
            return Err(plan(format!(
                "a temporal join is INNER or LEFT OUTER, not {}",
                self.kind.sql()
            )));
        }
        if is_changelog_schema(&self.left_schema) {
            return Err(plan(
                "the left input of a temporal join must be append-only".to_string(),
            ));
        }
        RegularJoinSpec {
            kind: self.kind,
            left_keys: self.left_keys.clone(),
            right_keys: self.right_keys.clone(),
            left_schema: Arc::clone(&self.left_schema),
            right_schema: Arc::clone(&self.right_schema),
            residual: None,
            state_ttl_ms: None,
            bounded: false,
        }
        .validate()?;
        crate::time::check_timestamp_column(&self.left_schema, &self.left_rowtime)?;
        crate::time::check_timestamp_column(&self.right_schema, &self.right_rowtime)?;
        Ok(())
    }
}
