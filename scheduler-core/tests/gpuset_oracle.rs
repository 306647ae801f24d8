//! The GPU-set choice checked against an independent brute-force oracle, and on
//! real node shapes written out by hand from the recorded `nvidia-smi topo -m`
//! matrices under `fixtures/nvidia/`.
//!
//! The oracle shares no code with the crate: it enumerates every k-subset, finds
//! each subset's best ring by depth-first search over the orders of its GPUs
//! (a permutation enumeration, cut where it cannot beat the best found), and
//! ranks sets by the documented order: bottleneck, NUMA nodes, leftover (sizes
//! 8, 4, 2: best ring of the GPUs left, then how many subsets reach it), lower
//! index list.

use gputopo_api::{
    Collective, GpuInfo, GpuLink, GpuTopologySpec, Interconnect, LinkClass, TopologySource,
    TopologySummary,
};
use gputopo_scheduler_core::gpuset::{
    DecidedBy, GpuSetChoice, Method, NoFitReason, NodeShape, SetRequest, ShapeCatalog,
    full_nvlink_slots, heuristic_gap, stranded_free_gpus,
};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

// ---------------------------------------------------------------------------
// Building topologies
// ---------------------------------------------------------------------------

/// Per-GPU facts of a test topology.
#[derive(Clone, Debug)]
struct Facts {
    numa: Option<i32>,
    memory_mib: Option<u64>,
    mig: bool,
}

impl Facts {
    fn numa(numa: i32) -> Facts {
        Facts {
            numa: Some(numa),
            memory_mib: Some(81_920),
            mig: false,
        }
    }
}

/// A node as the oracle sees it: a full link matrix and per-GPU facts.
#[derive(Clone, Debug)]
struct Topo {
    link: Vec<Vec<LinkClass>>,
    facts: Vec<Facts>,
}

impl Topo {
    fn n(&self) -> usize {
        self.facts.len()
    }

    fn spec(&self) -> GpuTopologySpec {
        let n = self.n();
        let gpus = self
            .facts
            .iter()
            .enumerate()
            .map(|(i, f)| GpuInfo {
                index: i as u32,
                uuid: None,
                product: Some("test".into()),
                memory_mib: f.memory_mib,
                pci_bus_id: None,
                numa_node: f.numa,
                cpu_affinity: None,
                mig_enabled: Some(f.mig),
                fabric: None,
            })
            .collect();
        let mut links = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                let c = self.link[a][b];
                links.push(GpuLink {
                    a: a as u32,
                    b: b as u32,
                    link_type: c.link_type(),
                    nvlinks: c.nvlinks(),
                    // XGMI's class is its hop count: direct (1) or routed (2+).
                    hops: match c {
                        LinkClass::Xgmi => Some(1),
                        LinkClass::XgmiRouted => Some(2),
                        _ => None,
                    },
                    weight: None,
                    bandwidth: None,
                });
            }
        }
        GpuTopologySpec {
            node_name: "test-node".into(),
            source: TopologySource::Fixture,
            vendor: None,
            driver_version: None,
            cuda_version: None,
            gpus,
            links,
            nics: vec![],
            islands: vec![],
            summary: TopologySummary {
                gpu_count: n as u32,
                product: None,
                p2p_level: None,
                all_to_all_nvlink: false,
                largest_island: 0,
                numa_nodes: None,
                interconnect: Interconnect::NvlinkMesh,
            },
        }
    }

    fn shape(&self) -> NodeShape {
        NodeShape::from_spec(&self.spec()).expect("test topologies are well formed")
    }
}

/// Reads the GPU block of an `nvidia-smi topo -m` matrix written as literal rows
/// (`X` on the diagonal), with one NUMA node per GPU.
fn topo_from_rows(rows: &[&str], numa: &[Option<i32>]) -> Topo {
    let link: Vec<Vec<LinkClass>> = rows
        .iter()
        .map(|row| {
            row.split_whitespace()
                .map(|cell| match cell {
                    "X" => LinkClass::Sys, // never read: the diagonal
                    other => other.parse().expect("a link class"),
                })
                .collect()
        })
        .collect();
    let n = link.len();
    for (i, row) in link.iter().enumerate() {
        assert_eq!(row.len(), n, "row {i} has {} cells", row.len());
        for j in 0..n {
            assert_eq!(row[j], link[j][i], "matrix not symmetric at {i},{j}");
        }
    }
    let facts = numa
        .iter()
        .map(|&numa| Facts {
            numa,
            memory_mib: Some(32_768),
            mig: false,
        })
        .collect();
    Topo { link, facts }
}

