//! The PodTopologySpread filter: matching pods counted per domain once per
//! decision (upstream's PreFilter), over the nodes that carry every
//! constraint's key and that each constraint's inclusion policies admit;
//! then per node, in the constraints' order, the key must be on the node
//! and `pods in its domain + the pod itself − the global minimum` must not
//! exceed `maxSkew`. The global minimum is 0 while fewer domains exist than
//! `minDomains`.

use super::constraints::{Applied, eligibility_of, includes, self_match};
use super::domains::Domains;
use super::{NodeEligibility, SpreadRefusal};
use crate::config::SpreadDefaults;
use crate::pod::PendingPod;
use crate::pod_constraints::WhenUnsatisfiable;
use crate::snapshot::Snapshot;

/// The pod's `DoNotSchedule` constraints with matching pods counted per
/// domain.
pub(crate) struct SpreadFilter {
    rules: Vec<Rule>,
}

struct Rule {
    max_skew: i64,
    /// 1 when the pod matches the constraint's selector.
    self_match: i64,
    /// The global minimum the skew is measured from.
    min: i64,
    domains: Domains,
}

impl SpreadFilter {
    /// `None` when no `DoNotSchedule` constraint applies to the pod.
    /// `eligible(index)` is what the pod's own node rules say of each node.
    pub(crate) fn new(
        snapshot: &Snapshot,
        pod: &PendingPod,
        defaults: &SpreadDefaults,
        eligible: &dyn Fn(usize) -> NodeEligibility,
    ) -> Option<SpreadFilter> {
        let applied = Applied::of_pod(snapshot, pod, defaults, WhenUnsatisfiable::DoNotSchedule);
        if applied.is_empty() {
            return None;
        }
        let per_node = applied.pods_per_node(snapshot, pod);
        let mut domains: Vec<Domains> = applied
            .keys(snapshot)
            .into_iter()
            .map(|k| Domains::new(snapshot, k))
            .collect();
        let reads_eligibility = applied.reads_eligibility();
        let mut slots = vec![0usize; domains.len()];
        'nodes: for index in 0..snapshot.len() {
            for (slot, d) in slots.iter_mut().zip(&domains) {
                match d.value(snapshot, index) {
                    Some(v) => *slot = v,
                    // Only nodes with every constraint's key are counted.
                    None => continue 'nodes,
                }
            }
            let eligibility = eligibility_of(reads_eligibility, eligible, index);
            for (i, c) in applied.list.iter().enumerate() {
                if includes(c, eligibility) {
                    domains[i].touch(slots[i]);
                    domains[i].add(slots[i], per_node.get(index, i));
                }
            }
        }
        let rules = applied
            .list
            .iter()
            .zip(domains)
            .map(|(c, domains)| {
                let min = if (domains.len() as i64) < i64::from(c.min_domains) {
                    0
                } else {
                    // No domain at all: nothing to be skewed against.
                    domains.min().map_or(i64::from(i32::MAX), i64::from)
                };
                Rule {
                    max_skew: i64::from(c.max_skew),
                    self_match: i64::from(self_match(c, pod)),
                    min,
                    domains,
                }
            })
            .collect();
        Some(SpreadFilter { rules })
    }

    /// Whether the node at `index` may take the pod.
    pub(crate) fn check(&self, snapshot: &Snapshot, index: usize) -> Result<(), SpreadRefusal> {
        for rule in &self.rules {
            let Some(slot) = rule.domains.value(snapshot, index) else {
                return Err(SpreadRefusal::MissingLabel);
            };
            let skew = i64::from(rule.domains.count(slot)) + rule.self_match - rule.min;
            if skew > rule.max_skew {
                return Err(SpreadRefusal::Skew);
            }
        }
        Ok(())
    }
}
