//! `kubectl gputopo gangs [-n NS | -A]`: each gang the scheduler's pods
//! form (a PodGroup of either API, the `gputopo.dev/gang` annotation, a
//! JobSet, a LeaderWorkerSet group; identified as the scheduler's gang
//! assembly identifies them), with its members, how many are bound,
//! pending and gated against the size its object gives, the nodes and
//! network domains its bound members use, its state, and the scheduler's
//! word now on its pending members (the dry-run cycle's).

use crate::explain::decision_view;
use crate::nodes::{Domain, domains_of};
use crate::table::render;
use crate::view::View;
use crate::{Scope, pod_key};
use gputopo_api::{GangRef, GpuRequest};
use gputopo_scheduler::cluster::{is_gated, is_pending_for, is_unbound_for};
use gputopo_scheduler::cycle::gang::{GangKey, GangKind};
use gputopo_scheduler::gangs::GangSize;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangsReport {
    pub gangs: Vec<GangView>,
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangView {
    /// As the scheduler names it: `gang ml/pair`, `PodGroup ml/llm`.
    pub gang: String,
    pub namespace: String,
    /// `PodGroup`, `PodGroup.scheduling.k8s.io`, `annotation`, `JobSet`,
    /// `LeaderWorkerSet`.
    pub kind: String,
    /// Members it needs, as its object (or annotation) says.
    pub size: Option<u32>,
    /// Why the size is not known, or why its pods go one by one.
    pub size_note: Option<String>,
    pub members: Vec<Member>,
    pub bound: u32,
    pub pending: u32,
    /// Held by scheduling gates: they do not count until ungated.
    pub gated: u32,
    /// The nodes its bound members are on.
    pub nodes: Vec<String>,
    /// The network domains of those nodes, outermost tier first.
    pub domains: Vec<Domain>,
    /// `placed` (every member bound, enough of them), `partial` (some
    /// bound, some not), `waiting` (none bound).
    pub state: String,
    /// The scheduler's word now on a pending member (the same for all).
    pub verdict: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// `namespace/name`.
    pub pod: String,
    pub node: Option<String>,
    /// `bound`, `pending` or `gated`.
    pub state: String,
}

/// Every gang of the scheduler's pods in `scope`, by name.
pub fn report(view: &View, scope: &Scope) -> GangsReport {
    let names = view.names();
    let mut gangs: BTreeMap<GangKey, (GangRef, Vec<Member>)> = BTreeMap::new();
    for pod in &view.cluster.pods {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        if !scope.includes(namespace) {
            continue;
        }
        let Some((gang, member)) = member(pod, &names) else {
            continue;
        };
        let key = GangKey::of(namespace, &gang);
        gangs
            .entry(key)
            .or_insert_with(|| (gang, Vec::new()))
            .1
            .push(member);
    }
    GangsReport {
        gangs: gangs
            .into_iter()
            .map(|(key, (gang, members))| gang_view(view, &names, key, &gang, members))
            .collect(),
        warnings: view.warnings.clone(),
    }
}

/// The gang `pod` is a counted member of, if any: a pod of the scheduler
/// bound and running, pending, or gated.
fn member(pod: &Arc<Pod>, names: &[String]) -> Option<(GangRef, Member)> {
    let spec = pod.spec.as_ref()?;
    if !spec
        .scheduler_name
        .as_deref()
        .is_some_and(|n| names.iter().any(|m| m == n))
    {
        return None;
    }
    let gang = GpuRequest::from_pod(pod).ok()?.gang?;
    let node = spec.node_name.clone().filter(|n| !n.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let finished = matches!(phase, Some("Succeeded" | "Failed"));
    let state = if node.is_some() && !finished && pod.metadata.deletion_timestamp.is_none() {
        "bound"
    } else if is_pending_for(pod, names) {
        "pending"
    } else if is_gated(pod) && is_unbound_for(pod, names) {
        "gated"
    } else {
        return None;
    };
    Some((
        gang,
        Member {
            pod: pod_key(pod),
            node,
            state: state.into(),
        },
    ))
}

fn gang_view(
    view: &View,
    names: &[String],
    key: GangKey,
    gang: &GangRef,
    mut members: Vec<Member>,
) -> GangView {
    members.sort_by(|a, b| a.pod.cmp(&b.pod));
    let count = |state: &str| members.iter().filter(|m| m.state == state).count() as u32;
    let (bound, pending, gated) = (count("bound"), count("pending"), count("gated"));
    let (size, size_note) = match view.cluster.gangs.size(&key.namespace, gang, names) {
        Ok(GangSize::Gang { size, .. }) => (Some(size), None),
        Ok(GangSize::Independent(why)) => (None, Some(format!("placed one by one: {why}"))),
        Err(e) => (None, Some(e.to_string())),
    };
    let nodes: BTreeSet<String> = members
        .iter()
        .filter(|m| m.state == "bound")
        .filter_map(|m| m.node.clone())
        .collect();
    let state = if pending == 0 && gated == 0 && bound > 0 && size.is_none_or(|s| bound >= s) {
        "placed"
    } else if bound > 0 {
        "partial"
    } else {
        "waiting"
    };
    let verdict = members
        .iter()
        .filter(|m| m.state == "pending")
        .find_map(|m| view.verdicts.outcomes.get(&m.pod))
        .map(|o| decision_view(o).message);
    GangView {
        gang: key.to_string(),
        kind: kind(&key.gang).into(),
        namespace: key.namespace.clone(),
        size,
        size_note,
        bound,
        pending,
        gated,
        domains: domains(view, &nodes),
        nodes: nodes.into_iter().collect(),
        members,
        state: state.into(),
        verdict,
    }
}

fn kind(gang: &GangKind) -> &'static str {
    match gang {
        GangKind::PodGroup(_) => "PodGroup",
        GangKind::Annotation(_) => "annotation",
        GangKind::SchedulingGroup(_) => "PodGroup.scheduling.k8s.io",
        GangKind::JobSet(_) => "JobSet",
        GangKind::LeaderWorkerSet(..) => "LeaderWorkerSet",
    }
}

/// The distinct domains of `nodes`, outermost tier first, by name within one.
fn domains(view: &View, nodes: &BTreeSet<String>) -> Vec<Domain> {
    let tiers = view.snapshot.tiers().keys();
    let mut found: BTreeSet<(usize, Domain)> = BTreeSet::new();
    for name in nodes {
        let Some(id) = view.snapshot.node_id(name) else {
            continue;
        };
        for d in domains_of(view, view.snapshot.node(id)) {
            let tier = tiers
                .iter()
                .position(|t| *t == d.tier)
                .unwrap_or(usize::MAX);
            found.insert((tier, d));
        }
    }
    found.into_iter().map(|(_, d)| d).collect()
}

impl GangsReport {
    pub fn text(&self) -> String {
        if self.gangs.is_empty() {
            return "no gang\n".into();
        }
        let rows: Vec<Vec<String>> = self
            .gangs
            .iter()
            .map(|g| {
                vec![
                    g.gang.clone(),
                    g.state.clone(),
                    g.size.map_or_else(|| "-".into(), |s| s.to_string()),
                    format!("{}/{}/{}", g.bound, g.pending, g.gated),
                    if g.nodes.is_empty() {
                        "-".into()
                    } else {
                        g.nodes.join(",")
                    },
                    if g.domains.is_empty() {
                        "-".into()
                    } else {
                        g.domains
                            .iter()
                            .map(|d| d.name.as_str())
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                    g.verdict
                        .clone()
                        .or_else(|| g.size_note.clone())
                        .unwrap_or_default(),
                ]
            })
            .collect();
        let mut out = render(
            &[
                "GANG",
                "STATE",
                "SIZE",
                "BOUND/PENDING/GATED",
                "NODES",
                "DOMAINS",
                "SCHEDULER",
            ],
            &rows,
        );
        for g in &self.gangs {
            out.push_str(&format!("\n{}:\n", g.gang));
            for m in &g.members {
                out.push_str(&format!(
                    "  {}  {}  {}\n",
                    m.pod,
                    m.state,
                    m.node.as_deref().unwrap_or("-")
                ));
            }
        }
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }
}
