use super::super::protocol::{BindingRequest, PlanError};
use super::*;
use futures::future::BoxFuture;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::Snapshot;
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// One CPU-only node, `cpu-1`. Binds are recorded, refused for node
/// `refuse`, and held for node `hang` (it says `started`, then waits for
/// `release`). The pods: any name in `ml`, uid `u`, default scheduler;
/// `ml/theirs` names schedulerName `gputopo-scheduler`.
struct Fake {
    ready: AtomicBool,
    config: SchedulerConfig,
    snapshot: Arc<Snapshot>,
    binds: Mutex<Vec<BindingRequest>>,
    started: Notify,
    release: Notify,
}

impl Backend for Fake {
    fn ready(&self) -> Result<(), NotReady> {
        if self.ready.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(NotReady {
                reason: "waiting for the Pod watch to sync".into(),
            })
        }
    }
    fn snapshot(&self) -> Result<Arc<Snapshot>, SnapshotUnavailable> {
        Ok(self.snapshot.clone())
    }
    fn config(&self) -> &SchedulerConfig {
        &self.config
    }
    fn bind(&self, request: BindingRequest) -> BoxFuture<'_, Result<Placement, BindError>> {
        Box::pin(async move {
            if request.node == "refuse" {
                return Err(BindError::from(PlanError::AlreadyBound {
                    pod: request.pod_key(),
                    node: "refuse".into(),
                }));
            }
            if request.node == "hang" {
                self.started.notify_one();
                self.release.notified().await;
                let pod = request.pod_key();
                lock(&self.binds).push(request);
                return Err(BindError::AlreadyAssumed { pod });
            }
            let scheduler = (request.name == "theirs").then_some("gputopo-scheduler");
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                "metadata": {"name": request.name, "namespace": request.namespace, "uid": "u"},
                "spec": {"containers": [], "schedulerName": scheduler}
            }))
            .expect("a pod");
            let served = [protocol::DEFAULT_SCHEDULER_NAME.to_string()];
            let placement = protocol::plan_binding(
                &self.snapshot,
                &self.config,
                &served,
                &pod,
                &request,
                &protocol::PodClaims::Unjudged,
            )?;
            lock(&self.binds).push(request);
            Ok(placement)
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn serve(ready: bool) -> (u16, Arc<Fake>, Arc<ExtenderMetrics>) {
    serve_with(ready, Limits::default()).await
}

async fn serve_with(ready: bool, limits: Limits) -> (u16, Arc<Fake>, Arc<ExtenderMetrics>) {
    let config = SchedulerConfig::default();
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": "cpu-1"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
    }))
    .expect("a node");
    let mut b = SnapshotBuilder::new(&config);
    b.node(node_input(&node, None, ReadingTrust::at(Timestamp::now())).expect("node input"));
    let fake = Arc::new(Fake {
        ready: AtomicBool::new(ready),
        snapshot: Arc::new(b.build().expect("snapshot")),
        config,
        binds: Mutex::new(Vec::new()),
        started: Notify::new(),
        release: Notify::new(),
    });
    let metrics = Arc::new(ExtenderMetrics::new());
    let app = router(fake.clone(), metrics.clone(), limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, fake, metrics)
}

/// A raw HTTP/1.1 request: (status, content type, body). A server that
/// answers before reading the whole body may reset the connection after
/// its answer; the answer counts.
async fn call(port: u16, method: &str, path: &str, body: &str) -> (u16, String, String) {
    let (method, path, body) = (method.to_string(), path.to_string(), body.to_string());
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let _ = write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut chunk) {
            answer.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&answer).to_string();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("a status in {text:?}"));
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

fn metrics_text(metrics: &ExtenderMetrics) -> String {
    gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(metrics))
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
        text.contains("gputopo_extender_requests_total{verb=\"bind\",result=\"bad_request\"} 1"),
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
            uid: "u".into(),
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
        json!({"Error": "pod ml/p is already bound to node refuse"})
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

