//! What a drawing of one node shows, before any geometry: the GPUs in ring
//! order grouped by NUMA node, the fabric links between pairs (NVLink,
//! XGMI), hubs where every pair of a group is joined alike (NVSwitch), the
//! PCIe switches and host bridges the link classes reveal, the NICs, and
//! who holds each GPU.

use super::pcie::{Pcie, PcieTree};
use gputopo_api::{GpuLink, GpuTopologySpec, GpuTopologyStatus, Interconnect, LinkClass};
use std::collections::BTreeMap;

/// Who holds each GPU: `namespace/name` of each pod (a share or a MIG
/// instance noted after the name), by GPU index. Absent: the allocation is
/// not known (a fixture alone); present and empty: nothing is held.
pub type Holders = BTreeMap<u32, Vec<String>>;

/// A fabric link between two GPUs, as drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fabric {
    /// `k` bonded NVLinks, directly or through NVSwitch.
    Nv(u32),
    /// A direct XGMI link.
    Xgmi,
    /// XGMI routed through other GPUs, with the hops the driver counts.
    XgmiRouted(Option<u32>),
}

impl Fabric {
    /// The fabric of a link; `None` for every PCIe class.
    pub fn of(link: &GpuLink) -> Option<Fabric> {
        match link.class() {
            LinkClass::Nv(k) => Some(Fabric::Nv(k)),
            LinkClass::Xgmi => Some(Fabric::Xgmi),
            LinkClass::XgmiRouted => Some(Fabric::XgmiRouted(link.hops)),
            _ => None,
        }
    }

    /// The edge's label: `NV12`, `XGMI`, `XGMI 2 hops`.
    pub fn label(self) -> String {
        match self {
            Fabric::Nv(k) => format!("NV{k}"),
            Fabric::Xgmi => "XGMI".into(),
            Fabric::XgmiRouted(Some(h)) => format!("XGMI {h} hops"),
            Fabric::XgmiRouted(None) => "XGMI routed".into(),
        }
    }
}

/// One GPU's box.
#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub index: u32,
    /// The product, shortened (`H100 80GB HBM3`); `None` when unknown.
    pub product: Option<String>,
    pub memory_mib: Option<u64>,
    pub mig: bool,
    pub holders: Vec<String>,
    /// The colour of its first holder: an index into [`Picture::pods`].
    pub pod: Option<usize>,
}

/// GPUs that share a NUMA node (or, where no NUMA node is known, a CPU
/// affinity), in ring order.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub label: String,
    pub gpus: Vec<u32>,
}

/// A fabric link drawn as an edge between two GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair {
    pub a: u32,
    pub b: u32,
    pub fabric: Fabric,
}

/// GPUs every pair of which is joined alike, drawn as spokes to one hub
/// instead of a pair edge each: an NVSwitch, or a full XGMI mesh.
#[derive(Clone, Debug, PartialEq)]
pub struct Hub {
    pub label: String,
    /// Each GPU and its link to the hub (the count it reaches every peer with).
    pub spokes: Vec<(u32, Fabric)>,
}

impl Hub {
    /// The one fabric of every spoke, when they agree.
    pub fn uniform(&self) -> Option<Fabric> {
        let first = self.spokes.first()?.1;
        self.spokes.iter().all(|s| s.1 == first).then_some(first)
    }
}

/// What a node's picture shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    pub title: String,
    pub subtitle: String,
    /// By GPU index.
    pub gpus: Vec<Gpu>,
    /// In ring order; every GPU in exactly one.
    pub groups: Vec<Group>,
    pub pairs: Vec<Pair>,
    pub hubs: Vec<Hub>,
    pub pcie: PcieTree,
    /// The pods holding GPUs, in colour order, with their GPUs.
    pub pods: Vec<(String, Vec<u32>)>,
    /// The allocation line of the legend: who holds what, or that it is not known.
    pub allocation: String,
}

