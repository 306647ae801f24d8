//! [`ClusterWrites`] over `kube::Client`: each write one request in its own
//! short `tracing` span, errors sorted into `WriteErrorKind`s
//! ([`write_error`]). The claim writes are `claims/claim_writes.rs`.

use crate::assignment_record::AssignmentRecord;
use crate::binding::{PodIdentity, pod_binding};
use crate::checked::InvalidObject;
use crate::cluster::pod_key;
use crate::cycle::gang_status::GangStatusWrite;
use crate::cycle::node_trust::NodeConditionWrite;
use crate::cycle::writes::truncate;
use crate::cycle::{ClusterWrites, EventSpec, WriteError, WriteOp};
use crate::event_queue::EventQueue;
use crate::gangs::{PodGroup, UpstreamPodGroup};
use crate::volume_writes::write_volume_plan;
use crate::writer::{FIELD_MANAGER, write_error};
use gputopo_scheduler_core::schedule::Placement;
use k8s_openapi::api::core::v1::{Binding, Node, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use tracing::{Instrument, info_span, warn};

/// Environment variable naming a number of bindings after which the
/// process aborts: lets the end-to-end tests kill the scheduler between two
/// members of a gang, which no signal sent from outside can time reliably.
pub const FAILPOINT_EXIT_AFTER_BINDS: &str = "GPUTOPO_SCHEDULER_FAILPOINT_EXIT_AFTER_BINDS";

/// Environment variable naming a number of claim writes after which the
/// process aborts, before the binding that would follow: the end-to-end
/// tests' crash between a claim's allocation and its pod's binding.
pub const FAILPOINT_EXIT_AFTER_CLAIMS: &str = "GPUTOPO_SCHEDULER_FAILPOINT_EXIT_AFTER_CLAIMS";

/// Per pod (`namespace/name`) and event reason: the last note and its recorder.
type Recorders = HashMap<(String, &'static str), Vec<(String, Recorder)>>;

/// How many of a pod's recent notes per reason keep their event: a note
/// that comes back (a node flapping Ready and back changes the counts and
/// then restores them) adds to its own event's series, as client-go's
/// aggregation keys events by their message, instead of writing a new one.
const RECENT_NOTES: usize = 4;

/// The scheduler's writes to the API server.
pub struct KubeWrites {
    client: kube::Client,
    /// For evictions: a client that does not retry 429 Too Many Requests,
    /// the API server's answer when a PodDisruptionBudget refuses, which
    /// the default client would retry for about a minute.
    eviction_client: kube::Client,
    reporter: Reporter,
    /// Per pod and warning reason, its last [`RECENT_NOTES`] notes, each
    /// with the recorder that wrote it, oldest first (normal events are
    /// said once: `emit_event`). `Recorder` folds repeats into one event's
    /// series but keys them without the note, so a changed note would
    /// hide under the old one: a new note gets a new recorder, hence a new
    /// event, as client-go's aggregation does.
    recorders: Mutex<Recorders>,
    /// Events waiting to be published (`event_queue.rs`).
    events: EventQueue,
    exit_after_binds: Option<u32>,
    binds: AtomicU32,
    exit_after_claims: Option<u32>,
    claims: AtomicU32,
}

impl KubeWrites {
    pub fn new(client: kube::Client, eviction_client: kube::Client) -> KubeWrites {
        KubeWrites {
            reporter: Reporter {
                controller: FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME")
                    .ok()
                    .or_else(|| std::env::var("HOSTNAME").ok()),
            },
            recorders: Mutex::new(HashMap::new()),
            events: EventQueue::default(),
            exit_after_binds: std::env::var(FAILPOINT_EXIT_AFTER_BINDS)
                .ok()
                .and_then(|v| v.parse().ok()),
            binds: AtomicU32::new(0),
            exit_after_claims: std::env::var(FAILPOINT_EXIT_AFTER_CLAIMS)
                .ok()
                .and_then(|v| v.parse().ok()),
            claims: AtomicU32::new(0),
            client,
            eviction_client,
        }
    }

    /// Events dropped because too many were waiting, since the last call.
    pub fn take_dropped_events(&self) -> u64 {
        self.events.take_dropped()
    }

    /// Forgets the event series of pods `keep` says no longer matter.
    pub fn retain_events(&self, keep: impl Fn(&str) -> bool) {
        recorders(&self.recorders).retain(|(k, _), _| keep(k));
    }

    /// A `Warning` event on an object gputopo skips, saying why.
    pub fn report_invalid(&self, bad: &InvalidObject) {
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidObject".into(),
            note: Some(truncate(format!(
                "gputopo-scheduler skips this {}: {}",
                bad.kind, bad.reason
            ))),
            action: "Reading".into(),
            secondary: None,
        };
        let reference = bad.reference.clone();
        let name = bad.name.clone();
        self.events.push(
            async move {
                if let Err(e) = recorder.publish(&event, &reference).await {
                    warn!(object = %name, error = %e, "event not written");
                }
            }
            .instrument(info_span!("event", reason = "InvalidObject")),
        );
    }

    fn pods(&self, pod: &Pod) -> Api<Pod> {
        Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }
}

/// The recorder of `note` among a pod's recent ones (moved to the newest),
/// or a new one from `make`, the oldest dropped past [`RECENT_NOTES`].
fn recorder_for<R: Clone>(
    recent: &mut Vec<(String, R)>,
    note: &str,
    make: impl FnOnce() -> R,
) -> R {
    let entry = match recent.iter().position(|(n, _)| n == note) {
        Some(i) => recent.remove(i),
        None => (note.to_string(), make()),
    };
    let recorder = entry.1.clone();
    recent.push(entry);
    if recent.len() > RECENT_NOTES {
        recent.remove(0);
    }
    recorder
}

fn recorders<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// After a binding that named GPUs: the same record as the pod's
/// [`CONDITION_TYPE`](crate::assignment_record::CONDITION_TYPE) condition,
/// where tenants cannot write (see `assignment_record`). The binding is the
/// promise; a failure here is logged and the annotations stay the record.
pub async fn record_in_status(api: &Api<Pod>, pod: &Pod, p: &Placement) {
    let Some(annotations) = crate::binding::binding_annotations(p) else {
        return;
    };
    let condition = AssignmentRecord::from_binding(&annotations).condition(Timestamp::now());
    let patch = json!({"status": {"conditions": [condition]}});
    let key = pod_key(pod);
    if let Err(e) = api
        .patch_status(
            pod.name_any().as_str(),
            &params(),
            &Patch::Strategic(&patch),
        )
        .instrument(info_span!("record_gpus", pod = %key))
        .await
    {
        warn!(pod = %key, error = %e, "GPU record not written to the pod's status; its annotations stay the record");
    }
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

impl ClusterWrites for KubeWrites {
    async fn bind(&self, pod: &Pod, p: &Placement) -> Result<(), WriteError> {
        let key = pod_key(pod);
        if !p.volumes.is_empty() {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            write_volume_plan(&self.client, namespace, &p.volumes, &p.node).await?;
        }
        let binding = pod_binding(&PodIdentity::of(pod), p);
        let post = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.pods(pod)
            .create_subresource::<Binding, serde_json::Value>(
                "binding",
                pod.name_any().as_str(),
                &post,
                &binding,
            )
            .instrument(info_span!("bind_pod", pod = %key, node = %p.node))
            .await
            .map_err(|e| write_error(WriteOp::Bind, key, e))?;
        record_in_status(&self.pods(pod), pod, p).await;
        let binds = self.binds.fetch_add(1, Ordering::SeqCst) + 1;
        if self.exit_after_binds.is_some_and(|n| binds >= n) {
            warn!(binds, "{FAILPOINT_EXIT_AFTER_BINDS} reached: aborting");
            std::process::abort();
        }
        Ok(())
    }

    async fn evict(&self, victim: &str, dry_run: bool) -> Result<(), WriteError> {
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
            Err(e) => Err(write_error(
                WriteOp::Evict { dry_run },
                victim.to_string(),
                e,
            )),
        }
    }

    async fn nominate(&self, pod: &Pod, node: &str) -> Result<(), WriteError> {
        let key = pod_key(pod);
        let patch = json!({"status": {"nominatedNodeName": node}});
        self.pods(pod)
            .patch_status(pod.name_any().as_str(), &params(), &Patch::Merge(&patch))
            .instrument(info_span!("nominate_pod", pod = %key, node))
            .await
            .map(|_| ())
            .map_err(|e| write_error(WriteOp::Nominate, key, e))
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
        let condition = PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some(message.to_string()),
            last_transition_time: Some(Time(Timestamp::now())),
            ..PodCondition::default()
        };
        let patch = json!({"status": {"conditions": [condition]}});
        self.pods(pod)
            .patch_status(
                pod.name_any().as_str(),
                &params(),
                &Patch::Strategic(&patch),
            )
            .instrument(info_span!("pod_condition", pod = %key))
            .await
            .map(|_| ())
            .map_err(|e| write_error(WriteOp::Condition, key, e))
    }

    async fn set_gang_status(&self, write: &GangStatusWrite) -> Result<(), WriteError> {
        let target = write.target();
        let span = info_span!("gang_status", group = %target);
        let written = match write {
            GangStatusWrite::SchedulerPlugins {
                namespace,
                name,
                status,
            } => {
                // Its CRD's status is plain fields: a merge patch sets them.
                let patch = json!({"status": status});
                Api::<PodGroup>::namespaced(self.client.clone(), namespace)
                    .patch_status(name, &params(), &Patch::Merge(&patch))
                    .instrument(span)
                    .await
                    .map(|_| ())
            }
            GangStatusWrite::Upstream {
                namespace,
                name,
                condition,
            } => {
                // Server-side apply owns just this condition (a map list
                // keyed by type), leaving kube-scheduler's others alone.
                let patch = json!({
                    "apiVersion": "scheduling.k8s.io/v1beta1",
                    "kind": "PodGroup",
                    "status": {"conditions": [condition]}
                });
                Api::<UpstreamPodGroup>::namespaced(self.client.clone(), namespace)
                    .patch_status(
                        name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&patch),
                    )
                    .instrument(span)
                    .await
                    .map(|_| ())
            }
        };
        written.map_err(|e| write_error(WriteOp::GangStatus, target, e))
    }

    async fn set_node_condition(&self, write: &NodeConditionWrite) -> Result<(), WriteError> {
        // Server-side apply owns just this condition type (the kubelet's
        // conditions are a map list keyed by type too, and stay its own).
        let patch = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "status": {"conditions": [write.condition]}
        });
        Api::<Node>::all(self.client.clone())
            .patch_status(
                &write.node,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .instrument(info_span!("node_condition", node = %write.node))
            .await
            .map(|_| ())
            .map_err(|e| write_error(WriteOp::NodeCondition, write.node.clone(), e))
    }

    async fn reserve_claim(&self, write: &crate::claims::ClaimWrite) -> Result<(), WriteError> {
        crate::claims::claim_writes::reserve(&self.client, write).await?;
        let claims = self.claims.fetch_add(1, Ordering::SeqCst) + 1;
        if self.exit_after_claims.is_some_and(|n| claims >= n) {
            warn!(claims, "{FAILPOINT_EXIT_AFTER_CLAIMS} reached: aborting");
            std::process::abort();
        }
        Ok(())
    }

    async fn release_claim(
        &self,
        write: &crate::claims::ClaimWrite,
        deallocate: bool,
    ) -> Result<(), WriteError> {
        crate::claims::claim_writes::release(&self.client, write, deallocate).await
    }

    async fn create_claim(
        &self,
        claim: &k8s_openapi::api::resource::v1::ResourceClaim,
    ) -> Result<k8s_openapi::api::resource::v1::ResourceClaim, WriteError> {
        crate::claims::claim_writes::create(&self.client, claim).await
    }

    async fn delete_claim(&self, write: &crate::claims::ClaimWrite) -> Result<(), WriteError> {
        crate::claims::claim_writes::delete(&self.client, write).await
    }

    async fn set_extended_claim_status(
        &self,
        pod: &Pod,
        status: &k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> Result<(), WriteError> {
        let key = pod_key(pod);
        let patch = json!({"status": {"extendedResourceClaimStatus": status}});
        self.pods(pod)
            .patch_status(pod.name_any().as_str(), &params(), &Patch::Merge(&patch))
            .instrument(info_span!("extended_claim_status", pod = %key))
            .await
            .map(|_| ())
            .map_err(|e| write_error(WriteOp::ExtendedClaimStatus, key, e))
    }

    fn emit_event(&self, pod: &Pod, event: EventSpec) {
        let reference = pod.object_ref(&());
        let key = pod_key(pod);
        // Only warnings repeat (a pod failing again): a normal event
        // (scheduled, preempted) is said once, and its recorder goes with
        // it. Kept, a recorder and its cached event (about 6 kB) would
        // stay until the cycle that placed the pod ends: at 5,000 nodes a
        // backlog drained in one cycle held 64 MB of them.
        let recorder = if !event.warning {
            Recorder::new(self.client.clone(), self.reporter.clone())
        } else {
            let mut map = recorders(&self.recorders);
            let recent = map.entry((key.clone(), event.reason)).or_default();
            recorder_for(recent, &event.note, || {
                Recorder::new(self.client.clone(), self.reporter.clone())
            })
        };
        let reason = event.reason;
        let event = Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.into(),
            note: Some(event.note),
            action: event.action.into(),
            secondary: None,
        };
        // Published in the background (the recorder serializes its own
        // series updates), through the bounded queue.
        self.events.push(
            async move {
                if let Err(e) = recorder.publish(&event, &reference).await {
                    warn!(pod = %key, reason, error = %e, "event not written");
                }
            }
            .instrument(info_span!("event", reason)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A note that comes back reuses its recorder (its event's series);
    /// only the most recent notes are kept.
    #[test]
    fn a_recurring_note_keeps_its_recorder_and_old_ones_are_dropped() {
        let mut recent: Vec<(String, u32)> = Vec::new();
        let mut made = 0;
        let mut get = |recent: &mut Vec<(String, u32)>, note: &str| {
            recorder_for(recent, note, || {
                made += 1;
                made
            })
        };
        let a = get(&mut recent, "a");
        let b = get(&mut recent, "b");
        assert_ne!(a, b);
        assert_eq!(get(&mut recent, "a"), a, "a flapping note keeps its event");
        for note in ["c", "d", "e"] {
            get(&mut recent, note);
        }
        assert_eq!(recent.len(), RECENT_NOTES);
        assert!(
            recent.iter().all(|(n, _)| n != "b"),
            "the least recent note goes first: {recent:?}"
        );
        assert_eq!(get(&mut recent, "a"), a, "used recently, kept");
    }
}
