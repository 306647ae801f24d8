//! One normalizer for every backend: [`NodeFacts`] in, `GpuTopology.spec` out,
//! exactly as docs/contract/gpu-topology.md defines it (a link for every GPU
//! pair, NICs with their GPU links, islands, and the summary with `p2pLevel`).

use crate::facts::{NodeFacts, PairFact, RemoteEnd};
use gputopo_api::{
    GpuInfo, GpuLink, GpuTopologySpec, Interconnect, LinkClass, LinkType, Nic, NicGpuLink,
    TopologySummary,
};
use std::collections::{BTreeMap, BTreeSet};

/// The most NVLinks one GPU has ever had (NVLink4/5: 18). When a GPU shows more
/// bonded links to its peers in total than this, the links must be shared
/// through NVSwitch rather than wired point to point.
const MAX_NVLINKS_PER_GPU: u32 = 18;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizeError {
    #[error("GPU {index} is listed twice")]
    DuplicateGpu { index: u32 },
    #[error("{context} names GPU {index}, which the node does not list (GPUs: {known})")]
    UnknownGpu {
        context: String,
        index: u32,
        known: String,
    },
    #[error("no link reported between GPU {a} and GPU {b}; every GPU pair needs one")]
    MissingPair { a: u32, b: u32 },
    #[error("GPU {a} and GPU {b} are reported as both {first} and {second}")]
    ConflictingPair {
        a: u32,
        b: u32,
        first: LinkClass,
        second: LinkClass,
    },
    #[error("a link from GPU {index} to itself was reported")]
    SelfPair { index: u32 },
    #[error("NIC {nic} is listed twice")]
    DuplicateNic { nic: String },
    #[error("GPU {a} and GPU {b} are reported with different {what}: {first} and {second}")]
    ConflictingPairDetail {
        a: u32,
        b: u32,
        what: &'static str,
        first: String,
        second: String,
    },
}

/// Builds `GpuTopology.spec` for `node_name` from what a backend saw.
pub fn normalize(node_name: &str, facts: &NodeFacts) -> Result<GpuTopologySpec, NormalizeError> {
    let mut gpus: Vec<GpuInfo> = Vec::with_capacity(facts.gpus.len());
    let mut seen = BTreeSet::new();
    for g in &facts.gpus {
        if !seen.insert(g.index) {
            return Err(NormalizeError::DuplicateGpu { index: g.index });
        }
        gpus.push(GpuInfo {
            index: g.index,
            uuid: g.uuid.clone(),
            product: g.product.clone(),
            memory_mib: g.memory_mib,
            pci_bus_id: g.pci_bus_id.clone(),
            numa_node: g.numa_node,
            cpu_affinity: g.cpu_affinity.clone(),
            mig_enabled: g.mig_enabled,
            fabric: g.fabric.clone(),
        });
    }
    gpus.sort_by_key(|g| g.index);
    let known = |context: &dyn Fn() -> String, index: u32| {
        if seen.contains(&index) {
            Ok(())
        } else {
            Err(NormalizeError::UnknownGpu {
                context: context(),
                index,
                known: seen
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            })
        }
    };

    let mut pairs: BTreeMap<(u32, u32), &PairFact> = BTreeMap::new();
    for p in &facts.gpu_pairs {
        if p.a == p.b {
            return Err(NormalizeError::SelfPair { index: p.a });
        }
        known(&|| format!("the link {}-{}", p.a, p.b), p.a)?;
        known(&|| format!("the link {}-{}", p.a, p.b), p.b)?;
        let key = (p.a.min(p.b), p.a.max(p.b));
        if let Some(first) = pairs.insert(key, p) {
            same_pair(key, first, p)?;
        }
    }
    let mut links = Vec::with_capacity(gpus.len() * gpus.len().saturating_sub(1) / 2);
    for (i, ga) in gpus.iter().enumerate() {
        for gb in &gpus[i + 1..] {
            let p = *pairs
                .get(&(ga.index, gb.index))
                .ok_or(NormalizeError::MissingPair {
                    a: ga.index,
                    b: gb.index,
                })?;
            let class = p.class();
            links.push(GpuLink {
                a: ga.index,
                b: gb.index,
                link_type: class.link_type(),
                nvlinks: class.nvlinks(),
                hops: p.hops,
                weight: p.weight,
                bandwidth: p.bandwidth,
            });
        }
    }

    let mut nics = Vec::with_capacity(facts.nics.len());
    let mut nic_names = BTreeSet::new();
    for n in &facts.nics {
        if !nic_names.insert(n.name.as_str()) {
            return Err(NormalizeError::DuplicateNic {
                nic: n.name.clone(),
            });
        }
        let mut gpu_links = Vec::with_capacity(n.gpu_links.len());
        for &(gpu, link_type) in &n.gpu_links {
            known(&|| format!("NIC {}", n.name), gpu)?;
            gpu_links.push(NicGpuLink { gpu, link_type });
        }
        gpu_links.sort_by_key(|l| l.gpu);
        nics.push(Nic {
            name: n.name.clone(),
            numa_node: n.numa_node,
            gpu_links,
        });
    }

    let islands = fabric_islands(&gpus, &links);
    let summary = summarize(&gpus, &links, &islands, facts);
    Ok(GpuTopologySpec {
        node_name: node_name.to_string(),
        source: facts.source,
        vendor: facts.vendor,
        driver_version: facts.driver_version.clone(),
        cuda_version: facts.cuda_version.clone(),
        gpus,
        links,
        nics,
        islands,
        summary,
    })
}

