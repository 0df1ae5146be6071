//! Row pattern recognition's plan: SQL's `MATCH_RECOGNIZE` (Flink's CEP in
//! SQL). Rows of each partition, in time order, are matched against a
//! regular expression over pattern variables; each match becomes one row of
//! measures.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{Result, WeirError};
use crate::spec::AggregateSpec;
use crate::time::{check_timestamp_column, column_list};
use crate::wire::ExprNode;

/// A row pattern: a regular expression over pattern variables (indices
/// into [`MatchRecognizeSpec::variables`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MatchPattern {
    /// One row mapped to the variable.
    Var(usize),
    /// The parts one after the other, on consecutive rows.
    Concat(Vec<MatchPattern>),
    /// One of the parts, the leftmost preferred.
    Alternation(Vec<MatchPattern>),
    /// The part `min` to `max` times (`None`: no limit); greedy takes as
    /// many rows as it can (a row its variable accepts is never left for
    /// what follows, as in Flink), reluctant as few.
    Repeat {
        /// The repeated part.
        inner: Box<MatchPattern>,
        /// Fewest repetitions.
        min: u32,
        /// Most repetitions.
        max: Option<u32>,
        /// Greedy (default) or reluctant (`*?`, `+?`, `??`, `{n,m}?`).
        greedy: bool,
    },
}

impl MatchPattern {
    /// Whether the pattern can match no row at all.
    pub fn nullable(&self) -> bool {
        match self {
            MatchPattern::Var(_) => false,
            MatchPattern::Concat(parts) => parts.iter().all(MatchPattern::nullable),
            MatchPattern::Alternation(parts) => parts.iter().any(MatchPattern::nullable),
            MatchPattern::Repeat { inner, min, .. } => *min == 0 || inner.nullable(),
        }
    }

    /// Whether the pattern can end with a greedy quantifier that may take
    /// more than one row (Flink refuses those: a match could never know it
    /// ended).
    pub fn ends_greedy(&self) -> bool {
        match self {
            MatchPattern::Var(_) => false,
            MatchPattern::Concat(parts) => parts.last().is_some_and(MatchPattern::ends_greedy),
            MatchPattern::Alternation(parts) => parts.iter().any(MatchPattern::ends_greedy),
            MatchPattern::Repeat {
                inner,
                min,
                max,
                greedy,
            } => (*greedy && max.is_none_or(|m| m > *min && m > 1)) || inner.ends_greedy(),
        }
    }

    /// The variables the pattern names.
    pub fn variables(&self, out: &mut Vec<usize>) {
        match self {
            MatchPattern::Var(v) => out.push(*v),
            MatchPattern::Concat(p) | MatchPattern::Alternation(p) => {
                p.iter().for_each(|p| p.variables(out))
            }
            MatchPattern::Repeat { inner, .. } => inner.variables(out),
        }
    }

    /// The pattern in SQL, with `names` for the variables.
    pub fn sql(&self, names: &[String]) -> String {
        match self {
            MatchPattern::Var(v) => names.get(*v).cloned().unwrap_or_else(|| format!("#{v}")),
            MatchPattern::Concat(p) => p.iter().map(|p| p.sql(names)).collect::<Vec<_>>().join(" "),
            MatchPattern::Alternation(p) => format!(
                "({})",
                p.iter()
                    .map(|p| p.sql(names))
                    .collect::<Vec<_>>()
                    .join(" | ")
            ),
            MatchPattern::Repeat {
                inner,
                min,
                max,
                greedy,
            } => {
                let q = match (min, max) {
                    (0, None) => "*".to_string(),
                    (1, None) => "+".to_string(),
                    (0, Some(1)) => "?".to_string(),
                    (n, None) => format!("{{{n},}}"),
                    (n, Some(m)) if n == m => format!("{{{n}}}"),
                    (n, Some(m)) => format!("{{{n},{m}}}"),
                };
                let inner = match inner.as_ref() {
                    MatchPattern::Var(_) => inner.sql(names),
                    other => format!("({})", other.sql(names)),
                };
                format!("{inner}{q}{}", if *greedy { "" } else { "?" })
            }
        }
    }
}

/// Where matching resumes after a match (`AFTER MATCH SKIP …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AfterMatchSkip {
    /// `PAST LAST ROW`: after the match's last row; matches never overlap.
    PastLastRow,
    /// `TO NEXT ROW` (Flink's default): at the row after the match's first.
    ToNextRow,
    /// `TO FIRST v`: at the first row mapped to the variable.
    ToFirst(usize),
    /// `TO LAST v`: at the last row mapped to the variable.
    ToLast(usize),
}

