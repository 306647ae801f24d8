//! What the scheduler holds for whom between cycles: pods assumed bound
//! (until the watch shows them), GPUs reserved for waiting gangs, GPUs
//! nominated to preemptors, and claims written and not yet seen. Every
//! other decision sees these taken; a pod's (or gang's) own decision is
//! made with its own holds lifted. Pure: time is an argument.

use super::NOMINATION_TTL;
use super::gang::GangKey;
use super::nominations::Nominations;
use super::reservations::GangReservations;
use crate::claims::AssumedClaims;
use crate::cluster::{AssumeCache, Assumed, pod_key};
use crate::config::ReservationPolicy;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::{Held, Snapshot};
use k8s_openapi::api::core::v1::Pod;
use std::time::Instant;
use tracing::{info, warn};

/// See the module documentation.
#[derive(Debug)]
pub struct Holds {
    assumed: AssumeCache,
    /// GPUs held for waiting gangs; `None` when the configuration turns
    /// reservations off.
    reservations: Option<GangReservations>,
    /// Preemptors' claims on the GPUs their victims free.
    nominations: Nominations,
    /// Claims written and not yet seen by the watch.
    claims: AssumedClaims,
}

impl Holds {
    pub fn new(reservations: Option<ReservationPolicy>) -> Holds {
        Holds {
            assumed: AssumeCache::default(),
            reservations: reservations.map(GangReservations::new),
            nominations: Nominations::default(),
            claims: AssumedClaims::default(),
        }
    }

    /// Pods placed and not yet seen bound.
    pub fn assumed(&self) -> &AssumeCache {
        &self.assumed
    }

    pub fn assumed_mut(&mut self) -> &mut AssumeCache {
        &mut self.assumed
    }

    pub fn nominations(&self) -> &Nominations {
        &self.nominations
    }

    pub fn claims(&self) -> &AssumedClaims {
        &self.claims
    }

    pub fn claims_mut(&mut self) -> &mut AssumedClaims {
        &mut self.claims
    }

    /// Gangs holding a reservation.
    pub fn reservations(&self) -> usize {
        self.reservations.as_ref().map_or(0, GangReservations::len)
    }

    /// Ends what no longer waits: reservations that lapsed or whose gang
    /// stopped waiting, nominations that lapsed or whose pod is no longer
    /// pending.
    pub fn prune(
        &mut self,
        now: Instant,
        gang_waiting: impl Fn(&GangKey) -> bool,
        pending: impl Fn(&str) -> bool,
    ) {
        if let Some(r) = &mut self.reservations {
            for gang in r.prune(now, gang_waiting) {
                info!(%gang, "reservation ended: lapsed or the gang stopped waiting");
            }
        }
        self.nominations.prune(now, pending);
    }

    /// Adds every reservation's placeholders to the cycle's snapshot.
    pub fn apply_reservations(&self, snapshot: &mut Snapshot) {
        if let Some(r) = &self.reservations {
            for w in r.apply(snapshot, None) {
                warn!(warning = %w, "reservation");
            }
        }
    }

    /// Adds every nomination's placeholders to the cycle's snapshot.
    pub fn apply_nominations(&self, snapshot: &mut Snapshot) {
        for w in self.nominations.apply(snapshot, None) {
            warn!(warning = %w, "nomination");
        }
    }

    /// Frees for `members`' own decision what is held for them: their
    /// gang's reservation, their nominations.
    pub fn lift(&self, snapshot: &mut Snapshot, gang: Option<&GangKey>, members: &[String]) {
        if let (Some(r), Some(gang)) = (&self.reservations, gang) {
            r.unapply(snapshot, gang);
        }
        for k in members {
            self.nominations.unapply(snapshot, k);
        }
    }

