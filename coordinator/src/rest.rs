//! The Dispatcher's REST API: JSON under `/v1`.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/v1/overview` | workers, slots, jobs by status |
//! | GET | `/v1/workers` | registered workers and their slots |
//! | POST | `/v1/jobs` | submit a job graph (JSON body) → `201 {"job_id"}` |
//! | GET | `/v1/jobs` | every job with status and failure |
//! | GET | `/v1/jobs/{id}` | one job: vertices, subtasks (state, worker, back-pressure), history |
//! | POST | `/v1/jobs/{id}/cancel` | cancel → `202 {"status"}` |
//! | POST | `/v1/jobs/{id}/savepoints` | `{"dir"?, "stop"?, "drain"?}` → `202 {"path"}`; the job's `savepoints` list it when taken |
//!
//! Metrics, checkpoints, exceptions, the plan and Prometheus' `/metrics`:
//! see [`crate::rest_metrics`].
//!
//! `POST /v1/jobs?from_savepoint=PATH[&allow_non_restored_state=true]`
//! resumes a job from a savepoint (or a checkpoint folder).
//!
//! Errors are JSON `{"error": "..."}` with a 4xx status: 400 for a malformed
//! job graph, 401 without a valid token (when one is configured), 404 for an
//! unknown job, 409 when the cluster lacks free slots.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use weir_core::{Result, Secret};

use crate::jobs::{self, ClusterState, SubmitError, lock};

pub(crate) type Shared = Arc<Mutex<ClusterState>>;

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// Serve the API on `addr`; returns the bound address.
pub async fn serve(addr: SocketAddr, state: Shared, token: Option<Secret>) -> Result<SocketAddr> {
    let token = Arc::new(token);
    let app = Router::new()
        .route("/v1/overview", get(overview))
        .route("/v1/workers", get(workers))
        .route("/v1/jobs", get(list_jobs).post(submit))
        .route("/v1/jobs/{id}", get(job_details))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/savepoints", post(savepoint))
        .merge(crate::rest_metrics::routes())
        .merge(crate::web::routes())
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "no such endpoint (the API lives under /v1)",
            )
        })
        // Job graphs carry lookup tables and in-memory data inline.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            |State(state): State<Shared>, req: Request, next: Next| async move {
                // A standby answers every call with the leader's address.
                match crate::standby_refusal(&state, true) {
                    Some(why) => error(StatusCode::SERVICE_UNAVAILABLE, &why),
                    None => next.run(req).await,
                }
            },
        ))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let token = Arc::clone(&token);
                async move { authorize(req, next, token.as_ref().as_ref()).await }
            },
        ))
        .with_state(state);
    let (listener, bound) = weir_flight::node::bind(addr).await?;
    tokio::spawn(async move {
        // Replies go out at once, not behind the peer's delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("REST API stopped: {e}");
        }
    });
    Ok(bound)
}

/// Largest request body taken, in bytes (16 MiB); larger ones get 413.
pub const MAX_BODY: usize = 16 << 20;

async fn authorize(req: Request, next: Next, token: Option<&Secret>) -> Response {
    if let Some(token) = token.filter(|_| !crate::web::is_public(req.uri().path())) {
        let header = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let ok = weir_flight::node::bearer_matches(header, token);
        if !ok {
            return error(
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required (Authorization: Bearer <token>)",
            );
        }
    }
    next.run(req).await
}

async fn overview(State(state): State<Shared>) -> Response {
    let s = lock(&state);
    let workers = s.workers();
    let live: Vec<_> = workers.iter().filter(|w| !w.lost).collect();
    let jobs = s.jobs();
    let count = |st: jobs::JobStatus| jobs.iter().filter(|j| j.status == st).count();
    axum::Json(json!({
        "workers": live.len(),
        "workers_lost": workers.len() - live.len(),
        "slots_total": live.iter().map(|w| w.slots).sum::<usize>(),
        "slots_free": live.iter().map(|w| w.slots - w.slots_used.min(w.slots)).sum::<usize>(),
        "jobs_running": count(jobs::JobStatus::Running) + count(jobs::JobStatus::Created),
        "jobs_finished": count(jobs::JobStatus::Finished),
        "jobs_failed": count(jobs::JobStatus::Failed),
        "jobs_canceled": count(jobs::JobStatus::Canceled),
    }))
    .into_response()
}

async fn workers(State(state): State<Shared>) -> Response {
    axum::Json(lock(&state).workers()).into_response()
}

/// `GET /v1/jobs` paging: `offset` jobs skipped (oldest first), at most
/// `limit` (default 100, at most 1000) returned; `X-Total-Count` tells how
/// many there are.
#[derive(serde::Deserialize)]
struct ListParams {
    #[serde(default)]
    offset: usize,
    #[serde(default = "default_page")]
    limit: usize,
}