/// DGX-1 V100 hybrid cube-mesh (fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt);
/// sockets from its CPU affinity column: GPUs 0-3 on 0-19,40-59, 4-7 on 20-39,60-79.
fn dgx1() -> Topo {
    topo_from_rows(
        &[
            "X   NV1 NV1 NV2 NV2 SYS SYS SYS",
            "NV1 X   NV2 NV1 SYS NV2 SYS SYS",
            "NV1 NV2 X   NV2 SYS SYS NV1 SYS",
            "NV2 NV1 NV2 X   SYS SYS SYS NV1",
            "NV2 SYS SYS SYS X   NV1 NV1 NV2",
            "SYS NV2 SYS SYS NV1 X   NV2 NV1",
            "SYS SYS NV1 SYS NV1 NV2 X   NV2",
            "SYS SYS SYS NV1 NV2 NV1 NV2 X  ",
        ],
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// 8x A100 SXM behind NVSwitch (fixtures/nvidia/a100-sxm-8gpu-4nic-gpu-numa-id-topo-m.txt).
fn a100_nv12() -> Topo {
    let row = |i: usize| {
        (0..8)
            .map(|j| if i == j { "X" } else { "NV12" })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rows: Vec<String> = (0..8).map(row).collect();
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    topo_from_rows(
        &rows,
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// PCIe-only two-socket box with PIX pairs (fixtures/nvidia/dgx1-v100-topo-mp-pcie-only-view.txt).
fn pcie_pix_pairs() -> Topo {
    topo_from_rows(
        &[
            "X   PIX PHB PHB SYS SYS SYS SYS",
            "PIX X   PHB PHB SYS SYS SYS SYS",
            "PHB PHB X   PIX SYS SYS SYS SYS",
            "PHB PHB PIX X   SYS SYS SYS SYS",
            "SYS SYS SYS SYS X   PIX PHB PHB",
            "SYS SYS SYS SYS PIX X   PHB PHB",
            "SYS SYS SYS SYS PHB PHB X   PIX",
            "SYS SYS SYS SYS PHB PHB PIX X  ",
        ],
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// 8x RTX 4090, NODE within a socket, SYS across
/// (fixtures/nvidia/rtx4090-8gpu-pcie-2socket-space-expanded-topo-m.txt).
fn pcie_node_sys() -> Topo {
    topo_from_rows(
        &[
            "X    NODE NODE NODE SYS  SYS  SYS  SYS",
            "NODE X    NODE NODE SYS  SYS  SYS  SYS",
            "NODE NODE X    NODE SYS  SYS  SYS  SYS",
            "NODE NODE NODE X    SYS  SYS  SYS  SYS",
            "SYS  SYS  SYS  SYS  X    NODE NODE NODE",
            "SYS  SYS  SYS  SYS  NODE X    NODE NODE",
            "SYS  SYS  SYS  SYS  NODE NODE X    NODE",
            "SYS  SYS  SYS  SYS  NODE NODE NODE X   ",
        ],
        &[
            Some(0),
            Some(0),
            Some(0),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
            Some(1),
        ],
    )
}

/// 4x A100 80GB PCIe in NVLink-bridged NV12 pairs
/// (fixtures/nvidia/a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt).
fn bridged_pairs() -> Topo {
    topo_from_rows(
        &[
            "X    NV12 SYS  SYS",
            "NV12 X    SYS  SYS",
            "SYS  SYS  X    NV12",
            "SYS  SYS  NV12 X   ",
        ],
        &[Some(0), Some(0), Some(1), Some(1)],
    )
}

/// The same wiring, one GPU per NUMA node
/// (fixtures/nvidia/4gpu-nv12-bridged-pairs-4numa-one-gpu-per-numa-matrix-only-NO-LEGEND-captured.txt).
fn bridged_pairs_4numa() -> Topo {
    let mut t = bridged_pairs();
    for (i, f) in t.facts.iter_mut().enumerate() {
        f.numa = Some(i as i32);
    }
    t
}

/// DGX-2: 16 V100 behind NVSwitch, NV6 between every pair
/// (fixtures/nvidia/dgx2-v100-16gpu-nv6-10nic-nccl-tests-issue78-no-numa-column-TRUNCATED.txt,
/// whose GPU block is complete; CPU affinity 0-23,48-71 for GPUs 0-7).
fn dgx2() -> Topo {
    let link = (0..16)
        .map(|i| {
            (0..16)
                .map(|j| {
                    if i == j {
                        LinkClass::Sys
                    } else {
                        LinkClass::Nv(6)
                    }
                })
                .collect()
        })
        .collect();
    let facts = (0..16).map(|i| Facts::numa(i / 8)).collect();
    Topo { link, facts }
}

/// Two DGX-1 boards side by side as one 16-GPU node, joined by SYS, four NUMA nodes.
fn twin_dgx1() -> Topo {
    let one = dgx1();
    let link = (0..16)
        .map(|i| {
            (0..16)
                .map(|j| {
                    if i / 8 == j / 8 {
                        one.link[i % 8][j % 8]
                    } else {
                        LinkClass::Sys
                    }
                })
                .collect()
        })
        .collect();
    let facts = (0..16).map(|i| Facts::numa(i / 4)).collect();
    Topo { link, facts }
}

/// A symmetric link matrix of `n` GPUs whose pair `a < b` is `class(a, b)`.
fn symmetric(n: usize, mut class: impl FnMut(usize, usize) -> LinkClass) -> Vec<Vec<LinkClass>> {
    let upper: Vec<Vec<LinkClass>> = (0..n)
        .map(|a| {
            (0..n)
                .map(|b| if a < b { class(a, b) } else { LinkClass::Sys })
                .collect()
        })
        .collect();
    (0..n)
        .map(|a| (0..n).map(|b| upper[a.min(b)][a.max(b)]).collect())
        .collect()
}

fn mask(gpus: &[u32]) -> u32 {
    gpus.iter().fold(0, |m, &g| m | (1 << g))
}

fn all(n: usize) -> u32 {
    if n >= 32 { u32::MAX } else { (1u32 << n) - 1 }
}

// ---------------------------------------------------------------------------
// The oracle
// ---------------------------------------------------------------------------

/// A set's quality: a link class, or no hop at all (a single GPU), which beats every link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Quality {
    Link(LinkClass),
    NoHop,
}

impl Quality {
    fn class(self) -> Option<LinkClass> {
        match self {
            Quality::Link(c) => Some(c),
            Quality::NoHop => None,
        }
    }
}

/// Why the oracle found nothing, in the documented order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    TooFew,
    Mig,
    Memory,
    SingleNuma,
    Nvlink,
}

fn reason_of(r: &NoFitReason) -> Reason {
    match r {
        NoFitReason::TooFewFreeGpus { .. } => Reason::TooFew,
        NoFitReason::MigEnabled { .. } => Reason::Mig,
        NoFitReason::InsufficientMemory { .. } => Reason::Memory,
        NoFitReason::SingleNumaNode { .. } => Reason::SingleNuma,
        NoFitReason::NoNvlinkSet { .. } => Reason::Nvlink,
    }
}

/// (best ring of that size, subsets reaching it) for sizes 8, 4, 2.
type LeftoverVec = [(Option<Quality>, u32); 3];

struct Oracle<'a> {
    topo: &'a Topo,
    rings: HashMap<Vec<usize>, Quality>,
}

impl<'a> Oracle<'a> {
    fn new(topo: &'a Topo) -> Oracle<'a> {
        Oracle {
            topo,
            rings: HashMap::new(),
        }
    }

    /// The best ring's weakest hop, by DFS over orders of the set (first GPU fixed).
    fn ring(&mut self, set: &[usize]) -> Quality {
        match set.len() {
            0 | 1 => return Quality::NoHop,
            2 => return Quality::Link(self.topo.link[set[0]][set[1]]),
            _ => {}
        }
        if let Some(&q) = self.rings.get(set) {
            return q;
        }
        let link = &self.topo.link;
        let ceiling = set
            .iter()
            .flat_map(|&a| {
                set.iter()
                    .filter(move |&&b| b != a)
                    .map(move |&b| link[a][b])
            })
            .max()
            .expect("at least one pair");
        let mut best: Option<LinkClass> = None;
        let mut used = vec![false; set.len()];
        used[0] = true;
        let mut order = vec![set[0]];
        fn dfs(
            link: &[Vec<LinkClass>],
            set: &[usize],
            used: &mut [bool],
            order: &mut Vec<usize>,
            weakest: Option<LinkClass>,
            best: &mut Option<LinkClass>,
            ceiling: LinkClass,
        ) {
            if best.is_some_and(|b| b >= ceiling || weakest.is_some_and(|w| w <= b)) {
                return;
            }
            let last = *order.last().expect("non-empty");
            if order.len() == set.len() {
                let closing = link[last][set[0]];
                let cycle = weakest.map_or(closing, |w| w.min(closing));
                if best.is_none_or(|b| cycle > b) {
                    *best = Some(cycle);
                }
                return;
            }
            for i in 1..set.len() {
                if used[i] {
                    continue;
                }
                used[i] = true;
                order.push(set[i]);
                let hop = link[last][set[i]];
                let w = weakest.map_or(hop, |w| w.min(hop));
                dfs(link, set, used, order, Some(w), best, ceiling);
                order.pop();
                used[i] = false;
            }
        }
        dfs(link, set, &mut used, &mut order, None, &mut best, ceiling);
        let q = Quality::Link(best.expect("a cycle exists in a complete graph"));
        self.rings.insert(set.to_vec(), q);
        q
    }

    fn all_to_all(&self, set: &[usize]) -> Quality {
        let mut worst = Quality::NoHop;
        for (i, &a) in set.iter().enumerate() {
            for &b in &set[i + 1..] {
                worst = worst.min(Quality::Link(self.topo.link[a][b]));
            }
        }
        worst
    }

    fn quality(&mut self, set: &[usize], collective: Collective) -> Quality {
        match collective {
            Collective::Ring => self.ring(set),
            Collective::AllToAll => self.all_to_all(set),
        }
    }

    fn numa_nodes(&self, set: &[usize]) -> usize {
        set.iter()
            .map(|&g| self.topo.facts[g].numa)
            .collect::<HashSet<_>>()
            .len()
    }

    fn leftover(&mut self, left: &[usize]) -> LeftoverVec {
        let mut out = [(None, 0); 3];
        for (slot, size) in out.iter_mut().zip([8usize, 4, 2]) {
            if left.len() < size {
                continue;
            }
            let mut best = None;
            let mut count = 0u32;
            for subset in subsets(left, size) {
                let q = Some(self.ring(&subset));
                if q > best {
                    best = q;
                    count = 1;
                } else if q == best {
                    count += 1;
                }
            }
            *slot = (best, count.min(8191));
        }
        out
    }

    /// The best set for the request, or why none fits.
    fn choose(&mut self, free: u32, req: &SetRequest) -> Result<Vec<usize>, Reason> {
        let n = self.topo.n();
        let k = req.gpus as usize;
        let facts = &self.topo.facts;
        if k == 0 {
            return Ok(Vec::new());
        }
        let free: Vec<usize> = (0..n).filter(|&g| free & (1 << g) != 0).collect();
        if free.len() < k {
            return Err(Reason::TooFew);
        }
        let mut pool = free.clone();
        if !req.allow_mig {
            pool.retain(|&g| !facts[g].mig);
            if pool.len() < k {
                return Err(Reason::Mig);
            }
        }
        if let Some(min) = req.min_memory_mib {
            pool.retain(|&g| facts[g].memory_mib.is_some_and(|m| m >= min));
            if pool.len() < k {
                return Err(Reason::Memory);
            }
        }
        if req.single_numa_node {
            let mut per_node: HashMap<i32, usize> = HashMap::new();
            for &g in &pool {
                if let Some(numa) = facts[g].numa {
                    *per_node.entry(numa).or_default() += 1;
                }
            }
            if per_node.values().all(|&c| c < k) {
                return Err(Reason::SingleNuma);
            }
        }
        let mut candidates: Vec<Vec<usize>> = subsets(&pool, k)
            .into_iter()
            .filter(|s| {
                !req.single_numa_node
                    || (s.iter().all(|&g| facts[g].numa.is_some())
                        && s.iter().all(|&g| facts[g].numa == facts[s[0]].numa))
            })
            .filter(|s| match req.min_nvlink_level {
                None | Some(0) => true,
                Some(level) => s.iter().enumerate().all(|(i, &a)| {
                    s[i + 1..]
                        .iter()
                        .all(|&b| self.topo.link[a][b] >= LinkClass::Nv(level))
                }),
            })
            .collect();
        if candidates.is_empty() {
            return Err(Reason::Nvlink);
        }
        // Bottleneck, then NUMA nodes: only the top tier needs a leftover.
        let scored: Vec<(Quality, usize)> = candidates
            .iter()
            .map(|s| (self.quality(s, req.collective), self.numa_nodes(s)))
            .collect();
        let top = scored
            .iter()
            .map(|&(q, numa)| (q, std::cmp::Reverse(numa)))
            .max()
            .expect("candidates");
        let mut tier: Vec<Vec<usize>> = candidates
            .drain(..)
            .zip(scored)
            .filter(|(_, (q, numa))| (*q, std::cmp::Reverse(*numa)) == top)
            .map(|(s, _)| s)
            .collect();
        let whole_free: Vec<usize> = free.iter().copied().filter(|&g| !facts[g].mig).collect();
        let mut best: Option<(LeftoverVec, Vec<usize>)> = None;
        for s in tier.drain(..) {
            let left: Vec<usize> = whole_free
                .iter()
                .copied()
                .filter(|g| !s.contains(g))
                .collect();
            let measure = self.leftover(&left);
            let better = match &best {
                None => true,
                Some((m, b)) => measure > *m || (measure == *m && s < *b),
            };
            if better {
                best = Some((measure, s));
            }
        }
        Ok(best.expect("a non-empty tier").1)
    }
}

/// Every `k`-subset of `items`, each sorted as `items` is.
fn subsets(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    fn go(
        items: &[usize],
        k: usize,
        start: usize,
        cur: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..items.len() {
            if items.len() - i < k - cur.len() {
                break;
            }
            cur.push(items[i]);
            go(items, k, i + 1, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    go(items, k, 0, &mut Vec::new(), &mut out);
    out
}

fn to_indices(m: u32) -> Vec<usize> {
    (0..32).filter(|&g| m & (1 << g) != 0).collect()
}

/// Checks the crate's exact answer against the oracle on one case.
fn check_case(
    topo: &Topo,
    shape: &NodeShape,
    oracle: &mut Oracle<'_>,
    free: u32,
    req: &SetRequest,
) -> Result<(), TestCaseError> {
    let expected = oracle.choose(free & all(topo.n()), req);
    let got = shape.pick(free, req);
    match (&expected, &got) {
        (Err(reason), Err(no_fit)) => {
            prop_assert_eq!(*reason, reason_of(no_fit), "reason for {:?}", req);
        }
        (Ok(set), Ok(pick)) => {
            let got_set = to_indices(pick.gpus);
            let q_expected = oracle.quality(set, req.collective);
            let q_got = oracle.quality(&got_set, req.collective);
            prop_assert_eq!(
                q_got,
                q_expected,
                "quality: got {:?}, oracle {:?}",
                got_set,
                set
            );
            prop_assert_eq!(pick.bottleneck, q_expected.class(), "reported bottleneck");
            // No set of the optimal quality spans fewer NUMA nodes.
            prop_assert_eq!(
                oracle.numa_nodes(&got_set),
                oracle.numa_nodes(set),
                "NUMA tie-break: got {:?}, oracle {:?}",
                got_set,
                set
            );
            prop_assert_eq!(pick.numa_nodes as usize, oracle.numa_nodes(set));
            // The full order, leftover and indices included.
            prop_assert_eq!(&got_set, set, "full order");
            let whole: Vec<usize> = to_indices(free & all(topo.n()))
                .into_iter()
                .filter(|&g| !topo.facts[g].mig && !set.contains(&g))
                .collect();
            let measure = oracle.leftover(&whole);
            for (slot, (best, count)) in pick.leftover.slots.iter().zip(measure) {
                prop_assert_eq!(slot.best_ring, best.and_then(Quality::class));
                prop_assert_eq!(slot.sets, count);
            }
            prop_assert!(pick.score <= 100);
        }
        _ => prop_assert!(
            false,
            "oracle {:?} but crate {:?} for {:?}",
            expected,
            got,
            req
        ),
    }
    Ok(())
}

/// Checks the heuristic's answer is valid and no better than the optimum.
fn check_heuristic(
    topo: &Topo,
    shape: &NodeShape,
    oracle: &mut Oracle<'_>,
    free: u32,
    req: &SetRequest,
) -> Result<(), TestCaseError> {
    let exact = oracle.choose(free & all(topo.n()), req);
    let heuristic = shape.pick_with(free, req, Method::Heuristic);
    match (exact, heuristic) {
        (Err(reason), Err(no_fit)) => prop_assert_eq!(reason, reason_of(&no_fit)),
        (Err(reason), Ok(pick)) => prop_assert!(false, "oracle {:?}, heuristic {:?}", reason, pick),
        // Only an NVLink floor may make the greedy miss a feasible set.
        (Ok(_), Err(no_fit)) => prop_assert_eq!(reason_of(&no_fit), Reason::Nvlink),
        (Ok(best), Ok(pick)) => {
            let set = to_indices(pick.gpus);
            prop_assert_eq!(set.len(), req.gpus as usize);
            prop_assert_eq!(pick.gpus & !free, 0, "only free GPUs");
            for &g in &set {
                let f = &topo.facts[g];
                prop_assert!(req.allow_mig || !f.mig);
                if let Some(min) = req.min_memory_mib {
                    prop_assert!(f.memory_mib.is_some_and(|m| m >= min));
                }
            }
            if req.single_numa_node && !set.is_empty() {
                prop_assert!(set.iter().all(|&g| topo.facts[g].numa.is_some()));
                prop_assert_eq!(oracle.numa_nodes(&set), 1);
            }
            if let Some(level) = req.min_nvlink_level.filter(|&l| l > 0) {
                prop_assert!(oracle.all_to_all(&set) >= Quality::Link(LinkClass::Nv(level)));
            }
            let q = oracle.quality(&set, req.collective);
            prop_assert!(q <= oracle.quality(&best, req.collective));
            prop_assert_eq!(
                pick.bottleneck,
                q.class(),
                "n ≤ 16: the exact quality of its set"
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Random cases
// ---------------------------------------------------------------------------

fn class_strategy() -> impl Strategy<Value = LinkClass> {
    prop_oneof![
        Just(LinkClass::Sys),
        Just(LinkClass::Node),
        Just(LinkClass::Phb),
        Just(LinkClass::Pxb),
        Just(LinkClass::Pix),
        Just(LinkClass::XgmiRouted),
        Just(LinkClass::Xgmi),
        Just(LinkClass::Nv(1)),
        Just(LinkClass::Nv(2)),
        Just(LinkClass::Nv(4)),
        Just(LinkClass::Nv(12)),
    ]
}

fn facts_strategy() -> impl Strategy<Value = Facts> {
    (
        prop_oneof![3 => (0i32..3).prop_map(Some), 1 => Just(None)],
        prop_oneof![Just(Some(81_920u64)), Just(Some(40_960)), Just(None)],
        prop_oneof![6 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(numa, memory_mib, mig)| Facts {
            numa,
            memory_mib,
            mig,
        })
}

/// A random node of `n` GPUs whose links come from a small random palette, so
/// that ties (and so the tie-breaks) are common.
fn topo_strategy(n: usize) -> impl Strategy<Value = Topo> {
    (
        proptest::collection::vec(class_strategy(), 1..=4),
        proptest::collection::vec(any::<u8>(), n * (n - 1) / 2),
        proptest::collection::vec(facts_strategy(), n),
    )
        .prop_map(move |(palette, picks, facts)| {
            let mut p = picks.iter();
            let link = symmetric(n, |_, _| {
                palette[usize::from(*p.next().unwrap_or(&0)) % palette.len()]
            });
            Topo { link, facts }
        })
}

/// Requests of 1..=max_k GPUs (0 now and then), constraints now and then.
fn request_strategy(max_k: u32) -> impl Strategy<Value = SetRequest> {
    (
        prop_oneof![1 => Just(0), 12 => 1..=max_k.max(1)],
        prop_oneof![Just(Collective::Ring), Just(Collective::AllToAll)],
        prop_oneof![4 => Just(None), 1 => (0u32..=13).prop_map(Some)],
        prop_oneof![4 => Just(None), 1 => Just(Some(40_960u64)), 1 => Just(Some(81_920u64))],
        prop_oneof![4 => Just(false), 1 => Just(true)],
        prop_oneof![4 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(gpus, collective, min_nvlink_level, min_memory_mib, allow_mig, single_numa_node)| {
                SetRequest {
                    gpus,
                    collective,
                    min_nvlink_level,
                    min_memory_mib,
                    allow_mig,
                    single_numa_node,
                }
            },
        )
}

/// A random node of `n` GPUs for `n` in `sizes`, and `queries` requests of up to `max_k` GPUs.
fn case_strategy(
    sizes: std::ops::RangeInclusive<usize>,
    max_k: u32,
    queries: usize,
) -> impl Strategy<Value = (Topo, Vec<(u32, SetRequest)>)> {
    sizes.prop_flat_map(move |n| {
        (
            topo_strategy(n),
            proptest::collection::vec(
                (free_strategy(), request_strategy(max_k.min(n as u32))),
                queries,
            ),
        )
    })
}

/// Free masks, mostly with most GPUs free.
fn free_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        1 => any::<u32>(),
        2 => any::<(u32, u32)>().prop_map(|(a, b)| a | b),
        1 => Just(u32::MAX),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(1024)
    })]

    /// Up to 10 GPUs, any request of up to 8: the exact choice is the oracle's,
    /// with every constraint and the full tie-break order.
    #[test]
    fn exact_choice_matches_the_oracle((topo, queries) in case_strategy(1..=10, 8, 4)) {
        let shape = topo.shape();
        let mut oracle = Oracle::new(&topo);
        for (free, req) in &queries {
            check_case(&topo, &shape, &mut oracle, *free, req)?;
            // The cache, and a picker prepared once, answer a repeated query identically.
            prop_assert_eq!(shape.pick(*free, req), shape.pick(*free, req));
            prop_assert_eq!(shape.picker(req).pick(*free), shape.pick(*free, req));
            check_heuristic(&topo, &shape, &mut oracle, *free, req)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(32)
    })]

    /// 11 to 16 GPUs, small requests and at most 11 free GPUs, to keep the
    /// oracle's leftover enumeration cheap in debug builds.
    #[test]
    fn exact_choice_matches_the_oracle_up_to_16_gpus(
        (topo, queries) in case_strategy(11..=16, 4, 3),
    ) {
        let shape = topo.shape();
        let mut oracle = Oracle::new(&topo);
        for (free, req) in &queries {
            let mut free = *free & all(topo.n());
            // Keep the oracle's leftover enumeration cheap: at most 11 free.
            while free.count_ones() > 11 {
                free &= free - 1;
            }
            check_case(&topo, &shape, &mut oracle, free, req)?;
        }
    }
}

// ---------------------------------------------------------------------------
// Deterministic 16-GPU cases
// ---------------------------------------------------------------------------

/// An MI300X-class box: 8 GPUs, a direct XGMI link between every pair, two NUMA nodes
/// (fixtures/amd/amd-mi308x-8gpu-0x74a2-rocm72-rocm-smi-showtopo-lowpower-warning.txt).
fn mi300x() -> Topo {
    let link = symmetric(8, |_, _| LinkClass::Xgmi);
    let facts = (0..8).map(|i| Facts::numa(i / 4)).collect();
    Topo { link, facts }
}

/// Two XGMI hives of 4, PCIe across sockets between them, each hive on its NUMA node
/// (fixtures/amd/amd-8gpu-two-xgmi-hives-of-4-pcie-between-64gb-likely-mi210-rocm-smi-showtopo.txt).
fn two_hives() -> Topo {
    let link = symmetric(8, |a, b| {
        if a / 4 == b / 4 {
            LinkClass::Xgmi
        } else {
            LinkClass::Sys
        }
    });
    let facts = (0..8).map(|i| Facts::numa(i / 4)).collect();
    Topo { link, facts }
}

/// MI250X-like: pairs of GCDs on one package (direct XGMI), the rest reached
/// through another GCD (routed XGMI), one NUMA node.
fn routed_xgmi() -> Topo {
    let link = symmetric(8, |a, b| {
        if a / 2 == b / 2 {
            LinkClass::Xgmi
        } else {
            LinkClass::XgmiRouted
        }
    });
    let facts = (0..8).map(|_| Facts::numa(0)).collect();
    Topo { link, facts }
}

#[test]
fn xgmi_shapes_match_the_oracle() {
    for topo in [mi300x(), two_hives(), routed_xgmi()] {
        let shape = topo.shape();
        let mut oracle = Oracle::new(&topo);
        let frees = [all(8), all(8) & !mask(&[0, 5]), mask(&[1, 2, 3, 4, 6])];
        for free in frees {
            for k in 0..=8 {
                for collective in [Collective::Ring, Collective::AllToAll] {
                    let req = SetRequest::new(k, collective);
                    check_case(&topo, &shape, &mut oracle, free, &req)
                        .unwrap_or_else(|e| panic!("free {free:#x}, {req:?}: {e}"));
                }
            }
        }
    }
}

#[test]
fn four_gpus_on_two_hives_take_one_hive() {
    let topo = two_hives();
    for collective in [Collective::Ring, Collective::AllToAll] {
        let choice = choose(&topo, all(8), 4, collective);
        assert_eq!(choice.gpus, vec![0, 1, 2, 3], "{}", choice.explanation);
        assert_eq!(choice.bottleneck, Some(LinkClass::Xgmi));
    }
    // With one GPU of the first hive busy, the intact hive is the only XGMI set.
    let choice = choose(&topo, all(8) & !mask(&[1]), 4, Collective::Ring);
    assert_eq!(choice.gpus, vec![4, 5, 6, 7], "{}", choice.explanation);
    // A pair on the routed box stays on one package.
    let choice = choose(&routed_xgmi(), all(8), 2, Collective::Ring);
    assert_eq!(choice.bottleneck, Some(LinkClass::Xgmi));
}

#[test]
fn sixteen_gpu_shapes_match_the_oracle() {
    for topo in [dgx2(), twin_dgx1()] {
        let shape = topo.shape();
        assert!(shape.is_exact());
        let mut oracle = Oracle::new(&topo);
        let frees = [
            all(16),
            all(16) & !mask(&[0, 3, 9]),
            mask(&[1, 2, 4, 5, 6, 7, 8, 10, 11, 14]),
        ];
        for free in frees {
            for (k, collective) in [
                (1, Collective::Ring),
                (2, Collective::Ring),
                (4, Collective::Ring),
                (4, Collective::AllToAll),
                (8, Collective::Ring),
            ] {
                let req = SetRequest::new(k, collective);
                check_case(&topo, &shape, &mut oracle, free, &req)
                    .unwrap_or_else(|e| panic!("free {free:#x}, {req:?}: {e}"));
            }
        }
    }
}

#[test]
fn twin_dgx1_eight_gpus_take_one_board() {
    let topo = twin_dgx1();
    let shape = topo.shape();
    let choice = shape
        .choose(all(16), &SetRequest::new(8, Collective::Ring))
        .expect("fits");
    // A board's NV2 links form one 8-cycle: 0-3-2-1-5-6-7-4-0.
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(2)));
    assert!(choice.gpus.iter().all(|&g| g < 8) || choice.gpus.iter().all(|&g| g >= 8));
    assert_eq!(choice.numa_nodes, 2);
}

// ---------------------------------------------------------------------------
// Real shapes
// ---------------------------------------------------------------------------

fn choose(topo: &Topo, free: u32, k: u32, collective: Collective) -> GpuSetChoice {
    topo.shape()
        .choose(free, &SetRequest::new(k, collective))
        .unwrap_or_else(|e| panic!("{k} GPUs should fit: {e}"))
}

fn one_socket(gpus: &[u32]) -> bool {
    gpus.iter().all(|&g| g < 4) || gpus.iter().all(|&g| g >= 4)
}

#[test]
fn dgx1_quad_on_an_empty_node_is_an_nv1_ring_in_one_socket() {
    let choice = choose(&dgx1(), all(8), 4, Collective::Ring);
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(1)));
    assert!(one_socket(&choice.gpus), "{choice:?}");
    assert_eq!(choice.numa_nodes, 1);
    assert_eq!(choice.gpus, vec![0, 1, 2, 3]);
    assert_eq!(
        choice.decided_by,
        DecidedBy::LowestIndices,
        "GPUs 4-7 are its mirror image"
    );
    assert!(
        choice.explanation.contains("ring bottleneck NV1"),
        "{}",
        choice.explanation
    );
    assert!(
        choice.explanation.contains("1 NUMA node"),
        "{}",
        choice.explanation
    );
    assert_eq!(choice.score, 100, "{}", choice.explanation);
}

#[test]
fn dgx1_pair_is_an_nv2_pair_in_one_socket() {
    let choice = choose(&dgx1(), all(8), 2, Collective::Ring);
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(2)));
    assert!(one_socket(&choice.gpus));
    // {0,4} is NV2 too, but spans both sockets.
    let across = dgx1()
        .shape()
        .choose(mask(&[0, 4]), &SetRequest::new(2, Collective::Ring));
    assert_eq!(across.map(|c| c.numa_nodes).ok(), Some(2));
}

#[test]
fn dgx1_single_gpu_after_one_socket_is_taken_keeps_nv2_pairs() {
    let topo = dgx1();
    let shape = topo.shape();
    let free = mask(&[0, 1, 2, 3]);
    let choice = shape
        .choose(free, &SetRequest::new(1, Collective::Ring))
        .expect("fits");
    assert_eq!(choice.bottleneck, None, "a single GPU crosses no link");
    let pairs = choice.leftover.slot(2).expect("pair slot");
    assert_eq!(pairs.best_ring, Some(LinkClass::Nv(2)));
    // Every other single GPU would leave at most as many NV2 pairs.
    for g in 0..4 {
        let left = shape.leftover(free & !(1 << g));
        let other = left.slot(2).expect("pair slot");
        assert!((other.best_ring, other.sets) <= (pairs.best_ring, pairs.sets));
    }
    assert_eq!(
        pairs.sets, 2,
        "taking 0 or 1 keeps two NV2 pairs; 2 or 3 keeps one"
    );
    assert!(choice.gpus == vec![0] || choice.gpus == vec![1]);
}

#[test]
fn a100_nvswitch_all_to_all() {
    let topo = a100_nv12();
    let quad = choose(&topo, all(8), 4, Collective::AllToAll);
    assert_eq!(quad.bottleneck, Some(LinkClass::Nv(12)));
    assert_eq!(quad.numa_nodes, 1);
    let eight = choose(&topo, all(8), 8, Collective::AllToAll);
    assert_eq!(
        (eight.bottleneck, eight.numa_nodes, eight.score),
        (Some(LinkClass::Nv(12)), 2, 100)
    );

    let shape = topo.shape();
    let mut req = SetRequest::new(4, Collective::AllToAll);
    req.min_nvlink_level = Some(12);
    assert!(shape.choose(all(8), &req).is_ok());
    req.min_nvlink_level = Some(18);
    let err = shape.choose(all(8), &req).expect_err("no NV18 on A100");
    assert_eq!(err.summary(), "no 4-GPU set with NV18");

    let mut req = SetRequest::new(5, Collective::Ring);
    req.single_numa_node = true;
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::SingleNumaNode {
            requested: 5,
            largest_group: 4
        })
    ));
    // A 3-GPU request next to a busy GPU 0: {1,2,3} and {4,5,6} leave equally
    // good NV12 sets (the leftover measure does not look at NUMA); lower indices win.
    let three = shape
        .choose(all(8) & !1, &SetRequest::new(3, Collective::Ring))
        .expect("fits");
    assert_eq!(three.gpus, vec![1, 2, 3]);
}

