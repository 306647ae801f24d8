//! The secondary scheduler's metrics (and the label types the extender's,
//! `extender/metrics.rs`, share); `/healthz`, `/readyz` (false until every
//! watch has listed its objects) and `/metrics` are served by `gputopo-ops`.

use crate::annotations::bottleneck_text;
use crate::assignment_record::RecordFinding;
use crate::checked::InvalidObjectsGauge;
use crate::cycle::{CycleReport, Outcome};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// [`Outcome::metric_label`]: one of [`Outcome::METRIC_LABELS`].
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DomainLabels {
    /// The tier's node label key (`network.gputopo.dev/leaf`).
    pub tier: String,
    /// The label value naming the domain (`leaf-3`).
    pub domain: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    /// The tier's node label key (`gputopo.dev/leaf`).
    pub tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// `evicted` | `refused` (a PodDisruptionBudget) | `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// One of [`crate::cycle::HeldState::by_kind`]'s labels.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FindingLabel {
    /// One of [`RecordFinding::METRIC_LABELS`].
    pub finding: &'static str,
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
    /// From a gang's first member seen pending to its last member bound.
    pub gang_wait: Histogram,
    pub gang_recovery: Histogram,
    pub held: Family<StateLabel, Gauge>,
    pub domain_utilization: Family<DomainLabels, Gauge<f64, AtomicU64>>,
    /// Per network tier, its domains with GPUs and every one of them free.
    pub free_domains: Family<TierLabel, Gauge>,
    pub evictions: Family<EvictionLabels, Counter>,
    /// Pods found on other GPUs than chosen, by node (each difference once).
    pub assignment_mismatches: Family<NodeLabel, Counter>,
    /// GPU records not believed, by finding (each once).
    pub record_findings: Family<FindingLabel, Counter>,
    /// 1 on the replica that holds the leader lease (or runs without
    /// leader election), 0 on a standby.
    pub leader: Gauge,
    pub invalid_objects: InvalidObjectsGauge,
    /// Events not published because too many were waiting.
    pub events_dropped: Counter,
}

/// Registers `gputopo_gpu_record_findings_total{finding}` (both modes have it).
pub fn register_record_findings(registry: &mut Registry) -> Family<FindingLabel, Counter> {
    let family = Family::<FindingLabel, Counter>::default();
    registry.register(
        "gpu_record_findings",
        format!(
            "Bound pods whose GPU record was not believed, by finding ({}): edited after binding, contradicting the scheduler's status record, or a status record that cannot be read; each counted once",
            RecordFinding::METRIC_LABELS.join(", ")
        ),
        family.clone(),
    );
    // Every finding at 0 from the start: an alert on `increase()` then
    // sees the first one.
    for finding in RecordFinding::METRIC_LABELS {
        let _ = family.get_or_create(&FindingLabel { finding });
    }
    family
}

/// Registers `gputopo_invalid_objects{kind,reason}` (both modes have it).
pub fn register_invalid_objects(registry: &mut Registry) -> InvalidObjectsGauge {
    let gauge = InvalidObjectsGauge::default();
    registry.register(
        "invalid_objects",
        "Watched objects gputopo cannot use (skipped), by kind and the field that failed",
        gauge.clone(),
    );
    gauge
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        gputopo_ops::build_info::register_build_info(&mut root, "scheduler");
        let registry = root.sub_registry_with_prefix("gputopo");
        let duration = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let attempts = Family::<AttemptLabels, Counter>::default();
        let decisions = Counter::default();
        let allocation = Gauge::<f64, AtomicU64>::default();
        let fragmentation = Gauge::<f64, AtomicU64>::default();
        let bottlenecks = Family::<BottleneckLabel, Counter>::default();
        let leader = Gauge::default();
        // 0.5 s to ~4.5 h.
        let gang_wait = Histogram::new(exponential_buckets(0.5, 2.0, 16));
        // 0.25 s to ~17 min: the goal is under 30 s.
        let gang_recovery = Histogram::new(exponential_buckets(0.25, 2.0, 12));
        let domain_utilization = Family::<DomainLabels, Gauge<f64, AtomicU64>>::default();
        let free_domains = Family::<TierLabel, Gauge>::default();
        let evictions = Family::<EvictionLabels, Counter>::default();
        let invalid_objects = register_invalid_objects(registry);
        let assignment_mismatches = Family::<NodeLabel, Counter>::default();
        let record_findings = register_record_findings(registry);
        let held = Family::<StateLabel, Gauge>::default();
        registry.register(
            "scheduler_state",
            "What the scheduler carries between cycles, by kind: assumed_pods (bound, not yet seen bound), gang_reservations, nominations, waiting_gangs, partial_gangs; all 0 on an idle cluster",
            held.clone(),
        );
        registry.register(
            "assignment_mismatch",
            "Pods a node reports holding other GPUs than gputopo chose (gputopo.dev/assigned-gpus), by node; each difference counted once",
            assignment_mismatches.clone(),
        );
        registry.register(
            "gang_wait_seconds",
            "Time from a gang's first member seen pending to its last member bound",
            gang_wait.clone(),
        );
        registry.register(
            "gang_recovery_seconds",
            "Time from a gang member's creation to its binding beside its gang's bound members (a lost member's replacement)",
            gang_recovery.clone(),
        );
        registry.register(
            "domain_utilization_ratio",
            "GPUs held (whole or shared) over GPUs listed, per network domain, at the last decision",
            domain_utilization.clone(),
        );
        registry.register(
            "free_domains",
            "Network domains with GPUs and every one of them free (whole domains a gang can still have), per tier, at the last decision",
            free_domains.clone(),
        );
        registry.register(
            "preemption_evictions",
            "Evictions asked of the API server for preemption, by result (evicted, refused by a PodDisruptionBudget, error)",
            evictions.clone(),
        );
        registry.register(
            "scheduling_duration_seconds",
            "Time to decide one pod or gang: snapshot, filter, score, choice (API writes excluded)",
            duration.clone(),
        );
        registry.register("schedule_attempts", attempts_help(), attempts.clone());
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
        registry.register(
            "leader",
            "1 on the replica that holds the leader lease and binds, 0 on a standby",
            leader.clone(),
        );
        let events_dropped = Counter::default();
        registry.register(
            "events_dropped",
            "Events not published because 1,000 were already waiting for the API server",
            events_dropped.clone(),
        );
        Metrics {
            registry: root,
            duration,
            attempts,
            decisions,
            allocation,
            fragmentation,
            bottlenecks,
            gang_wait,
            gang_recovery,
            held,
            domain_utilization,
            free_domains,
            evictions,
            assignment_mismatches,
            record_findings,
            leader,
            invalid_objects,
            events_dropped,
        }
    }
}