impl Picture {
    /// The picture of `spec` and, when known, its allocation.
    pub fn new(spec: &GpuTopologySpec, holders: Option<&Holders>) -> Picture {
        let pods = pods_of(holders);
        let gpus: Vec<Gpu> = {
            let mut gpus: Vec<Gpu> = spec
                .gpus
                .iter()
                .map(|g| {
                    let held = holders
                        .and_then(|h| h.get(&g.index))
                        .cloned()
                        .unwrap_or_default();
                    Gpu {
                        index: g.index,
                        product: g.product.as_deref().map(short_product),
                        memory_mib: g.memory_mib,
                        mig: g.mig_enabled == Some(true),
                        pod: held
                            .first()
                            .and_then(|p| pods.iter().position(|(name, _)| name == p)),
                        holders: held,
                    }
                })
                .collect();
            gpus.sort_by_key(|g| g.index);
            gpus
        };
        let (hubs, pairs) = hubs_and_pairs(spec);
        let pcie = PcieTree::new(spec);
        let groups = groups(spec, &pcie);
        Picture {
            title: title(spec),
            subtitle: subtitle(spec, &groups),
            gpus,
            groups,
            pairs,
            hubs,
            pcie,
            allocation: allocation_line(spec, holders, &pods),
            pods,
        }
    }