#[test]
fn pcie_box_pairs_take_a_pix_switch_and_quads_stay_in_a_socket() {
    let topo = pcie_pix_pairs();
    let pair = choose(&topo, all(8), 2, Collective::Ring);
    assert_eq!(pair.bottleneck, Some(LinkClass::Pix));
    let quad = choose(&topo, all(8), 4, Collective::Ring);
    assert!(one_socket(&quad.gpus), "{quad:?}");
    assert_eq!(quad.bottleneck, Some(LinkClass::Phb));
    // With one GPU of each socket busy, a quad must still avoid SYS if it can't: it can't.
    let split = choose(&topo, all(8) & !mask(&[0, 4]), 4, Collective::Ring);
    assert_eq!(split.bottleneck, Some(LinkClass::Sys));
    // A single GPU next to a busy GPU 0 takes its PIX partner, keeping 2-3, 4-5, 6-7 whole.
    let single = choose(&topo, all(8) & !1, 1, Collective::Ring);
    assert_eq!(single.gpus, vec![1]);

    let node = pcie_node_sys();
    let quad = choose(&node, all(8), 4, Collective::Ring);
    assert!(one_socket(&quad.gpus));
    assert_eq!(quad.bottleneck, Some(LinkClass::Node));
    let quad = choose(&node, all(8) & !mask(&[1]), 4, Collective::Ring);
    assert_eq!(quad.gpus, vec![4, 5, 6, 7], "socket 0 has only 3 free");
}

