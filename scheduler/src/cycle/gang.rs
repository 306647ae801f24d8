//! Gangs as one cycle sees them: who the members are, how many are
//! pending and bound, how many the gang needs, and how long it may wait.
//! Pure functions over the watched objects.

use crate::cluster::{AssumeCache, is_gated, is_pending_for, is_unbound_for};
use crate::gangs::{GangObjects, GangSize, GangSizeError};
use gputopo_api::GangRef;
use gputopo_scheduler_core::pod::PendingPod;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A gang's identity: namespace and how its pods name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GangKey {
    pub namespace: String,
    pub gang: GangKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GangKind {
    PodGroup(String),
    Annotation(String),
    /// An upstream `scheduling.k8s.io` PodGroup.
    SchedulingGroup(String),
    JobSet(String),
    /// A LeaderWorkerSet and the group's index.
    LeaderWorkerSet(String, String),
}

impl GangKey {
    pub fn of(namespace: &str, gang: &GangRef) -> GangKey {
        GangKey {
            namespace: namespace.to_string(),
            gang: match gang {
                GangRef::PodGroup { name } => GangKind::PodGroup(name.clone()),
                GangRef::Annotation { name, .. } => GangKind::Annotation(name.clone()),
                GangRef::SchedulingGroup { name } => GangKind::SchedulingGroup(name.clone()),
                GangRef::JobSet { name, .. } => GangKind::JobSet(name.clone()),
                GangRef::LeaderWorkerSet { name, group, .. } => {
                    GangKind::LeaderWorkerSet(name.clone(), group.clone())
                }
            },
        }
    }

    /// The gang `pod` belongs to, if it names one readably.
    pub fn of_pod(pod: &Pod) -> Option<GangKey> {
        let gang = gputopo_api::GpuRequest::from_pod(pod).ok()?.gang?;
        Some(GangKey::of(
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            &gang,
        ))
    }
}

impl std::fmt::Display for GangKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = &self.namespace;
        match &self.gang {
            GangKind::PodGroup(n) => write!(f, "PodGroup {ns}/{n}"),
            GangKind::Annotation(n) => write!(f, "gang {ns}/{n}"),
            GangKind::SchedulingGroup(n) => write!(f, "PodGroup {ns}/{n} (scheduling.k8s.io)"),
            GangKind::JobSet(n) => write!(f, "JobSet {ns}/{n}"),
            GangKind::LeaderWorkerSet(n, g) => write!(f, "LeaderWorkerSet {ns}/{n} group {g}"),
        }
    }
}

/// Whether a gang can be decided on now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GangReadiness {
    /// Enough members are present (pending here, or already bound).
    Complete,
    /// Fewer members than the gang needs: none is placed.
    Incomplete {
        size: u32,
        pending: usize,
        bound: u32,
        /// Members held by a scheduling gate: they do not count until ungated.
        gated: u32,
    },
    /// The gang's size is not known.
    SizeUnknown(GangSizeError),
    /// The gang's object and its members say different things of its
    /// structure: it waits until one is changed.
    Conflicting(String),
    /// The object the pods name says they are placed one by one (basic
    /// policy, ordered start): each goes alone.
    Independent(String),
}

/// A gang with at least one member pending for this scheduler.
#[derive(Clone, Debug)]
pub struct GangUnit {
    pub key: GangKey,
    /// Its pending members this scheduler serves, readable, sorted by name.
    pub members: Vec<(Arc<Pod>, PendingPod)>,
    /// Members already bound (or assumed): they count toward its size.
    pub bound: u32,
    /// Those members (`namespace/name`) and their nodes.
    pub bound_members: Vec<(String, String)>,
    /// Their ranks (`bound_members` order), where their controllers give one.
    pub bound_ranks: Vec<Option<gputopo_api::Rank>>,
    pub readiness: GangReadiness,
    /// How long it may wait before it is told it timed out.
    pub timeout: Duration,
    /// The gang's minimum, where its object gives one: members bound
    /// beyond it joined an elastic gang rather than replaced a lost one.
    pub size: Option<u32>,
}

