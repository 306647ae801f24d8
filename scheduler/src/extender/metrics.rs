//! The extender's metrics (`/metrics` on `--listen`, OpenMetrics). The
//! placement metrics keep the secondary scheduler's names, so one dashboard
//! reads both modes; the request metrics are the extender's own.

use crate::metrics::BottleneckLabel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `filter` | `prioritize` | `bind`.
    pub verb: &'static str,
    /// `ok` (answered; a bind that failed is `error`), `bad_request` (400),
    /// `not_ready` (503), `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    pub verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabel {
    /// `passed` | `failed` | `unresolvable`.
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandshakeLabel {
    /// `ok` | `refused` (no client certificate, one the CA did not sign,
    /// not TLS at all) | `timeout`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabel {
    /// `too_large` (413) | `timeout` (408) | `overloaded` (503).
    pub reason: &'static str,
}

fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// See the module documentation.
pub struct ExtenderMetrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<VerbLabel, Histogram, fn() -> Histogram>,
    pub filtered_nodes: Family<VerdictLabel, Counter>,
    pub decisions: Counter,
    pub bottlenecks: Family<BottleneckLabel, Counter>,
    pub allocation: Gauge<f64, AtomicU64>,
    pub fragmentation: Gauge<f64, AtomicU64>,
    pub invalid_objects: crate::checked::InvalidObjectsGauge,
    pub handshakes: Family<HandshakeLabel, Counter>,
    pub refused: Family<RefusedLabel, Counter>,
    pub suboptimal_dra_allocations: Counter,
    pub record_findings: Family<crate::metrics::FindingLabel, Counter>,
}

impl ExtenderMetrics {
    pub fn new() -> ExtenderMetrics {
        let mut root = Registry::default();
        gputopo_ops::build_info::register_build_info(&mut root, "extender");
        let registry = root.sub_registry_with_prefix("gputopo");
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<VerbLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            request_histogram,
        );
        let filtered_nodes = Family::<VerdictLabel, Counter>::default();
        let decisions = Counter::default();
        let bottlenecks = Family::<BottleneckLabel, Counter>::default();
        let allocation = Gauge::<f64, AtomicU64>::default();
        let fragmentation = Gauge::<f64, AtomicU64>::default();
        let invalid_objects = crate::metrics::register_invalid_objects(registry);
        let handshakes = Family::<HandshakeLabel, Counter>::default();
        let refused = Family::<RefusedLabel, Counter>::default();
        let suboptimal_dra_allocations = Counter::default();
        let record_findings = crate::metrics::register_record_findings(registry);
        registry.register(
            "extender_requests",
            "Extender requests from kube-scheduler by verb (filter, prioritize, bind) and result (ok, bad_request, not_ready, error)",
            requests.clone(),
        );
        registry.register(
            "extender_request_duration_seconds",
            "Time to answer one extender request, by verb (a bind includes its API writes)",
            duration.clone(),
        );
        registry.register(
            "extender_filtered_nodes",
            "Nodes judged by the filter verb: passed, failed (preemption may help), unresolvable",
            filtered_nodes.clone(),
        );
        registry.register(
            "placement_decisions",
            "Pods placed (bound with their GPUs)",
            decisions.clone(),
        );
        registry.register(
            "placement_bottleneck",
            "Placements by the weakest link class of the chosen GPU set",
            bottlenecks.clone(),
        );
        registry.register(
            "gpu_allocation_ratio",
            "GPUs held (whole or shared) over GPUs listed, over every node, at the last bind",
            allocation.clone(),
        );
        registry.register(
            "fragmentation_ratio",
            "Free GPUs that no 8-GPU request could use (stranded), over free GPUs, at the last bind",
            fragmentation.clone(),
        );
        registry.register(
            "extender_tls_handshakes",
            "TLS handshakes on the extender port by result (ok, refused, timeout)",
            handshakes.clone(),
        );
        registry.register(
            "extender_refused_requests",
            "Extender requests refused by a limit before any verb ran: too_large (413), timeout (408), overloaded (503)",
            refused.clone(),
        );
        registry.register(
            "extender_suboptimal_dra_allocations",
            "Pods bound whose claims kube-scheduler allocated on a worse GPU set than gputopo would have chosen on the same node (each also a SuboptimalGPUAllocation event)",
            suboptimal_dra_allocations.clone(),
        );
        ExtenderMetrics {
            registry: root,
            requests,
            duration,
            filtered_nodes,
            decisions,
            bottlenecks,
            allocation,
            fragmentation,
            invalid_objects,
            handshakes,
            refused,
            suboptimal_dra_allocations,
            record_findings,
        }
    }

    pub fn request(&self, verb: &'static str, result: &'static str, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels { verb, result })
            .inc();
        self.duration
            .get_or_create(&VerbLabel { verb })
            .observe(seconds);
    }
}

impl Default for ExtenderMetrics {
    fn default() -> Self {
        ExtenderMetrics::new()
    }
}

impl gputopo_ops::MetricsRegistry for ExtenderMetrics {
    fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names() {
        let m = ExtenderMetrics::new();
        m.request("filter", "ok", 0.002);
        m.request("bind", "bad_request", 0.001);
        m.filtered_nodes
            .get_or_create(&VerdictLabel {
                verdict: "unresolvable",
            })
            .inc();
        m.decisions.inc();
        m.bottlenecks
            .get_or_create(&BottleneckLabel {
                bottleneck: "NV2".into(),
            })
            .inc();
        m.allocation.set(0.25);
        m.handshakes
            .get_or_create(&HandshakeLabel { result: "refused" })
            .inc();
        m.refused
            .get_or_create(&RefusedLabel {
                reason: "too_large",
            })
            .inc();
        let text = gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(&m));
        for line in [
            "gputopo_extender_requests_total{verb=\"filter\",result=\"ok\"} 1",
            "gputopo_extender_requests_total{verb=\"bind\",result=\"bad_request\"} 1",
            "gputopo_extender_request_duration_seconds_count{verb=\"filter\"} 1",
            "gputopo_extender_filtered_nodes_total{verdict=\"unresolvable\"} 1",
            "gputopo_placement_decisions_total 1",
            "gputopo_placement_bottleneck_total{bottleneck=\"NV2\"} 1",
            "gputopo_gpu_allocation_ratio 0.25",
            "gputopo_fragmentation_ratio",
            "gputopo_extender_tls_handshakes_total{result=\"refused\"} 1",
            "gputopo_extender_refused_requests_total{reason=\"too_large\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
    }
}