    /// Puts back what [`Holds::lift`] took out: the decision left them
    /// waiting.
    pub fn restore(&self, snapshot: &mut Snapshot, gang: Option<&GangKey>, members: &[String]) {
        if let (Some(r), Some(gang)) = (&self.reservations, gang) {
            for w in r.reapply(snapshot, gang) {
                warn!(warning = %w, "reservation");
            }
        }
        for pod in members {
            for w in self.nominations.reapply(snapshot, pod) {
                warn!(warning = %w, "nomination");
            }
        }
    }

    /// A bound pod: it joins the snapshot for the rest of the cycle and the
    /// assume cache until the watch shows it bound.
    pub fn assume(
        &mut self,
        snapshot: &mut Snapshot,
        pod: &Pod,
        pending: &PendingPod,
        p: &Placement,
        now: Instant,
    ) {
        let key = pod_key(pod);
        if let Err(e) = snapshot.add_pod(p.bound_pod(pending)) {
            warn!(pod = %key, error = %e, "adding the bound pod to this cycle's snapshot");
        }
        self.assumed.assume(
            key,
            Assumed {
                uid: pod.metadata.uid.clone(),
                input: p.bound_pod(pending),
                since: now,
            },
        );
    }

    /// Takes back an assumption whose binding failed: its GPUs are free
    /// again for this cycle's later decisions and the next cycles.
    pub fn unassume(&mut self, snapshot: &mut Snapshot, key: &str) {
        self.assumed.forget(key);
        if let Some((namespace, name)) = key.split_once('/')
            && let Some(id) = snapshot.pod_id(namespace, name)
        {
            snapshot.remove_pod(id);
        }
    }

    /// Drops `gang`'s reservation; whether it had one.
    pub fn release(&mut self, gang: &GangKey) -> bool {
        self.reservations.as_mut().is_some_and(|r| r.release(gang))
    }

    /// For a complete gang that fits nowhere and preempts nothing: holds
    /// the GPUs it would use once pods of no higher priority finish, or
    /// says why not. `None` when reservations are off.
    pub fn reserve(
        &mut self,
        snapshot: &Snapshot,
        gang: &GangKey,
        members: &[PendingPod],
        core: &SchedulerConfig,
        now: Instant,
    ) -> Option<String> {
        let r = self.reservations.as_mut()?;
        if let Some(held) = r.get(gang) {
            return Some(format!(
                "holding its reservation of {} GPUs ({}) while they free up",
                held.gpus,
                held.describe()
            ));
        }
        let Some(nodes) = GangReservations::propose(snapshot, members, core) else {
            return Some(
                "no reservation: it would not fit even once every pod of no higher priority finished"
                    .into(),
            );
        };
        let cluster_gpus: u32 = snapshot.nodes().map(|n| n.gpus().count_ones()).sum();
        match r.reserve(gang, nodes, cluster_gpus, now) {
            Ok(held) => {
                info!(%gang, gpus = held.gpus, nodes = %held.describe(), "reserved");
                Some(format!(
                    "reserved {} GPUs ({}) for it: no other pod may take them as they free up",
                    held.gpus,
                    held.describe()
                ))
            }
            Err(why) => Some(format!("no reservation: {why}")),
        }
    }

    /// A preemptor's members wait for their victims on these nodes and
    /// GPUs, holding there what they ask besides.
    pub fn nominate(&mut self, members: &[PendingPod], plan: &[(String, Vec<u32>)], now: Instant) {
        for (pod, (node, gpus)) in members.iter().zip(plan) {
            let held = Held::for_nominee(pod, mask(gpus));
            self.nominations
                .nominate(&pod.key(), node, held, now + NOMINATION_TTL);
        }
    }

    /// A nomination read back from a pod's `status.nominatedNodeName`.
    pub fn nominate_until(&mut self, pod: &PendingPod, node: &str, gpus: &[u32], expires: Instant) {
        let held = Held::for_nominee(pod, mask(gpus));
        self.nominations.nominate(&pod.key(), node, held, expires);
    }
}

/// GPU indices as a mask (bit i = GPU i).
fn mask(gpus: &[u32]) -> u32 {
    gpus.iter().fold(0u32, |m, g| m | (1 << g))
}