/// An aggregate over the rows of a variable (or of the whole match).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum NavAggregate {
    /// `COUNT(v.col)`: non-null values.
    Count,
    /// `COUNT(*)` / `COUNT(v.*)`: rows.
    CountRows,
    /// `SUM(v.col)`.
    Sum,
    /// `MIN(v.col)`.
    Min,
    /// `MAX(v.col)`.
    Max,
}

/// What a navigation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum NavKind {
    /// `LAST(v.col, n)`: the n-th row from the last one mapped to `v` (in
    /// a DEFINE of `v`, the current row is the last); `v.col` is `n = 0`.
    Last,
    /// `FIRST(v.col, n)`: the n-th row from the first one mapped to `v`.
    First,
    /// `PREV(col, n)`: the row `n` rows before the current one in its
    /// partition (a physical offset; Flink 2.3 refuses these).
    Prev,
    /// An aggregate over the rows mapped to `v` so far.
    Aggregate(NavAggregate),
}

/// A value a DEFINE condition or a measure reads from the rows of a match:
/// it becomes the column `__nav{i}` of the row the expression is evaluated
/// over.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Navigation {
    /// What it reads.
    pub kind: NavKind,
    /// The pattern variable; `None` for every row of the match.
    pub var: Option<usize>,
    /// The input column; `None` only for `COUNT(*)`.
    pub column: Option<String>,
    /// The offset (`n` above).
    pub offset: u32,
}

impl Navigation {
    /// The name of its column.
    pub fn column_name(i: usize) -> String {
        format!("__nav{i}")
    }

    /// Its column's field against the input schema.
    pub fn field(&self, i: usize, input: &Schema) -> Result<Field> {
        let name = Self::column_name(i);
        let column = |c: &Option<String>| -> Result<&Field> {
            let c = c
                .as_deref()
                .ok_or_else(|| WeirError::plan(format!("{name}: a navigation without a column")))?;
            input.field_with_name(c).map_err(|_| {
                WeirError::plan(format!(
                    "MATCH_RECOGNIZE: column '{c}' not found; available columns: {}",
                    column_list(input)
                ))
            })
        };
        let t = match self.kind {
            NavKind::Last | NavKind::First | NavKind::Prev => {
                column(&self.column)?.data_type().clone()
            }
            NavKind::Aggregate(NavAggregate::Count | NavAggregate::CountRows) => DataType::Int64,
            NavKind::Aggregate(NavAggregate::Min | NavAggregate::Max) => {
                column(&self.column)?.data_type().clone()
            }
            NavKind::Aggregate(NavAggregate::Sum) => {
                let c = column(&self.column)?.name().clone();
                AggregateSpec::sum(&c)
                    .output_field(input)?
                    .data_type()
                    .clone()
            }
        };
        Ok(Field::new(name, t, true))
    }
}

/// An expression of a DEFINE or MEASURES clause: over the input's columns
/// (DEFINE: the current row) followed by its navigations' columns
/// (MEASURES: its navigations' columns only).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MatchExpr {
    /// The expression.
    pub expr: ExprNode,
    /// The values it reads from the match.
    pub navigations: Vec<Navigation>,
}

impl MatchExpr {
    /// The schema it is evaluated over: the input's columns (when
    /// `with_row`), then one column per navigation.
    pub fn schema(&self, input: &Schema, with_row: bool) -> Result<SchemaRef> {
        let mut fields: Vec<Field> = if with_row {
            input.fields().iter().map(|f| f.as_ref().clone()).collect()
        } else {
            vec![]
        };
        for (i, n) in self.navigations.iter().enumerate() {
            fields.push(n.field(i, input)?);
        }
        Ok(Arc::new(Schema::new(fields)))
    }
}

