//! The extender's HTTP surface: `POST /filter`, `/prioritize` and `/bind`,
//! each reading kube-scheduler's JSON and answering with it. The decisions
//! are [`super::protocol`]'s; the state they read and the writes of a bind
//! are a [`Backend`]'s, so this layer is tested with a fake one.
//!
//! Status codes: 200 with the protocol's answer (a filter that could not
//! run, or a bind that failed, says so in its `Error` field, which
//! kube-scheduler reports for the pod); 400 with a plain-text message for a
//! body that is not the protocol's; 503 until the caches have synced; 500
//! for a prioritize that could not run (its answer has no error field).
//! kube-scheduler treats every status but 200 as a failed call and retries
//! the pod.

use super::metrics::{ExtenderMetrics, VerdictLabel};
use super::protocol::{
    self, BIND_PATH, BindingRequest, ExtenderBindingResult, ExtenderFilterResult, FILTER_PATH,
    PRIORITIZE_PATH,
};
use crate::serve::BottleneckLabel;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::future::BoxFuture;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::Snapshot;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, info, warn};

/// The largest request body taken: a filter without `nodeCacheCapable`
/// carries every candidate Node object (about 5 kB each).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// What the handlers read and write through.
pub trait Backend: Send + Sync + 'static {
    /// `Err(reason)` until the caches have synced.
    fn ready(&self) -> Result<(), String>;
    /// The cluster now, with the pods this extender bound and has not yet
    /// seen bound; `Err(reason)` when it cannot be built.
    fn snapshot(&self) -> Result<Arc<Snapshot>, String>;
    fn config(&self) -> &SchedulerConfig;
    /// Chooses the GPUs on the request's node, writes them on the pod and
    /// binds it; one bind at a time. `Err` is the message for kube-scheduler.
    fn bind(&self, request: BindingRequest) -> BoxFuture<'_, Result<Placement, String>>;
}

struct Shared {
    backend: Arc<dyn Backend>,
    metrics: Arc<ExtenderMetrics>,
}

