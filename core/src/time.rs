//! Event time: watermark strategies and window assigners.

use std::time::Duration;

use arrow::datatypes::{DataType, Schema, TimeUnit};

use crate::error::{Result, WeirError};
use crate::message::{Timestamp, Watermark};

/// How a source derives watermarks from its event-time column.
#[derive(Debug, Clone, PartialEq)]
pub enum WatermarkGenerator {
    /// `watermark = max_seen_ts - bound - 1`.
    BoundedOutOfOrderness(Duration),
    /// Timestamps never decrease: `watermark = max_seen_ts - 1`.
    Monotonous,
}

/// Which column carries event time and how watermarks follow it.
#[derive(Debug, Clone, PartialEq)]
pub struct WatermarkStrategy {
    /// Name of the event-time column (`Timestamp(Millisecond)` or `Int64` ms).
    pub timestamp_column: Option<String>,
    /// The watermark generator; `None` emits no watermarks before end of input.
    pub generator: Option<WatermarkGenerator>,
    /// After this long without data a source split is marked idle.
    pub idleness: Option<Duration>,
}

impl WatermarkStrategy {
    /// Watermarks trail the largest timestamp seen by `bound`.
    pub fn for_bounded_out_of_orderness(column: impl Into<String>, bound: Duration) -> Self {
        Self {
            timestamp_column: Some(column.into()),
            generator: Some(WatermarkGenerator::BoundedOutOfOrderness(bound)),
            idleness: None,
        }
    }

    /// Timestamps are ascending; watermarks follow the largest one seen.
    pub fn for_monotonous_timestamps(column: impl Into<String>) -> Self {
        Self {
            timestamp_column: Some(column.into()),
            generator: Some(WatermarkGenerator::Monotonous),
            idleness: None,
        }
    }

    /// No event time at all: the stream cannot feed event-time windows.
    pub fn no_watermarks() -> Self {
        Self {
            timestamp_column: None,
            generator: None,
            idleness: None,
        }
    }

    /// Mark a split idle after `timeout` without data.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// The watermark implied by the largest timestamp seen so far.
    pub fn watermark_for(&self, max_timestamp: Timestamp) -> Option<Watermark> {
        let bound = match self.generator.as_ref()? {
            WatermarkGenerator::BoundedOutOfOrderness(b) => b.as_millis() as i64,
            WatermarkGenerator::Monotonous => 0,
        };
        Some(Watermark(
            max_timestamp.saturating_sub(bound).saturating_sub(1),
        ))
    }

    /// Check the strategy against the source schema.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        if let Some(col) = &self.timestamp_column {
            check_timestamp_column(schema, col)?;
        }
        Ok(())
    }
}

/// Check that `column` exists in `schema` and holds millisecond event time.
pub fn check_timestamp_column(schema: &Schema, column: &str) -> Result<usize> {
    let idx = schema.index_of(column).map_err(|_| {
        WeirError::plan(format!(
            "event-time column '{column}' not found; available columns: {}",
            column_list(schema)
        ))
    })?;
    match schema.field(idx).data_type() {
        DataType::Timestamp(TimeUnit::Millisecond, _) | DataType::Int64 => Ok(idx),
        other => Err(WeirError::plan(format!(
            "event-time column '{column}' has type {other}; expected Timestamp(Millisecond) or Int64 milliseconds"
        ))),
    }
}

/// Comma-separated column names of a schema, for error messages.
pub fn column_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Assigns each record to windows by its event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowAssigner {
    /// Fixed-size, non-overlapping windows `[start, start + size)` with
    /// `start = ts - ((ts - offset) mod size)`.
    Tumbling {
        /// Window length in ms.
        size: i64,
        /// Offset of window starts from the epoch in ms.
        offset: i64,
    },
}

impl WindowAssigner {
    /// Reject nonsensical windows before the job runs.
    pub fn validate(&self) -> Result<()> {
        match *self {
            WindowAssigner::Tumbling { size, offset } => {
                if size <= 0 {
                    return Err(WeirError::plan(format!(
                        "tumbling window size must be positive, got {size} ms"
                    )));
                }
                if offset.abs() >= size {
                    return Err(WeirError::plan(format!(
                        "tumbling window offset {offset} ms must be smaller than the size {size} ms"
                    )));
                }
                Ok(())
            }
        }
    }

    /// Short human-readable form, as in Flink's plan names.
    pub fn describe(&self) -> String {
        match *self {
            WindowAssigner::Tumbling { size, offset: 0 } => {
                format!("TumblingEventTimeWindows({size})")
            }
            WindowAssigner::Tumbling { size, offset } => {
                format!("TumblingEventTimeWindows({size}, offset {offset})")
            }
        }
    }
}

/// Start of the tumbling window containing `ts` (non-negative modulo, so
/// timestamps before the epoch fall into the right window).
#[inline(always)]
pub fn tumbling_window_start(ts: i64, size: i64, offset: i64) -> i64 {
    ts.wrapping_sub(ts.wrapping_sub(offset).rem_euclid(size))
}

/// Builder for tumbling event-time windows, named as in Flink.
pub struct TumblingEventTimeWindows;

impl TumblingEventTimeWindows {
    /// Windows of `size`, aligned to the epoch.
    pub fn of(size: Duration) -> WindowAssigner {
        WindowAssigner::Tumbling {
            size: size.as_millis() as i64,
            offset: 0,
        }
    }

    /// Windows of `size` whose starts are shifted by `offset` from the epoch.
    pub fn with_offset(size: Duration, offset: Duration) -> WindowAssigner {
        WindowAssigner::Tumbling {
            size: size.as_millis() as i64,
            offset: offset.as_millis() as i64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumbling_start_handles_negative_timestamps() {
        assert_eq!(tumbling_window_start(0, 10, 0), 0);
        assert_eq!(tumbling_window_start(9, 10, 0), 0);
        assert_eq!(tumbling_window_start(10, 10, 0), 10);
        assert_eq!(tumbling_window_start(-1, 10, 0), -10);
        assert_eq!(tumbling_window_start(-10, 10, 0), -10);
        assert_eq!(tumbling_window_start(12, 10, 3), 3);
        assert_eq!(tumbling_window_start(2, 10, 3), -7);
    }

    #[test]
    fn bounded_watermark_is_max_minus_bound_minus_one() {
        let s = WatermarkStrategy::for_bounded_out_of_orderness("ts", Duration::from_secs(4));
        assert_eq!(s.watermark_for(10_000), Some(Watermark(5_999)));
        let m = WatermarkStrategy::for_monotonous_timestamps("ts");
        assert_eq!(m.watermark_for(10_000), Some(Watermark(9_999)));
    }

    #[test]
    fn zero_size_window_is_rejected() {
        let err = TumblingEventTimeWindows::of(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("must be positive"));
    }
}