#[test]
fn bridged_pairs_single_gpu_takes_the_orphan() {
    for topo in [bridged_pairs(), bridged_pairs_4numa()] {
        let all_free = choose(&topo, all(4), 1, Collective::Ring);
        assert_eq!(
            all_free.gpus,
            vec![0],
            "either pair is equivalent; lowest index"
        );
        let orphan = choose(&topo, all(4) & !mask(&[0]), 1, Collective::Ring);
        assert_eq!(orphan.gpus, vec![1], "{}", orphan.explanation);
        assert_eq!(orphan.decided_by, DecidedBy::Leftover);
        assert!(
            orphan.explanation.contains("best pair NV12"),
            "{}",
            orphan.explanation
        );
        let orphan = choose(&topo, all(4) & !mask(&[3]), 1, Collective::Ring);
        assert_eq!(orphan.gpus, vec![2]);
        let pair = choose(&topo, all(4) & !mask(&[0]), 2, Collective::Ring);
        assert_eq!(
            (pair.gpus, pair.bottleneck),
            (vec![2, 3], Some(LinkClass::Nv(12)))
        );
    }
}

#[test]
fn eight_bridged_pairs_keep_intact_pairs_whole() {
    // Four NV12 bridged pairs (0-1, 2-3, 4-5, 6-7), SYS otherwise; GPU 6 busy:
    // a single GPU must take 7, not break the lower-indexed pair 0-1.
    let link = (0..8)
        .map(|i: usize| {
            (0..8)
                .map(|j: usize| {
                    if i / 2 == j / 2 {
                        LinkClass::Nv(12)
                    } else {
                        LinkClass::Sys
                    }
                })
                .collect()
        })
        .collect();
    let topo = Topo {
        link,
        facts: (0..8).map(|i| Facts::numa(i / 4)).collect(),
    };
    let choice = choose(&topo, all(8) & !mask(&[6]), 1, Collective::Ring);
    assert_eq!(choice.gpus, vec![7], "{}", choice.explanation);
}

