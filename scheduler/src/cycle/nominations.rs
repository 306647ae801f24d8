//! Preemptors' claims on the room their victims free (GPUs, cpu and
//! memory, host ports). Pure: time is an argument.

use super::reservations::placeholder_name;
use gputopo_scheduler_core::snapshot::{Held, Snapshot};
use std::collections::BTreeMap;
use std::time::Instant;

/// A preemptor's claim on the room its victims free, as kube-scheduler's
/// nominated pods: until it binds (or the claim lapses), other pods'
/// decisions see its GPUs, requests and host ports taken on that node, so a
/// lower-priority pod that happens to be tried first cannot take what the
/// evictions were for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nomination {
    pub node: String,
    pub held: Held,
    pub expires: Instant,
}

/// Every pending preemptor's nomination, by pod key (`namespace/name`).
#[derive(Clone, Debug, Default)]
pub struct Nominations {
    by_pod: BTreeMap<String, Nomination>,
}

impl Nominations {
    pub fn nominate(&mut self, pod: &str, node: &str, held: Held, expires: Instant) {
        self.by_pod.insert(
            pod.to_string(),
            Nomination {
                node: node.to_string(),
                held,
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
            if let Err(e) = snapshot.hold(namespace, &name, &n.node, &n.held) {
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
            Held::gpus(0xff),
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
        nominations.nominate("ml/x", "n2", Held::gpus(1), now);
        nominations.prune(now, |_| true);
        assert!(nominations.is_empty(), "a lapsed nomination stays");
    }

    /// A preemptor that asks no GPU (its victims held a host port it needs)
    /// holds its port on the node it waits for, and its cpu: a pod of lower
    /// priority asking the same port is refused there until it binds.
    #[test]
    fn a_nomination_holds_the_host_port_and_requests_of_a_pod_without_gpus() {
        use gputopo_scheduler_core::pod_constraints::{HostPort, PodConstraints};
        use std::sync::Arc;
        let mut snap = cluster();
        let config = SchedulerConfig::default();
        let mut web = PendingPod::from_k8s(&pod("web", 0, None, 100)).expect("a pod");
        web.constraints = Arc::new(PodConstraints {
            host_ports: vec![HostPort::tcp(18080)],
            ..PodConstraints::default()
        });
        web.requests.cpu_milli = 500;
        let held = Held::for_nominee(&web, 0);
        assert_eq!(held.requests.cpu_milli, 500);
        let mut nominations = Nominations::default();
        let now = Instant::now();
        nominations.nominate(&web.key(), "n2", held, now + Duration::from_secs(60));
        assert!(nominations.apply(&mut snap, None).is_empty());
        let mut rival = PendingPod::from_k8s(&pod("rival", 0, None, 0)).expect("a pod");
        rival.constraints = web.constraints.clone();
        rival.node_name = Some("n2".into());
        match schedule(&snap, &rival, &config) {
            Decision::Unschedulable(u) => assert!(
                u.message.contains("didn't have free ports"),
                "{}",
                u.message
            ),
            Decision::Placed(p) => panic!("the rival took the nominee's port: {p:?}"),
        }
        nominations.unapply(&mut snap, &web.key());
        let mut pinned = web.clone();
        pinned.node_name = Some("n2".into());
        assert!(
            matches!(schedule(&snap, &pinned, &config), Decision::Placed(_)),
            "the nominee is kept off its own node"
        );
    }
}
