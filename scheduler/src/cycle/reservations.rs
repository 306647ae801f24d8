//! Reservations for waiting gangs: the daemon's bookkeeping around
//! scheduler-core's decisions, so that a stream of small pods cannot starve
//! a big gang (KAI-Scheduler#1969). Pure: time is an argument.
//!
//! A gang that has all its members but fits nowhere, and for which no
//! preemption is under way, is given the GPUs it would use once the pods
//! of no higher priority holding them finish ([`GangReservations::propose`]
//! asks `schedule_gang` on a copy of the snapshot without those pods). From
//! then on every decision but the gang's own sees those GPUs taken: each
//! reservation becomes, per node, a placeholder pod in the snapshot holding
//! the reserved GPUs that are free ([`GangReservations::apply`]); reserved
//! GPUs still held by running pods are taken anyway and join the
//! placeholder as those pods go.
//!
//! Bounded as the configuration's [`ReservationPolicy`] says: at most
//! `max_reservations` gangs and `max_fraction` of the cluster's GPUs at once,
//! each for `ttl`. A reservation ends when its gang is placed, stops waiting
//! (deleted), times out, or its `ttl` lapses.

use super::gang::GangKey;
use crate::config::ReservationPolicy;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::snapshot::{PodId, Snapshot};
use std::collections::BTreeMap;
use std::time::Instant;

/// The namespace-less prefix of placeholder pods' names; `:` cannot occur
/// in a real pod's name, so a placeholder never shadows one.
const PLACEHOLDER_PREFIX: &str = "reservation:";

/// One gang's reserved GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldReservation {
    /// Node name to the reserved GPU mask (bit i = GPU i).
    pub nodes: BTreeMap<String, u32>,
    /// GPUs reserved in all.
    pub gpus: u32,
    pub expires: Instant,
}

impl HeldReservation {
    /// `node-a: 0-7, node-b: 0-7` style, for events.
    pub fn describe(&self) -> String {
        self.nodes
            .iter()
            .map(|(n, m)| format!("{n} GPUs {}", mask_text(*m)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn mask_text(mask: u32) -> String {
    (0..32)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Why a reservation was refused, naming the bound.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReserveError {
    #[error("{0} already holds a reservation")]
    AlreadyHeld(GangKey),
    #[error("{0}: nothing to reserve")]
    Nothing(GangKey),
    #[error(
        "{held} gangs hold reservations, the most allowed (gangs.reservations.maxReservations)"
    )]
    TooMany { held: usize },
    #[error(
        "reserving {gpus} GPUs would hold {total} of the cluster's {cluster_gpus}; at most {limit} may be reserved (gangs.reservations.maxFraction {max_fraction})"
    )]
    OverFraction {
        gpus: u32,
        total: u32,
        cluster_gpus: u32,
        limit: u32,
        max_fraction: f64,
    },
    #[error("GPUs {gpus} of {node} are already reserved for {other}")]
    Taken {
        gpus: String,
        node: String,
        other: GangKey,
    },
}

/// Every waiting gang's reservation.
#[derive(Clone, Debug)]
pub struct GangReservations {
    policy: ReservationPolicy,
    held: BTreeMap<GangKey, HeldReservation>,
}

impl GangReservations {
    pub fn new(policy: ReservationPolicy) -> GangReservations {
        GangReservations {
            policy,
            held: BTreeMap::new(),
        }
    }

    pub fn get(&self, gang: &GangKey) -> Option<&HeldReservation> {
        self.held.get(gang)
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// GPUs reserved in all.
    pub fn reserved_gpus(&self) -> u32 {
        self.held.values().map(|r| r.gpus).sum()
    }

    /// Drops `gang`'s reservation; whether it had one.
    pub fn release(&mut self, gang: &GangKey) -> bool {
        self.held.remove(gang).is_some()
    }

    /// Drops the reservations that lapsed by `now` and those of gangs for
    /// which `waiting` is false; returns the gangs dropped.
    pub fn prune(&mut self, now: Instant, waiting: impl Fn(&GangKey) -> bool) -> Vec<GangKey> {
        let gone: Vec<GangKey> = self
            .held
            .iter()
            .filter(|(k, r)| r.expires <= now || !waiting(k))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.held.remove(k);
        }
        gone
    }

