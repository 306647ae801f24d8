//! `kubectl gputopo explain POD`: for a bound pod, where it is and which
//! GPUs it holds, three ways (the scheduler's kept record, the snapshot's
//! count, the node's report) with its bottleneck; for a pending pod, the
//! scheduler's decision now (the dry-run cycle's outcome: where it would
//! go, or the `FailedScheduling` message it would emit) and every node's
//! verdict for the pod alone (scheduler-core's `explain_pod`). The pod's
//! recorded scheduling events are added by the caller (`events.rs`).

use crate::events::PodEvent;
use crate::nodes::{reading_text, weakest_link};
use crate::table::render;
use crate::view::View;
use crate::{gpu_list, mask_gpus, pod_key};
use gputopo_api::keys::pod as pod_keys;
use gputopo_scheduler::BOTTLENECK_ANNOTATION;
use gputopo_scheduler::annotations::bottleneck_text;
use gputopo_scheduler::assignment_record::{AssignmentRecord, CONDITION_TYPE, RecordKeeper};
use gputopo_scheduler::claims::uses_claims;
use gputopo_scheduler::cluster::{ReadingTrust, is_gated, is_unbound_for};
use gputopo_scheduler::cycle::Outcome;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{ClaimError, DraPod, hold_snapshot};
use gputopo_scheduler_core::dra_schedule::explain_claims;
use gputopo_scheduler_core::explain::{ExplainRow, Explanation, explain_pod};
use gputopo_scheduler_core::pod::PendingPod;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

