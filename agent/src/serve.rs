//! The agent's metrics; `/healthz`, `/readyz` and `/metrics` are served by `gputopo-ops`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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

pub use gputopo_ops::{Readiness, router};
