//! The scheduler loop: watch (reflectors for Pods, Nodes, `GpuTopology`,
//! PodGroups), then per cycle the pure stages (snapshot, decision, in
//! `scheduler-core`), then the API writes (annotations, binding, events,
//! the PodScheduled condition), each in its own short `tracing` span.

use crate::annotations::{assignment_annotations, bottleneck_text};
use crate::cluster::{
    AssumeCache, Assumed, GangKey, Objects, build_snapshot, gang_size, is_pending_for, pod_key,
    queued, usage,
};
use crate::config::{Preemption, Settings};
use crate::podgroup::PodGroup;
use crate::queue::SchedulingQueue;
use crate::reservations::{GangReservations, Nominations};
use crate::serve::{
    AttemptLabels, BottleneckLabel, DomainLabels, EvictionLabels, Metrics, Readiness,
};
use crate::watch::{always, pod_changes_cluster, reflect};
use futures::FutureExt;
use gputopo_api::{GpuTopology, WorkloadKind};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::{PendingPod, PodError};
use gputopo_scheduler_core::preempt_schedule::propose_preemption_sparing;
use gputopo_scheduler_core::schedule::{Decision, Placement, schedule};
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use tracing::{Instrument, debug, info, info_span, warn};

/// The field manager of every write, and the events' reporting controller.
pub const FIELD_MANAGER: &str = "gputopo-scheduler";

pub use crate::annotations::BOTTLENECK_ANNOTATION;

/// How long a preemptor keeps its claim on the GPUs its victims free: well
/// beyond the victims' default 30 s grace period.
const NOMINATION_TTL: Duration = Duration::from_secs(5 * 60);

/// The longest a quiet scheduler sleeps before looking at its queue again.
const IDLE_WAKE: Duration = Duration::from_secs(5);

/// A Kubernetes Event's note may hold 1 kB.
const NOTE_MAX: usize = 1000;

/// Why the scheduler stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the {what} watch ended before its first list completed")]
    WatchEnded { what: &'static str },
    #[error("checking whether the API server serves {what}: {error}")]
    Discover {
        what: &'static str,
        error: kube::Error,
    },
}

/// A pod write that failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("binding pod {pod} (with its GPUs) to node {node}: {source}")]
    Bind {
        pod: String,
        node: String,
        source: kube::Error,
    },
    #[error("setting the PodScheduled condition of pod {pod}: {source}")]
    Condition { pod: String, source: kube::Error },
    #[error("setting status.nominatedNodeName of pod {pod} to {node}: {source}")]
    Nominate {
        pod: String,
        node: String,
        source: kube::Error,
    },
}

/// An eviction for preemption that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum EvictError {
    /// The API server said no: a PodDisruptionBudget allows no disruption now.
    #[error("{0}")]
    Refused(String),
    #[error("evicting {pod}: {source}")]
    Failed { pod: String, source: kube::Error },
}

impl WriteError {
    /// The pod is gone: nothing to retry.
    pub fn pod_gone(&self) -> bool {
        let source = match self {
            WriteError::Bind { source, .. }
            | WriteError::Condition { source, .. }
            | WriteError::Nominate { source, .. } => source,
        };
        matches!(source, kube::Error::Api(s) if s.code == 404)
    }
}

struct Stores {
    pods: Store<Pod>,
    nodes: Store<Node>,
    topologies: Store<GpuTopology>,
    groups: Store<PodGroup>,
}

/// What wakes the loop: `wake` for anything, `changed` when the cluster
/// changed in a way that may make an unschedulable pod fit.
#[derive(Default)]
struct Signals {
    wake: Notify,
    changed: AtomicBool,
}

impl Signals {
    fn poke(&self, changed: bool) {
        if changed {
            self.changed.store(true, Ordering::SeqCst);
        }
        self.wake.notify_one();
    }
}

/// Starts a reflector for `api`; every event pokes the loop (`changed`
/// decides which count as cluster changes).
fn watch<K>(
    api: Api<K>,
    what: &'static str,
    signals: Arc<Signals>,
    changed: fn(&watcher::Event<K>) -> bool,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    reflect(api, what, move |c| signals.poke(c), changed)
}

/// An empty store, for a resource the API server does not serve.
fn empty_store<K>() -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

/// Whether the API server serves `api`'s resource (its CRD is installed).
async fn served<K>(api: &Api<K>, what: &'static str) -> Result<bool, RunError>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(error) => Err(RunError::Discover { what, error }),
    }
}