#[test]
fn constraints_and_reasons() {
    let mut topo = dgx1();
    topo.facts[0].mig = true;
    topo.facts[1].memory_mib = Some(16_384);
    topo.facts[2].memory_mib = None;
    topo.facts[5].numa = None;
    let shape = topo.shape();

    let req = SetRequest::new(9, Collective::Ring);
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::TooFewFreeGpus {
            requested: 9,
            free: 8
        })
    ));

    let req = SetRequest::new(8, Collective::Ring);
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::MigEnabled { usable: 7, .. })
    ));
    let req = SetRequest {
        allow_mig: true,
        ..req
    };
    assert!(shape.choose(all(8), &req).is_ok());

    let req = SetRequest {
        min_memory_mib: Some(32_768),
        ..SetRequest::new(6, Collective::Ring)
    };
    let err = shape
        .choose(all(8), &req)
        .expect_err("GPU 0 MIG, 1 small, 2 unknown");
    assert_eq!(
        err,
        NoFitReason::InsufficientMemory {
            requested: 6,
            min_memory_mib: 32_768,
            eligible: 5
        }
    );
    assert_eq!(err.summary(), "too few free GPUs with 32768 MiB");

    // Socket 1 has 4 GPUs but GPU 5's NUMA node is unknown: no single node holds 4.
    let req = SetRequest {
        single_numa_node: true,
        ..SetRequest::new(4, Collective::Ring)
    };
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::SingleNumaNode {
            largest_group: 3,
            ..
        })
    ));
    let three = shape
        .choose(all(8), &SetRequest { gpus: 3, ..req })
        .expect("3 fit in one NUMA node");
    assert!(!three.gpus.contains(&5) && !three.gpus.contains(&0));

    let req = SetRequest {
        min_nvlink_level: Some(2),
        ..SetRequest::new(3, Collective::Ring)
    };
    assert!(matches!(
        shape.choose(all(8), &req),
        Err(NoFitReason::NoNvlinkSet { level: 2, .. })
    ));
    let single = shape
        .choose(all(8), &SetRequest { gpus: 1, ..req })
        .expect("vacuous");
    assert_eq!(single.gpus.len(), 1);
    let none = shape
        .choose(0, &SetRequest::new(0, Collective::Ring))
        .expect("nothing asked");
    assert!(none.gpus.is_empty());
}

