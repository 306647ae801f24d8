//! The agent's metrics and liveness. `/readyz` and `/metrics` are served by
//! `gputopo-ops`; `/healthz` is the agent's own: it fails when the scan loop
//! is wedged (no round completed for longer than [`Liveness::limit`]).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
pub use gputopo_ops::labels::{ReasonLabel, ResultLabel};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    pub pod_resources_failures: Family<ReasonLabel, Counter>,
    pub unknown_devices: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        gputopo_ops::build_info::register_build_info(&mut root, "agent");
        let registry = root.sub_registry_with_prefix("gputopo_agent");
        let scans = Family::<ResultLabel, Counter>::default();
        let writes = Family::<WriteLabel, Counter>::default();
        let gpus = Gauge::default();
        let degraded = Gauge::default();
        let last_success = Gauge::default();
        let pod_resources_failures = Family::<ReasonLabel, Counter>::default();
        let unknown_devices = Gauge::default();
        registry.register(
            "scans",
            "Discovery-and-publish rounds, by result (ok, discovery_error, publish_error, timeout)",
            scans.clone(),
        );
        registry.register(
            "pod_resources_failures",
            "Failed readings of the kubelet's PodResources API, by reason (socket_missing, connect_failed, call_failed, timeout, saved_unreadable, answer_invalid)",
            pod_resources_failures.clone(),
        );
        registry.register(
            "pod_resources_unknown_devices",
            "GPU device IDs the kubelet names that match none of this node's GPUs",
            unknown_devices.clone(),
        );
        registry.register(
            "api_writes",
            "Writes to the API server, by object (node_labels, gpu_topology, gpu_topology_status)",
            writes.clone(),
        );
        registry.register("gpus", "GPUs discovered on this node", gpus.clone());
        registry.register(
            "degraded",
            "1 when the node's GPUs or NVLinks are degraded (see the GpuTopology Degraded condition)",
            degraded.clone(),
        );
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the last successful publish",
            last_success.clone(),
        );
        Metrics {
            registry: root,
            scans,
            writes,
            gpus,
            degraded,
            last_success,
            pod_resources_failures,
            unknown_devices,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl gputopo_ops::MetricsRegistry for Metrics {
    fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// Readiness before the first success: no discovery published yet.
pub fn readiness() -> gputopo_ops::Readiness {
    gputopo_ops::Readiness::new("no discovery published yet")
}

pub use gputopo_ops::Readiness;

/// When the scan loop last completed a round, and how long it may go without.
pub struct Liveness {
    started: Instant,
    /// Milliseconds after `started` of the last completed round.
    last: AtomicU64,
    limit: Duration,
}

impl Liveness {
    /// Alive now; wedged after `limit` without a [`Liveness::beat`].
    pub fn new(limit: Duration) -> Liveness {
        Liveness {
            started: Instant::now(),
            last: AtomicU64::new(0),
            limit,
        }
    }

    /// The limit for a loop that rescans every `rescan_interval`, backs off
    /// at most `max_backoff` and bounds a round by `scan_timeout`: three
    /// missed rounds plus one that ran to its timeout.
    pub fn limit_for(
        rescan_interval: Duration,
        max_backoff: Duration,
        scan_timeout: Duration,
    ) -> Duration {
        rescan_interval
            .max(max_backoff)
            .saturating_mul(3)
            .saturating_add(scan_timeout)
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// A round completed (whatever its outcome).
    pub fn beat(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::SeqCst);
    }

    /// How long since the last completed round.
    pub fn quiet_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::SeqCst));
        self.started.elapsed().saturating_sub(last)
    }

    pub fn is_alive(&self) -> bool {
        self.quiet_for() <= self.limit
    }
}

/// `/healthz` (this agent's), `/readyz` and `/metrics` (`gputopo-ops`).
pub fn router(metrics: Arc<Metrics>, readiness: Arc<Readiness>, liveness: Arc<Liveness>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(liveness)
        // Everything else is gputopo-ops's (its own /healthz is never reached).
        .fallback_service(gputopo_ops::router(metrics, readiness))
}

async fn healthz(State(liveness): State<Arc<Liveness>>) -> (StatusCode, String) {
    if liveness.is_alive() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "scan loop wedged: no round completed for {}s (limit {}s)\n",
                liveness.quiet_for().as_secs(),
                liveness.limit.as_secs()
            ),
        )
    }
}
