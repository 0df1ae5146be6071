//! Weir's metrics in Prometheus' text format (OpenMetrics), with the
//! `prometheus-client` crate: each Flink metric mapped to a `weir_…` name
//! in Prometheus' conventions (`_total` counters, `_seconds`, `_bytes`,
//! ratios instead of ms per second).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Labels of one series.
pub type Labels = Vec<(String, String)>;

/// How a metric of several subtasks is summed up into one of the vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Add them (rows, bytes, rates, state).
    Sum,
    /// The smallest (watermarks).
    Min,
    /// The largest (lag).
    Max,
    /// Their mean (time ratios).
    Mean,
}

/// One exported metric: its Prometheus name and the Flink metric it is.
#[derive(Debug)]
pub struct MetricDef {
    /// Name after `weir_`, without the unit or `_total` suffix.
    pub name: &'static str,
    /// The Flink metric it carries.
    pub flink: &'static str,
    /// What it measures.
    pub help: &'static str,
    /// A counter (only goes up within an attempt) or a gauge.
    pub counter: bool,
    /// Its unit, appended to the name.
    pub unit: Option<Unit>,
    /// The factor from Flink's value (ms → s, ms per second → ratio).
    pub scale: f64,
    /// How subtasks combine.
    pub fold: Fold,
}

const fn def(
    name: &'static str,
    flink: &'static str,
    help: &'static str,
    counter: bool,
    unit: Option<Unit>,
    scale: f64,
    fold: Fold,
) -> MetricDef {
    MetricDef {
        name,
        flink,
        help,
        counter,
        unit,
        scale,
        fold,
    }
}

/// Per-subtask metrics, as [`crate::metrics::SubtaskLive::metrics`] names
/// them.
pub static TASK_METRICS: &[MetricDef] = &[
    def(
        "records_in",
        "numRecordsIn",
        "Rows into the task",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "records_out",
        "numRecordsOut",
        "Rows out of the task",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "records_in_per_second",
        "numRecordsInPerSecond",
        "Rows in per second",
        false,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "records_out_per_second",
        "numRecordsOutPerSecond",
        "Rows out per second",
        false,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "input",
        "numBytesIn",
        "Bytes of the batches in",
        true,
        Some(Unit::Bytes),
        1.0,
        Fold::Sum,
    ),
    def(
        "output",
        "numBytesOut",
        "Bytes of the batches out",
        true,
        Some(Unit::Bytes),
        1.0,
        Fold::Sum,
    ),
    def(
        "busy_time",
        "busyTimeMsPerSecond",
        "Share of time busy",
        false,
        Some(Unit::Ratios),
        1e-3,
        Fold::Mean,
    ),
    def(
        "idle_time",
        "idleTimeMsPerSecond",
        "Share of time waiting for input",
        false,
        Some(Unit::Ratios),
        1e-3,
        Fold::Mean,
    ),
    def(
        "back_pressured_time",
        "backPressuredTimeMsPerSecond",
        "Share of time waiting for room downstream",
        false,
        Some(Unit::Ratios),
        1e-3,
        Fold::Mean,
    ),
    def(
        "late_records_dropped",
        "numLateRecordsDropped",
        "Rows dropped as late",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "state_rows",
        "stateRows",
        "Rows of keyed state held",
        false,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "state",
        "stateBytes",
        "Bytes of keyed state held",
        false,
        Some(Unit::Bytes),
        1.0,
        Fold::Sum,
    ),
    def(
        "current_input_watermark",
        "currentInputWatermark",
        "Input watermark (event time)",
        false,
        Some(Unit::Seconds),
        1e-3,
        Fold::Min,
    ),
    def(
        "current_output_watermark",
        "currentOutputWatermark",
        "Output watermark (event time)",
        false,
        Some(Unit::Seconds),
        1e-3,
        Fold::Min,
    ),
    def(
        "watermark_lag",
        "watermarkLag",
        "Wall clock minus the input watermark",
        false,
        Some(Unit::Seconds),
        1e-3,
        Fold::Max,
    ),
    def(
        "source_splits_done",
        "splitsDone",
        "Splits a bounded source has finished",
        false,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "source_splits",
        "splitsTotal",
        "Splits a bounded source reads in all",
        false,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "source_pending_records",
        "pendingRecords",
        "Records the source is behind",
        false,
        None,
        1.0,
        Fold::Sum,
    ),
];