/// The extender's routes over `backend`.
pub fn router(backend: Arc<dyn Backend>, metrics: Arc<ExtenderMetrics>) -> Router {
    Router::new()
        .route(FILTER_PATH, post(filter))
        .route(PRIORITIZE_PATH, post(prioritize))
        .route(BIND_PATH, post(bind))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(Shared { backend, metrics }))
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
            return json(StatusCode::OK, &ExtenderFilterResult::error(e));
        }
    };
    let result = protocol::filter(&snapshot, s.backend.config(), &request);
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
            return text(StatusCode::INTERNAL_SERVER_ERROR, e);
        }
    };
    let scores = protocol::prioritize(&snapshot, s.backend.config(), &request);
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
    match s.backend.bind(request).await {
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
            json(StatusCode::OK, &ExtenderBindingResult { error })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_scheduler_core::snapshot::SnapshotBuilder;
    use gputopo_scheduler_core::snapshot::kube::node_input;
    use serde_json::{Value, json};
    use std::io::{Read, Write};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// One CPU-only node, `cpu-1`; binds are recorded, and refused for node `refuse`.
    struct Fake {
        ready: AtomicBool,
        config: SchedulerConfig,
        snapshot: Arc<Snapshot>,
        binds: Mutex<Vec<BindingRequest>>,
    }

    impl Backend for Fake {
        fn ready(&self) -> Result<(), String> {
            if self.ready.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("waiting for the Pod watch to sync".into())
            }
        }
        fn snapshot(&self) -> Result<Arc<Snapshot>, String> {
            Ok(self.snapshot.clone())
        }
        fn config(&self) -> &SchedulerConfig {
            &self.config
        }
        fn bind(&self, request: BindingRequest) -> BoxFuture<'_, Result<Placement, String>> {
            Box::pin(async move {
                if request.node == "refuse" {
                    return Err("node refuse cannot take pod ml/p: too few free GPUs".into());
                }
                let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                    "metadata": {"name": request.name, "namespace": request.namespace},
                    "spec": {"containers": []}
                }))
                .map_err(|e| e.to_string())?;
                let request2 = request.clone();
                self.binds.lock().map_err(|e| e.to_string())?.push(request);
                protocol::plan_binding(&self.snapshot, &self.config, &pod, &request2)
                    .map_err(|e| e.to_string())
            })
        }
    }

    async fn serve(ready: bool) -> (u16, Arc<Fake>, Arc<ExtenderMetrics>) {
        let config = SchedulerConfig::default();
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {"name": "cpu-1"},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
        }))
        .expect("a node");
        let mut b = SnapshotBuilder::new(&config);
        b.node(node_input(&node, None).expect("node input"));
        let fake = Arc::new(Fake {
            ready: AtomicBool::new(ready),
            snapshot: Arc::new(b.build().expect("snapshot")),
            config,
            binds: Mutex::new(Vec::new()),
        });
        let metrics = Arc::new(ExtenderMetrics::new());
        let app = router(fake.clone(), metrics.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let port = listener.local_addr().expect("an address").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (port, fake, metrics)
    }

    /// A raw HTTP/1.1 request: (status, content type, body).
    async fn call(port: u16, method: &str, path: &str, body: &str) -> (u16, String, String) {
        let (method, path, body) = (method.to_string(), path.to_string(), body.to_string());
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
            write!(
                s,
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .expect("write");
            let mut text = String::new();
            s.read_to_string(&mut text).expect("read");
            let status = text
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .expect("a status");
            let (head, body) = text.split_once("\r\n\r\n").expect("a head");
            let content_type = head
                .lines()
                .find_map(|l| l.strip_prefix("content-type: "))
                .unwrap_or_default()
                .to_string();
            (status, content_type, body.to_string())
        })
        .await
        .expect("the request ran")
    }

    const POD: &str = r#"{"metadata": {"name": "web", "namespace": "ml", "uid": "u1"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}"#;

    #[tokio::test]
    async fn filter_and_prioritize_answer_in_the_protocols_json() {
        let (port, _, metrics) = serve(true).await;
        let (status, content_type, body) = call(
            port,
            "POST",
            "/filter",
            &format!(r#"{{"Pod": {POD}, "Nodes": null, "NodeNames": ["cpu-1", "gone"]}}"#),
        )
        .await;
        assert_eq!((status, content_type.as_str()), (200, "application/json"));
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("JSON"),
            json!({
                "Nodes": null,
                "NodeNames": ["cpu-1"],
                "FailedNodes": {"gone": "node(s) not yet in gputopo's node cache"},
                "FailedAndUnresolvableNodes": {},
                "Error": ""
            })
        );
        let (status, _, body) = call(
            port,
            "POST",
            "/prioritize",
            &format!(r#"{{"Pod": {POD}, "NodeNames": ["cpu-1", "gone"]}}"#),
        )
        .await;
        assert_eq!(status, 200);
        let scores: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(scores[1], json!({"Host": "gone", "Score": 0}));
        assert_eq!(scores[0]["Host"], "cpu-1");
        assert!(
            scores[0]["Score"]
                .as_i64()
                .is_some_and(|s| (0..=10).contains(&s)),
            "{scores}"
        );
        let text = gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(metrics.as_ref()));
        assert!(
            text.contains("gputopo_extender_requests_total{verb=\"filter\",result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("gputopo_extender_filtered_nodes_total{verdict=\"failed\"} 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn bad_bodies_get_400_naming_the_field() {
        let (port, fake, metrics) = serve(true).await;
        let (status, content_type, body) = call(port, "POST", "/filter", "{\"Pod\": 3}").await;
        assert_eq!(status, 400);
        assert!(content_type.starts_with("text/plain"), "{content_type}");
        assert!(
            body.starts_with("invalid ExtenderArgs at Pod: invalid type: integer"),
            "{body}"
        );
        let (status, _, body) = call(port, "POST", "/prioritize", "").await;
        assert_eq!(status, 400);
        assert!(body.contains("EOF"), "{body}");
        let (status, _, body) = call(port, "POST", "/bind", r#"{"PodName": "p"}"#).await;
        assert_eq!(status, 400);
        assert!(
            body.starts_with("ExtenderBindingArgs has no PodNamespace"),
            "{body}"
        );
        assert!(fake.binds.lock().expect("lock").is_empty());
        // Not a verb, not a method.
        assert_eq!(call(port, "POST", "/preempt", "{}").await.0, 404);
        assert_eq!(call(port, "GET", "/filter", "").await.0, 405);
        let text = gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(metrics.as_ref()));
        assert!(
            text.contains(
                "gputopo_extender_requests_total{verb=\"bind\",result=\"bad_request\"} 1"
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn nothing_is_answered_before_the_caches_sync() {
        let (port, fake, _) = serve(false).await;
        let (status, _, body) = call(
            port,
            "POST",
            "/bind",
            r#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "cpu-1"}"#,
        )
        .await;
        assert_eq!(status, 503);
        assert_eq!(
            body,
            "gputopo extender not ready: waiting for the Pod watch to sync\n"
        );
        assert!(fake.binds.lock().expect("lock").is_empty());
    }

    #[tokio::test]
    async fn bind_answers_with_an_empty_error_or_the_reason() {
        let (port, fake, metrics) = serve(true).await;
        let (status, _, body) = call(
            port,
            "POST",
            "/bind",
            r#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "cpu-1"}"#,
        )
        .await;
        assert_eq!((status, body.as_str()), (200, r#"{"Error":""}"#));
        assert_eq!(
            fake.binds.lock().expect("lock").as_slice(),
            [BindingRequest {
                namespace: "ml".into(),
                name: "p".into(),
                uid: Some("u".into()),
                node: "cpu-1".into()
            }]
        );
        let (status, _, body) = call(
            port,
            "POST",
            "/bind",
            r#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "refuse"}"#,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("JSON"),
            json!({"Error": "node refuse cannot take pod ml/p: too few free GPUs"})
        );
        let text = gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(metrics.as_ref()));
        assert!(
            text.contains("gputopo_extender_requests_total{verb=\"bind\",result=\"error\"} 1"),
            "{text}"
        );
        // One placement (no GPUs asked: no bottleneck).
        assert!(
            text.contains("gputopo_placement_decisions_total 1"),
            "{text}"
        );
        assert!(
            text.contains("gputopo_placement_bottleneck_total{bottleneck=\"none\"} 1"),
            "{text}"
        );
    }
}