    /// Where `members` would go once every pod holding GPUs at no higher a
    /// priority than theirs had finished: per node, the GPU mask. `None`
    /// when they would not fit even then. Pods of equal priority count
    /// (preemption cannot move them, but they end too); higher ones do not.
    pub fn propose(
        snapshot: &Snapshot,
        members: &[PendingPod],
        config: &SchedulerConfig,
    ) -> Option<Vec<(String, u32)>> {
        let priority = members.iter().map(|m| m.priority).min()?;
        let mut what_if = snapshot.clone();
        let lower: Vec<PodId> = what_if
            .pods()
            .filter(|(_, p)| p.gpus != 0 && p.priority <= priority)
            .map(|(id, _)| id)
            .collect();
        for id in lower {
            what_if.remove_pod(id);
        }
        match schedule_gang(&what_if, members, config) {
            GangDecision::Placed(placements) => {
                let mut nodes: BTreeMap<String, u32> = BTreeMap::new();
                for p in placements {
                    let mask = p.gpus.iter().fold(0u32, |m, g| m | (1 << g));
                    *nodes.entry(p.node).or_default() |= mask;
                }
                Some(nodes.into_iter().filter(|(_, m)| *m != 0).collect())
            }
            GangDecision::Waiting { .. } => None,
        }
    }

    /// Reserves `nodes` for `gang` until `now + ttl`, within the policy's
    /// bounds; `cluster_gpus` is the cluster's whole-GPU count. An error
    /// says which bound refused it.
    pub fn reserve(
        &mut self,
        gang: &GangKey,
        nodes: Vec<(String, u32)>,
        cluster_gpus: u32,
        now: Instant,
    ) -> Result<&HeldReservation, ReserveError> {
        if self.held.contains_key(gang) {
            return Err(ReserveError::AlreadyHeld(gang.clone()));
        }
        let mut wanted: BTreeMap<String, u32> = BTreeMap::new();
        for (node, mask) in nodes {
            if mask != 0 {
                *wanted.entry(node).or_default() |= mask;
            }
        }
        let gpus: u32 = wanted.values().map(|m| m.count_ones()).sum();
        if gpus == 0 {
            return Err(ReserveError::Nothing(gang.clone()));
        }
        if self.held.len() >= self.policy.max_reservations {
            return Err(ReserveError::TooMany {
                held: self.held.len(),
            });
        }
        let limit = (f64::from(cluster_gpus) * self.policy.max_fraction.clamp(0.0, 1.0)) as u32;
        let reserved = self.reserved_gpus();
        if reserved + gpus > limit {
            return Err(ReserveError::OverFraction {
                gpus,
                total: reserved + gpus,
                cluster_gpus,
                limit,
                max_fraction: self.policy.max_fraction,
            });
        }
        for (other, r) in &self.held {
            for (node, mask) in &wanted {
                if r.nodes.get(node).is_some_and(|m| m & mask != 0) {
                    return Err(ReserveError::Taken {
                        gpus: mask_text(r.nodes[node] & mask),
                        node: node.clone(),
                        other: other.clone(),
                    });
                }
            }
        }
        let held = HeldReservation {
            nodes: wanted,
            gpus,
            expires: now + self.policy.ttl,
        };
        Ok(self.held.entry(gang.clone()).or_insert(held))
    }

    /// Adds to `snapshot`, for every reservation but `except`'s, a
    /// placeholder pod per node holding the reserved GPUs that are free
    /// there, at the highest priority (never a preemption victim). Returns
    /// what could not be added (a node gone), as warnings.
    pub fn apply(&self, snapshot: &mut Snapshot, except: Option<&GangKey>) -> Vec<String> {
        let mut warnings = Vec::new();
        for (gang, r) in &self.held {
            if Some(gang) == except {
                continue;
            }
            for (node, mask) in &r.nodes {
                let name = placeholder_name(&gang.to_string(), node);
                if let Err(e) = snapshot.hold_free_gpus(&gang.namespace, &name, node, *mask) {
                    warnings.push(format!("{gang}: {e}"));
                }
            }
        }
        warnings
    }

    /// Takes `gang`'s placeholders out of `snapshot` (before its own decision).
    pub fn unapply(&self, snapshot: &mut Snapshot, gang: &GangKey) {
        let Some(r) = self.held.get(gang) else {
            return;
        };
        for node in r.nodes.keys() {
            let name = placeholder_name(&gang.to_string(), node);
            if let Some(id) = snapshot.pod_id(&gang.namespace, &name) {
                snapshot.remove_pod(id);
            }
        }
    }

    /// Puts `gang`'s placeholders back (its decision left it waiting).
    pub fn reapply(&self, snapshot: &mut Snapshot, gang: &GangKey) -> Vec<String> {
        let Some(r) = self.held.get(gang) else {
            return Vec::new();
        };
        let only = GangReservations {
            policy: self.policy,
            held: BTreeMap::from([(gang.clone(), r.clone())]),
        };
        only.apply(snapshot, None)
    }

