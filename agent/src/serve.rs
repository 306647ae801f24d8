//! `/healthz`, `/readyz` and `/metrics` for the daemon.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    pub object: &'static str,
}

/// The agent's metrics, registered in one `prometheus-client` registry.
pub struct Metrics {
    registry: Registry,
    pub scans: Family<ResultLabel, Counter>,
    pub writes: Family<WriteLabel, Counter>,
    pub gpus: Gauge,
    pub degraded: Gauge,
    pub last_success: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("gputopo_agent");
        let scans = Family::<ResultLabel, Counter>::default();
        let writes = Family::<WriteLabel, Counter>::default();
        let gpus = Gauge::default();
        let degraded = Gauge::default();
        let last_success = Gauge::default();
        registry.register(
            "scans",
            "Discovery-and-publish rounds, by result (ok, discovery_error, publish_error)",
            scans.clone(),
        );
        registry.register(
            "api_writes",
            "Writes to the API server, by object (node_labels, gpu_topology, gpu_topology_status)",
            writes.clone(),
        );
        registry.register("gpus", "GPUs discovered on this node", gpus.clone());
        registry.register(
            "degraded",
            "1 when the node's NVLinks are degraded (see the GpuTopology Degraded condition)",
            degraded.clone(),
        );
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the last successful publish",
            last_success.clone(),
        );
        Metrics {
            registry,
            scans,
            writes,
            gpus,
            degraded,
            last_success,
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Readiness: false until the first discovery is published, and while the last
/// round failed, with the reason for `/readyz` to print.
#[derive(Default)]
pub struct Readiness {
    ready: AtomicBool,
    reason: Mutex<String>,
}

impl Readiness {
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    pub fn set_not_ready(&self, reason: String) {
        if let Ok(mut r) = self.reason.lock() {
            *r = reason;
        }
        self.ready.store(false, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    fn reason(&self) -> String {
        self.reason
            .lock()
            .map(|r| r.clone())
            .unwrap_or_else(|_| "unknown".to_string())
    }
}

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
}

pub fn router(metrics: Arc<Metrics>, readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Shared { metrics, readiness })
}

async fn readyz(State(s): State<Shared>) -> (StatusCode, String) {
    if s.readiness.is_ready() {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        let reason = s.readiness.reason();
        let reason = if reason.is_empty() {
            "no discovery published yet".to_string()
        } else {
            reason
        };
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
    }
}

async fn metrics_text(
    State(s): State<Shared>,
) -> ([(axum::http::header::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}