/// A claim pod whose claims cannot be read (missing, or asking what
/// gputopo does not allocate): its nodes are not judged.
#[derive(Debug, thiserror::Error)]
#[error("its claims cannot be judged: {0}")]
pub struct ClaimsNotJudged(#[source] pub ClaimError);

/// No such pod.
#[derive(Debug, thiserror::Error)]
#[error("pod {0} not found")]
pub struct NoSuchPod(pub String);

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainReport {
    /// `namespace/name`.
    pub pod: String,
    pub scheduler_name: String,
    /// Whether `schedulerName` is one the scheduler serves.
    pub gputopo_schedules_it: bool,
    pub phase: Option<String>,
    pub bound: Option<BoundView>,
    pub pending: Option<PendingView>,
    /// Its scheduling events in the API, oldest first.
    pub events: Vec<PodEvent>,
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundView {
    pub node: String,
    /// The GPUs it holds whole, as the scheduler counts them.
    pub gpus: Vec<u32>,
    pub gpu_uuids: Vec<String>,
    /// GPUs charged by count: neither its record nor the node names which.
    pub counted_gpus: u32,
    /// A `gpu-share` pod's GPU and part (thousandths).
    pub shared: Option<(u32, u32)>,
    /// Its GPU record as the scheduler keeps it.
    pub record: RecordView,
    /// The GPUs the node's kubelet says it holds (`None`: no reading).
    pub reported_by_node: Option<Vec<u32>>,
    pub node_reading: String,
    /// The weakest link among its GPUs on the node's topology now.
    pub weakest_link: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordView {
    /// `status condition gputopo.dev/gpu-assignment`, `annotations` or `none`.
    pub source: String,
    pub assigned_gpus: Option<String>,
    pub assigned_gpu_uuids: Option<String>,
    pub bottleneck: Option<String>,
    /// Edits after binding that are not believed, and why.
    pub findings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingView {
    /// Scheduling gates holding it (it is not considered until lifted).
    pub gates: Vec<String>,
    pub decision: DecisionView,
    /// The node it would wait on while its victims leave.
    pub nominated_node: Option<String>,
    /// Every node's verdict for this pod alone, chosen first.
    pub nodes: Vec<NodeRow>,
    /// Why `nodes` is empty for a pod with ResourceClaims.
    pub nodes_note: Option<String>,
}

/// The scheduler's decision now.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionView {
    /// `scheduled` (it would be bound now), `unschedulable`, `preempting`,
    /// `waiting`, `timeout`, `invalid`, `error`; `not-tried` when the
    /// scheduler would not consider it.
    pub result: String,
    pub node: Option<String>,
    pub gpus: Vec<u32>,
    pub bottleneck: Option<String>,
    /// The `FailedScheduling` message, or what the `Scheduled` event would say.
    pub message: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub node: String,
    pub verdict: String,
    pub score: Option<u8>,
    pub gpus: Vec<u32>,
    pub bottleneck: Option<String>,
    pub reason: String,
}

/// The report of pod `namespace/name` (events left empty).
pub fn report(view: &View, namespace: &str, name: &str) -> Result<ExplainReport, NoSuchPod> {
    let pod = view
        .cluster
        .pod(namespace, name)
        .ok_or_else(|| NoSuchPod(format!("{namespace}/{name}")))?;
    let spec = pod.spec.as_ref();
    let scheduler_name = spec
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_else(|| "default-scheduler".into());
    let node = spec
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let names = view.names();
    Ok(ExplainReport {
        pod: pod_key(pod),
        gputopo_schedules_it: names.contains(&scheduler_name),
        phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
        bound: node.as_ref().map(|n| bound_view(view, pod, n)),
        pending: node
            .is_none()
            .then(|| pending_view(view, pod, &scheduler_name, &names)),
        scheduler_name,
        events: Vec::new(),
        warnings: view.warnings.clone(),
    })
}

fn bound_view(view: &View, pod: &std::sync::Arc<Pod>, node: &str) -> BoundView {
    let key = pod_key(pod);
    let (namespace, name) = key.split_once('/').unwrap_or_default();
    let held = view
        .snapshot
        .pod_id(namespace, name)
        .and_then(|id| view.snapshot.pod(id));
    let gpus = held.map_or_else(Vec::new, |p| mask_gpus(p.gpus & !p.stand_in));
    let node_ref = view.snapshot.node_id(node).map(|id| view.snapshot.node(id));
    let topology = view.cluster.topology(node);
    let status = topology.and_then(|t| t.status.as_ref());
    let trust = ReadingTrust {
        now: view.now,
        max_age: view
            .settings
            .settings
            .accounting
            .reported_allocations_max_age,
    };
    BoundView {
        node: node.to_string(),
        gpu_uuids: node_ref.map(|n| n.gpu_uuids(&gpus)).unwrap_or_default(),
        counted_gpus: held.map_or(0, |p| p.stand_in.count_ones()),
        shared: held.and_then(|p| p.shared).map(|s| (s.gpu, s.milli)),
        record: record_view(&key, pod),
        reported_by_node: status.filter(|s| s.pod_resources.is_some()).map(|s| {
            s.allocations
                .iter()
                .filter(|a| a.pods.contains(&key))
                .map(|a| a.gpu)
                .collect()
        }),
        node_reading: reading_text(trust.state(status)),
        weakest_link: topology
            .and_then(|t| weakest_link(&t.spec, &gpus))
            .map(|l| l.to_string()),
        gpus,
    }
}

/// The record the scheduler keeps for `pod` (read as its cycle reads it).
fn record_view(key: &str, pod: &std::sync::Arc<Pod>) -> RecordView {
    let observed = RecordKeeper::default().observe(key, pod);
    let kept = AssignmentRecord::from_annotations(&observed.pod);
    let annotation = |k: &str| {
        observed
            .pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k).cloned())
    };
    let source = match AssignmentRecord::from_status(pod) {
        Some(Ok(r)) if !r.is_empty() => format!("status condition {CONDITION_TYPE}"),
        _ if !kept.is_empty() => "annotations".into(),
        _ => "none".into(),
    };
    RecordView {
        source,
        assigned_gpus: annotation(pod_keys::ASSIGNED_GPUS),
        assigned_gpu_uuids: annotation(pod_keys::ASSIGNED_GPU_UUIDS),
        bottleneck: annotation(BOTTLENECK_ANNOTATION),
        findings: observed.findings.iter().map(|f| f.message()).collect(),
    }
}

fn pending_view(
    view: &View,
    pod: &std::sync::Arc<Pod>,
    scheduler_name: &str,
    names: &[String],
) -> PendingView {
    let key = pod_key(pod);
    let gates: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map(|g| g.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default();
    let decision = match view.verdicts.outcomes.get(&key) {
        Some(outcome) => decision_view(outcome),
        None => not_tried(view, pod, scheduler_name, names),
    };
    let (core, _) = view.settings.settings.profile_for(scheduler_name);
    let (nodes, nodes_note) = match explanation(view, pod, core) {
        Ok(e) => (e.rows.iter().map(node_row).collect(), None),
        Err(note) => (Vec::new(), Some(note.to_string())),
    };
    PendingView {
        gates,
        decision,
        nominated_node: view.verdicts.nominations.get(&key).cloned(),
        nodes,
        nodes_note,
    }
}

fn node_row(r: &ExplainRow) -> NodeRow {
    NodeRow {
        node: r.node.clone(),
        verdict: r.verdict.as_str().to_string(),
        score: r.score,
        gpus: r.gpus.clone(),
        bottleneck: r.bottleneck.map(|b| b.to_string()),
        reason: r.reason.clone(),
    }
}

/// Every node's verdict for `pod` alone: with its claims' devices where
/// its GPUs come through ResourceClaims (as `gputopo explain` judges
/// them); `Err` says why a claim pod's nodes cannot be judged.
fn explanation(
    view: &View,
    pod: &Pod,
    core: &SchedulerConfig,
) -> Result<Explanation, ClaimsNotJudged> {
    let dra = &view.cluster.dra;
    let pending = match PendingPod::from_k8s(pod) {
        Ok(p) if uses_claims(pod) => p,
        _ => return Ok(explain_pod(&view.snapshot, pod, core)),
    };
    let claims = DraPod::from_pod(
        pod,
        |namespace, name| {
            dra.claims
                .iter()
                .find(|c| {
                    c.metadata.namespace.as_deref() == Some(namespace)
                        && c.metadata.name.as_deref() == Some(name)
                })
                .map(AsRef::as_ref)
        },
        dra.classes.iter().map(AsRef::as_ref),
    )
    .map_err(ClaimsNotJudged)?;
    let mut inventory = dra.inventory(&view.settings.settings.dra, &view.cluster.topologies);
    hold_snapshot(&mut inventory, &view.snapshot);
    Ok(explain_claims(
        &view.snapshot,
        &inventory,
        &claims,
        &pending,
        core,
    ))
}

/// The decision an outcome of the dry-run cycle stands for.
pub fn decision_view(outcome: &Outcome) -> DecisionView {
    match outcome {
        Outcome::Scheduled(p) => DecisionView {
            result: outcome.metric_label().into(),
            node: Some(p.node.clone()),
            gpus: p.gpus.clone(),
            bottleneck: Some(bottleneck_text(p)),
            message: format!(
                "would be bound to {} with GPUs {} (bottleneck {}, score {}): {}",
                p.node,
                gpu_list(&p.gpus),
                bottleneck_text(p),
                p.score,
                p.explanation
            ),
        },
        other => DecisionView {
            result: other.metric_label().into(),
            node: None,
            gpus: Vec::new(),
            bottleneck: None,
            message: other.message().unwrap_or_default(),
        },
    }
}

/// Why the cycle did not try a pending pod.
fn not_tried(view: &View, pod: &Pod, scheduler_name: &str, names: &[String]) -> DecisionView {
    let message = if !names.iter().any(|n| n == scheduler_name) {
        format!(
            "not gputopo's: spec.schedulerName {scheduler_name} is none of {} (the scheduler's names, from {})",
            names.join(", "),
            view.settings.from
        )
    } else if !is_unbound_for(pod, names) {
        "finished or being deleted: nothing to place".into()
    } else if is_gated(pod) {
        "held by scheduling gates: not considered until they are lifted".into()
    } else if let Some(e) = &view.verdicts.error {
        e.clone()
    } else {
        "not decided in this cycle (a gang waiting on a member's binding): ask again".into()
    };
    DecisionView {
        result: "not-tried".into(),
        node: None,
        gpus: Vec::new(),
        bottleneck: None,
        message,
    }
}

impl ExplainReport {
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(b) = &self.bound {
            out.push_str(&b.text(self));
        }
        if let Some(p) = &self.pending {
            out.push_str(&p.text(self));
        }
        out.push_str(&events_text(&self.events));
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }
}

impl BoundView {
    fn text(&self, r: &ExplainReport) -> String {
        let mut out = format!(
            "pod {}: bound to node {} (phase {}; schedulerName {})\n",
            r.pod,
            self.node,
            r.phase.as_deref().unwrap_or("-"),
            r.scheduler_name
        );
        out.push_str(&format!("  GPUs {}", gpu_list(&self.gpus)));
        if self.counted_gpus > 0 {
            out.push_str(&format!(
                " and {} counted (which not known)",
                self.counted_gpus
            ));
        }
        if let Some((gpu, milli)) = self.shared {
            out.push_str(&format!("; shares GPU {gpu} ({milli}m)"));
        }
        out.push('\n');
        if !self.gpu_uuids.is_empty() {
            out.push_str(&format!("  UUIDs {}\n", self.gpu_uuids.join(",")));
        }
        out.push_str(&format!(
            "  record ({}): assigned-gpus {}, bottleneck {}\n",
            self.record.source,
            self.record.assigned_gpus.as_deref().unwrap_or("-"),
            self.record.bottleneck.as_deref().unwrap_or("-"),
        ));
        for f in &self.record.findings {
            out.push_str(&format!("  record not believed: {f}\n"));
        }
        out.push_str(&format!(
            "  weakest link among them on the node's topology: {}\n",
            self.weakest_link.as_deref().unwrap_or("-")
        ));
        let reported = self
            .reported_by_node
            .as_ref()
            .map_or_else(|| "-".to_string(), |g| gpu_list(g));
        out.push_str(&format!(
            "  the node reports GPUs {reported} (kubelet reading {})\n",
            self.node_reading
        ));
        out
    }
}

impl PendingView {
    fn text(&self, r: &ExplainReport) -> String {
        let mut out = format!(
            "pod {}: pending (schedulerName {})\n",
            r.pod, r.scheduler_name
        );
        if !self.gates.is_empty() {
            out.push_str(&format!("  scheduling gates: {}\n", self.gates.join(", ")));
        }
        out.push_str(&format!(
            "  the scheduler now: {}: {}\n",
            self.decision.result, self.decision.message
        ));
        if let Some(n) = &self.nominated_node {
            out.push_str(&format!(
                "  it would wait on node {n} while its victims leave\n"
            ));
        }
        if let Some(note) = &self.nodes_note {
            out.push_str(&format!("  nodes not judged: {note}\n"));
        }
        if !self.nodes.is_empty() {
            out.push_str("\nEvery node, judged for this pod alone on the cluster as it is:\n");
            let rows: Vec<Vec<String>> = self
                .nodes
                .iter()
                .map(|n| {
                    vec![
                        n.node.clone(),
                        n.verdict.clone(),
                        n.score.map_or_else(|| "-".into(), |s| s.to_string()),
                        gpu_list(&n.gpus),
                        n.bottleneck.clone().unwrap_or_else(|| "-".into()),
                        n.reason.clone(),
                    ]
                })
                .collect();
            out.push_str(&render(
                &["NODE", "VERDICT", "SCORE", "GPUS", "BOTTLENECK", "REASON"],
                &rows,
            ));
        }
        out
    }
}

fn events_text(events: &[PodEvent]) -> String {
    if events.is_empty() {
        return "\nEvents: none about its scheduling\n".into();
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.last_seen.map_or_else(|| "-".into(), |t| t.to_string()),
                e.reason.clone(),
                e.count.to_string(),
                e.reporter.clone().unwrap_or_else(|| "-".into()),
                e.message.clone(),
            ]
        })
        .collect();
    format!(
        "\nEvents:\n{}",
        render(&["LAST SEEN", "REASON", "COUNT", "FROM", "MESSAGE"], &rows)
    )
}
