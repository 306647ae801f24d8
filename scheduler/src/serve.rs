//! `/healthz`, `/readyz` (false until every watch has listed its objects)
//! and `/metrics` (prometheus-client, OpenMetrics text).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// `scheduled` | `unschedulable` | `invalid` | `waiting` | `error`.
    pub result: &'static str,
    /// `training` | `inference` | `unspecified`.
    pub workload: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BottleneckLabel {
    /// The placement's weakest link class (`NV12`, `PIX`, `SYS`), or `none`
    /// (one GPU, a shared GPU, no GPU) or `unknown` (a node without topology).
    pub bottleneck: String,
}

/// The scheduler's metrics, in one registry.
pub struct Metrics {
    registry: Registry,
    pub duration: Histogram,
    pub attempts: Family<AttemptLabels, Counter>,
    pub decisions: Counter,
    pub allocation: Gauge<f64, AtomicU64>,
    pub fragmentation: Gauge<f64, AtomicU64>,
    pub bottlenecks: Family<BottleneckLabel, Counter>,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("gputopo");
        let duration = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let attempts = Family::<AttemptLabels, Counter>::default();
        let decisions = Counter::default();
        let allocation = Gauge::<f64, AtomicU64>::default();
        let fragmentation = Gauge::<f64, AtomicU64>::default();
        let bottlenecks = Family::<BottleneckLabel, Counter>::default();
        registry.register(
            "scheduling_duration_seconds",
            "Time to decide one pod or gang: snapshot, filter, score, choice (API writes excluded)",
            duration.clone(),
        );
        registry.register(
            "schedule_attempts",
            "Scheduling attempts by result (scheduled, unschedulable, invalid, waiting, error) and workload",
            attempts.clone(),
        );
        registry.register(
            "placement_decisions",
            "Pods placed (bound with their GPUs)",
            decisions.clone(),
        );
        registry.register(
            "gpu_allocation_ratio",
            "GPUs held (whole or shared) over GPUs listed, over every node, at the last decision",
            allocation.clone(),
        );
        registry.register(
            "fragmentation_ratio",
            "Free GPUs that no 8-GPU request could use (stranded), over free GPUs, at the last decision",
            fragmentation.clone(),
        );
        registry.register(
            "placement_bottleneck",
            "Placements by the weakest link class of the chosen GPU set",
            bottlenecks.clone(),
        );
        Metrics {
            registry,
            duration,
            attempts,
            decisions,
            allocation,
            fragmentation,
            bottlenecks,
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

/// Not ready until the watches have synced, with the reason for `/readyz`.
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
            "watches not synced yet".to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_match_the_contract() {
        let m = Metrics::new();
        m.duration.observe(0.01);
        m.attempts
            .get_or_create(&AttemptLabels {
                result: "scheduled",
                workload: "training",
            })
            .inc();
        m.decisions.inc();
        m.allocation.set(0.5);
        m.bottlenecks
            .get_or_create(&BottleneckLabel {
                bottleneck: "NV2".into(),
            })
            .inc();
        let text = m.encode();
        for name in [
            "gputopo_scheduling_duration_seconds_bucket",
            "gputopo_schedule_attempts_total{result=\"scheduled\",workload=\"training\"} 1",
            "gputopo_placement_decisions_total 1",
            "gputopo_gpu_allocation_ratio 0.5",
            "gputopo_fragmentation_ratio",
            "gputopo_placement_bottleneck_total{bottleneck=\"NV2\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }
}
