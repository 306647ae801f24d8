//! The cycle's pure stages: from the objects to the snapshot and the pods
//! due, the bookkeeping after each outcome, and the gangs' reservations.
//! No `async`, no API: the driver (`drive.rs`) calls these between writes.

use super::gang::{GangContext, GangKey, GangUnit};
use super::queue::QueuedPod;
use super::reservations::GangReservations;
use super::{Clock, Cycle, DomainUse, NOMINATION_TTL, Outcome};
use crate::cluster::{Assumed, Objects, ReadingTrust, nominated_node, pod_key, queued};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::DraInventory;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::{Decision, Placement, schedule};
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// What the cycle works on once prepared.
pub struct Prepared {
    /// Every pod, by `namespace/name`.
    pub by_key: crate::live_cluster::PodsByKey,
    /// The pods due now, in the queue's order.
    pub ready: Vec<QueuedPod>,
    /// The cluster as the decisions see it: bound and assumed pods, the
    /// GPUs allocated to ResourceClaims, other gangs' reservations and
    /// other preemptors' nominations.
    pub snapshot: Snapshot,
    /// The DRA devices; `None` when no DRA object exists.
    pub inventory: Option<DraInventory>,
}

impl Cycle {
    /// Reconciles the assume cache with the pods, makes the queue hold
    /// exactly the pending pods, and, when any is due, builds the snapshot.
    /// `Ok(None)`: nothing is due. `Err`: the snapshot cannot be built; the
    /// due pods back off.
    pub fn prepare(
        &mut self,
        objects: &Objects<'_>,
        clock: Clock,
    ) -> Result<Option<Prepared>, String> {
        self.observe(objects, clock);
        self.prepare_observed(objects, clock)
    }

    /// Reads what changed in `objects` (all of them without a change
    /// list): first in every cycle, whether or not a pod is due, since a
    /// change list is handed over once.
    pub fn observe(&mut self, objects: &Objects<'_>, clock: Clock) {
        self.live.observe(objects, self.reading_trust(clock));
    }

    fn reading_trust(&self, clock: Clock) -> ReadingTrust {
        ReadingTrust {
            now: clock.wall,
            max_age: self.settings.accounting.reported_allocations_max_age,
        }
    }

