//! What nodes report about held GPUs (the agent's reading of the kubelet's
//! PodResources API in each `GpuTopology` status), for `gputopo explain`:
//! the node's truth beside the scheduler's choice.

use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_scheduler_core::reported::{ReadingState, ReadingTrust, assignment_mismatches};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One node's report.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub node: String,
    /// When the agent read the kubelet.
    pub observed_at: String,
    /// Whether the scheduler believes it (`fresh`) or falls back to the
    /// pods' annotations (`stale`).
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_devices: Vec<String>,
    /// The GPUs someone holds.
    pub gpus: Vec<GpuHeld>,
    /// Pods the node reports on other GPUs than gputopo chose (fresh readings only).
    pub mismatches: Vec<String>,
}

/// Who holds one GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuHeld {
    pub gpu: u32,
    /// `namespace/pod/container (whole|mig|replica)`, or `namespace/pod`
    /// from agents that name no containers.
    pub holders: Vec<String>,
}

/// The reports of every node whose topology carries a reading, by node name.
pub fn node_reports<'a>(
    topologies: &BTreeMap<String, GpuTopology>,
    pods: impl IntoIterator<Item = &'a Pod>,
    trust: ReadingTrust,
) -> Vec<NodeReport> {
    let by_node: HashMap<&str, &GpuTopology> =
        topologies.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut mismatches: HashMap<String, Vec<String>> = HashMap::new();
    for m in assignment_mismatches(pods, &by_node, trust) {
        mismatches
            .entry(m.node.clone())
            .or_default()
            .push(format!("{}: {}", m.pod, m.message()));
    }
    topologies
        .iter()
        .filter_map(|(node, t)| {
            let status = t.status.as_ref()?;
            let reading = status.pod_resources.as_ref()?;
            let state = match trust.state(Some(status)) {
                ReadingState::Fresh { .. } => "fresh",
                _ => "stale",
            };
            let gpus = status
                .allocations
                .iter()
                .map(|a| GpuHeld {
                    gpu: a.gpu,
                    holders: if a.holders.is_empty() {
                        a.pods.clone()
                    } else {
                        a.holders
                            .iter()
                            .map(|h| format!("{}/{} ({})", h.pod, h.container, h.form.as_str()))
                            .collect()
                    },
                })
                .collect();
            Some(NodeReport {
                node: node.clone(),
                observed_at: reading.observed_at.0.to_string(),
                state,
                last_error: reading.last_error.clone(),
                unknown_devices: reading.unknown_devices.clone(),
                gpus,
                mismatches: mismatches.remove(node).unwrap_or_default(),
            })
        })
        .collect()
}

impl NodeReport {
    /// Lines for the text output.
    pub fn text(&self) -> String {
        let mut out = format!(
            "  {}: read {} ({})\n",
            self.node, self.observed_at, self.state
        );
        for g in &self.gpus {
            out.push_str(&format!("    GPU {}: {}\n", g.gpu, g.holders.join(", ")));
        }
        if self.gpus.is_empty() {
            out.push_str("    no GPU held\n");
        }
        if !self.unknown_devices.is_empty() {
            out.push_str(&format!(
                "    devices that are not this node's GPUs: {}\n",
                self.unknown_devices.join(", ")
            ));
        }
        if let Some(e) = &self.last_error {
            out.push_str(&format!("    last read failed: {e}\n"));
        }
        for m in &self.mismatches {
            out.push_str(&format!("    MISMATCH {m}\n"));
        }
        out
    }
}
