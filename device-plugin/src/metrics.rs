//! The plugin's metrics; `/healthz`, `/readyz` and `/metrics` are served by `gputopo-ops`.

use crate::choose::{AnnotationProblem, Outcome};
pub use gputopo_ops::labels::{ReasonLabel, ResultLabel};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// The plugin's metrics, registered in one `prometheus-client` registry.
pub struct Metrics {
    registry: Registry,
    pub preferred: Family<OutcomeLabel, Counter>,
    pub bad_annotations: Family<ReasonLabel, Counter>,
    pub allocations: Counter,
    pub registrations: Family<ResultLabel, Counter>,
    pub healthy: Gauge,
    pub unhealthy: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        gputopo_ops::build_info::register_build_info(&mut root, "device-plugin");
        let registry = root.sub_registry_with_prefix("gputopo_device_plugin");
        let preferred = Family::<OutcomeLabel, Counter>::default();
        let bad_annotations = Family::<ReasonLabel, Counter>::default();
        let registrations = Family::<ResultLabel, Counter>::default();
        let allocations = Counter::default();
        let healthy = Gauge::default();
        let unhealthy = Gauge::default();
        registry.register(
            "preferred_allocations",
            "GetPreferredAllocation answers per container, by outcome (matched, ambiguous, topology-rule, none)",
            preferred.clone(),
        );
        registry.register(
            "bad_annotations",
            "Pods whose gputopo.dev/assigned-gpus could not be used, by reason (unparsable, unknown-gpu, duplicate); counted once per pod",
            bad_annotations.clone(),
        );
        registry.register(
            "allocations",
            "Containers answered in Allocate",
            allocations.clone(),
        );
        registry.register(
            "registrations",
            "Registrations with the kubelet, by result (ok, error)",
            registrations.clone(),
        );
        registry.register("healthy_gpus", "GPUs advertised Healthy", healthy.clone());
        registry.register(
            "unhealthy_gpus",
            "GPUs advertised Unhealthy (NVML reports them lost)",
            unhealthy.clone(),
        );
        // Every label exists from the start, so a dashboard sees zeros, not gaps.
        for outcome in Outcome::METRIC_LABELS {
            let _ = preferred.get_or_create(&OutcomeLabel { outcome });
        }
        for reason in AnnotationProblem::METRIC_LABELS {
            let _ = bad_annotations.get_or_create(&ReasonLabel { reason });
        }
        Metrics {
            registry: root,
            preferred,
            bad_annotations,
            allocations,
            registrations,
            healthy,
            unhealthy,
        }
    }

    /// Preferred allocations counted with `outcome`.
    pub fn preferred_count(&self, outcome: &'static str) -> u64 {
        self.preferred
            .get_or_create(&OutcomeLabel { outcome })
            .get()
    }

    /// Registrations with the kubelet counted with `result` (ok, error).
    pub fn registration_count(&self, result: &'static str) -> u64 {
        self.registrations
            .get_or_create(&ResultLabel { result })
            .get()
    }

    /// Pods counted with a bad annotation for `reason`.
    pub fn bad_annotation_count(&self, reason: &'static str) -> u64 {
        self.bad_annotations
            .get_or_create(&ReasonLabel { reason })
            .get()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_plugin_exports_its_build_beside_its_prefixed_metrics() {
        let m = Metrics::new();
        m.allocations.inc();
        let text = gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(&m));
        assert!(
            text.contains("gputopo_build_info{component=\"device-plugin\",version=\""),
            "{text}"
        );
        assert!(
            text.contains("gputopo_device_plugin_allocations_total 1"),
            "{text}"
        );
    }
}
