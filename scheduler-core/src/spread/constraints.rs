//! Which spread constraints a decision applies, and the bound pods each
//! one counts.
//!
//! A pod's own constraints win; a pod that states none is spread by the
//! configured defaults, each given the selector of the pods that share the
//! pod's Services and controller (upstream's `DefaultSelector`), and by
//! none when that selector is empty. A bound pod counts for a constraint
//! when it is in the pod's namespace, is not terminating, and the selector
//! matches it; an empty selector counts no pod, yet matches the pod itself.

use super::NodeEligibility;
use crate::config::SpreadDefaults;
use crate::pod::PendingPod;
use crate::pod_constraints::{InclusionPolicy, SpreadConstraint, WhenUnsatisfiable};
use crate::snapshot::Snapshot;
use crate::snapshot::intern::Sym;
use std::borrow::Cow;

/// The node label kube-scheduler counts per node rather than per domain.
pub(super) const HOSTNAME: &str = "kubernetes.io/hostname";

/// The constraints of one `whenUnsatisfiable` that apply to a pod.
pub(super) struct Applied<'a> {
    pub(super) list: Cow<'a, [SpreadConstraint]>,
    /// Scoring skips nodes lacking any key, except under the system
    /// defaults (so nodes without a zone label still spread by hostname).
    pub(super) require_all_keys: bool,
}

impl<'a> Applied<'a> {
    pub(super) fn of_pod(
        snapshot: &Snapshot,
        pod: &'a PendingPod,
        defaults: &SpreadDefaults,
        kind: WhenUnsatisfiable,
    ) -> Applied<'a> {
        let own = &pod.constraints.spread;
        if !own.is_empty() {
            let list: Cow<'a, [SpreadConstraint]> =
                if own.iter().all(|c| c.when_unsatisfiable == kind) {
                    Cow::Borrowed(own.as_slice())
                } else {
                    Cow::Owned(
                        own.iter()
                            .filter(|c| c.when_unsatisfiable == kind)
                            .cloned()
                            .collect(),
                    )
                };
            return Applied {
                list,
                require_all_keys: true,
            };
        }
        let (mut list, system) = defaults.constraints();
        list.retain(|c| c.when_unsatisfiable == kind);
        if !list.is_empty() {
            match snapshot.workload_selectors().default_selector(
                &pod.namespace,
                &pod.constraints.labels,
                pod.controller.as_ref(),
            ) {
                Some(selector) => {
                    for c in &mut list {
                        c.selector = Some(selector.clone());
                    }
                }
                None => list.clear(),
            }
        }
        Applied {
            list: Cow::Owned(list),
            require_all_keys: !system,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Each constraint's topology key, interned; `None`: no node has it.
    pub(super) fn keys(&self, snapshot: &Snapshot) -> Vec<Option<Sym>> {
        self.list
            .iter()
            .map(|c| snapshot.strings.get(&c.topology_key))
            .collect()
    }

    /// Whether any constraint reads the caller's node rules.
    pub(super) fn reads_eligibility(&self) -> bool {
        self.list.iter().any(|c| {
            c.node_affinity_policy == InclusionPolicy::Honor
                || c.node_taints_policy == InclusionPolicy::Honor
        })
    }

    /// The matching bound pods per node and constraint.
    pub(super) fn pods_per_node(&self, snapshot: &Snapshot, pod: &PendingPod) -> PodsPerNode {
        let stride = self.list.len();
        let mut counts = PodsPerNode {
            stride,
            counts: vec![0u32; snapshot.len() * stride],
        };
        let counting: Vec<bool> = self
            .list
            .iter()
            .map(|c| {
                c.selector
                    .as_ref()
                    .is_some_and(|s| !s.requirements.is_empty())
            })
            .collect();
        if !counting.contains(&true) {
            return counts;
        }
        let selectors = self
            .list
            .iter()
            .zip(&counting)
            .filter(|(_, counts)| **counts)
            .map(|(c, _)| c.selector.as_ref());
        let candidates = snapshot.selector_candidates(selectors);
        for (_, bound) in snapshot.pods_or_all(candidates.as_deref()) {
            if bound.terminating || bound.namespace != pod.namespace {
                continue;
            }
            let node = bound.node.0 as usize;
            for (i, c) in self.list.iter().enumerate() {
                if counting[i]
                    && c.selector
                        .as_ref()
                        .is_some_and(|s| s.matches(&bound.constraints.labels))
                    && let Some(n) = counts.counts.get_mut(node * stride + i)
                {
                    *n += 1;
                }
            }
        }
        counts
    }
}

/// Matching bound pods per node (outer) and constraint (inner), flat.
pub(super) struct PodsPerNode {
    stride: usize,
    counts: Vec<u32>,
}

impl PodsPerNode {
    pub(super) fn get(&self, node: usize, constraint: usize) -> u32 {
        self.counts
            .get(node * self.stride + constraint)
            .copied()
            .unwrap_or(0)
    }
}

/// What the caller's node rules say of the node at `index`, asked only
/// when some constraint reads them (`reads`); else every node is eligible.
pub(super) fn eligibility_of(
    reads: bool,
    eligible: &dyn Fn(usize) -> NodeEligibility,
    index: usize,
) -> NodeEligibility {
    if reads {
        eligible(index)
    } else {
        NodeEligibility {
            affinity: true,
            taints: true,
        }
    }
}

/// Whether a constraint counts the pods of a node its inclusion policies
/// read as `eligible`.
pub(super) fn includes(c: &SpreadConstraint, eligible: NodeEligibility) -> bool {
    (c.node_affinity_policy == InclusionPolicy::Ignore || eligible.affinity)
        && (c.node_taints_policy == InclusionPolicy::Ignore || eligible.taints)
}

/// Whether the pod matches the constraint's selector (it counts itself).
pub(super) fn self_match(c: &SpreadConstraint, pod: &PendingPod) -> bool {
    c.selector
        .as_ref()
        .is_some_and(|s| s.matches(&pod.constraints.labels))
}

/// Whether the spread score can apply to the pod: it states a
/// `ScheduleAnyway` constraint, or defaults reach it.
pub(crate) fn score_may_apply(
    snapshot: &Snapshot,
    pod: &PendingPod,
    defaults: &SpreadDefaults,
) -> bool {
    !Applied::of_pod(snapshot, pod, defaults, WhenUnsatisfiable::ScheduleAnyway).is_empty()
}