    /// [`Self::prepare`] after [`Self::observe`].
    pub(super) fn prepare_observed(
        &mut self,
        objects: &Objects<'_>,
        clock: Clock,
    ) -> Result<Option<Prepared>, String> {
        let now = clock.now;
        let by_key = self.live.pods().clone();
        let forgotten = self.assumed.reconcile(&by_key);
        if forgotten > 0 {
            debug!(forgotten, "assumed pods now seen bound");
        }
        let (pending_keys, pending): (HashSet<&str>, Vec<Arc<Pod>>) = self
            .live
            .pending()
            .filter(|(k, _)| !self.assumed.contains(k))
            .map(|(k, p)| (k, p.clone()))
            .unzip();
        let pending_keys: HashSet<String> = pending_keys.into_iter().map(str::to_string).collect();
        self.queue.sync(pending.iter().map(|p| queued(p)));
        // A gang has waited since its oldest pending member was created:
        // read from the API, so a new leader does not restart its timeout.
        let mut waiting_gangs: HashMap<GangKey, Instant> = HashMap::new();
        for p in &pending {
            let Some(k) = GangKey::of_pod(p) else {
                continue;
            };
            let created = p
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|t| clock.wall.duration_since(t.0).try_into().ok())
                .and_then(|age: Duration| now.checked_sub(age))
                .unwrap_or(now);
            let since = waiting_gangs.entry(k).or_insert(created);
            *since = (*since).min(created);
        }
        self.gang_since.retain(|k, _| waiting_gangs.contains_key(k));
        self.partial_since
            .retain(|k, _| waiting_gangs.contains_key(k));
        for (k, since) in waiting_gangs {
            self.gang_since.entry(k).or_insert(since);
        }
        if let Some(r) = &mut self.reservations {
            let gang_since = &self.gang_since;
            for gang in r.prune(now, |k| gang_since.contains_key(k)) {
                info!(%gang, "reservation ended: lapsed or the gang stopped waiting");
            }
        }
        self.nominations.prune(now, |k| pending_keys.contains(k));
        let ready = self.queue.ready(now);
        if ready.is_empty() {
            return Ok(None);
        }
        self.live.sync_groups(objects);
        let (mut snapshot, warnings) = match self.live.snapshot(&self.assumed) {
            Ok(s) => s,
            Err(e) => {
                for q in &ready {
                    self.queue.retry_later(&q.key, now);
                }
                return Err(format!("building the cluster snapshot: {e}"));
            }
        };
        let mut warnings: HashSet<String> = warnings.into_iter().collect();
        self.claims_assumed.reconcile(objects.dra);
        let assumed = &self.claims_assumed;
        let inventory = (!objects.dra.is_empty()).then(|| {
            let topologies: Vec<_> = self.live.topologies().cloned().collect();
            let mut inventory = objects.dra.inventory(&self.settings.dra, &topologies);
            assumed.mark_busy(&mut inventory);
            warnings.extend(inventory.warnings.iter().map(ToString::to_string));
            warnings.extend(hold_claimed(&mut snapshot, &inventory));
            inventory
        });
        for w in warnings.difference(&self.warned) {
            warn!(warning = %w, "snapshot");
        }
        self.warned = warnings;
        if let Some(r) = &self.reservations {
            for w in r.apply(&mut snapshot, None) {
                warn!(warning = %w, "reservation");
            }
        }
        self.read_back_nominations(&pending, &snapshot, now);
        for w in self.nominations.apply(&mut snapshot, None) {
            warn!(warning = %w, "nomination");
        }
        Ok(Some(Prepared {
            by_key,
            ready,
            snapshot,
            inventory,
        }))
    }

    /// A preemptor nominated by an earlier leader (its
    /// `status.nominatedNodeName`) that this process holds no nomination
    /// for: once its node has room for it, the GPUs it would get there are
    /// held for it, so that a pod of lower priority decided first (the
    /// preemptor may be backing off) cannot take what the evictions freed.
    fn read_back_nominations(&mut self, pending: &[Arc<Pod>], snapshot: &Snapshot, now: Instant) {
        for pod in pending {
            let Some(node) = nominated_node(pod) else {
                continue;
            };
            let key = pod_key(pod);
            if self.nominations.get(&key).is_some() {
                continue;
            }
            let Ok(mut pinned) = PendingPod::from_k8s(pod) else {
                continue;
            };
            pinned.node_name = Some(node.to_string());
            let name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
            let (core, _) = self.settings.profile_for(name.unwrap_or_default());
            if let Decision::Placed(p) = schedule(snapshot, &pinned, core) {
                debug!(pod = %key, node, gpus = %p.assigned_gpus(), "nomination read back");
                self.nominations
                    .nominate(&key, node, &p.gpus, now + NOMINATION_TTL);
            }
        }
    }

    /// The gang `first` belongs to, as this cycle sees it.
    pub fn assemble_gang(
        &self,
        first: &PendingPod,
        gang: &gputopo_api::GangRef,
        by_key: &HashMap<String, Arc<Pod>>,
        gangs: &crate::gangs::GangObjects,
    ) -> GangUnit {
        let names = self.settings.all_scheduler_names();
        super::gang::assemble(
            first,
            gang,
            &GangContext {
                by_key,
                gangs,
                names: &names,
                assumed: &self.assumed,
                default_timeout: self.settings.gangs.schedule_timeout,
            },
        )
    }

    /// Frees for `members`' own decision what is held for them: their
    /// gang's reservation, their nominations.
    pub fn lift_holds(&self, snapshot: &mut Snapshot, gang: Option<&GangKey>, members: &[String]) {
        if let (Some(r), Some(gang)) = (&self.reservations, gang) {
            r.unapply(snapshot, gang);
        }
        for k in members {
            self.nominations.unapply(snapshot, k);
        }
    }

    /// Puts back what [`Cycle::lift_holds`] took out: the decision left
    /// them waiting.
    pub fn restore_holds(
        &self,
        snapshot: &mut Snapshot,
        gang: Option<&GangKey>,
        members: &[String],
    ) {
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

    /// The queue's bookkeeping after `outcome`: a placed pod (or one gone)
    /// leaves, a failed binding backs off, anything else waits for a change.
    pub fn record(&mut self, pod: &str, outcome: &Outcome, now: Instant) {
        match outcome {
            Outcome::Scheduled(_) => self.queue.done(pod),
            Outcome::BindFailed(e) if e.pod_gone() => self.queue.done(pod),
            Outcome::BindFailed(_) => {
                self.queue.retry_later(pod, now);
            }
            _ => {
                self.queue.unschedulable(pod, now);
            }
        }
    }

    /// A pod left to try again later without an outcome of its own.
    pub fn retry_later(&mut self, pod: &str, now: Instant) {
        self.queue.retry_later(pod, now);
    }

    /// The pod is gone from the store.
    pub fn forget(&mut self, pod: &str) {
        self.queue.done(pod);
    }

    /// How long `unit` has been partly bound (some members bound, others
    /// pending), or `None` when it is not.
    pub fn partly_bound_for(&mut self, unit: &GangUnit, now: Instant) -> Option<Duration> {
        if unit.bound_members.is_empty() || unit.members.is_empty() {
            self.partial_since.remove(&unit.key);
            return None;
        }
        let since = *self.partial_since.entry(unit.key.clone()).or_insert(now);
        Some(now.saturating_duration_since(since))
    }

    /// A partly bound gang was undone: its clocks and reservation end.
    pub fn gang_undone(&mut self, gang: &GangKey) {
        self.partial_since.remove(gang);
        self.gang_since.remove(gang);
        if let Some(r) = &mut self.reservations {
            r.release(gang);
        }
    }

    /// A gang placed whole: its clock stops and its reservation ends.
    /// Returns how long it waited.
    pub fn gang_placed(&mut self, gang: &GangKey, now: Instant) -> Option<std::time::Duration> {
        if let Some(r) = &mut self.reservations {
            r.release(gang);
        }
        self.partial_since.remove(gang);
        self.gang_since
            .remove(gang)
            .map(|since| now.saturating_duration_since(since))
    }

    /// How long `gang` has waited.
    pub fn gang_waited(&self, gang: &GangKey, now: Instant) -> std::time::Duration {
        self.gang_since
            .get(gang)
            .map_or(std::time::Duration::ZERO, |t| {
                now.saturating_duration_since(*t)
            })
    }

    /// The gang waited past its timeout: it is told, and loses its
    /// reservation (what coscheduling's Permit timeout means here).
    pub fn gang_timed_out(
        &mut self,
        unit: &GangUnit,
        waited: std::time::Duration,
        message: &str,
    ) -> Outcome {
        let released = self
            .reservations
            .as_mut()
            .is_some_and(|r| r.release(&unit.key));
        Outcome::GangTimedOut {
            message: format!(
                "{} has waited {}s, longer than its schedule timeout ({}s){}: {message}",
                unit.key,
                waited.as_secs(),
                unit.timeout.as_secs(),
                if released {
                    "; its reservation is released"
                } else {
                    ""
                }
            ),
        }
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

    /// A preemptor's members wait for their victims on these nodes and GPUs.
    pub fn nominate(&mut self, members: &[String], plan: &[(String, Vec<u32>)], now: Instant) {
        for (pod, (node, gpus)) in members.iter().zip(plan) {
            self.nominations
                .nominate(pod, node, gpus, now + NOMINATION_TTL);
        }
    }
}

/// On a DRA node the claims are the truth: the GPUs allocated to a claim
/// are held in the snapshot (a placeholder per claim and node, never a
/// preemption victim) unless a pod already holds them there (one this
/// scheduler bound, whose annotations name them). Returns warnings.
fn hold_claimed(snapshot: &mut Snapshot, inventory: &DraInventory) -> Vec<String> {
    let mut warnings = Vec::new();
    for (node, claims) in inventory.busy_gpus() {
        for (claim, mask) in claims {
            let (namespace, name) = claim.split_once('/').unwrap_or(("default", claim));
            let placeholder = format!("resourceclaim:{name}");
            if let Err(e) = snapshot.hold_free_gpus(namespace, &placeholder, node, mask) {
                warnings.push(format!("ResourceClaim {claim}: {e}"));
            }
        }
    }
    warnings
}

/// Node selectors for the rest of a gang whose members are bound on
/// `nodes`, tightest first: every network domain they all share (leaf and
/// spine), then the outer ones only, then none. The rest goes where the
/// first placement would have put it: as close to its bound members as fits.
pub fn domain_selectors(snapshot: &Snapshot, nodes: &[String]) -> Vec<BTreeMap<String, String>> {
    let mut shared: Vec<(String, String)> = Vec::new();
    if !nodes.is_empty() {
        for key in snapshot.tiers().keys() {
            let values: BTreeSet<Option<&str>> = nodes
                .iter()
                .map(|n| {
                    snapshot
                        .node_id(n)
                        .and_then(|id| snapshot.node(id).label(key))
                })
                .collect();
            match values.into_iter().collect::<Vec<_>>()[..] {
                [Some(v)] => shared.push((key.clone(), v.to_string())),
                _ => break,
            }
        }
    }
    (0..=shared.len())
        .rev()
        .map(|n| shared[..n].iter().cloned().collect())
        .collect()
}

/// GPUs in use per network domain.
pub fn domain_use(snapshot: &Snapshot) -> Vec<DomainUse> {
    let tiers = snapshot.tiers().keys();
    snapshot
        .domains()
        .filter(|(_, d)| d.gpu_count() > 0)
        .map(|(_, d)| DomainUse {
            tier: tiers.get(d.tier()).cloned().unwrap_or_default(),
            domain: d.name().to_string(),
            ratio: f64::from(d.gpus_used()) / f64::from(d.gpu_count()),
        })
        .collect()
}
