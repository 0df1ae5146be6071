//! The REST API's metrics endpoints, shaped like Flink's:
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/v1/jobs/{id}/metrics[?get=a,b]` | job metrics (`uptime`, `numRestarts`, checkpoint counts and sizes, …) |
//! | GET | `/v1/jobs/{id}/vertices/{vid}/metrics[?get=…]` | per subtask: `{i}.numRecordsIn`, `{i}.{operator}.numRecordsOut`, … |
//! | GET | `/v1/jobs/{id}/vertices/{vid}/subtasks/metrics[?get=…]` | over the subtasks: `min`, `max`, `avg`, `sum` |
//! | GET | `/v1/jobs/{id}/vertices/{vid}/watermarks` | each subtask's `currentInputWatermark` |
//! | GET | `/v1/jobs/{id}/watermarks` | every vertex's watermark (the minimum over its subtasks) |
//! | GET | `/v1/jobs/{id}/checkpoints` | counts, latest, history with per-subtask and per-operator figures |
//! | GET | `/v1/jobs/{id}/exceptions` | the root cause and the history of failures |
//! | GET | `/v1/jobs/{id}/plan` | vertices, chained operators, edges |
//! | GET | `/metrics` | Prometheus text: job metrics and per-vertex aggregates |
//!
//! Without `get`, a metrics endpoint lists the available ids
//! (`[{"id": …}]`); with it, their values (`[{"id", "value"}]`, values as
//! strings as Flink sends them).

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use weir_core::prometheus::{self, Labels};

use crate::jobs::{JobInfo, JobStatus, lock};
use crate::rest::{Shared, error, query};

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/jobs/{id}/metrics", get(job_metrics))
        .route("/v1/jobs/{id}/vertices/{vid}/metrics", get(vertex_metrics))
        .route(
            "/v1/jobs/{id}/vertices/{vid}/subtasks/metrics",
            get(subtask_aggregates),
        )
        .route(
            "/v1/jobs/{id}/vertices/{vid}/watermarks",
            get(vertex_watermarks),
        )
        .route("/v1/jobs/{id}/watermarks", get(job_watermarks))
        .route("/v1/jobs/{id}/checkpoints", get(checkpoints))
        .route("/v1/jobs/{id}/exceptions", get(exceptions))
        .route("/v1/jobs/{id}/plan", get(plan))
        .route("/metrics", get(prometheus_text))
}

#[derive(serde::Deserialize, Default)]
struct Get {
    get: Option<String>,
}

type GetQuery = std::result::Result<Query<Get>, axum::extract::rejection::QueryRejection>;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Run `f` with the `get` parameter, or answer a malformed query string.
fn with_query(q: GetQuery, f: impl FnOnce(Option<String>) -> Response) -> Response {
    match query(q) {
        Ok(q) => f(q.get),
        Err((status, m)) => error(status, m),
    }
}

fn with_job(state: &Shared, id: &str, f: impl FnOnce(&JobInfo) -> Response) -> Response {
    let s = lock(state);
    match s.job_ref(id) {
        Some(job) => f(job),
        None => error(StatusCode::NOT_FOUND, format!("no job '{id}'")),
    }
}

/// Flink's answer to a metrics request: ids alone, or the asked ones with
/// their values (unknown ids are left out, as Flink leaves them).
fn answer(all: Vec<(String, f64)>, get: Option<String>) -> Response {
    let Some(get) = get else {
        let ids: Vec<Value> = all.iter().map(|(id, _)| json!({ "id": id })).collect();
        return axum::Json(ids).into_response();
    };
    let wanted: Vec<&str> = get.split(',').map(str::trim).collect();
    let values: Vec<Value> = wanted
        .iter()
        .filter_map(|w| all.iter().find(|(id, _)| id == w))
        .map(|(id, v)| json!({ "id": id, "value": number(*v) }))
        .collect();
    axum::Json(values).into_response()
}

/// A value as Flink prints it: whole numbers without a fraction.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The job's own metrics, by Flink's names.
pub(crate) fn job_level(job: &JobInfo) -> Vec<(String, f64)> {
    let o = &job.observed;
    let uptime = match (job.status, o.running_since) {
        (JobStatus::Running, Some(at)) => at.elapsed().as_millis() as f64,
        _ => 0.0,
    };
    let last = o.last_completed();
    vec![
        ("uptime".into(), uptime),
        ("numRestarts".into(), f64::from(job.restarts)),
        (
            "lastCheckpointDuration".into(),
            last.map_or(-1.0, |c| c.end_to_end_duration as f64),
        ),
        (
            "lastCheckpointSize".into(),
            last.map_or(-1.0, |c| c.state_size as f64),
        ),
        ("numberOfCompletedCheckpoints".into(), o.completed as f64),
        ("numberOfFailedCheckpoints".into(), o.failed as f64),
        (
            "numberOfInProgressCheckpoints".into(),
            f64::from(u8::from(job.pending.is_some())),
        ),
        (
            "lastCheckpointRestoreTimestamp".into(),
            o.last_restore_ms.map_or(-1.0, |t| t as f64),
        ),
    ]
}

async fn job_metrics(State(state): State<Shared>, Path(id): Path<String>, q: GetQuery) -> Response {
    with_query(q, |get| {
        with_job(&state, &id, |job| answer(job_level(job), get))
    })
}

/// Each subtask's metrics of vertex `vid`, or a 404 response.
fn subtask_metrics(job: &JobInfo, vid: usize) -> Result<Vec<Vec<(String, f64)>>, Box<Response>> {
    let v = job.vertices.get(vid).ok_or_else(|| {
        Box::new(error(
            StatusCode::NOT_FOUND,
            format!("job '{}' has no vertex {vid}", job.id),
        ))
    })?;
    let now = now_ms();
    Ok(v.subtasks.iter().map(|t| t.live.metrics(now)).collect())
}

async fn vertex_metrics(
    State(state): State<Shared>,
    Path((id, vid)): Path<(String, usize)>,
    q: GetQuery,
) -> Response {
    with_query(q, |get| {
        with_job(&state, &id, |job| match subtask_metrics(job, vid) {
            Ok(per) => {
                let all = per
                    .into_iter()
                    .enumerate()
                    .flat_map(|(i, m)| m.into_iter().map(move |(k, v)| (format!("{i}.{k}"), v)))
                    .collect();
                answer(all, get)
            }
            Err(r) => *r,
        })
    })
}

async fn subtask_aggregates(
    State(state): State<Shared>,
    Path((id, vid)): Path<(String, usize)>,
    q: GetQuery,
) -> Response {
    with_query(q, |get| {
        with_job(&state, &id, |job| aggregates(job, vid, get))
    })
}

/// Min, max, mean and sum of each asked metric over a vertex's subtasks.
fn aggregates(job: &JobInfo, vid: usize, get: Option<String>) -> Response {
    let per = match subtask_metrics(job, vid) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let mut by_id: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for m in per {
        for (k, v) in m {
            by_id.entry(k).or_default().push(v);
        }
    }
    let Some(get) = get else {
        let ids: Vec<Value> = by_id.keys().map(|id| json!({ "id": id })).collect();
        return axum::Json(ids).into_response();
    };
    let out: Vec<Value> = get
        .split(',')
        .map(str::trim)
        .filter_map(|w| by_id.get(w).map(|v| (w, v)))
        .map(|(w, v)| {
            let sum: f64 = v.iter().sum();
            json!({
                "id": w,
                "min": v.iter().copied().fold(f64::INFINITY, f64::min),
                "max": v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                "avg": sum / v.len() as f64,
                "sum": sum,
            })
        })
        .collect();
    axum::Json(out).into_response()
}

/// Each subtask's input watermark of a vertex (`None` before the first).
fn watermarks_of(job: &JobInfo, vid: usize) -> Vec<Option<i64>> {
    job.vertices[vid]
        .subtasks
        .iter()
        .map(|t| t.live.sample.as_ref().and_then(|s| s.watermark_in))
        .collect()
}

async fn vertex_watermarks(
    State(state): State<Shared>,
    Path((id, vid)): Path<(String, usize)>,
) -> Response {
    with_job(&state, &id, |job| {
        if vid >= job.vertices.len() {
            return error(
                StatusCode::NOT_FOUND,
                format!("job '{id}' has no vertex {vid}"),
            );
        }
        let out: Vec<Value> = watermarks_of(job, vid)
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                json!({
                    "id": format!("{i}.currentInputWatermark"),
                    "value": w.unwrap_or(i64::MIN).to_string(),
                })
            })
            .collect();
        axum::Json(out).into_response()
    })
}

async fn job_watermarks(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    with_job(&state, &id, |job| {
        let vertices: Vec<Value> = job
            .vertices
            .iter()
            .map(|v| {
                let subtasks = watermarks_of(job, v.id);
                // A vertex is as far as its slowest subtask.
                let min = if subtasks.iter().all(Option::is_some) {
                    subtasks.iter().flatten().min().copied()
                } else {
                    None
                };
                json!({
                    "id": v.id,
                    "name": v.name,
                    "watermark": min,
                    "subtasks": subtasks,
                })
            })
            .collect();
        axum::Json(json!({ "vertices": vertices })).into_response()
    })
}

async fn checkpoints(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    with_job(&state, &id, |job| {
        let o = &job.observed;
        let in_progress = job.pending.as_ref().map(|p| p.record("IN_PROGRESS", None));
        let mut history: Vec<Value> = o.checkpoints.iter().rev().map(|c| json!(c)).collect();
        if let Some(p) = &in_progress {
            history.insert(0, json!(p));
        }
        let latest_failed = o.checkpoints.iter().rev().find(|c| c.status == "FAILED");
        axum::Json(json!({
            "counts": {
                "completed": o.completed,
                "failed": o.failed,
                "in_progress": u8::from(in_progress.is_some()),
                "total": o.completed + o.failed + u64::from(in_progress.is_some()),
            },
            "latest": {
                "completed": o.last_completed(),
                "failed": latest_failed,
                "restored": o.last_restore_ms.map(|t| json!({ "restore_timestamp": t })),
            },
            "history": history,
        }))
        .into_response()
    })
}

async fn exceptions(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    with_job(&state, &id, |job| {
        let entries: Vec<Value> = job
            .observed
            .exceptions
            .iter()
            .rev()
            .map(|e| json!(e))
            .collect();
        let root = job.observed.exceptions.back();
        axum::Json(json!({
            "rootException": job.failure.clone().or_else(|| root.map(|e| e.exception.clone())),
            "timestamp": root.map(|e| e.timestamp),
            "exceptionHistory": {
                "entries": entries,
                "truncated": job.observed.exceptions.len() >= crate::metrics::EXCEPTION_HISTORY,
            },
        }))
        .into_response()
    })
}

async fn plan(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    with_job(&state, &id, |job| {
        axum::Json(json!({
            "plan": { "jid": job.id, "name": job.name, "nodes": job.observed.plan },
        }))
        .into_response()
    })
}

/// Job metrics and per-vertex aggregates of every job the coordinator
/// holds, in Prometheus' text format.
async fn prometheus_text(State(state): State<Shared>) -> Response {
    let now = now_ms();
    let mut points = vec![];
    {
        let s = lock(&state);
        for job in s.job_refs() {
            let base: Labels = vec![
                ("job_id".into(), job.id.clone()),
                ("job_name".into(), job.name.clone()),
            ];
            points.extend(prometheus::points(
                prometheus::JOB_METRICS,
                &job_level(job),
                &base,
            ));
            if job.status.is_terminal() {
                continue;
            }
            for v in &job.vertices {
                let mut per_subtask = vec![];
                for t in &v.subtasks {
                    let mut labels = base.clone();
                    labels.push(("vertex".into(), v.name.clone()));
                    labels.push(("subtask".into(), t.subtask.to_string()));
                    per_subtask.extend(prometheus::points(
                        prometheus::TASK_METRICS,
                        &t.live.metrics(now),
                        &labels,
                    ));
                }
                points.extend(prometheus::fold(per_subtask, "subtask"));
            }
        }
    }
    (
        [(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)],
        prometheus::encode_points(&points),
    )
        .into_response()
}
