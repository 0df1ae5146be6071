//! Live metrics of a running subtask, with Flink's names.
//!
//! A task writes its counters into a [`LiveTask`] as it works — relaxed
//! atomics, one store per batch and operator, no lock on the hot path;
//! operator-specific counters (late rows dropped, state size) are
//! published at most once a second. Whoever reports (a worker's
//! heartbeat, `weir run`'s progress line) takes a [`TaskSample`] at any
//! time; rates are differences of two samples over the time between them.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::graph::OperatorMetrics;

/// Counters of one chained operator.
#[derive(Debug, Default)]
pub struct LiveOperator {
    /// Operator name.
    pub name: String,
    /// Rows received (`numRecordsIn`).
    pub records_in: AtomicU64,
    /// Rows emitted (`numRecordsOut`).
    pub records_out: AtomicU64,
    /// Operator-specific counters as last published.
    pub counters: Mutex<Vec<(String, u64)>>,
}

/// Live counters of one subtask. The task writes, reporters read.
#[derive(Debug)]
pub struct LiveTask {
    /// Subtask name, `vertex (i/p)`.
    pub task: String,
    /// Job vertex id.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// The source's name when the chain is fed by one.
    pub source: Option<String>,
    /// Rows the source has read.
    pub source_rows: Arc<AtomicU64>,
    /// Records its source is behind the newest one it could read (Kafka:
    /// records behind the latest offset); negative when unknown.
    pub source_lag: AtomicI64,
    /// Splits its bounded source has finished, and has in all (0: none).
    pub splits: (AtomicU64, AtomicU64),
    /// The chained operators, head first.
    pub operators: Vec<LiveOperator>,
    /// Bytes of the batches that came in over the task's inputs.
    pub bytes_in: AtomicU64,
    /// Bytes of the batches it sent to its outputs.
    pub bytes_out: AtomicU64,
    /// The input watermark (ms; `i64::MIN` before the first).
    pub watermark_in: Arc<AtomicI64>,
    /// The last watermark it forwarded (ms; `i64::MIN` before the first).
    pub watermark_out: AtomicI64,
    /// Time waiting for input (ns).
    pub idle_ns: AtomicU64,
    /// Time waiting for room in full output channels (ns).
    pub back_pressured_ns: Arc<AtomicU64>,
    /// When the task started.
    pub started: Instant,
    /// When operator counters were last published (ms since `started`,
    /// plus one; 0: never).
    published: AtomicU64,
    /// Whether the task keeps these counters (off only to measure their
    /// cost: then only the source's rows, watermarks and back-pressure).
    pub enabled: bool,
}

impl LiveTask {
    /// Counters of subtask `subtask` of `vertex` whose chain runs
    /// `operators` (head first), fed by `source` when it has one.
    pub fn new(
        task: impl Into<String>,
        (vertex, subtask): (usize, usize),
        source: Option<String>,
        operators: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            task: task.into(),
            vertex,
            subtask,
            source,
            source_rows: Arc::default(),
            source_lag: AtomicI64::new(-1),
            splits: (AtomicU64::new(0), AtomicU64::new(0)),
            operators: operators
                .into_iter()
                .map(|name| LiveOperator {
                    name,
                    ..Default::default()
                })
                .collect(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            watermark_in: Arc::new(AtomicI64::new(i64::MIN)),
            watermark_out: AtomicI64::new(i64::MIN),
            idle_ns: AtomicU64::new(0),
            back_pressured_ns: Arc::default(),
            started: Instant::now(),
            published: AtomicU64::new(0),
            enabled: true,
        }
    }

