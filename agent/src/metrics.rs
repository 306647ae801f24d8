//! The agent's metrics: scan outcomes, writes, GPUs seen, one registry that
//! `gputopo-ops` serves at `/metrics` (see `health.rs` for the routes).

pub use gputopo_ops::labels::{ReasonLabel, ResultLabel};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
            "Writes to the API server, by object (node_labels, gpu_topology, gpu_topology_status, link_slice)",
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
