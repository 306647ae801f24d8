//! What `gputopo-agent` and `gputopo-scheduler` both serve for the kubelet's
//! probes and for Prometheus: `/healthz` (the process answers), `/readyz`
//! (503 with the reason until the daemon says it is ready) and `/metrics`
//! (OpenMetrics text of the daemon's `prometheus-client` registry). Each
//! daemon keeps its own metrics; this crate only serves them. `daemon.rs`
//! is the start every daemon shares: logging, runtime, API client, the
//! server of these routes, the stop signal and the `--listen` flag;
//! `man.rs` their manual pages.

pub mod daemon;
pub mod man;

pub mod build_info;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::{CONTENT_TYPE, HeaderName};
use axum::routing::get;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A daemon's metrics: anything that can lend its registry.
pub trait MetricsRegistry: Send + Sync + 'static {
    fn registry(&self) -> &Registry;
}

/// The registry's OpenMetrics text.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// Readiness with the reason `/readyz` prints while not ready.
pub struct Readiness {
    ready: AtomicBool,
    reason: Mutex<String>,
}

impl Readiness {
    /// Not ready, for `initial_reason` (e.g. `watches not synced yet`).
    pub fn new(initial_reason: &str) -> Readiness {
        Readiness {
            ready: AtomicBool::new(false),
            reason: Mutex::new(initial_reason.to_string()),
        }
    }

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

    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .map(|r| r.clone())
            .unwrap_or_else(|_| "unknown".to_string())
    }
}

struct Shared<M> {
    metrics: Arc<M>,
    readiness: Arc<Readiness>,
}

impl<M> Clone for Shared<M> {
    fn clone(&self) -> Self {
        Shared {
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
        }
    }
}

/// `/healthz`, `/readyz` and `/metrics` over `metrics` and `readiness`.
pub fn router<M: MetricsRegistry>(metrics: Arc<M>, readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz::<M>))
        .route("/metrics", get(metrics_text::<M>))
        .with_state(Shared { metrics, readiness })
}

async fn readyz<M: MetricsRegistry>(State(s): State<Shared<M>>) -> (StatusCode, String) {
    if s.readiness.is_ready() {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", s.readiness.reason()),
        )
    }
}

async fn metrics_text<M: MetricsRegistry>(
    State(s): State<Shared<M>>,
) -> ([(HeaderName, &'static str); 1], String) {
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        encode(s.metrics.registry()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_carries_its_reason() {
        let r = Readiness::new("watches not synced yet");
        assert!(!r.is_ready());
        assert_eq!(r.reason(), "watches not synced yet");
        r.set_ready();
        assert!(r.is_ready());
        r.set_not_ready("NVML not available: no driver".into());
        assert!(!r.is_ready());
        assert_eq!(r.reason(), "NVML not available: no driver");
    }

    #[test]
    fn encode_writes_openmetrics() {
        let mut registry = Registry::default();
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        registry.register("things", "Things seen", c.clone());
        c.inc();
        let text = encode(&registry);
        assert!(text.contains("things_total 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}

/// Label sets of one static value, which every daemon's counters use: a
/// typed outcome's `metric_label()` by result or by reason.
pub mod labels {
    use prometheus_client::encoding::EncodeLabelSet;

    /// `{result="..."}`.
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    pub struct ResultLabel {
        pub result: &'static str,
    }

    /// `{reason="..."}`.
    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    pub struct ReasonLabel {
        pub reason: &'static str,
    }
}