fn default_page() -> usize {
    100
}

async fn list_jobs(
    State(state): State<Shared>,
    params: std::result::Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let params = match query(params) {
        Ok(p) => p,
        Err((status, message)) => return error(status, message),
    };
    let s = lock(&state);
    let all = s.jobs();
    let total = all.len();
    let jobs: Vec<_> = all
        .into_iter()
        .skip(params.offset)
        .take(params.limit.min(1000))
        .map(|j| {
            json!({
                "id": j.id,
                "name": j.name,
                "status": j.status,
                "failure": j.failure,
                "submitted_at_ms": j.submitted_at_ms,
                "ended_at_ms": j.ended_at_ms,
            })
        })
        .collect();
    drop(s);
    ([("x-total-count", total.to_string())], axum::Json(jobs)).into_response()
}

/// Query-string parameters; a malformed query string gets the API's JSON
/// error, not axum's text.
pub(crate) fn query<T>(
    params: std::result::Result<Query<T>, axum::extract::rejection::QueryRejection>,
) -> std::result::Result<T, (StatusCode, String)> {
    params.map(|Query(p)| p).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("query string: {}", e.body_text()),
        )
    })
}

/// A request body as text: too large (413) or not UTF-8 (400) are the
/// API's JSON errors, like every other.
pub(crate) fn body_text(
    body: std::result::Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> std::result::Result<String, (StatusCode, String)> {
    let bytes = body.map_err(|e| (e.status(), format!("request body: {}", e.body_text())))?;
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!(
                "request body is not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

async fn job_details(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    match lock(&state).job(&id) {
        Some(job) => axum::Json(job).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job '{id}'")),
    }
}

/// `POST /v1/jobs` options.
#[derive(serde::Deserialize, Default)]
struct SubmitParams {
    from_savepoint: Option<String>,
    #[serde(default)]
    allow_non_restored_state: bool,
}

async fn submit(
    State(state): State<Shared>,
    params: std::result::Result<Query<SubmitParams>, axum::extract::rejection::QueryRejection>,
    body: std::result::Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let body = match body_text(body) {
        Ok(b) => b,
        Err((status, message)) => return error(status, message),
    };
    let params = match query(params) {
        Ok(p) => p,
        Err((status, message)) => return error(status, message),
    };
    let from = params.from_savepoint.as_deref();
    submitted(jobs::submit_json(&state, &body, from, params.allow_non_restored_state).await)
}

/// The answer to a submission: 201 with the job id, or why not.
pub(crate) fn submitted(outcome: std::result::Result<String, SubmitError>) -> Response {
    match outcome {
        Ok(id) => (StatusCode::CREATED, axum::Json(json!({ "job_id": id }))).into_response(),
        Err(SubmitError::Invalid(e)) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(SubmitError::InsufficientSlots { job_id, message }) => (
            StatusCode::CONFLICT,
            axum::Json(json!({ "error": message, "job_id": job_id })),
        )
            .into_response(),
    }
}

#[derive(serde::Deserialize, Default)]
struct SavepointBody {
    dir: Option<String>,
    #[serde(default)]
    stop: bool,
    #[serde(default)]
    drain: bool,
}

async fn savepoint(
    State(state): State<Shared>,
    Path(id): Path<String>,
    body: std::result::Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let body = match body_text(body) {
        Ok(b) => b,
        Err((status, message)) => return error(status, message),
    };
    let request: SavepointBody = if body.trim().is_empty() {
        SavepointBody::default()
    } else {
        match serde_json::from_str(&body) {
            Ok(r) => r,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("malformed savepoint request: {e}"),
                );
            }
        }
    };
    if request.drain && !request.stop {
        return error(
            StatusCode::BAD_REQUEST,
            "drain applies to a stop: send \"stop\": true with \"drain\": true".to_string(),
        );
    }
    let known = lock(&state).job(&id).is_some();
    if !known {
        return error(StatusCode::NOT_FOUND, format!("no job '{id}'"));
    }
    let dir = match jobs::savepoint_base(request.dir.as_deref()) {
        Ok(dir) => dir,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match jobs::request_savepoint(&state, &id, Some(dir), request.stop, request.drain) {
        Ok(path) => (StatusCode::ACCEPTED, axum::Json(json!({ "path": path }))).into_response(),
        Err(e) => error(StatusCode::CONFLICT, e),
    }
}

async fn cancel(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    match jobs::cancel(&state, &id) {
        Some(status) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({ "status": status })),
        )
            .into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job '{id}'")),
    }
}
