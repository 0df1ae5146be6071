//! The web dashboard: plain ES modules (no build step) embedded into the
//! binary, served at `/` on the REST port. The page and its scripts hold
//! no data; everything it shows comes from the REST API, which asks for
//! the cluster token — the page prompts for it when one is set.
//!
//! Also the two REST routes only the dashboard needed: `POST /v1/sql`
//! (a Flink SQL script, compiled by the binary's SQL front end, submitted
//! as a job) and `GET /v1/jobs/{id}/config`.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rust_embed::RustEmbed;
use serde_json::json;

use crate::jobs::{self, lock};
use crate::rest::{Shared, body_text, error};

#[derive(RustEmbed)]
#[folder = "web/"]
struct Assets;

/// Paths served without the token: the page and its static files.
pub(crate) fn is_public(path: &str) -> bool {
    path == "/" || path.starts_with("/assets/")
}

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/", get(|| async { asset("index.html") }))
        .route(
            "/assets/{*path}",
            get(|Path(p): Path<String>| async move { asset(&p) }),
        )
        .route("/v1/sql", post(submit_sql))
        .route("/v1/jobs/{id}/config", get(config))
}

fn asset(path: &str) -> Response {
    let Some(file) = Assets::get(path) else {
        return error(StatusCode::NOT_FOUND, format!("no asset '{path}'"));
    };
    let kind = match path.rsplit_once('.').map(|(_, e)| e) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "text/plain; charset=utf-8",
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        file.data.into_owned(),
    )
        .into_response()
}

async fn submit_sql(
    State(state): State<Shared>,
    body: std::result::Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let script = match body_text(body) {
        Ok(b) => b,
        Err((status, message)) => return error(status, message),
    };
    let compiler = lock(&state).sql.clone();
    let Some(compiler) = compiler else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "this coordinator has no SQL front end; submit a job graph",
        );
    };
    // Planning may read files (a lookup table): off the async threads.
    let compiled = tokio::task::spawn_blocking(move || (compiler.0)(&script)).await;
    let job = match compiled {
        Ok(Ok(job)) => job,
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, e),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    crate::rest::submitted(jobs::submit_json(&state, &job, None, false).await)
}

async fn config(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    let s = lock(&state);
    match s.job_ref(&id) {
        Some(job) => axum::Json(json!({
            "jid": job.id,
            "name": job.name,
            "execution-config": job.observed.config,
        }))
        .into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job '{id}'")),
    }
}

/// Turns a SQL script into a job graph (JSON); given by the binary, which
/// has the SQL front end the coordinator crate does without.
#[derive(Clone)]
pub struct SqlCompiler(pub std::sync::Arc<CompileSql>);

/// A script in, a job graph (JSON) or the error out.
pub type CompileSql = dyn Fn(&str) -> Result<String, String> + Send + Sync;

impl std::fmt::Debug for SqlCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqlCompiler")
    }
}