impl GangUnit {
    /// The `FailedScheduling` message of a gang that is not complete.
    pub fn waiting_message(&self) -> Option<String> {
        match &self.readiness {
            GangReadiness::Complete => None,
            GangReadiness::Incomplete {
                size,
                pending,
                bound,
                gated,
            } => Some(format!(
                "{}: {} of {size} members present ({pending} pending, {bound} bound{}); waiting for the rest before placing any",
                self.key,
                *pending as u32 + bound,
                if *gated > 0 {
                    format!(", {gated} more held by scheduling gates")
                } else {
                    String::new()
                }
            )),
            GangReadiness::SizeUnknown(e) => Some(e.to_string()),
            GangReadiness::Conflicting(why) => Some(why.clone()),
            GangReadiness::Independent(_) => None,
        }
    }
}

/// What gang assembly reads besides the pods.
pub struct GangContext<'a> {
    pub by_key: &'a HashMap<String, Arc<Pod>>,
    pub gangs: &'a GangObjects,
    pub names: &'a [String],
    pub assumed: &'a AssumeCache,
    /// `gangs.scheduleTimeout`, for gangs whose PodGroup names none.
    pub default_timeout: Duration,
}

/// The gang `first` (a pending member) belongs to.
pub fn assemble(first: &PendingPod, gang: &GangRef, ctx: &GangContext<'_>) -> GangUnit {
    let key = GangKey::of(&first.namespace, gang);
    let mut members: Vec<(Arc<Pod>, PendingPod)> = ctx
        .by_key
        .iter()
        .filter(|(k, p)| {
            p.metadata.namespace.as_deref().unwrap_or("default") == first.namespace
                && is_pending_for(p, ctx.names)
                && !ctx.assumed.contains(k)
        })
        .filter_map(|(_, p)| {
            let pending = PendingPod::from_k8s(p).ok()?;
            let gang = pending.request.gang.as_ref()?;
            (GangKey::of(&pending.namespace, gang) == key).then(|| (p.clone(), pending))
        })
        .collect();
    members.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    let bound_members = bound_members(&key, ctx);
    let bound = bound_members.len() as u32;
    let bound_ranks = bound_members
        .iter()
        .map(|(k, _)| {
            let pod = ctx.by_key.get(k)?;
            gputopo_api::GpuRequest::from_pod(pod).ok()?.rank
        })
        .collect();
    let gated = ctx
        .by_key
        .values()
        .filter(|p| {
            is_gated(p) && is_unbound_for(p, ctx.names) && GangKey::of_pod(p).as_ref() == Some(&key)
        })
        .count() as u32;
    let required = ctx.gangs.required_topology(&first.namespace, gang);
    let conflict = required.and_then(|key| {
        crate::gangs::topology::require_on_members(
            &first.namespace,
            gang.name(),
            &key,
            members.iter_mut().map(|(_, p)| p),
        )
        .err()
    });
    let (readiness, timeout, size) = match ctx.gangs.size(&first.namespace, gang, ctx.names) {
        _ if conflict.is_some() => (
            GangReadiness::Conflicting(conflict.map(|c| c.to_string()).unwrap_or_default()),
            None,
            None,
        ),
        Err(e) => (GangReadiness::SizeUnknown(e), None, None),
        Ok(GangSize::Independent(why)) => (GangReadiness::Independent(why), None, None),
        Ok(GangSize::Gang { size, timeout }) if members.len() as u32 + bound < size => (
            GangReadiness::Incomplete {
                size,
                pending: members.len(),
                bound,
                gated,
            },
            timeout,
            Some(size),
        ),
        Ok(GangSize::Gang { timeout, size }) => (GangReadiness::Complete, timeout, Some(size)),
    };
    let timeout = timeout.unwrap_or(ctx.default_timeout);
    GangUnit {
        key,
        members,
        bound,
        bound_members,
        bound_ranks,
        readiness,
        timeout,
        size,
    }
}