fn workload_label(pod: Option<&PendingPod>) -> &'static str {
    match pod.and_then(|p| p.request.workload) {
        Some(WorkloadKind::Training) => "training",
        Some(WorkloadKind::Inference) => "inference",
        None => "unspecified",
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > NOTE_MAX {
        let mut cut = NOTE_MAX - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// The `Scheduled` event's note: where, which GPUs, and why.
pub fn scheduled_note(p: &Placement) -> String {
    let gpus = if p.gpus.is_empty() {
        "no GPUs".to_string()
    } else {
        format!("GPUs {}", p.assigned_gpus())
    };
    truncate(format!(
        "Successfully assigned {} to {} with {gpus} (bottleneck {}): {}",
        p.pod,
        p.node,
        bottleneck_text(p),
        p.explanation
    ))
}

/// The scheduler process: configuration, client, metrics, and its state.
pub struct Scheduler {
    client: kube::Client,
    /// For evictions: a client that does not retry 429s (see `with_eviction_client`).
    eviction_client: kube::Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    reporter: Reporter,
    /// Per pod and reason, the last note and the recorder that wrote it.
    /// `Recorder` folds repeats into one event's series but keys them
    /// without the note, so a changed note would hide under the old one: a
    /// new note gets a new recorder, hence a new event, as client-go's
    /// aggregation does.
    recorders: HashMap<(String, &'static str), (String, Recorder)>,
    queue: SchedulingQueue,
    assumed: AssumeCache,
    /// When each gang waiting now was first seen pending: for
    /// `gputopo_gang_wait_seconds` and the gang's schedule timeout.
    gang_since: HashMap<GangKey, Instant>,
    /// GPUs held for waiting gangs; `None` when the configuration turns
    /// reservations off.
    reservations: Option<GangReservations>,
    /// Preemptors' claims on the GPUs their victims free.
    nominations: Nominations,
    /// Test failpoint: abort the process after this many bindings, as a
    /// SIGKILL mid-gang would (see `FAILPOINT_EXIT_AFTER_BINDS`).
    exit_after_binds: Option<u32>,
    binds: u32,
}

/// Environment variable naming a number of bindings after which the
/// process aborts: lets the end-to-end tests kill the scheduler between two
/// members of a gang, which no signal sent from outside can time reliably.
pub const FAILPOINT_EXIT_AFTER_BINDS: &str = "GPUTOPO_SCHEDULER_FAILPOINT_EXIT_AFTER_BINDS";

impl Scheduler {
    pub fn new(client: kube::Client, settings: Settings, metrics: Arc<Metrics>) -> Scheduler {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok()),
        };
        Scheduler {
            reporter,
            recorders: HashMap::new(),
            queue: SchedulingQueue::new(settings.backoff),
            assumed: AssumeCache::default(),
            gang_since: HashMap::new(),
            reservations: settings.gangs.reservations.map(GangReservations::new),
            exit_after_binds: std::env::var(FAILPOINT_EXIT_AFTER_BINDS)
                .ok()
                .and_then(|v| v.parse().ok()),
            binds: 0,
            nominations: Nominations::default(),
            eviction_client: client.clone(),
            client,
            settings,
            metrics,
        }
    }

    /// Evictions through `client`, which should not retry 429 Too Many
    /// Requests: the API server's answer when a PodDisruptionBudget refuses,
    /// which the default client would retry with backoff for about a minute,
    /// stalling the scheduling loop.
    pub fn with_eviction_client(mut self, client: kube::Client) -> Scheduler {
        self.eviction_client = client;
        self
    }

    /// Watches, waits for every store to be synced (then `readiness` turns
    /// ready), and schedules until `shutdown` completes, while `leader` is
    /// true: a standby replica keeps its stores warm but neither pops the
    /// queue nor binds (see `leader.rs`).
    pub async fn run(
        mut self,
        readiness: Arc<Readiness>,
        shutdown: impl Future<Output = ()>,
        mut leader: watch::Receiver<bool>,
    ) -> Result<(), RunError> {
        let signals = Arc::new(Signals::default());
        readiness.set_not_ready("starting the watches".into());
        let topologies_api = Api::<GpuTopology>::all(self.client.clone());
        let groups_api = Api::<PodGroup>::all(self.client.clone());
        let topologies = if served(&topologies_api, "GpuTopology").await? {
            watch(topologies_api, "GpuTopology", signals.clone(), always)
        } else {
            warn!(
                "the API server does not serve gputopologies.gputopo.dev (CRD not installed); every node is treated as having no topology until a restart"
            );
            empty_store()
        };
        let groups = if served(&groups_api, "PodGroup").await? {
            watch(groups_api, "PodGroup", signals.clone(), always)
        } else {
            info!(
                "the API server does not serve podgroups.scheduling.x-k8s.io; gangs are read from gputopo.dev/gang annotations only (restart after installing the CRD)"
            );
            empty_store()
        };
        let stores = Stores {
            pods: watch(
                Api::all(self.client.clone()),
                "Pod",
                signals.clone(),
                pod_changes_cluster,
            ),
            nodes: watch(
                Api::all(self.client.clone()),
                "Node",
                signals.clone(),
                always,
            ),
            topologies,
            groups,
        };
        let mut shutdown = std::pin::pin!(shutdown);
        for (what, ready) in [
            ("Pod", stores.pods.wait_until_ready().boxed()),
            ("Node", stores.nodes.wait_until_ready().boxed()),
            ("GpuTopology", stores.topologies.wait_until_ready().boxed()),
            ("PodGroup", stores.groups.wait_until_ready().boxed()),
        ] {
            readiness.set_not_ready(format!("waiting for the {what} watch to sync"));
            tokio::select! {
                r = ready => r.map_err(|_| RunError::WatchEnded { what })?,
                () = &mut shutdown => return Ok(()),
            }
        }
        readiness.set_ready();
        info!(names = ?self.settings.all_scheduler_names(), "watches synced");
        let mut leading = false;
        loop {
            let now_leading = *leader.borrow_and_update();
            if now_leading != leading {
                leading = now_leading;
                self.metrics.leader.set(i64::from(leading));
                if leading {
                    info!("leading: scheduling");
                } else {
                    info!("standing by: not scheduling");
                }
            }
            if signals.changed.swap(false, Ordering::SeqCst) {
                self.queue.cluster_changed();
            }
            if leading {
                self.cycle(&stores).await;
            }
            let now = Instant::now();
            let wake = self
                .queue
                .next_wake()
                .map_or(now + IDLE_WAKE, |t| t.clamp(now, now + IDLE_WAKE));
            tokio::select! {
                () = signals.wake.notified() => {}
                () = tokio::time::sleep_until(wake.into()) => {}
                r = leader.changed() => {
                    if r.is_err() {
                        // The elector is gone: nothing may bind any more.
                        info!("leader election stopped; stopping");
                        return Ok(());
                    }
                }
                () = &mut shutdown => {
                    info!("stopping");
                    return Ok(());
                }
            }
        }
    }

    /// One pass over the pods that are due.
    async fn cycle(&mut self, stores: &Stores) {
        let pods = stores.pods.state();
        let by_key: HashMap<String, Arc<Pod>> =
            pods.iter().map(|p| (pod_key(p), p.clone())).collect();
        let forgotten = self.assumed.reconcile(&by_key);
        if forgotten > 0 {
            debug!(forgotten, "assumed pods now seen bound");
        }
        let names = self.settings.all_scheduler_names();
        let pending: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| is_pending_for(p, &names) && !self.assumed.contains(&pod_key(p)))
            .collect();
        self.queue.sync(pending.iter().map(|p| queued(p)));
        let pending_keys: HashSet<String> = pending.iter().map(|p| pod_key(p)).collect();
        self.recorders.retain(|(k, _), _| pending_keys.contains(k));
        let waiting_gangs: HashSet<GangKey> = pending
            .iter()
            .filter_map(|p| {
                let gang = gputopo_api::GpuRequest::from_pod(p).ok()?.gang?;
                Some(GangKey::of(
                    p.metadata.namespace.as_deref().unwrap_or("default"),
                    &gang,
                ))
            })
            .collect();
        self.gang_since.retain(|k, _| waiting_gangs.contains(k));
        let now = Instant::now();
        for k in waiting_gangs {
            self.gang_since.entry(k).or_insert(now);
        }
        let ready = self.queue.ready(Instant::now());
        if ready.is_empty() {
            return;
        }
        let nodes = stores.nodes.state();
        let topologies = stores.topologies.state();
        let groups = stores.groups.state();
        let objects = Objects {
            nodes: &nodes,
            topologies: &topologies,
            pods: &pods,
            groups: &groups,
        };
        let started = Instant::now();
        let (mut snapshot, warnings) =
            match build_snapshot(&objects, &self.assumed, &self.settings.core) {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "building the cluster snapshot; retrying later");
                    for q in &ready {
                        self.queue.retry_later(&q.key, Instant::now());
                    }
                    return;
                }
            };
        if let Some(r) = &mut self.reservations {
            let gang_since = &self.gang_since;
            for gang in r.prune(Instant::now(), |k| gang_since.contains_key(k)) {
                info!(%gang, "reservation ended: lapsed or the gang stopped waiting");
            }
            for w in r.apply(&mut snapshot, None) {
                warn!(warning = %w, "reservation");
            }
        }
        self.nominations
            .prune(Instant::now(), |k| pending_keys.contains(k));
        for w in self.nominations.apply(&mut snapshot, None) {
            warn!(warning = %w, "nomination");
        }
        // The snapshot is built once per cycle: its time is charged to the
        // cycle's first decision, not to every one.
        let mut build_time = started.elapsed();
        for w in &warnings {
            debug!(warning = %w, "snapshot");
        }
        let mut handled: HashSet<String> = HashSet::new();
        for q in ready {
            if !handled.insert(q.key.clone()) {
                continue;
            }
            let Some(pod) = by_key.get(&q.key) else {
                self.queue.done(&q.key);
                continue;
            };
            let pending = match PendingPod::from_k8s(pod) {
                Ok(p) => p,
                Err(e) => {
                    self.invalid(pod, &e).await;
                    continue;
                }
            };
            let (core, preemption) = {
                let name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
                let (c, p) = self.settings.profile_for(name.unwrap_or_default());
                (c.clone(), *p)
            };
            match pending.request.gang.clone() {
                None => {
                    self.nominations.unapply(&mut snapshot, &q.key);
                    let t = Instant::now();
                    let decision = schedule(&snapshot, &pending, &core);
                    self.metrics
                        .duration
                        .observe((std::mem::take(&mut build_time) + t.elapsed()).as_secs_f64());
                    match decision {
                        Decision::Placed(p) => {
                            self.bind_all(&mut snapshot, &[(pod.clone(), pending.clone(), p)])
                                .await;
                        }
                        Decision::Unschedulable(u) => {
                            for w in self.nominations.reapply(&mut snapshot, &q.key) {
                                warn!(warning = %w, "nomination");
                            }
                            let members = [(pod.clone(), pending.clone())];
                            let (message, result) = match self
                                .preempt(&snapshot, &by_key, &members, &core, &preemption)
                                .await
                            {
                                Some((note, result)) => (format!("{}; {note}", u.message), result),
                                None => (u.message.clone(), "unschedulable"),
                            };
                            self.failed(pod, Some(&pending), &message, result).await;
                        }
                    }
                }
                Some(gang) => {
                    let key = GangKey::of(&pending.namespace, &gang);
                    let members: Vec<(Arc<Pod>, PendingPod)> =
                        pending_members(&pending, &key, &by_key, &names, &self.assumed);
                    handled.extend(members.iter().map(|(p, _)| pod_key(p)));
                    let bound = bound_members(&key, &pods, &self.assumed);
                    let sizes: BTreeMap<(String, String), u32> = groups
                        .iter()
                        .filter_map(|g| {
                            Some((
                                (g.namespace()?, g.metadata.name.clone()?),
                                g.spec.min_member,
                            ))
                        })
                        .collect();
                    let timeout = match &gang {
                        gputopo_api::GangRef::PodGroup { name } => groups
                            .iter()
                            .find(|g| {
                                g.namespace().as_deref() == Some(pending.namespace.as_str())
                                    && g.metadata.name.as_deref() == Some(name.as_str())
                            })
                            .and_then(|g| g.spec.schedule_timeout_seconds)
                            .map(|s| Duration::from_secs(u64::from(s))),
                        gputopo_api::GangRef::Annotation { .. } => None,
                    }
                    .unwrap_or(self.settings.gangs.schedule_timeout);
                    let waited = self
                        .gang_since
                        .get(&key)
                        .map_or(Duration::ZERO, |t| t.elapsed());
                    let annotated = match gang {
                        gputopo_api::GangRef::Annotation { size, .. } => Some(size),
                        gputopo_api::GangRef::PodGroup { .. } => None,
                    };
                    // The gang's own reservation and nominations are free for it.
                    if let Some(r) = &self.reservations {
                        r.unapply(&mut snapshot, &key);
                    }
                    let member_keys: Vec<String> =
                        members.iter().map(|(p, _)| pod_key(p)).collect();
                    for k in &member_keys {
                        self.nominations.unapply(&mut snapshot, k);
                    }
                    let t = Instant::now();
                    let decision = match gang_size(&key, annotated, &sizes) {
                        Err(message) => GangDecision::Waiting { message },
                        Ok(size) if (members.len() as u32) + bound < size => {
                            GangDecision::Waiting {
                                message: format!(
                                    "{key}: {} of {size} members present ({} pending, {bound} bound); waiting for the rest before placing any",
                                    members.len() as u32 + bound,
                                    members.len()
                                ),
                            }
                        }
                        Ok(_) => {
                            let list: Vec<PendingPod> =
                                members.iter().map(|(_, p)| p.clone()).collect();
                            schedule_gang(&snapshot, &list, &core)
                        }
                    };
                    self.metrics
                        .duration
                        .observe((std::mem::take(&mut build_time) + t.elapsed()).as_secs_f64());
                    match decision {
                        GangDecision::Placed(placements) if placements.len() == members.len() => {
                            let all: Vec<(Arc<Pod>, PendingPod, Placement)> = members
                                .into_iter()
                                .zip(placements)
                                .map(|((pod, pending), p)| (pod, pending, p))
                                .collect();
                            if self.bind_all(&mut snapshot, &all).await {
                                if let Some(since) = self.gang_since.remove(&key) {
                                    self.metrics
                                        .gang_wait
                                        .observe(since.elapsed().as_secs_f64());
                                }
                                if let Some(r) = &mut self.reservations {
                                    r.release(&key);
                                }
                            } else {
                                self.keep_reservation(&mut snapshot, &key, &member_keys);
                            }
                        }
                        GangDecision::Placed(placements) => {
                            warn!(gang = %key, members = members.len(), placements = placements.len(), "the gang decision does not place every member; retrying later");
                            for (pod, _) in &members {
                                self.queue.retry_later(&pod_key(pod), Instant::now());
                            }
                            self.keep_reservation(&mut snapshot, &key, &member_keys);
                        }
                        GangDecision::Waiting { message } => {
                            let incomplete = message.contains("waiting for the rest");
                            let (mut message, mut result) = if incomplete {
                                (message, "waiting")
                            } else {
                                match self
                                    .preempt(&snapshot, &by_key, &members, &core, &preemption)
                                    .await
                                {
                                    Some((note, result)) => (format!("{message}; {note}"), result),
                                    None => (message, "unschedulable"),
                                }
                            };
                            if waited > timeout {
                                // What coscheduling's Permit timeout means here:
                                // the gang is told, and keeps waiting unreserved.
                                let released =
                                    self.reservations.as_mut().is_some_and(|r| r.release(&key));
                                message = format!(
                                    "{key} has waited {}s, longer than its schedule timeout ({}s){}: {message}",
                                    waited.as_secs(),
                                    timeout.as_secs(),
                                    if released {
                                        "; its reservation is released"
                                    } else {
                                        ""
                                    }
                                );
                                result = "timeout";
                            } else if !incomplete
                                && result == "unschedulable"
                                && let Some(note) = self.reserve(&snapshot, &key, &members, &core)
                            {
                                message = format!("{message}; {note}");
                            }
                            self.keep_reservation(&mut snapshot, &key, &member_keys);
                            for (pod, pending) in &members {
                                self.failed(pod, Some(pending), &message, result).await;
                            }
                        }
                    }
                }
            }
        }
        let u = usage(&snapshot);
        self.metrics.allocation.set(u.allocation_ratio);
        self.metrics.fragmentation.set(u.fragmentation_ratio);
        let tiers = snapshot.tiers().keys();
        self.metrics.domain_utilization.clear();
        for (_, d) in snapshot.domains() {
            if d.gpu_count() == 0 {
                continue;
            }
            self.metrics
                .domain_utilization
                .get_or_create(&DomainLabels {
                    tier: tiers.get(d.tier()).cloned().unwrap_or_default(),
                    domain: d.name().to_string(),
                })
                .set(f64::from(d.gpus_used()) / f64::from(d.gpu_count()));
        }
    }

    /// Puts the gang's reservation and its members' nominations (if any)
    /// back into this cycle's snapshot after its own decision left it waiting.
    fn keep_reservation(&self, snapshot: &mut Snapshot, key: &GangKey, members: &[String]) {
        if let Some(r) = &self.reservations {
            for w in r.reapply(snapshot, key) {
                warn!(warning = %w, "reservation");
            }
        }
        for pod in members {
            for w in self.nominations.reapply(snapshot, pod) {
                warn!(warning = %w, "nomination");
            }
        }
    }

    /// For a complete gang that fits nowhere and preempts nothing: holds
    /// the GPUs it would use once pods of no higher priority finish, or
    /// says why not. `None` when reservations are off.
    fn reserve(
        &mut self,
        snapshot: &Snapshot,
        key: &GangKey,
        members: &[(Arc<Pod>, PendingPod)],
        core: &SchedulerConfig,
    ) -> Option<String> {
        let r = self.reservations.as_mut()?;
        if let Some(held) = r.get(key) {
            return Some(format!(
                "holding its reservation of {} GPUs ({}) while they free up",
                held.gpus,
                held.describe()
            ));
        }
        let pendings: Vec<PendingPod> = members.iter().map(|(_, p)| p.clone()).collect();
        let Some(nodes) = GangReservations::propose(snapshot, &pendings, core) else {
            return Some(
                "no reservation: it would not fit even once every pod of no higher priority finished"
                    .into(),
            );
        };
        let cluster_gpus: u32 = snapshot.nodes().map(|n| n.gpus().count_ones()).sum();
        match r.reserve(key, nodes, cluster_gpus, Instant::now()) {
            Ok(held) => {
                info!(gang = %key, gpus = held.gpus, nodes = %held.describe(), "reserved");
                Some(format!(
                    "reserved {} GPUs ({}) for it: no other pod may take them as they free up",
                    held.gpus,
                    held.describe()
                ))
            }
            Err(why) => Some(format!("no reservation: {why}")),
        }
    }

    /// For `members` (one pod, or every member of a gang) that fit nowhere:
    /// evicts the lower-priority pods scheduler-core proposes, through the
    /// Eviction API so that PodDisruptionBudgets hold, and nominates the
    /// nodes. `None` when preemption is off or not asked; otherwise a note
    /// for the FailedScheduling message and the attempt's result label.
    ///
    /// Every eviction is first tried as a dry run: a budget that refuses one
    /// victim spares it (and its gang) and the proposal is made again around
    /// it, so that a refusal never leaves half a plan evicted.
    async fn preempt(
        &mut self,
        snapshot: &Snapshot,
        by_key: &HashMap<String, Arc<Pod>>,
        members: &[(Arc<Pod>, PendingPod)],
        core: &SchedulerConfig,
        preemption: &Preemption,
    ) -> Option<(String, &'static str)> {
        if !preemption.enabled {
            return None;
        }
        if members.iter().any(|(p, _)| {
            p.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) == Some("Never")
        }) {
            return Some((
                "preemption: not tried, preemptionPolicy is Never".into(),
                "unschedulable",
            ));
        }
        // Victims of an earlier round still terminating: wait for them
        // rather than evict more.
        for (pod, _) in members {
            let Some(node) = pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref())
                .filter(|n| !n.is_empty())
            else {
                continue;
            };
            let terminating = by_key
                .values()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_some()
                        && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                })
                .count();
            if terminating > 0 {
                return Some((
                    format!(
                        "preemption: nominated to {node}, waiting for {terminating} evicted pod(s) there to terminate"
                    ),
                    "preempting",
                ));
            }
        }
        let pendings: Vec<PendingPod> = members.iter().map(|(_, p)| p.clone()).collect();
        let mut spared: BTreeSet<String> = BTreeSet::new();
        // Each refusal spares at least one pod; a few rounds are enough in
        // practice and bound the API calls of one cycle.
        for _ in 0..4 {
            let plan = match propose_preemption_sparing(
                snapshot,
                &pendings,
                core,
                &preemption.policy,
                Timestamp::now(),
                &spared,
            ) {
                Ok(plan) => plan,
                Err(why) if spared.is_empty() => {
                    return Some((format!("preemption: {why}"), "unschedulable"));
                }
                Err(why) => {
                    return Some((
                        format!(
                            "preemption: {why} (PodDisruptionBudgets refused evicting {})",
                            spared.iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                        "unschedulable",
                    ));
                }
            };
            let mut refused = Vec::new();
            for victim in &plan.victims {
                match self.evict(victim, true).await {
                    Ok(()) => {}
                    Err(EvictError::Refused(_)) => refused.push(victim.clone()),
                    Err(e) => return Some((format!("preemption: {e}"), "error")),
                }
            }
            if !refused.is_empty() {
                for _ in &refused {
                    self.metrics
                        .evictions
                        .get_or_create(&EvictionLabels { result: "refused" })
                        .inc();
                }
                spared.extend(refused);
                continue;
            }
            let preemptors: Vec<String> = members.iter().map(|(p, _)| pod_key(p)).collect();
            for victim in &plan.victims {
                let result = self.evict(victim, false).await;
                let label = match &result {
                    Ok(()) => "evicted",
                    Err(EvictError::Refused(_)) => "refused",
                    Err(_) => "error",
                };
                self.metrics
                    .evictions
                    .get_or_create(&EvictionLabels { result: label })
                    .inc();
                if let Err(e) = result {
                    // A budget changed between the dry run and now.
                    return Some((format!("preemption: {e}"), "error"));
                }
                if let Some(v) = by_key.get(victim) {
                    let node = v
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default();
                    let note = format!(
                        "Preempted by {} on node {node} ({})",
                        preemptors.join(", "),
                        plan.explanation
                    );
                    self.event(
                        v,
                        EventType::Normal,
                        "Preempted",
                        "Preempting",
                        truncate(note),
                    )
                    .await;
                }
            }
            for ((pod, _), (node, gpus)) in members.iter().zip(&plan.members) {
                self.nominations.nominate(
                    &pod_key(pod),
                    node,
                    gpus,
                    Instant::now() + NOMINATION_TTL,
                );
                if let Err(e) = self.nominate(pod, node).await {
                    warn!(error = %e, "nominated node not written");
                }
            }
            let nodes: BTreeSet<&str> = plan.members.iter().map(|(n, _)| n.as_str()).collect();
            info!(preemptors = ?preemptors, victims = ?plan.victims, gpu_hours_lost = plan.gpu_hours_lost, "preempting");
            return Some((
                format!(
                    "preempting {} ({:.2} GPU-hours lost) to make room on {}: {}",
                    plan.victims.join(", "),
                    plan.gpu_hours_lost,
                    nodes.into_iter().collect::<Vec<_>>().join(", "),
                    plan.explanation
                ),
                "preempting",
            ));
        }
        Some((
            format!(
                "preemption: every plan needed a pod that PodDisruptionBudgets protect ({})",
                spared.into_iter().collect::<Vec<_>>().join(", ")
            ),
            "unschedulable",
        ))
    }

    /// Asks the API server to evict `victim` (`namespace/name`); a dry run
    /// only checks that it would (PodDisruptionBudgets included).
    async fn evict(&self, victim: &str, dry_run: bool) -> Result<(), EvictError> {
        let (namespace, name) = victim.split_once('/').unwrap_or(("default", victim));
        let api = Api::<Pod>::namespaced(self.eviction_client.clone(), namespace);
        let params = EvictParams {
            delete_options: None,
            post_options: PostParams {
                dry_run,
                field_manager: None,
            },
        };
        match api
            .evict(name, &params)
            .instrument(info_span!("evict_pod", pod = %victim, dry_run))
            .await
        {
            Ok(_) => Ok(()),
            // Already gone: what the eviction was for.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 429 => Err(EvictError::Refused(format!(
                "evicting {victim} refused: {}",
                s.message
            ))),
            Err(source) => Err(EvictError::Failed {
                pod: victim.to_string(),
                source,
            }),
        }
    }

    /// Sets `status.nominatedNodeName`, as kube-scheduler does for a
    /// preemptor: where it waits for its victims to go.
    async fn nominate(&self, pod: &Pod, node: &str) -> Result<(), WriteError> {
        let key = pod_key(pod);
        let api = Api::<Pod>::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let patch = json!({"status": {"nominatedNodeName": node}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        api.patch_status(pod.name_any().as_str(), &params, &Patch::Merge(&patch))
            .instrument(info_span!("nominate_pod", pod = %key, node))
            .await
            .map(|_| ())
            .map_err(|source| WriteError::Nominate {
                pod: key,
                node: node.to_string(),
                source,
            })
    }

    /// Binds every pod, its GPUs written on it by the same request (the
    /// binding's annotations, which the API server copies onto the pod), then
    /// says so in an event. So a pod is never bound without its GPUs nor
    /// annotated without its node. Each bound pod joins `snapshot` (for the
    /// rest of the cycle) and the assume cache (until the watch shows it
    /// bound). A gang member whose binding fails after others succeeded
    /// cannot undo theirs: it is retried alone (see the README).
    /// Returns whether every pod was bound.
    async fn bind_all(
        &mut self,
        snapshot: &mut Snapshot,
        all: &[(Arc<Pod>, PendingPod, Placement)],
    ) -> bool {
        let mut all_bound = true;
        for (pod, pending, p) in all {
            let key = pod_key(pod);
            match self.bind(pod, p).await {
                Ok(()) => {
                    self.binds += 1;
                    if self.exit_after_binds.is_some_and(|n| self.binds >= n) {
                        warn!(
                            binds = self.binds,
                            "{FAILPOINT_EXIT_AFTER_BINDS} reached: aborting"
                        );
                        std::process::abort();
                    }
                    if let Err(e) = snapshot.add_pod(p.bound_pod(pending)) {
                        warn!(pod = %key, error = %e, "adding the bound pod to this cycle's snapshot");
                    }
                    self.assumed.assume(
                        key.clone(),
                        Assumed {
                            uid: pod.metadata.uid.clone(),
                            input: p.bound_pod(pending),
                            since: Instant::now(),
                        },
                    );
                    self.queue.done(&key);
                    self.metrics
                        .attempts
                        .get_or_create(&AttemptLabels {
                            result: "scheduled",
                            workload: workload_label(Some(pending)),
                        })
                        .inc();
                    self.metrics.decisions.inc();
                    self.metrics
                        .bottlenecks
                        .get_or_create(&BottleneckLabel {
                            bottleneck: bottleneck_text(p),
                        })
                        .inc();
                    info!(pod = %key, node = %p.node, gpus = %p.assigned_gpus(), score = p.score, "scheduled");
                    self.event(
                        pod,
                        EventType::Normal,
                        "Scheduled",
                        "Binding",
                        scheduled_note(p),
                    )
                    .await;
                }
                Err(e) => {
                    warn!(error = %e, "binding failed");
                    self.write_failed(pod, Some(pending), &e);
                    all_bound = false;
                }
            }
        }
        all_bound
    }

    fn write_failed(&mut self, pod: &Pod, pending: Option<&PendingPod>, e: &WriteError) {
        let key = pod_key(pod);
        if e.pod_gone() {
            self.queue.done(&key);
        } else {
            self.queue.retry_later(&key, Instant::now());
        }
        self.metrics
            .attempts
            .get_or_create(&AttemptLabels {
                result: "error",
                workload: workload_label(pending),
            })
            .inc();
    }

    async fn bind(&self, pod: &Pod, p: &Placement) -> Result<(), WriteError> {
        let key = pod_key(pod);
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace);
        let binding = Binding {
            metadata: ObjectMeta {
                name: pod.metadata.name.clone(),
                namespace: Some(namespace.to_string()),
                uid: pod.metadata.uid.clone(),
                annotations: Some(assignment_annotations(p)),
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(p.node.clone()),
                ..ObjectReference::default()
            },
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        api.create_subresource::<Binding, serde_json::Value>(
            "binding",
            pod.name_any().as_str(),
            &params,
            &binding,
        )
        .instrument(info_span!("bind_pod", pod = %key, node = %p.node))
        .await
        .map(|_| ())
        .map_err(|source| WriteError::Bind {
            pod: key,
            node: p.node.clone(),
            source,
        })
    }

    /// The pod's spec or annotations cannot be read: say which key, keep going.
    async fn invalid(&mut self, pod: &Pod, e: &PodError) {
        let message = format!("invalid {}: {e}", e.key());
        self.failed(pod, None, &message, "invalid").await;
    }

    /// No placement now: `FailedScheduling`, PodScheduled=False, back off.
    async fn failed(
        &mut self,
        pod: &Pod,
        pending: Option<&PendingPod>,
        message: &str,
        result: &'static str,
    ) {
        let key = pod_key(pod);
        let retry = self.queue.unschedulable(&key, Instant::now());
        debug!(pod = %key, %message, ?retry, "{result}");
        self.metrics
            .attempts
            .get_or_create(&AttemptLabels {
                result,
                workload: workload_label(pending),
            })
            .inc();
        self.event(
            pod,
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            truncate(message.to_string()),
        )
        .await;
        if let Err(e) = self.set_unschedulable(pod, message).await {
            warn!(error = %e, "pod condition not written");
        }
    }

    async fn set_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), WriteError> {
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
        if current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(message)
        }) {
            return Ok(());
        }
        let key = pod_key(pod);
        let api = Api::<Pod>::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let condition = PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some(message.to_string()),
            last_transition_time: Some(Time(Timestamp::now())),
            ..PodCondition::default()
        };
        let patch = json!({"status": {"conditions": [condition]}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        api.patch_status(pod.name_any().as_str(), &params, &Patch::Strategic(&patch))
            .instrument(info_span!("pod_condition", pod = %key))
            .await
            .map(|_| ())
            .map_err(|source| WriteError::Condition { pod: key, source })
    }

    async fn event(
        &mut self,
        pod: &Pod,
        type_: EventType,
        reason: &'static str,
        action: &str,
        note: String,
    ) {
        let reference = pod.object_ref(&());
        let key = pod_key(pod);
        let (client, reporter) = (&self.client, &self.reporter);
        let entry = self
            .recorders
            .entry((key.clone(), reason))
            .or_insert_with(|| {
                (
                    note.clone(),
                    Recorder::new(client.clone(), reporter.clone()),
                )
            });
        if entry.0 != note {
            *entry = (
                note.clone(),
                Recorder::new(client.clone(), reporter.clone()),
            );
        }
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        // Published in the background: an event is a report, not part of
        // the decision, and awaiting it would add a write per pod to every
        // cycle (the recorder serializes its own series updates).
        let recorder = entry.1.clone();
        tokio::spawn(
            async move {
                if let Err(e) = recorder.publish(&event, &reference).await {
                    warn!(pod = %key, reason, error = %e, "event not written");
                }
            }
            .instrument(info_span!("event", reason)),
        );
    }
}