#[tokio::test]
async fn bind_refuses_pods_of_other_profiles_and_other_uids() {
    let (port, fake, _) = serve(true).await;
    let error = |body: &str| {
        serde_json::from_str::<Value>(body).expect("JSON")["Error"]
            .as_str()
            .map(str::to_string)
            .expect("an Error field")
    };
    let (status, _, body) = call(
        port,
        "POST",
        "/bind",
        r#"{"PodName": "theirs", "PodNamespace": "ml", "PodUID": "u", "Node": "cpu-1"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        error(&body),
        "pod ml/theirs has schedulerName gputopo-scheduler; this extender binds only pods of \
         default-scheduler (--scheduler-name)"
    );
    let (status, _, body) = call(
        port,
        "POST",
        "/bind",
        r#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "other", "Node": "cpu-1"}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        error(&body)
            .starts_with("pod ml/p has uid u, the binding names uid other: not the same pod"),
        "{body}"
    );
    let (status, _, body) = call(
        port,
        "POST",
        "/bind",
        r#"{"PodName": "p", "PodNamespace": "ml", "Node": "cpu-1"}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body.starts_with("ExtenderBindingArgs has no PodUID"),
        "{body}"
    );
    assert!(fake.binds.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let limits = Limits {
        max_request_bytes: 1024,
        ..Limits::default()
    };
    let (port, fake, metrics) = serve_with(true, limits).await;
    // Under the limit: answered.
    let small = format!(r#"{{"Pod": {POD}, "NodeNames": ["cpu-1"]}}"#);
    assert!(small.len() < 1024);
    assert_eq!(call(port, "POST", "/filter", &small).await.0, 200);
    // Over it: 413 before the JSON is read, for either read verb.
    let names: Vec<String> = (0..100).map(|i| format!("node-{i:04}")).collect();
    let big = json!({"Pod": serde_json::from_str::<Value>(POD).expect("JSON"), "NodeNames": names})
        .to_string();
    assert!(big.len() > 1024);
    assert_eq!(call(port, "POST", "/filter", &big).await.0, 413);
    assert_eq!(call(port, "POST", "/prioritize", &big).await.0, 413);
    // A bind takes 64 KiB whatever the read limit.
    let long = "x".repeat(MAX_BIND_BYTES);
    let bind =
        format!(r#"{{"PodName": "{long}", "PodNamespace": "ml", "PodUID": "u", "Node": "cpu-1"}}"#);
    assert_eq!(call(port, "POST", "/bind", &bind).await.0, 413);
    assert!(fake.binds.lock().expect("lock").is_empty());
    let text = metrics_text(&metrics);
    assert!(
        text.contains("gputopo_extender_refused_requests_total{reason=\"too_large\"} 3"),
        "{text}"
    );
}

#[tokio::test]
async fn a_request_not_answered_in_time_gets_408_and_its_bind_still_completes() {
    let limits = Limits {
        request_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let (port, fake, metrics) = serve_with(true, limits).await;
    let hang = r#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "hang"}"#;
    let (status, _, _) = call(port, "POST", "/bind", hang).await;
    assert_eq!(status, 408);
    let text = metrics_text(&metrics);
    assert!(
        text.contains("gputopo_extender_refused_requests_total{reason=\"timeout\"} 1"),
        "{text}"
    );
    // The bind was not cut off with the request: released, it completes.
    fake.started.notified().await;
    fake.release.notify_one();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.binds.lock().expect("lock").is_empty() {
        assert!(Instant::now() < deadline, "the bind never completed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn requests_over_the_concurrency_limit_get_503() {
    let limits = Limits {
        max_concurrent_binds: 1,
        ..Limits::default()
    };
    let (port, fake, metrics) = serve_with(true, limits).await;
    let hang = r#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "hang"}"#;
    let first = tokio::spawn(async move { call(port, "POST", "/bind", hang).await });
    fake.started.notified().await;
    // One bind in flight: the next is shed at once.
    let (status, _, body) = call(
        port,
        "POST",
        "/bind",
        r#"{"PodName": "q", "PodNamespace": "ml", "PodUID": "u", "Node": "cpu-1"}"#,
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            "gputopo extender overloaded: 1 bind requests already in flight\n"
        )
    );
    // Filters have a limit of their own.
    let filter = format!(r#"{{"Pod": {POD}, "NodeNames": ["cpu-1"]}}"#);
    assert_eq!(call(port, "POST", "/filter", &filter).await.0, 200);
    fake.release.notify_one();
    let (status, _, body) = first.await.expect("the first bind");
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            r#"{"Error":"pod ml/p was bound by this extender moments ago (its binding is still on its way)"}"#
        )
    );
    // The slot is free again.
    let (status, _, body) = call(
        port,
        "POST",
        "/bind",
        r#"{"PodName": "q", "PodNamespace": "ml", "PodUID": "u", "Node": "cpu-1"}"#,
    )
    .await;
    assert_eq!((status, body.as_str()), (200, r#"{"Error":""}"#));
    let text = metrics_text(&metrics);
    assert!(
        text.contains("gputopo_extender_refused_requests_total{reason=\"overloaded\"} 1"),
        "{text}"
    );
}
