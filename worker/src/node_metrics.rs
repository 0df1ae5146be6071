//! A worker's `/metrics`: every subtask it runs, and each chained
//! operator's rows, in Prometheus' text format — Flink's per-TaskManager
//! Prometheus reporter. Behind the cluster token when one is set.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use weir_core::metrics::{LiveTask, SubtaskLive};
use weir_core::prometheus::{self, Labels};
use weir_core::{Result, Secret};

/// The tasks a worker runs, per job: (job id, job name, their counters).
pub(crate) type Running = Vec<(String, String, Vec<Arc<LiveTask>>)>;

/// What the endpoint reads: the running tasks now.
pub(crate) type Source = Arc<dyn Fn() -> Running + Send + Sync>;

/// Each subtask's samples, by job id, vertex and subtask.
type Lives = HashMap<(String, usize, usize), SubtaskLive>;

#[derive(Clone)]
struct Endpoint {
    source: Source,
    /// Samples kept between scrapes, for the rates.
    lives: Arc<Mutex<Lives>>,
}

/// Serve `/metrics` on `addr`; returns the bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    token: Option<Secret>,
    source: Source,
) -> Result<SocketAddr> {
    let endpoint = Endpoint {
        source,
        lives: Arc::default(),
    };
    let token = Arc::new(token);
    let app = Router::new()
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let token = Arc::clone(&token);
                async move {
                    match token.as_ref() {
                        Some(t)
                            if !weir_flight::node::bearer_matches(
                                req.headers()
                                    .get(header::AUTHORIZATION)
                                    .and_then(|v| v.to_str().ok()),
                                t,
                            ) =>
                        {
                            (
                                StatusCode::UNAUTHORIZED,
                                "a valid bearer token is required\n",
                            )
                                .into_response()
                        }
                        _ => next.run(req).await,
                    }
                }
            },
        ))
        .with_state(endpoint);
    let (listener, bound) = weir_flight::node::bind(addr).await?;
    tokio::spawn(async move {
        // Replies go out at once, not behind the peer's delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("worker metrics endpoint stopped: {e}");
        }
    });
    Ok(bound)
}

async fn metrics(State(endpoint): State<Endpoint>) -> Response {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let running = (endpoint.source)();
    let mut lives = endpoint.lives.lock().unwrap_or_else(|e| e.into_inner());
    let mut points = vec![];
    let mut seen = vec![];
    for (job_id, job_name, tasks) in running {
        for t in tasks {
            let key = (job_id.clone(), t.vertex, t.subtask);
            let live = lives.entry(key.clone()).or_default();
            live.absorb(t.sample());
            seen.push(key);
            let vertex = t.task.rsplit_once(" (").map_or(t.task.as_str(), |(v, _)| v);
            let labels: Labels = vec![
                ("job_id".into(), job_id.clone()),
                ("job_name".into(), job_name.clone()),
                ("vertex".into(), vertex.to_string()),
                ("subtask".into(), t.subtask.to_string()),
            ];
            let m = live.metrics(now);
            points.extend(prometheus::points(prometheus::TASK_METRICS, &m, &labels));
            points.extend(prometheus::points(
                prometheus::OPERATOR_METRICS,
                &m,
                &labels,
            ));
        }
    }
    // Tasks that ended are forgotten.
    lives.retain(|k, _| seen.contains(k));
    drop(lives);
    (
        [(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)],
        prometheus::encode_points(&points),
    )
        .into_response()
}