    /// The same, keeping only what the runtime needs anyway when `enabled`
    /// is false.
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Whether operator counters are due to be published again (once a
    /// second); marks them published.
    pub fn publish_due(&self) -> bool {
        // Only the task calls this: an atomic of ms since the start, no
        // lock (it runs once per batch).
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.published.load(Ordering::Relaxed);
        if last != 0 && now < last + 1000 {
            return false;
        }
        self.published.store(now, Ordering::Relaxed);
        true
    }

    /// Add `ns` of waiting for input.
    pub fn add_idle(&self, ns: u64) {
        if self.enabled {
            self.idle_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Add the bytes of a batch that came in.
    pub fn add_bytes_in(&self, batch: &arrow::record_batch::RecordBatch) {
        if self.enabled {
            self.bytes_in
                .fetch_add(batch_bytes(batch), Ordering::Relaxed);
        }
    }

    /// The counters now.
    pub fn sample(&self) -> TaskSample {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let wm = |a: &AtomicI64| Some(a.load(Ordering::Relaxed)).filter(|&w| w != i64::MIN);
        let mut operators = Vec::with_capacity(self.operators.len() + 1);
        if let Some(name) = &self.source {
            operators.push(OperatorMetrics {
                name: name.clone(),
                records_in: 0,
                records_out: load(&self.source_rows),
                counters: vec![],
            });
        }
        operators.extend(self.operators.iter().map(|o| OperatorMetrics {
            name: o.name.clone(),
            records_in: load(&o.records_in),
            records_out: load(&o.records_out),
            counters: o.counters.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }));
        TaskSample {
            task: self.task.clone(),
            vertex: self.vertex,
            subtask: self.subtask,
            operators,
            bytes_in: load(&self.bytes_in),
            bytes_out: load(&self.bytes_out),
            watermark_in: wm(&self.watermark_in),
            watermark_out: wm(&self.watermark_out),
            idle_ms: load(&self.idle_ns) / 1_000_000,
            back_pressured_ms: load(&self.back_pressured_ns) / 1_000_000,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            source_lag: u64::try_from(self.source_lag.load(Ordering::Relaxed)).ok(),
            splits: Some((load(&self.splits.0), load(&self.splits.1))).filter(|s| s.1 > 0),
        }
    }
}

/// One subtask's counters at one moment: what heartbeats carry.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskSample {
    /// Subtask name.
    pub task: String,
    /// Job vertex id.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: usize,
    /// Per operator (a source first): rows in and out, counters.
    pub operators: Vec<OperatorMetrics>,
    /// Bytes in over the inputs.
    pub bytes_in: u64,
    /// Bytes out to the outputs.
    pub bytes_out: u64,
    /// Input watermark, ms.
    pub watermark_in: Option<i64>,
    /// Output watermark, ms.
    pub watermark_out: Option<i64>,
    /// Total ms waiting for input.
    pub idle_ms: u64,
    /// Total ms back-pressured.
    pub back_pressured_ms: u64,
    /// Ms since the task started.
    pub uptime_ms: u64,
    /// Records the source is behind, when it knows.
    pub source_lag: Option<u64>,
    /// Splits finished of all, for a bounded source that has splits.
    #[serde(default)]
    pub splits: Option<(u64, u64)>,
}

impl TaskSample {
    /// Rows into the chain (its head operator, or what the source read).
    pub fn records_in(&self) -> u64 {
        match self.operators.first() {
            Some(o) if o.records_in == 0 => o.records_out,
            Some(o) => o.records_in,
            None => 0,
        }
    }

    /// Rows out of the chain (its last operator).
    pub fn records_out(&self) -> u64 {
        self.operators.last().map_or(0, |o| o.records_out)
    }

    /// The sum of a named operator counter over the chain.
    pub fn counter(&self, name: &str) -> u64 {
        self.operators
            .iter()
            .flat_map(|o| &o.counters)
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }
}

/// Per-second rates between two samples of one subtask, Flink's
/// `…PerSecond` and `…TimeMsPerSecond` metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TaskRates {
    /// `numRecordsInPerSecond`.
    pub records_in_per_second: f64,
    /// `numRecordsOutPerSecond`.
    pub records_out_per_second: f64,
    /// `numBytesInPerSecond`.
    pub bytes_in_per_second: f64,
    /// `numBytesOutPerSecond`.
    pub bytes_out_per_second: f64,
    /// `busyTimeMsPerSecond`.
    pub busy_time_ms_per_second: f64,
    /// `idleTimeMsPerSecond`.
    pub idle_time_ms_per_second: f64,
    /// `backPressuredTimeMsPerSecond`.
    pub back_pressured_time_ms_per_second: f64,
}

impl TaskRates {
    /// The rates from `before` to `after` (the same subtask, later). A
    /// restarted task (counters going back) gives `None`.
    pub fn between(before: &TaskSample, after: &TaskSample) -> Option<Self> {
        let elapsed = after.uptime_ms.checked_sub(before.uptime_ms)?;
        if elapsed == 0 {
            return None;
        }
        let per_s = |a: u64, b: u64| Some(b.checked_sub(a)? as f64 * 1000.0 / elapsed as f64);
        let idle = per_s(before.idle_ms, after.idle_ms)?.min(1000.0);
        let back = per_s(before.back_pressured_ms, after.back_pressured_ms)?.min(1000.0);
        Some(Self {
            records_in_per_second: per_s(before.records_in(), after.records_in())?,
            records_out_per_second: per_s(before.records_out(), after.records_out())?,
            bytes_in_per_second: per_s(before.bytes_in, after.bytes_in)?,
            bytes_out_per_second: per_s(before.bytes_out, after.bytes_out)?,
            busy_time_ms_per_second: (1000.0 - idle - back).max(0.0),
            idle_time_ms_per_second: idle,
            back_pressured_time_ms_per_second: back,
        })
    }
}

/// One subtask's latest live metrics.
#[derive(Debug, Clone, Default)]
pub struct SubtaskLive {
    /// The newest sample.
    pub sample: Option<TaskSample>,
    /// Rates over the last sampling interval.
    pub rates: Option<TaskRates>,
    /// The sample the rates were last taken from.
    base: Option<TaskSample>,
}

impl SubtaskLive {
    /// Take a heartbeat's sample; rates are renewed once at least 500 ms
    /// of the task's time lie between the samples.
    pub fn absorb(&mut self, sample: TaskSample) {
        match &self.base {
            Some(b) if sample.uptime_ms < b.uptime_ms => {
                // A new attempt: start over.
                self.rates = None;
                self.base = Some(sample.clone());
            }
            Some(b) if sample.uptime_ms >= b.uptime_ms + 500 => {
                if let Some(r) = TaskRates::between(b, &sample) {
                    self.rates = Some(r);
                }
                self.base = Some(sample.clone());
            }
            Some(_) => {}
            None => self.base = Some(sample.clone()),
        }
        self.sample = Some(sample);
    }