#[test]
fn fragmentation_measures() {
    let bridged = bridged_pairs().shape();
    assert_eq!(stranded_free_gpus(&bridged, all(4), 2), 0);
    assert_eq!(
        stranded_free_gpus(&bridged, all(4) & !1, 2),
        1,
        "GPU 1 lost its partner"
    );
    assert_eq!(
        stranded_free_gpus(&bridged, all(4), 4),
        0,
        "a SYS quad is the node's best"
    );
    assert_eq!(
        stranded_free_gpus(&bridged, all(4) & !1, 4),
        3,
        "too few left"
    );
    assert_eq!(stranded_free_gpus(&bridged, all(4) & !1, 1), 0);
    assert_eq!(full_nvlink_slots(&bridged, all(4), 2), 2);
    assert_eq!(full_nvlink_slots(&bridged, all(4) & !1, 2), 1);
    assert_eq!(full_nvlink_slots(&bridged, all(4), 4), 0);

    let nv12 = a100_nv12().shape();
    assert_eq!(full_nvlink_slots(&nv12, all(8), 8), 1);
    assert_eq!(full_nvlink_slots(&nv12, all(8), 4), 2);
    assert_eq!(full_nvlink_slots(&nv12, all(8) & !1, 4), 1);
    assert_eq!(stranded_free_gpus(&nv12, all(8) & !1, 4), 0);
    assert_eq!(stranded_free_gpus(&nv12, mask(&[0, 1, 2]), 4), 3);

    let dgx1 = dgx1().shape();
    assert_eq!(
        full_nvlink_slots(&dgx1, all(8), 8),
        0,
        "SYS pairs across sockets"
    );
    assert_eq!(full_nvlink_slots(&dgx1, all(8), 4), 2);
    assert_eq!(full_nvlink_slots(&dgx1, all(8), 2), 4);
    assert_eq!(stranded_free_gpus(&dgx1, all(8), 2), 0);
    // 0's NV2 partners are 3 and 4: with both busy, 0 can only join NV1 pairs.
    assert_eq!(stranded_free_gpus(&dgx1, all(8) & !mask(&[3, 4]), 2), 1);

    let pcie = pcie_pix_pairs().shape();
    assert_eq!(full_nvlink_slots(&pcie, all(8), 2), 0);
    assert_eq!(stranded_free_gpus(&pcie, all(8) & !1, 2), 1);
}