/// Members of the gang already bound (or assumed), with their nodes,
/// sorted; members that finished or are being deleted do not count.
fn bound_members(key: &GangKey, ctx: &GangContext<'_>) -> Vec<(String, String)> {
    let mut bound: Vec<(String, String)> = ctx
        .by_key
        .iter()
        .filter(|(_, p)| {
            p.metadata.deletion_timestamp.is_none()
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
                && GangKey::of_pod(p).as_ref() == Some(key)
        })
        .filter_map(|(k, p)| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty())
                .or_else(|| ctx.assumed.node_of(k).map(str::to_string))?;
            Some((k.clone(), node))
        })
        .collect();
    bound.sort();
    bound
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pod_key;
    use crate::gangs::{PodGroup, PodGroupSpec};
    use serde_json::json;

    fn pod(
        name: &str,
        node: Option<&str>,
        ann: serde_json::Value,
        labels: serde_json::Value,
    ) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "annotations": ann, "labels": labels},
                "spec": {"schedulerName": "gputopo-scheduler", "nodeName": node,
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
            }))
            .expect("a pod"),
        )
    }

    fn unit(pods: &[Arc<Pod>], groups: &[Arc<PodGroup>]) -> GangUnit {
        let gangs = GangObjects {
            pod_groups: groups.to_vec(),
            ..GangObjects::default()
        };
        let by_key: HashMap<String, Arc<Pod>> =
            pods.iter().map(|p| (pod_key(p), p.clone())).collect();
        let names = vec!["gputopo-scheduler".to_string()];
        let assumed = AssumeCache::default();
        let ctx = GangContext {
            by_key: &by_key,
            gangs: &gangs,
            names: &names,
            assumed: &assumed,
            default_timeout: Duration::from_secs(600),
        };
        let first = pods
            .iter()
            .find(|p| is_pending_for(p, &names))
            .expect("a pending pod");
        let first = PendingPod::from_k8s(first).expect("readable");
        let gang = first.request.gang.clone().expect("a gang member");
        assemble(&first, &gang, &ctx)
    }

    #[test]
    fn an_annotated_gang_counts_pending_and_bound_members() {
        let ann = json!({"gputopo.dev/gang": "g", "gputopo.dev/gang-size": "3"});
        let pods = [
            pod("g-1", None, ann.clone(), json!({})),
            pod("g-0", Some("n1"), ann.clone(), json!({})),
            pod("other", None, json!({}), json!({})),
        ];
        let u = unit(&pods, &[]);
        assert_eq!(u.members.len(), 1);
        assert_eq!(u.bound, 1);
        assert_eq!(
            u.readiness,
            GangReadiness::Incomplete {
                size: 3,
                pending: 1,
                bound: 1,
                gated: 0
            }
        );
        let msg = u.waiting_message().expect("waiting");
        assert!(
            msg.starts_with("gang ml/g: 2 of 3 members present (1 pending, 1 bound)"),
            "{msg}"
        );
        assert_eq!(u.timeout, Duration::from_secs(600));
    }

    #[test]
    fn a_pod_group_gang_waits_for_its_group_then_takes_its_size_and_timeout() {
        let label = json!({"scheduling.x-k8s.io/pod-group": "job"});
        let pods = [
            pod("job-0", None, json!({}), label.clone()),
            pod("job-1", None, json!({}), label.clone()),
        ];
        let u = unit(&pods, &[]);
        assert!(matches!(
            u.readiness,
            GangReadiness::SizeUnknown(GangSizeError::Missing(_))
        ));
        assert_eq!(
            u.waiting_message().as_deref(),
            Some("PodGroup ml/job (scheduling.x-k8s.io) does not exist (yet); waiting for it")
        );
        let mut group = PodGroup::new(
            "job",
            PodGroupSpec {
                min_member: 2,
                schedule_timeout_seconds: Some(30),
            },
        );
        group.metadata.namespace = Some("ml".into());
        let u = unit(&pods, &[Arc::new(group)]);
        assert_eq!(u.readiness, GangReadiness::Complete);
        assert_eq!(u.waiting_message(), None);
        assert_eq!(u.timeout, Duration::from_secs(30));
        let names: Vec<&str> = u.members.iter().map(|(_, p)| p.name.as_str()).collect();
        assert_eq!(names, ["job-0", "job-1"]);
    }
}
