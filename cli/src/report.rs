//! `gputopo explain` output: one JSON document, or a decision line and a table.

use crate::cluster::NodeReport as ReportedByNode;
use gputopo_scheduler_core::explain::Explanation;
use gputopo_scheduler_core::schedule::Decision;
use serde::Serialize;

/// The JSON document `explain -o json` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainReport {
    pub pod: String,
    pub decision: DecisionReport,
    pub nodes: Vec<NodeReport>,
    /// What nodes report about held GPUs (their kubelet, read by the agent).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reported_by_nodes: Vec<ReportedByNode>,
    /// A gang member: its gang's decision over the members in the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang: Option<crate::gang_report::GangReport>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DecisionReport {
    Placed {
        node: String,
        gpus: Vec<u32>,
        #[serde(rename = "gpuUuids")]
        gpu_uuids: Vec<String>,
        bottleneck: Option<String>,
        score: u8,
        explanation: String,
    },
    Unschedulable {
        message: String,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub node: String,
    pub verdict: &'static str,
    pub score: Option<u8>,
    pub gpus: Vec<u32>,
    pub bottleneck: Option<String>,
    pub reason: String,
    /// A pod with ResourceClaims: the devices its claims would get there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceReport>,
}

/// One device of a claim, as its allocation would name it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceReport {
    /// `namespace/name`.
    pub claim: String,
    pub request: String,
    /// `driver/pool/device`.
    pub device: String,
    pub gpu: Option<u32>,
}

impl ExplainReport {
    pub fn new(e: &Explanation, reported_by_nodes: &[ReportedByNode]) -> ExplainReport {
        let decision = match &e.decision {
            Decision::Placed(p) => DecisionReport::Placed {
                node: p.node.clone(),
                gpus: p.gpus.clone(),
                gpu_uuids: p.gpu_uuids.clone(),
                bottleneck: p.bottleneck.map(|b| b.to_string()),
                score: p.score,
                explanation: p.explanation.clone(),
            },
            Decision::Unschedulable(u) => DecisionReport::Unschedulable {
                message: u.message.clone(),
            },
        };
        ExplainReport {
            pod: e.pod.clone(),
            decision,
            nodes: e
                .rows
                .iter()
                .map(|r| NodeReport {
                    node: r.node.clone(),
                    verdict: r.verdict.as_str(),
                    score: r.score,
                    gpus: r.gpus.clone(),
                    bottleneck: r.bottleneck.map(|b| b.to_string()),
                    reason: r.reason.clone(),
                    devices: r
                        .devices
                        .iter()
                        .map(|d| DeviceReport {
                            claim: d.claim.clone(),
                            request: d.request.clone(),
                            device: d.device.clone(),
                            gpu: d.gpu,
                        })
                        .collect(),
                })
                .collect(),
            reported_by_nodes: reported_by_nodes.to_vec(),
            gang: None,
        }
    }

    /// The decision line, then a table of every node.
    pub fn text(&self) -> String {
        let mut out = match &self.decision {
            DecisionReport::Placed {
                node,
                gpus,
                bottleneck,
                score,
                explanation,
                ..
            } => format!(
                "pod {}: placed on {node}, GPUs {} (bottleneck {}), score {score}\n  {explanation}\n\n",
                self.pod,
                list(gpus),
                bottleneck.as_deref().unwrap_or("-"),
            ),
            DecisionReport::Unschedulable { message } => {
                format!("pod {}: unschedulable: {message}\n\n", self.pod)
            }
        };
        let rows: Vec<[String; 6]> = self
            .nodes
            .iter()
            .map(|n| {
                [
                    n.node.clone(),
                    n.verdict.to_string(),
                    n.score.map_or_else(|| "-".into(), |s| s.to_string()),
                    if n.gpus.is_empty() {
                        "-".into()
                    } else {
                        list(&n.gpus)
                    },
                    n.bottleneck.clone().unwrap_or_else(|| "-".into()),
                    n.reason.clone(),
                ]
            })
            .collect();
        let header = ["NODE", "VERDICT", "SCORE", "GPUS", "BOTTLENECK", "REASON"].map(String::from);
        let mut widths = [0usize; 5];
        for row in std::iter::once(&header).chain(&rows) {
            for (w, cell) in widths.iter_mut().zip(row.iter()) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            for (i, cell) in row.iter().enumerate() {
                if i < 5 {
                    out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                } else {
                    out.push_str(cell);
                }
            }
            out.push('\n');
        }
        if let Some(gang) = &self.gang {
            out.push('\n');
            out.push_str(&gang.text());
        }
        if !self.reported_by_nodes.is_empty() {
            out.push_str("\nWhat nodes report (their kubelet, read by gputopo-agent):\n");
            for r in &self.reported_by_nodes {
                out.push_str(&r.text());
            }
        }
        out
    }
}

fn list(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