/// The help text names every result label the cycle can report.
fn attempts_help() -> String {
    format!(
        "Scheduling attempts by result ({}) and workload",
        Outcome::METRIC_LABELS.join(", ")
    )
}

impl Metrics {
    /// Records what one cycle did.
    pub fn observe(&self, report: &CycleReport) {
        for d in &report.decisions {
            self.duration.observe(d.as_secs_f64());
        }
        for o in &report.outcomes {
            self.attempts
                .get_or_create(&AttemptLabels {
                    result: o.outcome.metric_label(),
                    workload: o.workload,
                })
                .inc();
            if let Outcome::Scheduled(p) = &o.outcome {
                self.decisions.inc();
                self.bottlenecks
                    .get_or_create(&BottleneckLabel {
                        bottleneck: bottleneck_text(p),
                    })
                    .inc();
            }
        }
        for w in &report.gang_waits {
            self.gang_wait.observe(w.as_secs_f64());
        }
        for r in &report.gang_recoveries {
            self.gang_recovery.observe(r.as_secs_f64());
        }
        for m in &report.assignment_mismatches {
            self.assignment_mismatches
                .get_or_create(&NodeLabel {
                    node: m.node.clone(),
                })
                .inc();
        }
        for f in &report.record_findings {
            self.record_findings
                .get_or_create(&FindingLabel {
                    finding: f.metric_label(),
                })
                .inc();
        }
        for e in &report.evictions {
            self.evictions
                .get_or_create(&EvictionLabels {
                    result: e.metric_label(),
                })
                .inc();
        }
        for (kind, count) in report.held.by_kind() {
            self.held
                .get_or_create(&StateLabel { kind })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        if let Some(u) = &report.usage {
            self.allocation.set(u.allocation_ratio);
            self.fragmentation.set(u.fragmentation_ratio);
            self.domain_utilization.clear();
            for d in &report.domains {
                self.domain_utilization
                    .get_or_create(&DomainLabels {
                        tier: d.tier.clone(),
                        domain: d.domain.clone(),
                    })
                    .set(d.ratio);
            }
            for f in &report.free_domains {
                self.free_domains
                    .get_or_create(&TierLabel {
                        tier: f.tier.clone(),
                    })
                    .set(i64::from(f.count));
            }
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

/// Readiness before the first success: watches not synced yet.
pub fn readiness() -> gputopo_ops::Readiness {
    gputopo_ops::Readiness::new("watches not synced yet")
}

pub use gputopo_ops::{Readiness, router};

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
        m.leader.set(1);
        m.gang_wait.observe(3.0);
        m.domain_utilization
            .get_or_create(&DomainLabels {
                tier: "network.gputopo.dev/leaf".into(),
                domain: "leaf-1".into(),
            })
            .set(0.25);
        m.free_domains
            .get_or_create(&TierLabel {
                tier: "gputopo.dev/spine".into(),
            })
            .set(3);
        m.evictions
            .get_or_create(&EvictionLabels { result: "refused" })
            .inc();
        m.bottlenecks
            .get_or_create(&BottleneckLabel {
                bottleneck: "NV2".into(),
            })
            .inc();
        let text = gputopo_ops::encode(gputopo_ops::MetricsRegistry::registry(&m));
        for name in [
            "gputopo_scheduling_duration_seconds_bucket",
            "gputopo_schedule_attempts_total{result=\"scheduled\",workload=\"training\"} 1",
            "gputopo_placement_decisions_total 1",
            "gputopo_gpu_allocation_ratio 0.5",
            "gputopo_fragmentation_ratio",
            "gputopo_placement_bottleneck_total{bottleneck=\"NV2\"} 1",
            "gputopo_leader 1",
            "gputopo_gang_wait_seconds_sum 3.0",
            "gputopo_domain_utilization_ratio{tier=\"network.gputopo.dev/leaf\",domain=\"leaf-1\"} 0.25",
            "gputopo_preemption_evictions_total{result=\"refused\"} 1",
            "gputopo_free_domains{tier=\"gputopo.dev/spine\"} 3",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }
}
