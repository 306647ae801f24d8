//! Inter-pod affinity and anti-affinity, judged as kube-scheduler's
//! InterPodAffinity plugin judges them: the filter (`filter.rs`) and the
//! score (`score.rs`), each computed once per decision from the snapshot's
//! bound pods, then read per node.

mod filter;
mod score;
mod terms;

pub(crate) use filter::AffinityFilter;
pub(crate) use score::normalized_scores;

use crate::pod::PendingPod;
use crate::snapshot::Snapshot;

/// Whether `pod`'s required anti-affinity keeps `other` off its node: one
/// of its terms over `kubernetes.io/hostname` selects `other`.
pub(crate) fn repels_per_node(snapshot: &Snapshot, pod: &PendingPod, other: &PendingPod) -> bool {
    pod.constraints.affinity.required_anti.iter().any(|t| {
        t.topology_key == "kubernetes.io/hostname"
            && terms::selects(t, snapshot, &other.namespace, &other.constraints.labels)
    })
}

/// Why inter-pod affinity refuses a node, in upstream's order of checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AffinityRefusal {
    /// The pod's required affinity finds no matching pod in the node's
    /// topology domain, or the node lacks a term's topology key —
    /// *node(s) didn't match pod affinity rules*. Evictions cannot help.
    AffinityRules,
    /// A pod matching the pod's required anti-affinity is in the node's
    /// domain — *node(s) didn't match pod anti-affinity rules*.
    AntiAffinityRules,
    /// A bound pod's required anti-affinity selects this pod, in the
    /// node's domain — *node(s) didn't satisfy existing pods anti-affinity rules*.
    ExistingAntiAffinity,
}

impl AffinityRefusal {
    /// kube-scheduler's reason text.
    pub fn summary(self) -> &'static str {
        match self {
            AffinityRefusal::AffinityRules => "node(s) didn't match pod affinity rules",
            AffinityRefusal::AntiAffinityRules => "node(s) didn't match pod anti-affinity rules",
            AffinityRefusal::ExistingAntiAffinity => {
                "node(s) didn't satisfy existing pods anti-affinity rules"
            }
        }
    }

    /// Whether evicting pods could lift it (upstream's `Unschedulable`
    /// against `UnschedulableAndUnresolvable`).
    pub fn resolvable(self) -> bool {
        !matches!(self, AffinityRefusal::AffinityRules)
    }
}
