//! The OVER aggregation's plan: SQL's `agg(…) OVER (PARTITION BY … ORDER BY
//! time ROWS|RANGE BETWEEN … PRECEDING AND CURRENT ROW)`.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};

use crate::error::{Result, WeirError};
use crate::spec::AggregateSpec;
use crate::time::{check_timestamp_column, column_list};

/// Which rows before the current one an OVER aggregate sees (always up to
/// and including the current row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OverFrame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`: the current row and the
    /// `n` before it in time order; `None` for `UNBOUNDED PRECEDING`.
    Rows(Option<u64>),
    /// `RANGE BETWEEN INTERVAL … PRECEDING AND CURRENT ROW`: every row whose
    /// time is at most this many ms before the current row's, and the rows
    /// of the same time after it (its peers); `None` for `UNBOUNDED`.
    Range(Option<i64>),
}

impl fmt::Display for OverFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverFrame::Rows(None) => write!(f, "ROWS UNBOUNDED PRECEDING"),
            OverFrame::Rows(Some(n)) => write!(f, "ROWS {n} PRECEDING"),
            OverFrame::Range(None) => write!(f, "RANGE UNBOUNDED PRECEDING"),
            OverFrame::Range(Some(ms)) => write!(f, "RANGE {ms} ms PRECEDING"),
        }
    }
}

/// An OVER aggregation: each input row once, with aggregates over its
/// frame among the rows of its partition. Ordered by event time, a row is
/// emitted when the watermark passes it (rows are worked in time order;
/// rows behind the watermark on arrival are dropped and counted, as in
/// Flink); ordered by processing time, on arrival.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct OverAggregateSpec {
    /// `PARTITION BY` columns (none: one partition).
    pub keys: Vec<String>,
    /// The event-time column rows are ordered by; `None` orders them by
    /// processing time (arrival).
    pub rowtime: Option<String>,
    /// The frame.
    pub frame: OverFrame,
    /// Aggregates, in output order after the input's columns.
    pub aggregates: Vec<AggregateSpec>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
}

impl OverAggregateSpec {
    /// The output: the input's columns, then one per aggregate.
    pub fn output_schema(&self) -> Result<SchemaRef> {
        let mut fields: Vec<Field> = self
            .input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for a in &self.aggregates {
            let f = a.output_field(&self.input_schema)?;
            if fields.iter().any(|x| x.name() == f.name()) {
                return Err(WeirError::plan(format!(
                    "OVER aggregate {a}: its output name '{}' is already a column",
                    f.name()
                )));
            }
            fields.push(f.as_ref().clone());
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Check columns and the frame.
    pub fn validate(&self) -> Result<()> {
        for k in &self.keys {
            self.input_schema.index_of(k).map_err(|_| {
                WeirError::plan(format!(
                    "OVER partition column '{k}' not found; available columns: {}",
                    column_list(&self.input_schema)
                ))
            })?;
        }
        if let Some(rt) = &self.rowtime {
            check_timestamp_column(&self.input_schema, rt)?;
        }
        if let OverFrame::Range(Some(ms)) = self.frame
            && ms < 0
        {
            return Err(WeirError::plan(format!(
                "OVER RANGE frame of {ms} ms: the preceding interval cannot be negative"
            )));
        }
        if self.aggregates.is_empty() {
            return Err(WeirError::plan("an OVER aggregation without aggregates"));
        }
        self.output_schema().map(|_| ())
    }
}