/// Both directions of a pair must say the same (class, hops, weight, bandwidth).
fn same_pair(key: (u32, u32), first: &PairFact, second: &PairFact) -> Result<(), NormalizeError> {
    if first.class() != second.class() {
        return Err(NormalizeError::ConflictingPair {
            a: key.0,
            b: key.1,
            first: first.class(),
            second: second.class(),
        });
    }
    let show = |v: Option<String>| v.unwrap_or_else(|| "none".to_string());
    let details = [
        (
            "hops",
            first.hops.map(|h| h.to_string()),
            second.hops.map(|h| h.to_string()),
        ),
        (
            "weights",
            first.weight.map(|w| w.to_string()),
            second.weight.map(|w| w.to_string()),
        ),
        (
            "bandwidths",
            first
                .bandwidth
                .map(|b| format!("{}-{} MB/s", b.min_mbps, b.max_mbps)),
            second
                .bandwidth
                .map(|b| format!("{}-{} MB/s", b.min_mbps, b.max_mbps)),
        ),
    ];
    for (what, x, y) in details {
        if x != y {
            return Err(NormalizeError::ConflictingPairDetail {
                a: key.0,
                b: key.1,
                what,
                first: show(x),
                second: show(y),
            });
        }
    }
    Ok(())
}

/// Whether a link is GPU fabric (NVLink, XGMI) rather than a PCIe path.
fn is_fabric(link_type: LinkType) -> bool {
    matches!(link_type, LinkType::Nv | LinkType::Xgmi)
}

/// Connected components of the graph whose edges are the fabric links (`NV`;
/// `XGMI`: AMD's hives), each sorted, ordered by their smallest GPU.
fn fabric_islands(gpus: &[GpuInfo], links: &[GpuLink]) -> Vec<Vec<u32>> {
    let position: BTreeMap<u32, usize> =
        gpus.iter().enumerate().map(|(i, g)| (g.index, i)).collect();
    let mut parent: Vec<usize> = (0..gpus.len()).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for l in links.iter().filter(|l| is_fabric(l.link_type)) {
        let (ra, rb) = (
            root(&mut parent, position[&l.a]),
            root(&mut parent, position[&l.b]),
        );
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    }
    let mut groups: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for (i, g) in gpus.iter().enumerate() {
        let r = root(&mut parent, i);
        groups.entry(r).or_default().push(g.index);
    }
    groups.into_values().collect()
}

