//! The extender's HTTP surface: `POST /filter`, `/prioritize` and `/bind`,
//! each reading kube-scheduler's JSON and answering with it. The decisions
//! are [`super::protocol`]'s; the state they read and the writes of a bind
//! are a [`Backend`]'s, so this layer is tested with a fake one.
//!
//! Status codes: 200 with the protocol's answer (a filter that could not
//! run, or a bind that failed or was refused, says so in its `Error` field,
//! which kube-scheduler reports for the pod); 400 with a plain-text message
//! for a body that is not the protocol's; 503 until the caches have synced;
//! 500 for a prioritize that could not run (its answer has no error field).
//! The [`Limits`] answer before any verb runs: 413 for a body over the
//! limit, 408 for a request not answered in time, 503 when too many are in
//! flight. kube-scheduler treats every status but 200 as a failed call and
//! retries the pod.

pub use super::backend::{Backend, BindError, NotReady, SnapshotUnavailable};
use super::metrics::{ExtenderMetrics, RefusedLabel, VerdictLabel};
use super::protocol::{
    self, BIND_PATH, ExtenderBindingResult, ExtenderFilterResult, FILTER_PATH, PRIORITIZE_PATH,
};
use crate::metrics::BottleneckLabel;
use axum::Router;
use axum::body::Bytes;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::load_shed::LoadShedLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tracing::{debug, info, warn};

/// The largest `/filter` or `/prioritize` body taken by default. With
/// `nodeCacheCapable: true` kube-scheduler sends the pod and node names
/// only: 15,000 nodes (three times Kubernetes' tested 5,000) with names of
/// the longest legal length, 253 bytes, quoted and comma-separated, are
/// 15,000 × 256 B ≈ 3.7 MiB; the pod is at most what the API server
/// accepts in one request, 3 MiB. 8 MiB holds both. Without
/// `nodeCacheCapable` every Node object comes too (5 to 20 kB each): raise
/// `--max-request-bytes` or, better, turn it on.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// The largest `/bind` body: four strings (pod name and node name up to
/// 253 bytes, namespace 63, uid 36) take under 1 KiB.
pub const MAX_BIND_BYTES: usize = 64 * 1024;

/// What one caller can make the extender hold; see "Limits" in
/// docs/extender.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `/filter` and `/prioritize` bodies (`/bind`: [`MAX_BIND_BYTES`]); 413 above.
    pub max_request_bytes: usize,
    /// From the request's arrival to the answer, its body read included; 408 after.
    pub request_timeout: Duration,
    /// `/filter` and `/prioritize` requests in flight at once (kube-scheduler
    /// sends them one pod at a time); 503 for more.
    pub max_concurrent_filters: usize,
    /// `/bind` requests in flight at once (kube-scheduler binds in
    /// parallel; the extender one at a time); 503 for more.
    pub max_concurrent_binds: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            // Below kube-scheduler's httpTimeout (30s in docs/extender.md's
            // configuration): the extender answers before the caller gives up.
            request_timeout: Duration::from_secs(25),
            max_concurrent_filters: 8,
            max_concurrent_binds: 64,
        }
    }
}

struct Shared {
    backend: Arc<dyn Backend>,
    metrics: Arc<ExtenderMetrics>,
}

/// 503 for a request over a concurrency limit (tower's load shedding).
fn shed(
    what: &'static str,
    limit: usize,
    metrics: &Arc<ExtenderMetrics>,
) -> HandleErrorLayer<
    impl Fn(tower::BoxError) -> std::future::Ready<Response> + Clone + Send + Sync + 'static,
    (),
> {
    let metrics = metrics.clone();
    HandleErrorLayer::new(move |e: tower::BoxError| {
        let response = if e.is::<tower::load_shed::error::Overloaded>() {
            metrics
                .refused
                .get_or_create(&RefusedLabel {
                    reason: "overloaded",
                })
                .inc();
            warn!(limit, "refused a {what} request: {limit} already in flight");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("gputopo extender overloaded: {limit} {what} requests already in flight"),
            )
        } else {
            text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        };
        std::future::ready(response)
    })
}

/// Counts the 413 and 408 answers the limits gave.
async fn count_refusals(
    State(metrics): State<Arc<ExtenderMetrics>>,
    response: Response,
) -> Response {
    let reason = match response.status() {
        StatusCode::PAYLOAD_TOO_LARGE => Some("too_large"),
        StatusCode::REQUEST_TIMEOUT => Some("timeout"),
        _ => None,
    };
    if let Some(reason) = reason {
        metrics
            .refused
            .get_or_create(&RefusedLabel { reason })
            .inc();
        warn!(status = %response.status(), "refused an extender request");
    }
    response
}