/// Per-job metrics.
pub static JOB_METRICS: &[MetricDef] = &[
    def(
        "job_uptime",
        "uptime",
        "Time since the job started running",
        false,
        Some(Unit::Seconds),
        1e-3,
        Fold::Max,
    ),
    def(
        "job_restarts",
        "numRestarts",
        "Restarts of the job",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "job_last_checkpoint_duration",
        "lastCheckpointDuration",
        "Trigger to commit of the last checkpoint",
        false,
        Some(Unit::Seconds),
        1e-3,
        Fold::Max,
    ),
    def(
        "job_last_checkpoint_size",
        "lastCheckpointSize",
        "State size of the last checkpoint",
        false,
        Some(Unit::Bytes),
        1.0,
        Fold::Max,
    ),
    def(
        "job_checkpoints_completed",
        "numberOfCompletedCheckpoints",
        "Checkpoints completed",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "job_checkpoints_failed",
        "numberOfFailedCheckpoints",
        "Checkpoints failed",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "job_checkpoints_in_progress",
        "numberOfInProgressCheckpoints",
        "Checkpoints under way",
        false,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "job_last_checkpoint_restore_timestamp",
        "lastCheckpointRestoreTimestamp",
        "When the job last restored from a checkpoint (Unix time)",
        false,
        Some(Unit::Seconds),
        1e-3,
        Fold::Max,
    ),
];

