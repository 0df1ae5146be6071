//! Event time: watermark strategies and window assigners.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, Schema, TimeUnit};

use crate::error::{Result, WeirError};
use crate::message::{Timestamp, Watermark};

/// Generates watermarks from the event times a source split has seen
/// (Flink's `WatermarkGenerator`): called with each batch's timestamps, and
/// asked for the current watermark when one is due (periodically). A custom
/// generator can hold any state, e.g. per-partition maxima or a punctuation.
pub trait WatermarkGenerator: Send {
    /// The event times of a batch.
    fn on_timestamps(&mut self, timestamps: &[Timestamp]);
    /// The watermark to emit now, if any (it may not go back; smaller values
    /// are ignored).
    fn current_watermark(&self) -> Option<Watermark>;
}

/// Makes one [`WatermarkGenerator`] per source subtask.
pub type WatermarkGeneratorFactory = Arc<dyn Fn() -> Box<dyn WatermarkGenerator> + Send + Sync>;

/// How a source derives watermarks from its event-time column.
#[derive(Clone)]
pub enum WatermarkKind {
    /// `watermark = max_seen_ts - bound - 1`.
    BoundedOutOfOrderness(Duration),
    /// Timestamps never decrease: `watermark = max_seen_ts - 1`.
    Monotonous,
    /// A user generator.
    Custom(WatermarkGeneratorFactory),
}

impl std::fmt::Debug for WatermarkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatermarkKind::BoundedOutOfOrderness(b) => write!(f, "BoundedOutOfOrderness({b:?})"),
            WatermarkKind::Monotonous => write!(f, "Monotonous"),
            WatermarkKind::Custom(_) => write!(f, "Custom"),
        }
    }
}

impl PartialEq for WatermarkKind {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::BoundedOutOfOrderness(a), Self::BoundedOutOfOrderness(b)) => a == b,
            (Self::Monotonous, Self::Monotonous) => true,
            (Self::Custom(a), Self::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Tracks the largest timestamp; the watermark trails it by `bound + 1`.
struct BoundedOutOfOrderness {
    bound: i64,
    max: Timestamp,
}

impl WatermarkGenerator for BoundedOutOfOrderness {
    fn on_timestamps(&mut self, timestamps: &[Timestamp]) {
        if let Some(&m) = timestamps.iter().max() {
            self.max = self.max.max(m);
        }
    }

    fn current_watermark(&self) -> Option<Watermark> {
        (self.max != i64::MIN)
            .then(|| Watermark(self.max.saturating_sub(self.bound).saturating_sub(1)))
    }
}

/// Which column carries event time and how watermarks follow it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WatermarkStrategy {
    /// Name of the event-time column (`Timestamp(Millisecond)` or `Int64` ms).
    pub timestamp_column: Option<String>,
    /// The watermark generator; `None` emits no watermarks before end of input.
    pub generator: Option<WatermarkKind>,
    /// After this long without data a source split is marked idle.
    pub idleness: Option<Duration>,
}

impl WatermarkStrategy {
    /// Watermarks trail the largest timestamp seen by `bound`.
    pub fn for_bounded_out_of_orderness(column: impl Into<String>, bound: Duration) -> Self {
        Self {
            timestamp_column: Some(column.into()),
            generator: Some(WatermarkKind::BoundedOutOfOrderness(bound)),
            idleness: None,
        }
    }

    /// Timestamps are ascending; watermarks follow the largest one seen.
    pub fn for_monotonous_timestamps(column: impl Into<String>) -> Self {
        Self {
            timestamp_column: Some(column.into()),
            generator: Some(WatermarkKind::Monotonous),
            idleness: None,
        }
    }

