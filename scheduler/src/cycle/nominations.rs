//! Preemptors' claims on the GPUs their victims free. Pure: time is an
//! argument.

use super::reservations::placeholder_name;
use gputopo_scheduler_core::snapshot::Snapshot;
use std::collections::BTreeMap;
use std::time::Instant;

/// A preemptor's claim on the GPUs its victims free, as kube-scheduler's
/// nominated pods: until it binds (or the claim lapses), other pods' decisions
/// see those GPUs taken, so a lower-priority pod that happens to be tried
/// first cannot take what the evictions were for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nomination {
    pub node: String,
    /// GPU mask (bit i = GPU i).
    pub gpus: u32,
    pub expires: Instant,
}

/// Every pending preemptor's nomination, by pod key (`namespace/name`).
#[derive(Clone, Debug, Default)]
pub struct Nominations {
    by_pod: BTreeMap<String, Nomination>,
}

impl Nominations {
    pub fn nominate(&mut self, pod: &str, node: &str, gpus: &[u32], expires: Instant) {
        let mask = gpus.iter().fold(0u32, |m, g| m | (1 << g));
        self.by_pod.insert(
            pod.to_string(),
            Nomination {
                node: node.to_string(),
                gpus: mask,
                expires,
            },
        );
    }

    pub fn get(&self, pod: &str) -> Option<&Nomination> {
        self.by_pod.get(pod)
    }

    pub fn len(&self) -> usize {
        self.by_pod.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_pod.is_empty()
    }

    /// Drops lapsed nominations and those of pods for which `pending` is
    /// false (bound, deleted).
    pub fn prune(&mut self, now: Instant, pending: impl Fn(&str) -> bool) {
        self.by_pod
            .retain(|pod, n| n.expires > now && pending(pod.as_str()));
    }

    pub fn remove(&mut self, pod: &str) {
        self.by_pod.remove(pod);
    }

    /// Adds a placeholder for every nomination but `except`'s (a pod key).
    pub fn apply(&self, snapshot: &mut Snapshot, except: Option<&str>) -> Vec<String> {
        let mut warnings = Vec::new();
        for (pod, n) in &self.by_pod {
            if Some(pod.as_str()) == except {
                continue;
            }
            let (namespace, _) = pod.split_once('/').unwrap_or(("default", pod));
            let name = placeholder_name(pod, &n.node);
            if let Err(e) = snapshot.hold_free_gpus(namespace, &name, &n.node, n.gpus) {
                warnings.push(format!("nomination of {pod}: {e}"));
            }
        }
        warnings
    }

    /// Takes `pod`'s placeholder out (before its own decision).
    pub fn unapply(&self, snapshot: &mut Snapshot, pod: &str) {
        let Some(n) = self.by_pod.get(pod) else {
            return;
        };
        let (namespace, _) = pod.split_once('/').unwrap_or(("default", pod));
        if let Some(id) = snapshot.pod_id(namespace, &placeholder_name(pod, &n.node)) {
            snapshot.remove_pod(id);
        }
    }

    /// Puts `pod`'s placeholder back (it is still waiting).
    pub fn reapply(&self, snapshot: &mut Snapshot, pod: &str) -> Vec<String> {
        let Some(n) = self.by_pod.get(pod) else {
            return Vec::new();
        };
        let only = Nominations {
            by_pod: BTreeMap::from([(pod.to_string(), n.clone())]),
        };
        only.apply(snapshot, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycle::tests::fixtures::{World, pod};
    use gputopo_scheduler_core::config::SchedulerConfig;
    use gputopo_scheduler_core::pod::PendingPod;
    use gputopo_scheduler_core::schedule::{Decision, schedule};
    use std::time::Duration;

    fn cluster() -> Snapshot {
        World::busy_pair().snapshot()
    }

    #[test]
    fn a_nomination_keeps_freed_gpus_for_its_preemptor() {
        let mut snap = cluster();
        let config = SchedulerConfig::default();
        let n2 = snap.node_id("n2").expect("n2");
        // n2 entirely nominated to one preemptor.
        let mut nominations = Nominations::default();
        let now = Instant::now();
        nominations.nominate(
            "ml/urgent",
            "n2",
            &[0, 1, 2, 3, 4, 5, 6, 7],
            now + Duration::from_secs(60),
        );
        assert!(nominations.apply(&mut snap, None).is_empty());
        assert_eq!(snap.node(n2).free_gpus(), 0);
        let small = PendingPod::from_k8s(&pod("small", 1, None, 0)).expect("a pod");
        assert!(
            matches!(schedule(&snap, &small, &config), Decision::Unschedulable(_)),
            "a lower-priority pod took the nominated GPUs"
        );
        nominations.unapply(&mut snap, "ml/urgent");
        let urgent = PendingPod::from_k8s(&pod("urgent", 8, None, 100)).expect("a pod");
        match schedule(&snap, &urgent, &config) {
            Decision::Placed(p) => assert_eq!(p.node, "n2"),
            other => panic!("the nominee cannot use its own GPUs: {other:?}"),
        }
        assert!(nominations.reapply(&mut snap, "ml/urgent").is_empty());
        assert_eq!(snap.node(n2).free_gpus(), 0);
        nominations.prune(now, |p| p != "ml/urgent");
        assert!(
            nominations.is_empty(),
            "a bound preemptor keeps no nomination"
        );
        nominations.nominate("ml/x", "n2", &[0], now);
        nominations.prune(now, |_| true);
        assert!(nominations.is_empty(), "a lapsed nomination stays");
    }
}