#[test]
fn catalog_shares_shapes_and_tables() {
    let mut catalog = ShapeCatalog::new();
    let a = catalog.shape(&dgx1().spec()).expect("valid");
    let b = catalog.shape(&dgx1().spec()).expect("valid");
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    let mut other = dgx1();
    other.facts[7].mig = true;
    let c = catalog.shape(&other.spec()).expect("valid");
    assert!(!std::sync::Arc::ptr_eq(&a, &c));
    assert_eq!((catalog.len(), catalog.link_matrices()), (2, 1));

    // Shared between scheduler threads.
    fn shareable<T: Send + Sync>(_: &T) {}
    shareable(&*a);
    // The documented table sizes: a few KiB at 8 GPUs, about 0.7 MiB at 16.
    assert!(a.table_bytes() < 8 * 1024, "{}", a.table_bytes());
    let sixteen = twin_dgx1().shape().table_bytes();
    assert!((600 * 1024..800 * 1024).contains(&sixteen), "{sixteen}");
}

#[test]
fn bad_specs_are_typed_errors() {
    use gputopo_scheduler_core::gpuset::ShapeError;
    let mut spec = bridged_pairs().spec();
    spec.links.push(GpuLink {
        a: 1,
        b: 0,
        link_type: gputopo_api::LinkType::Sys,
        nvlinks: 0,
        hops: None,
        weight: None,
        bandwidth: None,
    });
    assert!(matches!(
        NodeShape::from_spec(&spec),
        Err(ShapeError::ConflictingLinks { .. })
    ));
    let mut spec = bridged_pairs().spec();
    spec.gpus[3].index = 40;
    assert!(matches!(
        NodeShape::from_spec(&spec),
        Err(ShapeError::IndexTooLarge { index: 40 })
    ));
    let mut spec = bridged_pairs().spec();
    spec.gpus.clear();
    assert!(matches!(
        NodeShape::from_spec(&spec),
        Err(ShapeError::NoGpus)
    ));
    // A missing pair reads as SYS.
    let mut spec = bridged_pairs().spec();
    spec.links.retain(|l| (l.a, l.b) != (0, 1));
    let shape = NodeShape::from_spec(&spec).expect("valid");
    assert_eq!(shape.link(0, 1), Some(LinkClass::Sys));
}

