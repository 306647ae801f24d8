//! `kubectl gputopo nodes [NODE]`: each GPU node's wiring (its
//! `GpuTopology` summary: model, interconnect, the weakest pair, NVLink
//! islands, NICs and the GPUs nearest each), its network domains, and per
//! GPU who holds it twice over: as the scheduler counts it (the snapshot:
//! each bound pod's kept GPU record, or the node's report where the pod
//! has none) and as the node reports it (the agent's reading of the
//! kubelet, `status.allocations`).

use crate::table::render;
use crate::view::View;
use crate::{gpu_list, mask_gpus};
use gputopo_api::{GpuTopology, GpuTopologySpec, LinkClass, LinkType, keys};
use gputopo_scheduler::cluster::ReadingTrust;
use gputopo_scheduler_core::reported::ReadingState;
use gputopo_scheduler_core::snapshot::NodeRef;
use serde::Serialize;
use std::collections::BTreeMap;

/// No GPU node of that name.
#[derive(Debug, thiserror::Error)]
#[error("node {0} is not a GPU node (no GpuTopology and no GPUs allocatable), or does not exist")]
pub struct NoSuchNode(pub String);

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodesReport {
    pub nodes: Vec<NodeView>,
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub name: String,
    /// The product when every GPU is the same model (the `GpuTopology`'s,
    /// else the `nvidia.com/gpu.product` label).
    pub model: Option<String>,
    pub gpu_count: u32,
    /// `nvswitch`, `nvlink-mesh`, `nvlink-bridge`, `pcie`, `xgmi`; `None`
    /// without a `GpuTopology`.
    pub interconnect: Option<String>,
    /// The weakest connection between any two GPUs (`NV12`, `SYS`).
    pub p2p: Option<String>,
    /// GPUs joined by NVLink (or XGMI), each sorted.
    pub islands: Vec<Vec<u32>>,
    pub nics: Vec<NicView>,
    /// The node's network domain per tier, outermost first.
    pub domains: Vec<Domain>,
    /// GPUs neither held whole nor shared, as the scheduler counts them.
    pub free_gpus: Vec<u32>,
    /// Pods charged GPUs by count (neither their record nor the node
    /// names which): while any runs, which GPUs are free is not known.
    pub counted_holders: Vec<String>,
    /// The agent's reading of the kubelet: `fresh`, `stale` or `not reported`.
    pub reading: String,
    pub gpus: Vec<GpuView>,
}

/// A network domain: the tier's node label and its value on the node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Domain {
    pub tier: String,
    pub name: String,
}