fn summarize(
    gpus: &[GpuInfo],
    links: &[GpuLink],
    islands: &[Vec<u32>],
    facts: &NodeFacts,
) -> TopologySummary {
    let n = gpus.len() as u32;
    let all_nv = n >= 2 && links.iter().all(|l| l.link_type == LinkType::Nv);
    let p2p_level = if all_nv {
        links
            .iter()
            .map(|l| l.nvlinks)
            .min()
            .map(|k| format!("NV{k}"))
    } else {
        None
    };
    // Every pair has a link (normalize refuses a missing one), so the
    // weakest link is the node's weakest pair.
    let p2p_bottleneck = (n >= 2)
        .then(|| links.iter().map(GpuLink::class).min())
        .flatten()
        .map(|class| class.to_string());
    let product = match gpus.first().and_then(|g| g.product.as_ref()) {
        Some(p) if gpus.iter().all(|g| g.product.as_ref() == Some(p)) => Some(p.clone()),
        _ => None,
    };
    let numa: BTreeSet<i32> = gpus.iter().filter_map(|g| g.numa_node).collect();
    TopologySummary {
        gpu_count: n,
        product,
        p2p_level,
        p2p_bottleneck,
        all_to_all_nvlink: all_nv,
        largest_island: islands.iter().map(|i| i.len() as u32).max().unwrap_or(0),
        numa_nodes: (!numa.is_empty()).then_some(numa.len() as u32),
        interconnect: interconnect(gpus, links, islands, facts),
    }
}