    /// Watermarks from a user generator over the event times of `column`.
    pub fn for_generator(
        column: impl Into<String>,
        factory: impl Fn() -> Box<dyn WatermarkGenerator> + Send + Sync + 'static,
    ) -> Self {
        Self {
            timestamp_column: Some(column.into()),
            generator: Some(WatermarkKind::Custom(Arc::new(factory))),
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

    /// A generator for one source subtask, if the strategy has one.
    pub fn create_generator(&self) -> Option<Box<dyn WatermarkGenerator>> {
        Some(match self.generator.as_ref()? {
            WatermarkKind::BoundedOutOfOrderness(b) => Box::new(BoundedOutOfOrderness {
                bound: b.as_millis() as i64,
                max: i64::MIN,
            }),
            WatermarkKind::Monotonous => Box::new(BoundedOutOfOrderness {
                bound: 0,
                max: i64::MIN,
            }),
            WatermarkKind::Custom(factory) => factory(),
        })
    }

    /// The watermark implied by the largest timestamp seen so far.
    pub fn watermark_for(&self, max_timestamp: Timestamp) -> Option<Watermark> {
        let mut g = self.create_generator()?;
        g.on_timestamps(&[max_timestamp]);
        g.current_watermark()
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
///
/// Tumbling, sliding and cumulating windows are unions of aligned *panes*
/// (tumbling: the window itself; sliding: `gcd(size, slide)`; cumulating:
/// `step`). A record is aggregated once, into its pane; a window's result
/// merges the panes it spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WindowAssigner {
    /// Fixed-size, non-overlapping windows `[start, start + size)` with
    /// `start = ts - ((ts - offset) mod size)`.
    Tumbling {
        /// Window length in ms.
        size: i64,
        /// Offset of window starts from the epoch in ms.
        offset: i64,
    },
    /// Windows of `size` starting every `slide` (Flink's sliding windows,
    /// SQL's HOP).
    Sliding {
        /// Window length in ms.
        size: i64,
        /// Distance between window starts in ms.
        slide: i64,
        /// Offset of window starts from the epoch in ms.
        offset: i64,
    },
    /// SQL's CUMULATE: windows `[s, s + step)`, `[s, s + 2 step)`, … up to
    /// `[s, s + max_size)`, with `s = ts - ((ts - offset) mod max_size)`.
    Cumulate {
        /// Growth of each successive window in ms.
        step: i64,
        /// Size of the largest window of a cycle in ms.
        max_size: i64,
        /// Offset of cycle starts from the epoch in ms.
        offset: i64,
    },
    /// Per-key sessions: a record opens `[ts, ts + gap)`; windows that
    /// overlap or touch merge.
    Session {
        /// Inactivity gap in ms.
        gap: i64,
    },
    /// Every `size` rows of a key, in arrival order (Flink's `countWindow`:
    /// a global window with a purging count trigger). Results have no
    /// window bounds.
    Count {
        /// Rows per window.
        size: i64,
    },
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl WindowAssigner {
    /// Reject nonsensical windows before the job runs.
    pub fn validate(&self) -> Result<()> {
        let positive = |what: &str, v: i64| {
            if v <= 0 {
                Err(WeirError::plan(format!(
                    "window {what} must be positive, got {v} ms"
                )))
            } else {
                Ok(())
            }
        };
        match *self {
            WindowAssigner::Tumbling { size, offset } => {
                positive("size", size)?;
                if offset.abs() >= size {
                    return Err(WeirError::plan(format!(
                        "tumbling window offset {offset} ms must be smaller than the size {size} ms"
                    )));
                }
            }
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => {
                positive("size", size)?;
                positive("slide", slide)?;
                if slide > size {
                    return Err(WeirError::plan(format!(
                        "sliding window slide {slide} ms is larger than its size {size} ms; records between windows would be lost"
                    )));
                }
                if offset.abs() >= slide {
                    return Err(WeirError::plan(format!(
                        "sliding window offset {offset} ms must be smaller than the slide {slide} ms"
                    )));
                }
            }
            WindowAssigner::Cumulate {
                step,
                max_size,
                offset,
            } => {
                positive("step", step)?;
                positive("max size", max_size)?;
                if max_size % step != 0 {
                    return Err(WeirError::plan(format!(
                        "cumulate window max size {max_size} ms must be a multiple of the step {step} ms"
                    )));
                }
                if offset.abs() >= max_size {
                    return Err(WeirError::plan(format!(
                        "cumulate window offset {offset} ms must be smaller than the max size {max_size} ms"
                    )));
                }
            }
            WindowAssigner::Session { gap } => positive("session gap", gap)?,
            WindowAssigner::Count { size } => {
                if size <= 0 {
                    return Err(WeirError::plan(format!(
                        "count window size must be positive, got {size}"
                    )));
                }
            }
        }
        Ok(())
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
            WindowAssigner::Sliding { size, slide, .. } => {
                format!("SlidingEventTimeWindows({size}, {slide})")
            }
            WindowAssigner::Cumulate { step, max_size, .. } => {
                format!("CumulativeEventTimeWindows({step}, {max_size})")
            }
            WindowAssigner::Session { gap } => format!("EventTimeSessionWindows({gap})"),
            WindowAssigner::Count { size } => format!("CountWindow({size})"),
        }
    }

    /// Pane length and offset; `None` for session windows, which have no
    /// fixed panes.
    pub fn pane(&self) -> Option<(i64, i64)> {
        match *self {
            WindowAssigner::Tumbling { size, offset } => Some((size, offset)),
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => Some((gcd(size, slide), offset)),
            WindowAssigner::Cumulate { step, offset, .. } => Some((step, offset)),
            WindowAssigner::Session { .. } | WindowAssigner::Count { .. } => None,
        }
    }

    /// The windows `(start, end)` that contain the pane starting at
    /// `pane_start`, in increasing order of end.
    pub fn windows_of_pane(&self, pane_start: i64) -> Vec<(i64, i64)> {
        match *self {
            WindowAssigner::Tumbling { size, .. } => vec![(pane_start, pane_start + size)],
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => {
                let mut out = Vec::new();
                let mut start = pane_start - (pane_start - offset).rem_euclid(slide);
                while start + size > pane_start {
                    out.push((start, start + size));
                    start -= slide;
                }
                out.reverse();
                out
            }
            WindowAssigner::Cumulate {
                step,
                max_size,
                offset,
            } => {
                let cycle = pane_start - (pane_start - offset).rem_euclid(max_size);
                (1..=max_size / step)
                    .map(|k| (cycle, cycle + k * step))
                    .filter(|&(_, end)| end > pane_start)
                    .collect()
            }
            WindowAssigner::Session { .. } | WindowAssigner::Count { .. } => vec![],
        }
    }

    /// The latest end among the windows containing the pane at `pane_start`.
    pub fn last_window_end_of_pane(&self, pane_start: i64) -> i64 {
        match *self {
            WindowAssigner::Tumbling { size, .. } => pane_start + size,
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => pane_start - (pane_start - offset).rem_euclid(slide) + size,
            WindowAssigner::Cumulate {
                max_size, offset, ..
            } => pane_start - (pane_start - offset).rem_euclid(max_size) + max_size,
            WindowAssigner::Session { .. } | WindowAssigner::Count { .. } => pane_start,
        }
    }
}

impl WindowAssigner {
    /// The windows `[start, end)` an event at `ts` belongs to, for the
    /// aligned assigners (tumbling, sliding, cumulating); sessions and
    /// count windows have none known from the event alone.
    pub fn windows_of(&self, ts: i64, out: &mut Vec<(i64, i64)>) {
        match *self {
            WindowAssigner::Tumbling { size, offset } => {
                let start = tumbling_window_start(ts, size, offset);
                out.push((start, start + size));
            }
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => {
                // Latest start first, as Flink's sliding assigner lists them.
                let mut start = tumbling_window_start(ts, slide, offset);
                while start > ts - size {
                    out.push((start, start + size));
                    start -= slide;
                }
            }
            WindowAssigner::Cumulate {
                step,
                max_size,
                offset,
            } => {
                let cycle = tumbling_window_start(ts, max_size, offset);
                let mut end = tumbling_window_start(ts, step, offset) + step;
                while end <= cycle + max_size {
                    out.push((cycle, end));
                    end += step;
                }
            }
            WindowAssigner::Session { .. } | WindowAssigner::Count { .. } => {}
        }
    }
}

/// Start of the tumbling window (or pane) containing `ts` (non-negative
/// modulo, so timestamps before the epoch fall into the right window).
#[inline(always)]
pub fn tumbling_window_start(ts: i64, size: i64, offset: i64) -> i64 {
    ts.wrapping_sub(ts.wrapping_sub(offset).rem_euclid(size))
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// When a window emits, besides its end (Flink's triggers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Trigger {
    /// Only when time passes the window's end (event- or processing-time
    /// trigger, after the window's clock).
    #[default]
    OnWindowEnd,
    /// Also early: every `interval` ms of event time (each time the
    /// watermark crosses a multiple of it), every open window with data
    /// emits its current result.
    ContinuousEventTime {
        /// Early-firing interval in ms.
        interval: i64,
    },
    /// Also early: every `interval` ms of wall clock.
    ContinuousProcessingTime {
        /// Early-firing interval in ms.
        interval: i64,
    },
    /// Instead of at the end: each time a key's window has received another
    /// `count` records, in arrival order (Flink's `CountTrigger`; it does not
    /// fire at the window end). Tumbling windows.
    Count {
        /// Records per firing.
        count: u64,
    },
}

impl Trigger {
    /// Early firing every `interval` of event time.
    pub fn continuous_event_time(interval: Duration) -> Self {
        Trigger::ContinuousEventTime {
            interval: ms(interval),
        }
    }

    /// Fire every `count` records of a key's window.
    pub fn count(count: u64) -> Self {
        Trigger::Count { count }
    }

    /// Early firing every `interval` of wall clock.
    pub fn continuous_processing_time(interval: Duration) -> Self {
        Trigger::ContinuousProcessingTime {
            interval: ms(interval),
        }
    }
}

/// Windows and the clock they follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Window geometry.
    pub assigner: WindowAssigner,
    /// Wall clock (true) or event time (false).
    pub processing_time: bool,
}

impl From<WindowAssigner> for Windows {
    fn from(assigner: WindowAssigner) -> Self {
        Self {
            assigner,
            processing_time: false,
        }
    }
}

/// Builder for tumbling processing-time windows, named as in Flink: rows
/// are assigned by the wall clock when they reach the window operator, and
/// windows fire when the clock passes their end.
pub struct TumblingProcessingTimeWindows;

impl TumblingProcessingTimeWindows {
    /// Windows of `size`.
    pub fn of(size: Duration) -> Windows {
        Windows {
            assigner: TumblingEventTimeWindows::of(size),
            processing_time: true,
        }
    }
}

/// Builder for processing-time session windows: a key's session closes
/// once the wall clock has gone `gap` without a record of it.
pub struct ProcessingTimeSessionWindows;

impl ProcessingTimeSessionWindows {
    /// Sessions closed by `gap` of wall-clock inactivity.
    pub fn with_gap(gap: Duration) -> Windows {
        Windows {
            assigner: EventTimeSessionWindows::with_gap(gap),
            processing_time: true,
        }
    }
}

/// Builder for sliding processing-time windows.
pub struct SlidingProcessingTimeWindows;

impl SlidingProcessingTimeWindows {
    /// Windows of `size` every `slide`.
    pub fn of(size: Duration, slide: Duration) -> Windows {
        Windows {
            assigner: SlidingEventTimeWindows::of(size, slide),
            processing_time: true,
        }
    }
}

/// Builder for tumbling event-time windows, named as in Flink.
pub struct TumblingEventTimeWindows;

impl TumblingEventTimeWindows {
    /// Windows of `size`, aligned to the epoch.
    pub fn of(size: Duration) -> WindowAssigner {
        WindowAssigner::Tumbling {
            size: ms(size),
            offset: 0,
        }
    }

    /// Windows of `size` whose starts are shifted by `offset` from the epoch.
    pub fn with_offset(size: Duration, offset: Duration) -> WindowAssigner {
        WindowAssigner::Tumbling {
            size: ms(size),
            offset: ms(offset),
        }
    }
}

/// Builder for sliding event-time windows, named as in Flink.
pub struct SlidingEventTimeWindows;

impl SlidingEventTimeWindows {
    /// Windows of `size` every `slide`.
    pub fn of(size: Duration, slide: Duration) -> WindowAssigner {
        WindowAssigner::Sliding {
            size: ms(size),
            slide: ms(slide),
            offset: 0,
        }
    }
}

/// Builder for cumulating event-time windows (SQL's CUMULATE).
pub struct CumulativeEventTimeWindows;

impl CumulativeEventTimeWindows {
    /// Windows growing by `step` up to `max_size`.
    pub fn of(step: Duration, max_size: Duration) -> WindowAssigner {
        WindowAssigner::Cumulate {
            step: ms(step),
            max_size: ms(max_size),
            offset: 0,
        }
    }
}

/// Builder for event-time session windows, named as in Flink.
pub struct EventTimeSessionWindows;

impl EventTimeSessionWindows {
    /// Sessions closed by `gap` of inactivity.
    pub fn with_gap(gap: Duration) -> WindowAssigner {
        WindowAssigner::Session { gap: ms(gap) }
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
        let s = Duration::from_secs;
        let err = SlidingEventTimeWindows::of(s(2), s(5))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("larger than its size"), "{err}");
        let err = CumulativeEventTimeWindows::of(s(3), s(10))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("multiple of the step"), "{err}");
    }

    #[test]
    fn pane_geometry() {
        let hop = WindowAssigner::Sliding {
            size: 10,
            slide: 4,
            offset: 0,
        };
        assert_eq!(hop.pane(), Some((2, 0)));
        // Pane [8, 10) lies in windows starting at 0, 4 and 8.
        assert_eq!(hop.windows_of_pane(8), vec![(0, 10), (4, 14), (8, 18)]);
        assert_eq!(hop.last_window_end_of_pane(8), 18);
        // Pane [2, 4) lies in [-4, 6) and [0, 10), not in [4, 14).
        assert_eq!(hop.windows_of_pane(2), vec![(-4, 6), (0, 10)]);
        let cum = WindowAssigner::Cumulate {
            step: 2,
            max_size: 6,
            offset: 0,
        };
        assert_eq!(cum.windows_of_pane(8), vec![(6, 10), (6, 12)]);
        assert_eq!(cum.last_window_end_of_pane(8), 12);
        assert_eq!(cum.windows_of_pane(-2), vec![(-6, 0)]);
    }
}