/// `n`'s domains, outermost first (tiers whose label it lacks left out).
pub fn domains_of(view: &View, n: NodeRef<'_>) -> Vec<Domain> {
    view.snapshot
        .tiers()
        .keys()
        .iter()
        .zip(n.domain_names())
        .filter_map(|(tier, name)| {
            Some(Domain {
                tier: tier.clone(),
                name: name?.to_string(),
            })
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NicView {
    pub name: String,
    pub numa_node: Option<i32>,
    /// The GPUs behind the same PCIe switch (`PIX`, `PXB`).
    pub nearest_gpus: Vec<u32>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuView {
    pub index: u32,
    pub uuid: Option<String>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
    pub numa_node: Option<i32>,
    /// Pods holding it whole, as the scheduler counts them.
    pub held_by: Vec<String>,
    /// Pods sharing it (`gpu-share`), with their part: `ml/chat 250m`.
    pub shared_by: Vec<String>,
    /// Pods the node's kubelet says hold it (empty without a reading).
    pub reported_by_node: Vec<String>,
}

/// The report of every GPU node, or of `only`.
pub fn report(view: &View, only: Option<&str>) -> Result<NodesReport, NoSuchNode> {
    let trust = ReadingTrust {
        now: view.now,
        max_age: view
            .settings
            .settings
            .accounting
            .reported_allocations_max_age,
    };
    let mut nodes: Vec<NodeView> = view
        .snapshot
        .nodes()
        .filter(|n| only.is_none_or(|o| o == n.name()))
        .filter_map(|n| {
            let topology = view.cluster.topology(n.name()).map(AsRef::as_ref);
            (n.gpus() != 0 || topology.is_some()).then(|| node_view(view, n, topology, trust))
        })
        .collect();
    if let Some(name) = only
        && nodes.is_empty()
    {
        return Err(NoSuchNode(name.to_string()));
    }
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(NodesReport {
        nodes,
        warnings: view.warnings.clone(),
    })
}

fn node_view(
    view: &View,
    n: NodeRef<'_>,
    topology: Option<&GpuTopology>,
    trust: ReadingTrust,
) -> NodeView {
    let spec = topology.map(|t| &t.spec);
    let mut held: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut shared: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (_, pod) in n.pods() {
        for gpu in mask_gpus(pod.gpus & !pod.stand_in) {
            held.entry(gpu).or_default().push(pod.key());
        }
        if let Some(s) = pod.shared {
            shared
                .entry(s.gpu)
                .or_default()
                .push(format!("{} {}m", pod.key(), s.milli));
        }
    }
    let reported = reported_holders(topology);
    let gpus = mask_gpus(n.gpus())
        .into_iter()
        .map(|index| {
            let info = spec.and_then(|s| s.gpus.iter().find(|g| g.index == index));
            GpuView {
                index,
                uuid: n.gpu_uuid(index),
                memory_mib: n.gpu_memory_mib(index),
                numa_node: info.and_then(|g| g.numa_node),
                held_by: sorted(held.remove(&index)),
                shared_by: sorted(shared.remove(&index)),
                reported_by_node: sorted(reported.get(&index).cloned()),
            }
        })
        .collect();
    NodeView {
        name: n.name().to_string(),
        model: spec
            .and_then(|s| s.summary.product.clone())
            .or_else(|| n.label(keys::node::GPU_PRODUCT).map(str::to_string)),
        gpu_count: n.gpus().count_ones(),
        interconnect: spec.map(|s| s.summary.interconnect.as_str().to_string()),
        p2p: spec.and_then(|s| {
            s.summary
                .p2p_bottleneck
                .clone()
                .or_else(|| s.summary.p2p_level.clone())
        }),
        islands: spec.map(|s| s.islands.clone()).unwrap_or_default(),
        nics: spec.map(nics).unwrap_or_default(),
        domains: domains_of(view, n),
        free_gpus: mask_gpus(n.free_gpus()),
        counted_holders: view.snapshot.stand_in_holders(n.id()),
        reading: reading_text(trust.state(topology.and_then(|t| t.status.as_ref()))),
        gpus,
    }
}

fn sorted(v: Option<Vec<String>>) -> Vec<String> {
    let mut v = v.unwrap_or_default();
    v.sort();
    v
}

/// Per GPU, the pods the node's reading names.
fn reported_holders(topology: Option<&GpuTopology>) -> BTreeMap<u32, Vec<String>> {
    topology
        .and_then(|t| t.status.as_ref())
        .map(|s| {
            s.allocations
                .iter()
                .map(|a| (a.gpu, a.pods.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn nics(spec: &GpuTopologySpec) -> Vec<NicView> {
    spec.nics
        .iter()
        .map(|nic| NicView {
            name: nic.name.clone(),
            numa_node: nic.numa_node,
            nearest_gpus: nic
                .gpu_links
                .iter()
                .filter(|l| matches!(l.link_type, LinkType::Pix | LinkType::Pxb))
                .map(|l| l.gpu)
                .collect(),
        })
        .collect()
}

/// How far the node's reading of the kubelet is believed.
pub fn reading_text(state: ReadingState) -> String {
    match state {
        ReadingState::NotReported => "not reported".into(),
        ReadingState::Fresh { observed_at } => format!("fresh (read at {observed_at})"),
        ReadingState::Stale { observed_at, .. } => {
            format!("stale (read at {observed_at}): the pods' GPU records count instead")
        }
    }
}

/// The weakest link between any two of `gpus` on `spec`; `None` for fewer
/// than two GPUs or a pair the topology does not list.
pub fn weakest_link(spec: &GpuTopologySpec, gpus: &[u32]) -> Option<LinkClass> {
    let mut weakest: Option<LinkClass> = None;
    for (i, &a) in gpus.iter().enumerate() {
        for &b in &gpus[i + 1..] {
            let class = spec.link(a, b)?.class();
            weakest = Some(weakest.map_or(class, |w| w.min(class)));
        }
    }
    weakest
}

/// `0-3,5` for a sorted GPU list.
pub fn ranges(gpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < gpus.len() {
        let mut j = i;
        while j + 1 < gpus.len() && gpus[j + 1] == gpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", gpus[i], gpus[j])
        } else {
            gpus[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

fn or_dash(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or("-").to_string()
}

impl NodesReport {
    /// A table of the nodes, then each node's GPUs.
    pub fn text(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| {
                vec![
                    n.name.clone(),
                    or_dash(n.model.as_deref()),
                    n.gpu_count.to_string(),
                    gpu_list(&n.free_gpus),
                    or_dash(n.interconnect.as_deref()),
                    or_dash(n.p2p.as_deref()),
                    n.islands
                        .iter()
                        .map(|i| format!("[{}]", ranges(i)))
                        .collect(),
                    n.domains
                        .iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join("/"),
                ]
            })
            .collect();
        let mut out = render(
            &[
                "NODE",
                "MODEL",
                "GPUS",
                "FREE",
                "INTERCONNECT",
                "P2P",
                "ISLANDS",
                "DOMAINS",
            ],
            &rows,
        );
        for n in &self.nodes {
            out.push_str(&n.text());
        }
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }
}

impl NodeView {
    fn text(&self) -> String {
        let mut out = format!("\nnode {}: kubelet reading {}\n", self.name, self.reading);
        for d in &self.domains {
            out.push_str(&format!("  {}={}\n", d.tier, d.name));
        }
        // NICs grouped by the GPUs they sit beside: what a gang's ranks use.
        let mut by_gpus: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for nic in &self.nics {
            by_gpus
                .entry(gpu_list(&nic.nearest_gpus))
                .or_default()
                .push(&nic.name);
        }
        for (gpus, names) in by_gpus {
            let near = match gpus.as_str() {
                "-" => "beside no GPU".to_string(),
                _ => format!("beside GPUs {gpus}"),
            };
            out.push_str(&format!("  NICs {near}: {}\n", names.join(", ")));
        }
        if !self.counted_holders.is_empty() {
            out.push_str(&format!(
                "  charged by count (which GPUs unknown): {}\n",
                self.counted_holders.join(", ")
            ));
        }
        let rows: Vec<Vec<String>> = self
            .gpus
            .iter()
            .map(|g| {
                let mut held = g.held_by.clone();
                held.extend(g.shared_by.iter().cloned());
                vec![
                    g.index.to_string(),
                    or_dash(g.uuid.as_deref()),
                    g.memory_mib.map_or_else(|| "-".into(), |m| m.to_string()),
                    g.numa_node.map_or_else(|| "-".into(), |n| n.to_string()),
                    or_dash(Some(&held.join(", "))),
                    or_dash(Some(&g.reported_by_node.join(", "))),
                ]
            })
            .collect();
        let table = render(
            &[
                "GPU",
                "UUID",
                "MEMORY(MiB)",
                "NUMA",
                "HELD BY (SCHEDULER)",
                "REPORTED BY NODE",
            ],
            &rows,
        );
        for line in table.lines() {
            out.push_str(&format!("  {line}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_join_runs() {
        assert_eq!(ranges(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn the_weakest_pair_is_the_bottleneck() {
        let mut spec: GpuTopologySpec = serde_json::from_value(serde_json::json!({
            "nodeName": "n", "source": "fixture", "driverVersion": null,
            "gpus": [], "links": [], "nics": [], "islands": [],
            "summary": {"gpuCount": 3, "product": null, "p2pLevel": null,
                "allToAllNvlink": false, "largestIsland": 1, "numaNodes": null,
                "interconnect": "pcie"}
        }))
        .expect("a spec");
        spec.links = vec![
            gputopo_api::GpuLink::new(0, 1, LinkType::Nv, 12),
            gputopo_api::GpuLink::new(0, 2, LinkType::Sys, 0),
            gputopo_api::GpuLink::new(1, 2, LinkType::Pix, 0),
        ];
        assert_eq!(weakest_link(&spec, &[0, 1]), Some(LinkClass::Nv(12)));
        assert_eq!(weakest_link(&spec, &[0, 1, 2]), Some(LinkClass::Sys));
        assert_eq!(weakest_link(&spec, &[1]), None);
    }
}
