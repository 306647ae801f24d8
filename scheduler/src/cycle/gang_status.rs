//! What `kubectl get podgroups` should say, from the pods this scheduler
//! serves: the scheduler-plugins PodGroup's `status` (phase, scheduled,
//! running, succeeded, failed, as its PodGroup controller counts them) and
//! the upstream PodGroup's `PodGroupInitiallyScheduled` condition (as
//! kube-scheduler sets it: `Scheduled` once its gang is bound, never
//! reverted; `Unschedulable` with the reason while it cannot be placed).
//! Pure; the cycle writes what differs from the watched object.

use super::gang::{GangKey, GangKind};
use crate::gangs::{GangObjects, PodGroupStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::sync::Arc;

/// The upstream condition gputopo writes.
pub const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// A status write for one gang object.
#[derive(Clone, Debug, PartialEq)]
pub enum GangStatusWrite {
    /// The scheduler-plugins PodGroup's whole `status`.
    SchedulerPlugins {
        namespace: String,
        name: String,
        status: PodGroupStatus,
    },
    /// The upstream PodGroup's `PodGroupInitiallyScheduled` condition.
    Upstream {
        namespace: String,
        name: String,
        condition: Condition,
    },
}

impl GangStatusWrite {
    /// `namespace/name`, for logs.
    pub fn target(&self) -> String {
        match self {
            GangStatusWrite::SchedulerPlugins {
                namespace, name, ..
            }
            | GangStatusWrite::Upstream {
                namespace, name, ..
            } => format!("{namespace}/{name}"),
        }
    }
}

/// A gang's members by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    /// Members not finished and not being deleted.
    present: u32,
    /// Members with a node (running or finished included).
    scheduled: u32,
    running: u32,
    succeeded: u32,
    failed: u32,
    /// Whether any member names this scheduler: only those groups are ours
    /// to report on.
    ours: bool,
}

fn counts<'p>(
    pods: impl IntoIterator<Item = &'p Arc<Pod>>,
    names: &[String],
) -> HashMap<GangKey, Counts> {
    let mut out: HashMap<GangKey, Counts> = HashMap::new();
    for p in pods {
        let Some(key) = GangKey::of_pod(p) else {
            continue;
        };
        let c = out.entry(key).or_default();
        let scheduler = p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
        c.ours |= scheduler.is_some_and(|s| names.iter().any(|n| n == s));
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        match phase {
            Some("Succeeded") => c.succeeded += 1,
            Some("Failed") => c.failed += 1,
            Some("Running") => c.running += 1,
            _ => {}
        }
        let finished = matches!(phase, Some("Succeeded" | "Failed"));
        if !finished && p.metadata.deletion_timestamp.is_none() {
            c.present += 1;
        }
        let bound = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if bound {
            c.scheduled += 1;
        }
    }
    out
}

/// The scheduler-plugins phase of a gang of `min` members.
fn phase(min: u32, c: &Counts) -> &'static str {
    if c.succeeded >= min {
        "Finished"
    } else if c.failed > 0 && c.failed + c.running + c.succeeded >= min {
        "Failed"
    } else if c.running + c.succeeded >= min {
        "Running"
    } else if c.scheduled >= min {
        "Scheduled"
    } else if c.present >= min {
        "PreScheduling"
    } else {
        "Pending"
    }
}

/// The status writes that would make every gang object this scheduler
/// serves say what its pods show. `unschedulable` holds, per gang, why its
/// last decision could not place it; gangs without pods leave it.
pub fn gang_status_writes<'p>(
    gangs: &GangObjects,
    pods: impl IntoIterator<Item = &'p Arc<Pod>>,
    names: &[String],
    unschedulable: &mut HashMap<GangKey, String>,
    now: Timestamp,
) -> Vec<GangStatusWrite> {
    let counts = counts(pods, names);
    unschedulable.retain(|k, _| counts.get(k).is_some_and(|c| c.present > 0));
    let mut out = Vec::new();
    for g in &gangs.pod_groups {
        let (Some(ns), Some(name)) = (&g.metadata.namespace, &g.metadata.name) else {
            continue;
        };
        let key = GangKey {
            namespace: ns.clone(),
            gang: GangKind::PodGroup(name.clone()),
        };
        let Some(c) = counts.get(&key).filter(|c| c.ours) else {
            continue;
        };
        let status = PodGroupStatus {
            phase: Some(phase(g.spec.min_member.max(1), c).to_string()),
            scheduled: Some(c.scheduled),
            running: Some(c.running),
            succeeded: Some(c.succeeded),
            failed: Some(c.failed),
        };
        if g.status.as_ref() != Some(&status) {
            out.push(GangStatusWrite::SchedulerPlugins {
                namespace: ns.clone(),
                name: name.clone(),
                status,
            });
        }
    }
    for g in &gangs.upstream_groups {
        let (Some(ns), Some(name)) = (&g.metadata.namespace, &g.metadata.name) else {
            continue;
        };
        let key = GangKey {
            namespace: ns.clone(),
            gang: GangKind::SchedulingGroup(name.clone()),
        };
        let Some(c) = counts.get(&key).filter(|c| c.ours) else {
            continue;
        };
        let current = g
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == INITIALLY_SCHEDULED));
        // Terminal once true (the API's definition).
        if current.is_some_and(|c| c.status == "True") {
            continue;
        }
        let min = g
            .spec
            .scheduling_policy
            .gang
            .as_ref()
            .map_or(1, |p| p.min_count.max(1) as u32);
        let (status, reason, message) = if c.scheduled >= min {
            (
                "True",
                "Scheduled",
                format!("{} of {min} members bound", c.scheduled),
            )
        } else if let Some(why) = unschedulable.get(&key) {
            ("False", "Unschedulable", why.clone())
        } else {
            continue;
        };
        if current.is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
        {
            continue;
        }
        let since = match current {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Time(now),
        };
        out.push(GangStatusWrite::Upstream {
            namespace: ns.clone(),
            name: name.clone(),
            condition: Condition {
                type_: INITIALLY_SCHEDULED.into(),
                status: status.into(),
                reason: reason.into(),
                message,
                last_transition_time: since,
                observed_generation: g.metadata.generation,
            },
        });
    }
    out
}

/// Which kind of object a write is for, to key what was sent.
pub fn kind_of(w: &GangStatusWrite) -> &'static str {
    match w {
        GangStatusWrite::SchedulerPlugins { .. } => "scheduling.x-k8s.io",
        GangStatusWrite::Upstream { .. } => "scheduling.k8s.io",
    }
}

/// The watched object's resourceVersion for `w`'s target; `None` when gone.
pub fn resource_version(gangs: &GangObjects, w: &GangStatusWrite) -> Option<String> {
    let same = |m: &kube::api::ObjectMeta, ns: &str, n: &str| {
        m.namespace.as_deref() == Some(ns) && m.name.as_deref() == Some(n)
    };
    match w {
        GangStatusWrite::SchedulerPlugins {
            namespace, name, ..
        } => gangs
            .pod_groups
            .iter()
            .find(|g| same(&g.metadata, namespace, name))
            .and_then(|g| g.metadata.resource_version.clone()),
        GangStatusWrite::Upstream {
            namespace, name, ..
        } => gangs
            .upstream_groups
            .iter()
            .find(|g| same(&g.metadata, namespace, name))
            .and_then(|g| g.metadata.resource_version.clone()),
    }
}