/// `MATCH_RECOGNIZE`: per partition, in time order, each match of the
/// pattern becomes one row — the partition columns, then the measures
/// (Flink's `ONE ROW PER MATCH`). Ordered by event time, rows are matched
/// when the watermark passes them (rows behind it are dropped and counted);
/// by processing time, as they arrive.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MatchRecognizeSpec {
    /// `PARTITION BY` columns (none: one partition).
    pub keys: Vec<String>,
    /// The event-time column rows are ordered by; `None`: processing time.
    pub rowtime: Option<String>,
    /// The pattern variables' names.
    pub variables: Vec<String>,
    /// The pattern.
    pub pattern: MatchPattern,
    /// Per variable, its DEFINE condition (`None`: any row).
    pub defines: Vec<Option<MatchExpr>>,
    /// The measures and their names, in output order.
    pub measures: Vec<(MatchExpr, String)>,
    /// Where matching resumes after a match.
    pub skip: AfterMatchSkip,
    /// `WITHIN`: a match's last row is less than this many ms after its
    /// first.
    pub within_ms: Option<i64>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
}

impl MatchRecognizeSpec {
    /// The output: the partition columns, then the measures.
    pub fn output_schema(&self) -> Result<SchemaRef> {
        let mut fields: Vec<Field> = vec![];
        for k in &self.keys {
            fields.push(self.input_schema.field_with_name(k)?.clone());
        }
        for (m, name) in &self.measures {
            let schema = m.schema(&self.input_schema, false)?;
            let t = m.expr.to_physical(&schema)?.data_type(&schema)?;
            if fields.iter().any(|f| f.name() == name) {
                return Err(WeirError::plan(format!(
                    "MATCH_RECOGNIZE: measure '{name}' is already a column of the output"
                )));
            }
            fields.push(Field::new(name, t, true));
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Check columns, variables and the pattern.
    pub fn validate(&self) -> Result<()> {
        let plan = |m: String| WeirError::plan(format!("MATCH_RECOGNIZE: {m}"));
        for k in &self.keys {
            self.input_schema.index_of(k).map_err(|_| {
                plan(format!(
                    "partition column '{k}' not found; available columns: {}",
                    column_list(&self.input_schema)
                ))
            })?;
        }
        if let Some(rt) = &self.rowtime {
            check_timestamp_column(&self.input_schema, rt)?;
        }
        let mut used = vec![];
        self.pattern.variables(&mut used);
        if let Some(v) = used.iter().find(|&&v| v >= self.variables.len()) {
            return Err(plan(format!("pattern variable #{v} is not declared")));
        }
        if self.defines.len() != self.variables.len() {
            return Err(plan(format!(
                "{} DEFINE entries for {} variables",
                self.defines.len(),
                self.variables.len()
            )));
        }
        if self.pattern.nullable() {
            return Err(plan(format!(
                "the pattern ({}) can match no row at all; every match needs at least one row",
                self.pattern.sql(&self.variables)
            )));
        }
        let nav_var = |n: &Navigation| n.var.is_some_and(|v| v >= self.variables.len());
        for (i, d) in self.defines.iter().enumerate() {
            let Some(d) = d else { continue };
            if d.navigations.iter().any(nav_var) {
                return Err(plan("a DEFINE names an undeclared variable".into()));
            }
            let schema = d.schema(&self.input_schema, true)?;
            let t = d.expr.to_physical(&schema)?.data_type(&schema)?;
            if t != DataType::Boolean {
                return Err(plan(format!(
                    "DEFINE {} is {t}, not BOOLEAN",
                    self.variables[i]
                )));
            }
        }
        for (m, name) in &self.measures {
            if m.navigations.iter().any(nav_var) {
                return Err(plan(format!(
                    "measure '{name}' names an undeclared variable"
                )));
            }
            if m.navigations.iter().any(|n| n.kind == NavKind::Prev) {
                return Err(plan(format!(
                    "measure '{name}': PREV is for DEFINE conditions; use LAST or FIRST"
                )));
            }
        }
        if let Some(w) = self.within_ms
            && w <= 0
        {
            return Err(plan(format!(
                "WITHIN {w} ms: the interval must be positive"
            )));
        }
        if let AfterMatchSkip::ToFirst(v) | AfterMatchSkip::ToLast(v) = self.skip
            && v >= self.variables.len()
        {
            return Err(plan(format!(
                "AFTER MATCH SKIP to undeclared variable #{v}"
            )));
        }
        self.output_schema().map(|_| ())
    }
}

impl fmt::Display for MatchRecognizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MatchRecognize(partition [{}], order {}, pattern ({}), measures [{}])",
            self.keys.join(", "),
            self.rowtime.as_deref().unwrap_or("PROCTIME"),
            self.pattern.sql(&self.variables),
            self.measures
                .iter()
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}