/// Operator-level metrics (`{operator}.{metric}` in Flink's scope).
pub static OPERATOR_METRICS: &[MetricDef] = &[
    def(
        "operator_records_in",
        "numRecordsIn",
        "Rows into the operator",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
    def(
        "operator_records_out",
        "numRecordsOut",
        "Rows out of the operator",
        true,
        None,
        1.0,
        Fold::Sum,
    ),
];

/// One value of one series.
#[derive(Debug, Clone)]
pub struct Point {
    /// The metric.
    pub def: &'static MetricDef,
    /// Its labels.
    pub labels: Labels,
    /// Flink's value (scaled when encoded).
    pub value: f64,
}

/// The points of `metrics` (Flink names and values) that `defs` export,
/// each with `labels`; operator metrics (`op.metric`) get an `operator`
/// label when `defs` is [`OPERATOR_METRICS`].
pub fn points(
    defs: &'static [MetricDef],
    metrics: &[(String, f64)],
    labels: &Labels,
) -> Vec<Point> {
    let operator_level = std::ptr::eq(defs, OPERATOR_METRICS);
    let mut out = vec![];
    for (name, value) in metrics {
        let (operator, flink) = match name.rsplit_once('.') {
            Some((op, m)) if operator_level => (Some(op), m),
            Some(_) => continue,
            None if operator_level => continue,
            None => (None, name.as_str()),
        };
        if let Some(def) = defs.iter().find(|d| d.flink == flink) {
            let mut labels = labels.clone();
            if let Some(op) = operator {
                labels.push(("operator".into(), op.to_string()));
            }
            out.push(Point {
                def,
                labels,
                value: *value,
            });
        }
    }
    out
}

/// Combine the series that differ only in label `over` (the subtasks of
/// a vertex) by each metric's [`Fold`].
pub fn fold(points: Vec<Point>, over: &str) -> Vec<Point> {
    let mut groups: BTreeMap<(&'static str, Labels), (&'static MetricDef, Vec<f64>)> =
        BTreeMap::new();
    for p in points {
        let labels: Labels = p.labels.into_iter().filter(|(k, _)| k != over).collect();
        groups
            .entry((p.def.name, labels))
            .or_insert((p.def, vec![]))
            .1
            .push(p.value);
    }
    groups
        .into_iter()
        .map(|((_, labels), (def, values))| {
            let n = values.len() as f64;
            let value = match def.fold {
                Fold::Sum => values.iter().sum(),
                Fold::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
                Fold::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Fold::Mean => values.iter().sum::<f64>() / n,
            };
            Point { def, labels, value }
        })
        .collect()
}

/// The points in Prometheus' text format (OpenMetrics 1.0, served as
/// `application/openmetrics-text; version=1.0.0; charset=utf-8`).
pub fn encode_points(points: &[Point]) -> String {
    let mut registry = Registry::with_prefix("weir");
    let mut counters: BTreeMap<&str, Family<Labels, Counter<f64, AtomicU64>>> = BTreeMap::new();
    let mut gauges: BTreeMap<&str, Family<Labels, Gauge<f64, AtomicU64>>> = BTreeMap::new();
    let mut defs: BTreeMap<&str, &MetricDef> = BTreeMap::new();
    for p in points {
        defs.insert(p.def.name, p.def);
        let v = p.value * p.def.scale;
        if p.def.counter {
            counters
                .entry(p.def.name)
                .or_default()
                .get_or_create(&p.labels)
                .inc_by(v.max(0.0));
        } else {
            gauges
                .entry(p.def.name)
                .or_default()
                .get_or_create(&p.labels)
                .set(v);
        }
    }
    for (name, def) in defs {
        let help = format!("{} (Flink: {})", def.help, def.flink);
        match (counters.remove(name), gauges.remove(name), def.unit.clone()) {
            (Some(c), _, Some(u)) => registry.register_with_unit(name, help, u, c),
            (Some(c), _, None) => registry.register(name, help, c),
            (None, Some(g), Some(u)) => registry.register_with_unit(name, help, u, g),
            (None, Some(g), None) => registry.register(name, help, g),
            (None, None, _) => {}
        }
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

/// The content type of [`encode_points`]' text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The table of exported names, for the docs: Prometheus name, kind,
/// Flink metric.
pub fn name_table() -> Vec<(String, &'static str, &'static str)> {
    let suffix = |d: &MetricDef| match (&d.unit, d.counter) {
        (Some(Unit::Bytes), true) => "_bytes_total",
        (Some(Unit::Bytes), false) => "_bytes",
        (Some(Unit::Seconds), _) => "_seconds",
        (Some(Unit::Ratios), _) => "_ratios",
        (_, true) => "_total",
        _ => "",
    };
    TASK_METRICS
        .iter()
        .chain(JOB_METRICS)
        .chain(OPERATOR_METRICS)
        .map(|d| {
            (
                format!("weir_{}{}", d.name, suffix(d)),
                if d.counter { "counter" } else { "gauge" },
                d.flink,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(subtask: &str) -> Labels {
        vec![
            ("job_id".into(), "j1".into()),
            ("vertex".into(), "Source: s".into()),
            ("subtask".into(), subtask.into()),
        ]
    }

    #[test]
    fn subtasks_fold_into_their_vertex_and_encode_in_prometheus_conventions() {
        let a = vec![
            ("numRecordsIn".to_string(), 10.0),
            ("currentInputWatermark".into(), 5_000.0),
            ("busyTimeMsPerSecond".into(), 200.0),
            ("Window.numRecordsIn".into(), 10.0),
        ];
        let b = vec![
            ("numRecordsIn".to_string(), 30.0),
            ("currentInputWatermark".into(), 3_000.0),
            ("busyTimeMsPerSecond".into(), 600.0),
        ];
        let mut all = points(TASK_METRICS, &a, &labels("0"));
        all.extend(points(TASK_METRICS, &b, &labels("1")));
        assert_eq!(all.len(), 6, "operator metrics are not task metrics");
        let text = encode_points(&fold(all, "subtask"));
        assert!(
            text.contains("weir_records_in_total{job_id=\"j1\",vertex=\"Source: s\"} 40.0"),
            "{text}"
        );
        assert!(
            text.contains(
                "weir_current_input_watermark_seconds{job_id=\"j1\",vertex=\"Source: s\"} 3.0"
            ),
            "{text}"
        );
        assert!(text.contains("weir_busy_time_ratios{"), "{text}");
        assert!(text.contains("} 0.4\n"), "{text}");
        assert!(text.contains("# TYPE weir_records_in counter"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let ops = points(OPERATOR_METRICS, &a, &labels("0"));
        let text = encode_points(&ops);
        assert!(
            text.contains("weir_operator_records_in_total{job_id=\"j1\",vertex=\"Source: s\",subtask=\"0\",operator=\"Window\"} 10.0"),
            "{text}"
        );
    }

    #[test]
    fn every_name_is_unique() {
        let names = name_table();
        let mut seen = std::collections::HashSet::new();
        for (n, _, _) in &names {
            assert!(seen.insert(n.clone()), "{n} twice");
        }
    }
}