    pub fn gpu(&self, index: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// The PCIe switches and host bridges drawn.
    pub fn pcie_nodes(&self) -> &[Pcie] {
        &self.pcie.nodes
    }
}

/// `NVIDIA H100 80GB HBM3` → `H100 80GB HBM3`; long names end in `…`.
fn short_product(product: &str) -> String {
    let mut s = product.trim();
    for prefix in ["NVIDIA ", "Tesla ", "GeForce ", "AMD ", "Instinct "] {
        s = s.strip_prefix(prefix).unwrap_or(s);
    }
    let s = s.trim();
    if s.chars().count() > 24 {
        let cut: String = s.chars().take(23).collect();
        format!("{cut}…")
    } else {
        s.to_string()
    }
}

/// The holders in order of their first GPU, each with its GPUs.
fn pods_of(holders: Option<&Holders>) -> Vec<(String, Vec<u32>)> {
    let mut pods: Vec<(String, Vec<u32>)> = Vec::new();
    for (gpu, names) in holders.into_iter().flatten() {
        for name in names {
            match pods.iter_mut().find(|(n, _)| n == name) {
                Some((_, gpus)) => gpus.push(*gpu),
                None => pods.push((name.clone(), vec![*gpu])),
            }
        }
    }
    pods
}

/// Groups of at least this many GPUs joined alike become a hub even where
/// the node does not say NVSwitch (4 GPUs' 6 pair edges stay readable).
const HUB_MIN_GPUS: usize = 5;

/// The hubs (NVSwitch, full XGMI meshes) and the pair edges left over.
fn hubs_and_pairs(spec: &GpuTopologySpec) -> (Vec<Hub>, Vec<Pair>) {
    let mut hubs = Vec::new();
    for island in &spec.islands {
        if let Some(hub) = hub_of(spec, island) {
            hubs.push(hub);
        }
    }
    let in_hub = |a: u32, b: u32| {
        hubs.iter()
            .any(|h: &Hub| h.spokes.iter().any(|s| s.0 == a) && h.spokes.iter().any(|s| s.0 == b))
    };
    let pairs = spec
        .links
        .iter()
        .filter_map(|l| {
            let fabric = Fabric::of(l)?;
            (!in_hub(l.a, l.b)).then_some(Pair {
                a: l.a,
                b: l.b,
                fabric,
            })
        })
        .collect();
    (hubs, pairs)
}

/// A hub for `island` when every pair in it is joined alike: NVLink where
/// each pair has the smaller of its two GPUs' counts (an NVSwitch, a GPU
/// with links down reaching every peer with fewer), or direct XGMI.
fn hub_of(spec: &GpuTopologySpec, island: &[u32]) -> Option<Hub> {
    let nvswitch = spec.summary.interconnect == Interconnect::Nvswitch;
    if island.len() < 3 || (island.len() < HUB_MIN_GPUS && !nvswitch) {
        return None;
    }
    let fabric = |a: u32, b: u32| spec.link(a, b).and_then(Fabric::of);
    let mut best: BTreeMap<u32, u32> = BTreeMap::new();
    let (mut nv, mut xgmi) = (false, false);
    for (i, &a) in island.iter().enumerate() {
        for &b in &island[i + 1..] {
            match fabric(a, b)? {
                Fabric::Nv(k) => {
                    nv = true;
                    for g in [a, b] {
                        let e = best.entry(g).or_default();
                        *e = (*e).max(k);
                    }
                }
                Fabric::Xgmi => xgmi = true,
                Fabric::XgmiRouted(_) => return None,
            }
        }
    }
    if nv == xgmi {
        return None;
    }
    if xgmi {
        return Some(Hub {
            label: "XGMI mesh".into(),
            spokes: island.iter().map(|&g| (g, Fabric::Xgmi)).collect(),
        });
    }
    // Every pair NVLink, each with the smaller of its GPUs' counts.
    for (i, &a) in island.iter().enumerate() {
        for &b in &island[i + 1..] {
            if fabric(a, b) != Some(Fabric::Nv(best[&a].min(best[&b]))) {
                return None;
            }
        }
    }
    Some(Hub {
        label: if nvswitch {
            "NVSwitch"
        } else {
            "NVLink all-to-all"
        }
        .into(),
        spokes: island.iter().map(|&g| (g, Fabric::Nv(best[&g]))).collect(),
    })
}

/// The GPUs by NUMA node (else CPU affinity), groups ordered by their
/// first GPU, GPUs in a group by host bridge, then switch, then index, so
/// that PCIe siblings sit side by side on the ring.
fn groups(spec: &GpuTopologySpec, pcie: &PcieTree) -> Vec<Group> {
    let mut by_key: BTreeMap<Option<String>, Vec<u32>> = BTreeMap::new();
    for g in &spec.gpus {
        let key = match (g.numa_node, &g.cpu_affinity) {
            (Some(n), _) => Some(format!("NUMA node {n}")),
            (None, Some(cpus)) if !cpus.is_empty() => Some(format!("CPUs {cpus}")),
            _ => None,
        };
        by_key.entry(key).or_default().push(g.index);
    }
    let mut groups: Vec<Group> = by_key
        .into_iter()
        .map(|(key, mut gpus)| {
            gpus.sort_by_key(|&g| (pcie.sort_key(g), g));
            Group {
                label: key.unwrap_or_else(|| "NUMA node unknown".into()),
                gpus,
            }
        })
        .collect();
    groups.sort_by_key(|g| g.gpus.iter().min().copied());
    groups
}

fn title(spec: &GpuTopologySpec) -> String {
    let n = spec.gpus.len();
    match &spec.summary.product {
        Some(p) => format!("{}: {n} × {}", spec.node_name, short_product(p)),
        None => format!(
            "{}: {n} GPU{}",
            spec.node_name,
            if n == 1 { "" } else { "s" }
        ),
    }
}

fn subtitle(spec: &GpuTopologySpec, groups: &[Group]) -> String {
    let mut parts = vec![spec.summary.interconnect.as_str().to_string()];
    if let Some(p2p) = &spec.summary.p2p_bottleneck {
        parts.push(format!("weakest pair {p2p}"));
    }
    match groups {
        [one] => parts.push(format!("all GPUs: {}", one.label)),
        many => parts.push(format!("{} GPU groups by NUMA node", many.len())),
    }
    if !spec.nics.is_empty() {
        parts.push(format!("{} NICs", spec.nics.len()));
    }
    parts.join(" · ")
}

fn allocation_line(
    spec: &GpuTopologySpec,
    holders: Option<&Holders>,
    pods: &[(String, Vec<u32>)],
) -> String {
    match holders {
        None => "allocation not known (topology only)".into(),
        Some(h) => {
            let held = h.values().filter(|v| !v.is_empty()).count();
            format!(
                "{held} of {} GPUs held by {} pod{}",
                spec.gpus.len(),
                pods.len(),
                if pods.len() == 1 { "" } else { "s" }
            )
        }
    }
}

/// Who holds each GPU by a `GpuTopology` status (`allocations`): each
/// holder's pod once per GPU, a MIG instance or a shared replica noted.
pub fn holders_from_status(status: &GpuTopologyStatus) -> Holders {
    let mut holders = Holders::new();
    for a in &status.allocations {
        let names = holders.entry(a.gpu).or_default();
        let from_holders = a.holders.iter().map(|h| match h.form.as_str() {
            "whole" => h.pod.clone(),
            form => format!("{} ({form})", h.pod),
        });
        let listed: Vec<String> = if a.holders.is_empty() {
            a.pods.clone()
        } else {
            from_holders.collect()
        };
        for name in listed {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    holders
}