/// Classifies the interconnect. NVML names NVSwitch outright; from a `topo -m`
/// matrix, NVSwitch shows as more bonded links per GPU than any GPU has ports.
/// AMD GPUs with any XGMI link are `xgmi`.
fn interconnect(
    gpus: &[GpuInfo],
    links: &[GpuLink],
    islands: &[Vec<u32>],
    facts: &NodeFacts,
) -> Interconnect {
    if links.iter().any(|l| l.link_type == LinkType::Xgmi) {
        return Interconnect::Xgmi;
    }
    if !links.iter().any(|l| l.link_type == LinkType::Nv) {
        return Interconnect::Pcie;
    }
    let reaches_switch = facts.gpus.iter().any(|g| {
        g.nvlinks
            .iter()
            .flatten()
            .any(|l| l.active && matches!(l.remote, Some(RemoteEnd::Nvswitch { .. })))
    });
    let oversubscribed = gpus.iter().any(|g| {
        let total: u32 = links
            .iter()
            .filter(|l| l.a == g.index || l.b == g.index)
            .map(|l| l.nvlinks)
            .sum();
        total > MAX_NVLINKS_PER_GPU
    });
    if reaches_switch || oversubscribed {
        Interconnect::Nvswitch
    } else if islands.iter().all(|i| i.len() <= 2) {
        Interconnect::NvlinkBridge
    } else {
        Interconnect::NvlinkMesh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{GpuFacts, NicFacts};
    use gputopo_api::TopologySource;

    fn facts(n: u32, cell: impl Fn(u32, u32) -> &'static str) -> NodeFacts {
        let mut pairs = Vec::new();
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    pairs.push(PairFact::new(
                        a,
                        b,
                        cell(a.min(b), a.max(b)).parse().unwrap(),
                    ));
                }
            }
        }
        NodeFacts {
            source: TopologySource::Fixture,
            vendor: None,
            driver_version: None,
            cuda_version: None,
            gpus: (0..n)
                .map(|index| GpuFacts {
                    index,
                    product: Some("X".into()),
                    numa_node: Some((index / 4) as i32),
                    ..GpuFacts::default()
                })
                .collect(),
            gpu_pairs: pairs,
            nics: vec![],
        }
    }

    #[test]
    fn nvswitch_box() {
        let s = normalize("n", &facts(8, |_, _| "NV12")).unwrap();
        assert_eq!(s.links.len(), 28);
        assert_eq!(s.summary.p2p_level.as_deref(), Some("NV12"));
        assert_eq!(s.summary.p2p_bottleneck.as_deref(), Some("NV12"));
        assert!(s.summary.all_to_all_nvlink);
        assert_eq!(s.islands, vec![(0..8).collect::<Vec<_>>()]);
        assert_eq!(s.summary.interconnect, Interconnect::Nvswitch);
        assert_eq!(s.summary.numa_nodes, Some(2));
        assert_eq!(s.summary.product.as_deref(), Some("X"));
    }

    #[test]
    fn bridged_pairs_and_pcie() {
        let s = normalize(
            "n",
            &facts(4, |a, b| if a / 2 == b / 2 { "NV12" } else { "SYS" }),
        )
        .unwrap();
        assert_eq!(s.islands, vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(s.summary.p2p_level, None);
        assert_eq!(s.summary.p2p_bottleneck.as_deref(), Some("SYS"));
        assert_eq!(s.summary.largest_island, 2);
        assert_eq!(s.summary.interconnect, Interconnect::NvlinkBridge);

        let s = normalize("n", &facts(3, |_, _| "PHB")).unwrap();
        assert_eq!(s.islands.len(), 3);
        assert_eq!(s.summary.interconnect, Interconnect::Pcie);
        assert!(!s.summary.all_to_all_nvlink);
    }

    #[test]
    fn four_gpu_direct_mesh_is_not_a_switch() {
        let s = normalize("n", &facts(4, |_, _| "NV4")).unwrap();
        assert_eq!(s.summary.interconnect, Interconnect::NvlinkMesh);
        assert_eq!(s.summary.p2p_level.as_deref(), Some("NV4"));
    }

    #[test]
    fn single_gpu_has_no_p2p_level() {
        let s = normalize("n", &facts(1, |_, _| "SYS")).unwrap();
        assert_eq!(s.summary.p2p_level, None);
        assert_eq!(s.summary.p2p_bottleneck, None);
        assert!(!s.summary.all_to_all_nvlink);
        assert_eq!(s.islands, vec![vec![0]]);
        assert!(s.links.is_empty());
    }

    #[test]
    fn inconsistent_facts_are_errors() {
        let mut f = facts(3, |_, _| "PIX");
        f.gpu_pairs
            .retain(|p| (p.a.min(p.b), p.a.max(p.b)) != (1, 2));
        assert_eq!(
            normalize("n", &f),
            Err(NormalizeError::MissingPair { a: 1, b: 2 })
        );

        let mut f = facts(2, |_, _| "PIX");
        f.gpu_pairs[1] = PairFact::new(1, 0, LinkClass::Sys);
        assert!(matches!(
            normalize("n", &f),
            Err(NormalizeError::ConflictingPair { .. })
        ));

        let mut f = facts(2, |_, _| "PIX");
        f.nics.push(NicFacts {
            name: "mlx5_0".into(),
            numa_node: None,
            gpu_links: vec![(7, LinkType::Pix)],
        });
        let e = normalize("n", &f).unwrap_err();
        assert!(e.to_string().contains("NIC mlx5_0 names GPU 7"), "{e}");

        let mut f = facts(2, |_, _| "PIX");
        f.gpus.push(f.gpus[0].clone());
        assert_eq!(
            normalize("n", &f),
            Err(NormalizeError::DuplicateGpu { index: 0 })
        );
    }

    #[test]
    fn hidden_gpus_keep_their_indices() {
        // cgroups hide GPUs 0 and 1: the node lists 2 and 3 only.
        let mut f = facts(4, |_, _| "NV4");
        f.gpus.retain(|g| g.index >= 2);
        f.gpu_pairs.retain(|p| p.a >= 2 && p.b >= 2);
        let s = normalize("n", &f).unwrap();
        assert_eq!(s.links.len(), 1);
        assert_eq!((s.links[0].a, s.links[0].b), (2, 3));
        assert_eq!(s.islands, vec![vec![2, 3]]);
    }
}