    /// Whether a snapshot pod is a placeholder, not a real pod.
    pub fn is_placeholder(name: &str) -> bool {
        name.starts_with(PLACEHOLDER_PREFIX)
    }
}

pub(super) fn placeholder_name(owner: &str, node: &str) -> String {
    format!("{PLACEHOLDER_PREFIX}{owner}:{node}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycle::gang::GangKind;
    use crate::cycle::tests::fixtures::{World, member, pod};
    use gputopo_scheduler_core::schedule::{Decision, schedule};
    use std::time::Duration;

    fn cluster() -> Snapshot {
        World::busy_pair().snapshot()
    }

    fn gang() -> (GangKey, Vec<PendingPod>) {
        let members = (0..2)
            .map(|i| PendingPod::from_k8s(&member("big", 2, i, 8, 100)).expect("a member"))
            .collect();
        let key = GangKey {
            namespace: "ml".into(),
            gang: GangKind::Annotation("big".into()),
        };
        (key, members)
    }

    fn policy() -> ReservationPolicy {
        ReservationPolicy {
            max_fraction: 1.0,
            max_reservations: 2,
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_reserved_gang_keeps_small_pods_off_its_gpus_but_not_itself() {
        let mut snap = cluster();
        let config = SchedulerConfig::default();
        let (key, members) = gang();
        assert!(matches!(
            schedule_gang(&snap, &members, &config),
            GangDecision::Waiting { .. }
        ));
        let nodes = GangReservations::propose(&snap, &members, &config)
            .expect("it fits once the low-priority pod is gone");
        assert_eq!(nodes, vec![("n1".into(), 0xff), ("n2".into(), 0xff)]);

        let mut r = GangReservations::new(policy());
        let now = Instant::now();
        let held = r.reserve(&key, nodes, 16, now).expect("within bounds");
        assert_eq!(held.gpus, 16);
        assert_eq!(
            held.describe(),
            "n1 GPUs 0,1,2,3,4,5,6,7, n2 GPUs 0,1,2,3,4,5,6,7"
        );

        let small = PendingPod::from_k8s(&pod("small", 1, None, 0)).expect("a pod");
        assert!(matches!(
            schedule(&snap, &small, &config),
            Decision::Placed(_)
        ));
        assert!(r.apply(&mut snap, None).is_empty());
        let n2 = snap.node_id("n2").expect("n2");
        assert_eq!(snap.node(n2).free_gpus(), 0, "n2's free GPUs are held");
        assert!(
            matches!(schedule(&snap, &small, &config), Decision::Unschedulable(_)),
            "a small pod took reserved GPUs"
        );

        // The gang's own decision does not see its placeholders.
        r.unapply(&mut snap, &key);
        assert_eq!(snap.node(n2).free_gpus(), 0xff);
        assert!(r.reapply(&mut snap, &key).is_empty());
        assert_eq!(snap.node(n2).free_gpus(), 0);

        // Placeholders are never victims: they outrank everyone.
        assert!(
            snap.pods()
                .filter(|(_, p)| GangReservations::is_placeholder(&p.name))
                .all(|(_, p)| p.priority == i32::MAX)
        );
        assert!(r.release(&key));
        assert!(r.is_empty());
    }

    #[test]
    fn bounds_refuse_with_the_setting_named() {
        let (key, _) = gang();
        let other = |n: &str| GangKey {
            namespace: "ml".into(),
            gang: GangKind::Annotation(n.into()),
        };
        let now = Instant::now();
        let mut r = GangReservations::new(ReservationPolicy {
            max_fraction: 0.5,
            ..policy()
        });
        let e = r
            .reserve(&key, vec![("n1".into(), 0xff), ("n2".into(), 0x1)], 16, now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("maxFraction") && e.contains("at most 8"), "{e}");
        r.reserve(&key, vec![("n1".into(), 0x0f)], 16, now)
            .expect("4 of 16");
        let e = r
            .reserve(&other("b"), vec![("n1".into(), 0x18)], 16, now)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("GPUs 3 of n1") && e.contains("already reserved"),
            "{e}"
        );
        r.reserve(&other("b"), vec![("n1".into(), 0x10)], 16, now)
            .expect("disjoint");
        let e = r
            .reserve(&other("c"), vec![("n2".into(), 0x1)], 16, now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("maxReservations"), "{e}");
        assert!(r.reserve(&key, vec![("n2".into(), 0x1)], 16, now).is_err());
    }

    #[test]
    fn reservations_lapse_and_end_with_their_gang() {
        let (key, _) = gang();
        let b = GangKey {
            namespace: "ml".into(),
            gang: GangKind::Annotation("b".into()),
        };
        let now = Instant::now();
        let mut r = GangReservations::new(policy());
        r.reserve(&key, vec![("n1".into(), 0x1)], 16, now).unwrap();
        r.reserve(&b, vec![("n1".into(), 0x2)], 16, now).unwrap();
        assert_eq!(r.prune(now, |k| *k != b), vec![b.clone()]);
        assert_eq!(r.len(), 1);
        assert!(r.prune(now + Duration::from_secs(59), |_| true).is_empty());
        assert_eq!(r.prune(now + Duration::from_secs(60), |_| true), vec![key]);
        assert!(r.is_empty());
    }
}