    /// The subtask's metrics by Flink's names (task-level, then
    /// `{operator}.{metric}` per chained operator); `now_ms` is the wall
    /// clock for `watermarkLag`.
    pub fn metrics(&self, now_ms: i64) -> Vec<(String, f64)> {
        let Some(s) = &self.sample else {
            return vec![];
        };
        let r = self.rates.unwrap_or_default();
        let mut m = vec![
            ("numRecordsIn".to_string(), s.records_in() as f64),
            ("numRecordsOut".into(), s.records_out() as f64),
            ("numRecordsInPerSecond".into(), r.records_in_per_second),
            ("numRecordsOutPerSecond".into(), r.records_out_per_second),
            ("numBytesIn".into(), s.bytes_in as f64),
            ("numBytesOut".into(), s.bytes_out as f64),
            ("numBytesInPerSecond".into(), r.bytes_in_per_second),
            ("numBytesOutPerSecond".into(), r.bytes_out_per_second),
            ("busyTimeMsPerSecond".into(), r.busy_time_ms_per_second),
            ("idleTimeMsPerSecond".into(), r.idle_time_ms_per_second),
            (
                "backPressuredTimeMsPerSecond".into(),
                r.back_pressured_time_ms_per_second,
            ),
            (
                "numLateRecordsDropped".into(),
                s.counter("num_late_records_dropped") as f64,
            ),
            ("stateRows".into(), state_rows(s) as f64),
            ("stateBytes".into(), s.counter("state_bytes") as f64),
        ];
        if let Some(w) = s.watermark_in {
            m.push(("currentInputWatermark".into(), w as f64));
            m.push(("watermarkLag".into(), (now_ms - w).max(0) as f64));
        }
        if let Some(w) = s.watermark_out {
            m.push(("currentOutputWatermark".into(), w as f64));
        }
        if let Some(lag) = s.source_lag {
            // Flink's FLIP-33 name for a source's backlog.
            m.push(("pendingRecords".into(), lag as f64));
        }
        if let Some((done, all)) = s.splits {
            m.push(("splitsDone".into(), done as f64));
            m.push(("splitsTotal".into(), all as f64));
        }
        for o in &s.operators {
            m.push((format!("{}.numRecordsIn", o.name), o.records_in as f64));
            m.push((format!("{}.numRecordsOut", o.name), o.records_out as f64));
            for (k, v) in &o.counters {
                m.push((format!("{}.{k}", o.name), *v as f64));
            }
        }
        m
    }
}

/// Rows an operator keeps, by whichever counter it reports them under.
fn state_rows(s: &TaskSample) -> u64 {
    ["state_rows", "groups", "keys", "kept_rows", "buffered_rows"]
        .iter()
        .map(|n| s.counter(n))
        .sum()
}

/// The bytes of a batch's buffers (a slice counts the buffers it shares;
/// batches that cross an exchange are taken or filtered, not sliced). No
/// allocation: it runs once per batch.
pub fn batch_bytes(batch: &arrow::record_batch::RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.get_buffer_memory_size() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_differences_over_the_time_between_samples() {
        let live = LiveTask::new("v (1/1)", (0, 0), None, ["Map".to_string()]);
        live.operators[0].records_in.store(100, Ordering::Relaxed);
        live.operators[0].records_out.store(50, Ordering::Relaxed);
        let mut a = live.sample();
        a.uptime_ms = 1_000;
        live.operators[0].records_in.store(1_100, Ordering::Relaxed);
        live.operators[0].records_out.store(550, Ordering::Relaxed);
        live.add_idle(250_000_000);
        live.back_pressured_ns
            .fetch_add(500_000_000, Ordering::Relaxed);
        let mut b = live.sample();
        b.uptime_ms = 2_000;
        let r = TaskRates::between(&a, &b).unwrap();
        assert_eq!(r.records_in_per_second, 1000.0);
        assert_eq!(r.records_out_per_second, 500.0);
        assert_eq!(r.idle_time_ms_per_second, 250.0);
        assert_eq!(r.back_pressured_time_ms_per_second, 500.0);
        assert_eq!(r.busy_time_ms_per_second, 250.0);
        // A restarted task's counters start again: no rate.
        assert!(TaskRates::between(&b, &a).is_none());
    }

    #[test]
    fn a_source_counts_what_it_read_as_the_chains_input() {
        let live = LiveTask::new(
            "s (1/1)",
            (0, 0),
            Some("Source: s".into()),
            ["Filter".into()],
        );
        live.source_rows.store(7, Ordering::Relaxed);
        live.operators[0].records_in.store(7, Ordering::Relaxed);
        live.operators[0].records_out.store(3, Ordering::Relaxed);
        let s = live.sample();
        assert_eq!((s.records_in(), s.records_out()), (7, 3));
        assert_eq!(s.watermark_in, None);
    }

    fn sample(uptime_ms: u64, rows: u64) -> TaskSample {
        TaskSample {
            uptime_ms,
            operators: vec![OperatorMetrics {
                name: "Window".into(),
                records_in: rows,
                records_out: rows / 10,
                counters: vec![("num_late_records_dropped".into(), 3)],
            }],
            watermark_in: Some(9_000),
            ..Default::default()
        }
    }

    #[test]
    fn rates_come_from_samples_half_a_second_apart() {
        let mut live = SubtaskLive::default();
        live.absorb(sample(1_000, 0));
        live.absorb(sample(1_200, 400));
        assert!(live.rates.is_none());
        live.absorb(sample(2_000, 2_000));
        let m: std::collections::BTreeMap<String, f64> = live.metrics(10_000).into_iter().collect();
        assert_eq!(m["numRecordsInPerSecond"], 2_000.0);
        assert_eq!(m["numRecordsOutPerSecond"], 200.0);
        assert_eq!(m["numRecordsIn"], 2_000.0);
        assert_eq!(m["numLateRecordsDropped"], 3.0);
        assert_eq!(m["watermarkLag"], 1_000.0);
        assert_eq!(m["Window.numRecordsIn"], 2_000.0);
        // A restarted task starts its rates over.
        live.absorb(sample(100, 10));
        assert!(live.rates.is_none());
    }
}