/// The gang's pending members this scheduler serves, readable, sorted by name.
fn pending_members(
    first: &PendingPod,
    key: &GangKey,
    by_key: &HashMap<String, Arc<Pod>>,
    names: &[String],
    assumed: &AssumeCache,
) -> Vec<(Arc<Pod>, PendingPod)> {
    let mut members: Vec<(Arc<Pod>, PendingPod)> = by_key
        .iter()
        .filter(|(k, p)| {
            p.metadata.namespace.as_deref().unwrap_or("default") == first.namespace
                && is_pending_for(p, names)
                && !assumed.contains(k)
        })
        .filter_map(|(_, p)| {
            let pending = PendingPod::from_k8s(p).ok()?;
            let gang = pending.request.gang.as_ref()?;
            (GangKey::of(&pending.namespace, gang) == *key).then(|| (p.clone(), pending))
        })
        .collect();
    members.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    members
}

/// Members of the gang already bound (or assumed): they count toward its size.
fn bound_members(key: &GangKey, pods: &[Arc<Pod>], assumed: &AssumeCache) -> u32 {
    pods.iter()
        .filter(|p| {
            let bound = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty())
                || assumed.contains(&pod_key(p));
            bound
                && gputopo_api::GpuRequest::from_pod(p)
                    .ok()
                    .and_then(|r| r.gang)
                    .is_some_and(|g| {
                        GangKey::of(p.metadata.namespace.as_deref().unwrap_or("default"), &g)
                            == *key
                    })
        })
        .count() as u32
}