/// The extender's routes over `backend`, within `limits`.
pub fn router(backend: Arc<dyn Backend>, metrics: Arc<ExtenderMetrics>, limits: Limits) -> Router {
    let reads = Router::new()
        .route(FILTER_PATH, post(filter))
        .route(PRIORITIZE_PATH, post(prioritize))
        .layer(DefaultBodyLimit::max(limits.max_request_bytes))
        .layer(RequestBodyLimitLayer::new(limits.max_request_bytes))
        .layer(
            ServiceBuilder::new()
                .layer(shed(
                    "filter/prioritize",
                    limits.max_concurrent_filters,
                    &metrics,
                ))
                .layer(LoadShedLayer::new())
                .layer(GlobalConcurrencyLimitLayer::new(
                    limits.max_concurrent_filters,
                )),
        );
    let binds = Router::new()
        .route(BIND_PATH, post(bind))
        .layer(DefaultBodyLimit::max(MAX_BIND_BYTES))
        .layer(RequestBodyLimitLayer::new(MAX_BIND_BYTES))
        .layer(
            ServiceBuilder::new()
                .layer(shed("bind", limits.max_concurrent_binds, &metrics))
                .layer(LoadShedLayer::new())
                .layer(GlobalConcurrencyLimitLayer::new(
                    limits.max_concurrent_binds,
                )),
        );
    reads
        .merge(binds)
        .with_state(Arc::new(Shared {
            backend,
            metrics: metrics.clone(),
        }))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .layer(axum::middleware::map_response_with_state(
            metrics,
            count_refusals,
        ))
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (status, [(CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the answer: {e}"),
        ),
    }
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

/// 503 while not ready, with the reason.
fn not_ready(s: &Shared, verb: &'static str, started: Instant) -> Option<Response> {
    let reason = s.backend.ready().err()?;
    s.metrics
        .request(verb, "not_ready", started.elapsed().as_secs_f64());
    Some(text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("gputopo extender not ready: {reason}"),
    ))
}

fn bad_request(
    s: &Shared,
    verb: &'static str,
    started: Instant,
    e: &dyn std::fmt::Display,
) -> Response {
    warn!(verb, error = %e, "refused a malformed request");
    s.metrics
        .request(verb, "bad_request", started.elapsed().as_secs_f64());
    text(StatusCode::BAD_REQUEST, e.to_string())
}

/// The filter and prioritize prologue: ready, and a readable `ExtenderArgs`;
/// otherwise the 503 or 400 to answer.
fn admit(
    s: &Shared,
    verb: &'static str,
    started: Instant,
    body: &[u8],
) -> Result<protocol::ExtenderRequest, Box<Response>> {
    if let Some(r) = not_ready(s, verb, started) {
        return Err(Box::new(r));
    }
    protocol::decode_args(body).map_err(|e| Box::new(bad_request(s, verb, started, &e)))
}

async fn filter(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    const VERB: &str = "filter";
    let started = Instant::now();
    let request = match admit(&s, VERB, started, &body) {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    let snapshot = match s.backend.snapshot() {
        Ok(snapshot) => snapshot,
        Err(e) => {
            s.metrics
                .request(VERB, "error", started.elapsed().as_secs_f64());
            return json(StatusCode::OK, &ExtenderFilterResult::error(e.to_string()));
        }
    };
    let claims = s.backend.claims(&request.pod, &snapshot);
    let result = protocol::filter(&snapshot, s.backend.config(), &request, &claims);
    let passed = result
        .node_names
        .as_ref()
        .map(Vec::len)
        .or_else(|| {
            result
                .nodes
                .as_ref()
                .and_then(|n| n.items.as_ref())
                .map(Vec::len)
        })
        .unwrap_or(0);
    for (verdict, count) in [
        ("passed", passed),
        ("failed", result.failed_nodes.len()),
        ("unresolvable", result.failed_and_unresolvable_nodes.len()),
    ] {
        s.metrics
            .filtered_nodes
            .get_or_create(&VerdictLabel { verdict })
            .inc_by(count as u64);
    }
    debug!(
        pod = %request.pod_key(),
        passed,
        failed = ?result.failed_nodes,
        unresolvable = ?result.failed_and_unresolvable_nodes,
        "filter"
    );
    s.metrics
        .request(VERB, "ok", started.elapsed().as_secs_f64());
    json(StatusCode::OK, &result)
}

async fn prioritize(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    const VERB: &str = "prioritize";
    let started = Instant::now();
    let request = match admit(&s, VERB, started, &body) {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    let snapshot = match s.backend.snapshot() {
        Ok(snapshot) => snapshot,
        Err(e) => {
            s.metrics
                .request(VERB, "error", started.elapsed().as_secs_f64());
            return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        }
    };
    let claims = s.backend.claims(&request.pod, &snapshot);
    let scores = protocol::prioritize(&snapshot, s.backend.config(), &request, &claims);
    debug!(pod = %request.pod_key(), ?scores, "prioritize");
    s.metrics
        .request(VERB, "ok", started.elapsed().as_secs_f64());
    json(StatusCode::OK, &scores)
}

async fn bind(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    const VERB: &str = "bind";
    let started = Instant::now();
    if let Some(r) = not_ready(&s, VERB, started) {
        return r;
    }
    let request = match protocol::decode_binding(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(&s, VERB, started, &e),
    };
    let key = request.pod_key();
    let node = request.node.clone();
    // On a task of its own: a request that times out (408) does not cut a
    // bind off between its API write and the record of the GPUs it took.
    let backend = s.backend.clone();
    let bound = tokio::spawn(async move { backend.bind(request).await })
        .await
        .unwrap_or_else(|e| Err(BindError::Task(e)));
    match bound {
        Ok(p) => {
            info!(pod = %key, node = %p.node, gpus = %p.assigned_gpus(), score = p.score, explanation = %p.explanation, "bound");
            s.metrics.decisions.inc();
            s.metrics
                .bottlenecks
                .get_or_create(&BottleneckLabel {
                    bottleneck: protocol::bottleneck_text(&p),
                })
                .inc();
            s.metrics
                .request(VERB, "ok", started.elapsed().as_secs_f64());
            json(StatusCode::OK, &ExtenderBindingResult::default())
        }
        Err(error) => {
            warn!(pod = %key, %node, %error, "bind refused");
            s.metrics
                .request(VERB, "error", started.elapsed().as_secs_f64());
            json(
                StatusCode::OK,
                &ExtenderBindingResult {
                    error: error.to_string(),
                },
            )
        }
    }
}

#[cfg(test)]
mod tests;