// ---------------------------------------------------------------------------
// The heuristic, on shapes where the optimum is known and beyond
// ---------------------------------------------------------------------------

/// A reproducible random node: links from a palette of mesh-like classes,
/// two NUMA nodes (a tiny linear congruential generator; no crate needed).
fn seeded_topo(n: usize, seed: u64) -> Topo {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    let palette = [
        LinkClass::Sys,
        LinkClass::Node,
        LinkClass::Nv(1),
        LinkClass::Nv(2),
    ];
    let link = symmetric(n, |_, _| palette[next() % palette.len()]);
    let facts = (0..n).map(|i| Facts::numa((2 * i / n) as i32)).collect();
    Topo { link, facts }
}

#[test]
fn heuristic_gap_on_real_and_random_shapes() {
    let mut lines = Vec::new();
    for (name, topo, step) in [
        ("dgx1", dgx1(), 1u32),
        ("pcie-pix", pcie_pix_pairs(), 1),
        ("twin-dgx1", twin_dgx1(), 4099),
        ("random-12a", seeded_topo(12, 1), 97),
        ("random-12b", seeded_topo(12, 2), 97),
        ("random-16", seeded_topo(16, 3), 4099),
    ] {
        let shape = topo.shape();
        let n = topo.n() as u32;
        let mut cases = Vec::new();
        let mut free = all(n as usize);
        loop {
            for k in 1..=n.min(8) {
                for collective in [Collective::Ring, Collective::AllToAll] {
                    cases.push((free, SetRequest::new(k, collective)));
                }
            }
            if free < step {
                break;
            }
            free -= step;
        }
        let report = heuristic_gap(&shape, cases).expect("exact shape");
        assert_eq!(report.missed, 0, "{name}: no NVLink floor, nothing to miss");
        lines.push(format!("{name}: {report:?}"));
    }
    eprintln!("{}", lines.join("\n"));
}

#[test]
fn large_domains_use_the_heuristic() {
    // 32 GPUs behind NVSwitch (NV18), two NUMA nodes of 16.
    let n = 32;
    let link = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        LinkClass::Sys
                    } else {
                        LinkClass::Nv(18)
                    }
                })
                .collect()
        })
        .collect();
    let topo = Topo {
        link,
        facts: (0..n).map(|i| Facts::numa(i / 16)).collect(),
    };
    let shape = topo.shape();
    assert!(!shape.is_exact());
    let choice = shape
        .choose(!mask(&[0, 1, 2]), &SetRequest::new(8, Collective::Ring))
        .expect("fits");
    assert_eq!(choice.method, Method::Heuristic);
    assert_eq!(choice.bottleneck, Some(LinkClass::Nv(18)));
    assert_eq!(choice.numa_nodes, 1);
    assert_eq!(full_nvlink_slots(&shape, u32::MAX, 8), 4);
    assert_eq!(stranded_free_gpus(&shape, !1, 8), 0);

    // Three DGX-1 boards as one 24-GPU node: 8 GPUs take one board's NV1 ring.
    let one = dgx1();
    let link = (0..24)
        .map(|i| {
            (0..24)
                .map(|j| {
                    if i / 8 == j / 8 {
                        one.link[i % 8][j % 8]
                    } else {
                        LinkClass::Sys
                    }
                })
                .collect()
        })
        .collect();
    let topo = Topo {
        link,
        facts: (0..24).map(|i| Facts::numa(i / 4)).collect(),
    };
    let shape = topo.shape();
    for k in 1..=8 {
        let choice = shape
            .choose(all(24), &SetRequest::new(k, Collective::Ring))
            .expect("fits");
        let best_possible = dgx1()
            .shape()
            .choose(all(8), &SetRequest::new(k, Collective::Ring));
        assert_eq!(
            choice.bottleneck,
            best_possible.expect("fits").bottleneck,
            "k = {k}: {}",
            choice.explanation
        );
    }
    let mut req = SetRequest::new(4, Collective::AllToAll);
    req.min_nvlink_level = Some(1);
    req.single_numa_node = true;
    let quad = shape
        .choose(all(24) & !mask(&[0]), &req)
        .expect("a socket is an NV clique");
    assert_eq!(quad.numa_nodes, 1);
    assert_eq!(quad.bottleneck, Some(LinkClass::Nv(1)));
}

#[test]
fn explanations_name_the_bottleneck_and_the_deciding_rule() {
    let cases = [
        (dgx1(), all(8), SetRequest::new(4, Collective::Ring)),
        (dgx1(), all(8), SetRequest::new(2, Collective::Ring)),
        (
            dgx1(),
            mask(&[0, 4, 5]),
            SetRequest::new(2, Collective::Ring),
        ),
        (
            pcie_pix_pairs(),
            all(8) & !mask(&[0, 4]),
            SetRequest::new(4, Collective::Ring),
        ),
        (
            bridged_pairs(),
            all(4) & !1,
            SetRequest::new(1, Collective::Ring),
        ),
        (
            a100_nv12(),
            all(8) & !1,
            SetRequest::new(4, Collective::AllToAll),
        ),
        (
            a100_nv12(),
            mask(&[3, 4]),
            SetRequest::new(2, Collective::AllToAll),
        ),
    ];
    for (topo, free, request) in cases {
        let choice = topo.shape().choose(free, &request).expect("fits");
        eprintln!("{}  [score {}]", choice.explanation, choice.score);
        let class = choice.bottleneck.map(|c| c.to_string());
        match class {
            Some(class) => assert!(
                choice.explanation.contains(&class),
                "{}",
                choice.explanation
            ),
            None => assert!(
                choice.explanation.contains("no link"),
                "{}",
                choice.explanation
            ),
        }
        let rule = match choice.decided_by {
            DecidedBy::OnlyCandidate => "only feasible set",
            DecidedBy::Bottleneck => "the strongest",
            DecidedBy::NumaNodes => "fewer NUMA nodes",
            DecidedBy::Leftover => "better connected",
            DecidedBy::LowestIndices => "lower indices",
        };
        assert!(choice.explanation.contains(rule), "{}", choice.explanation);
        assert_eq!(
            choice.assigned_gpus(),
            choice
                .gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
}
