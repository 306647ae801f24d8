//! `kubectl gputopo why-pending [-n NS | -A]`: every unbound pod of the
//! scheduler's names, one line each with the scheduler's reason now (the
//! dry-run cycle's outcome and message), grouped by outcome.

use crate::explain::{DecisionView, decision_view};
use crate::table::render;
use crate::view::View;
use crate::{Scope, pod_key};
use gputopo_scheduler::cluster::{is_gated, is_unbound_for};
use serde::Serialize;
use std::collections::BTreeMap;

/// The groups, in the order printed: what needs a person first.
const GROUPS: [(&str, &str); 8] = [
    ("invalid", "cannot be read: fix the pod"),
    ("unschedulable", "fit nowhere now"),
    ("timeout", "gangs past their schedule timeout"),
    ("error", "failed writes"),
    ("preempting", "waiting for lower-priority pods to leave"),
    (
        "waiting",
        "waiting for their gang's members or their devices",
    ),
    (
        "scheduled",
        "would be bound now (the scheduler has not yet: is it running?)",
    ),
    (
        "not-tried",
        "not considered (scheduling gates, or not decided this cycle)",
    ),
];

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingReport {
    pub groups: Vec<Group>,
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    /// The outcome (`unschedulable`, `waiting`, ...).
    pub result: String,
    pub title: String,
    pub pods: Vec<PendingLine>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingLine {
    /// `namespace/name`.
    pub pod: String,
    pub scheduler_name: String,
    /// Where it would go now, for `scheduled`.
    pub node: Option<String>,
    pub message: String,
}

/// Every unbound pod of the scheduler's names in `scope`.
pub fn report(view: &View, scope: &Scope) -> PendingReport {
    let names = view.names();
    let mut by_result: BTreeMap<String, Vec<PendingLine>> = BTreeMap::new();
    for pod in &view.cluster.pods {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        if !scope.includes(namespace) || !is_unbound_for(pod, &names) {
            continue;
        }
        let key = pod_key(pod);
        let decision = match view.verdicts.outcomes.get(&key) {
            Some(outcome) => decision_view(outcome),
            None => DecisionView {
                result: "not-tried".into(),
                node: None,
                gpus: Vec::new(),
                bottleneck: None,
                message: if is_gated(pod) {
                    "held by scheduling gates".into()
                } else {
                    view.verdicts
                        .error
                        .clone()
                        .unwrap_or_else(|| "not decided in this cycle".into())
                },
            },
        };
        by_result
            .entry(decision.result)
            .or_default()
            .push(PendingLine {
                pod: key,
                scheduler_name: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduler_name.clone())
                    .unwrap_or_default(),
                node: decision.node,
                message: decision.message,
            });
    }
    let groups = GROUPS
        .iter()
        .filter_map(|(result, title)| {
            let mut pods = by_result.remove(*result)?;
            pods.sort_by(|a, b| a.pod.cmp(&b.pod));
            Some(Group {
                result: result.to_string(),
                title: title.to_string(),
                pods,
            })
        })
        .collect();
    PendingReport {
        groups,
        warnings: view.warnings.clone(),
    }
}

impl PendingReport {
    /// The pending pod `key`'s line, wherever it is grouped.
    pub fn line(&self, key: &str) -> Option<(&Group, &PendingLine)> {
        self.groups
            .iter()
            .find_map(|g| g.pods.iter().find(|p| p.pod == key).map(|p| (g, p)))
    }

    pub fn text(&self) -> String {
        if self.groups.is_empty() {
            return "no pod is pending for gputopo\n".into();
        }
        let mut out = String::new();
        for g in &self.groups {
            out.push_str(&format!(
                "{} ({}): {}\n",
                g.result.to_uppercase(),
                g.title,
                g.pods.len()
            ));
            let rows: Vec<Vec<String>> = g
                .pods
                .iter()
                .map(|p| vec![p.pod.clone(), p.message.clone()])
                .collect();
            out.push_str(&render(&["POD", "REASON"], &rows));
            out.push('\n');
        }
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }
}
