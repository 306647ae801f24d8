//! The PCIe tree a node's link classes reveal. `nvidia-smi topo -m` names,
//! for each pair of devices (GPUs and NICs), the widest part of the PCIe
//! tree between them: `PIX` one switch, `PXB` several switches, `PHB` the
//! CPU's host bridge, `NODE` across host bridges of one NUMA node, `SYS`
//! across NUMA nodes. So the devices joined by `PIX` or `PXB` sit under one
//! switch (or tree of switches), those joined by any of the three under one
//! host bridge. Pairs joined by NVLink or XGMI hide their PCIe class, but
//! a NIC they share still places them.

use gputopo_api::{GpuTopologySpec, LinkClass, LinkType, NicGpuLink};
use std::collections::BTreeMap;

/// What a drawn PCIe node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcieKind {
    /// Devices joined by `PIX`: one switch.
    Switch,
    /// Devices joined by `PXB` (and `PIX`): a tree of switches.
    Switches,
    /// Devices joined by `PHB` (and the above): one host bridge.
    HostBridge,
}

impl PcieKind {
    pub fn label(self) -> &'static str {
        match self {
            PcieKind::Switch => "PCIe switch",
            PcieKind::Switches => "PCIe switches",
            PcieKind::HostBridge => "host bridge",
        }
    }

    /// The `topo -m` class of the devices it joins.
    pub fn class(self) -> &'static str {
        match self {
            PcieKind::Switch => "PIX",
            PcieKind::Switches => "PXB",
            PcieKind::HostBridge => "PHB",
        }
    }
}

/// A PCIe switch or host bridge and the devices right under it.
#[derive(Clone, Debug, PartialEq)]
pub struct Pcie {
    pub kind: PcieKind,
    /// GPUs under it and under no drawn switch below it.
    pub gpus: Vec<u32>,
    /// NICs (indices into [`PcieTree::nics`]) likewise.
    pub nics: Vec<usize>,
    /// The host bridge above a switch, when drawn.
    pub parent: Option<usize>,
    /// Every GPU below it, switches below included.
    pub all_gpus: Vec<u32>,
}

/// A NIC and where it hangs.
#[derive(Clone, Debug, PartialEq)]
pub struct Nic {
    pub name: String,
    /// The switch or host bridge it is under, when drawn.
    pub up: Option<usize>,
    /// The class it reaches its nearest GPUs with (`None`: no GPU link known).
    pub class: Option<LinkType>,
    pub near: Vec<u32>,
}

/// The drawn PCIe nodes and NICs of a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PcieTree {
    pub nodes: Vec<Pcie>,
    pub nics: Vec<Nic>,
    gpu_up: BTreeMap<u32, usize>,
    /// Per GPU: (first GPU of its host-bridge group, first GPU of its switch group).
    keys: BTreeMap<u32, (u32, u32)>,
}

/// Union-find over device ids.
struct Sets(Vec<usize>);

impl Sets {
    fn new(n: usize) -> Sets {
        Sets((0..n).collect())
    }
    fn find(&mut self, x: usize) -> usize {
        let mut r = x;
        while self.0[r] != r {
            r = self.0[r];
        }
        self.0[x] = r;
        r
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        self.0[ra.max(rb)] = ra.min(rb);
    }
}

/// The three partitions, one device id per GPU (by position) then per NIC.
struct Partitions {
    pix: Sets,
    tree: Sets,
    bridge: Sets,
}

impl Partitions {
    fn join(&mut self, a: usize, b: usize, t: LinkType) {
        match t {
            LinkType::Pix => {
                self.pix.union(a, b);
                self.tree.union(a, b);
                self.bridge.union(a, b);
            }
            LinkType::Pxb => {
                self.tree.union(a, b);
                self.bridge.union(a, b);
            }
            LinkType::Phb => self.bridge.union(a, b),
            _ => {}
        }
    }
}

impl PcieTree {
    pub fn new(spec: &GpuTopologySpec) -> PcieTree {
        let gpus: Vec<u32> = spec.gpus.iter().map(|g| g.index).collect();
        let id = |gpu: u32| gpus.iter().position(|&g| g == gpu);
        let devices = gpus.len() + spec.nics.len();
        let mut parts = Partitions {
            pix: Sets::new(devices),
            tree: Sets::new(devices),
            bridge: Sets::new(devices),
        };
        for l in &spec.links {
            if let (Some(a), Some(b)) = (id(l.a), id(l.b)) {
                parts.join(a, b, l.link_type);
            }
        }
        for (j, nic) in spec.nics.iter().enumerate() {
            for l in &nic.gpu_links {
                if let Some(g) = id(l.gpu) {
                    parts.join(gpus.len() + j, g, l.link_type);
                }
            }
        }
        let mut tree = PcieTree::default();
        tree.place(&gpus, &mut parts);
        tree.nics = spec
            .nics
            .iter()
            .enumerate()
            .map(|(j, nic)| {
                let (class, near) = nearest_gpus(&nic.gpu_links);
                let up = tree.nodes.iter().position(|n| n.nics.contains(&j));
                Nic {
                    name: nic.name.clone(),
                    up,
                    class,
                    near,
                }
            })
            .collect();
        tree
    }

    /// Builds the nodes from the partitions: host bridges holding more
    /// than one switch group, switch groups of two devices or more, each
    /// with a GPU.
    fn place(&mut self, gpus: &[u32], parts: &mut Partitions) {
        let devices = parts.tree.0.len();
        let members = |sets: &mut Sets| {
            let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for d in 0..devices {
                by_root.entry(sets.find(d)).or_default().push(d);
            }
            by_root
        };
        let trees = members(&mut parts.tree);
        let bridges = members(&mut parts.bridge);
        let first_gpu = |m: &[usize]| {
            m.iter()
                .filter(|&&d| d < gpus.len())
                .map(|&d| gpus[d])
                .min()
        };
        for (d, &g) in gpus.iter().enumerate() {
            let b = first_gpu(&bridges[&parts.bridge.find(d)]).unwrap_or(g);
            let t = first_gpu(&trees[&parts.tree.find(d)]).unwrap_or(g);
            self.keys.insert(g, (b, t));
        }
        let mut node_of: BTreeMap<(bool, usize), usize> = BTreeMap::new();
        for (root, m) in &bridges {
            let mut tree_roots: Vec<usize> = m.iter().map(|&d| parts.tree.find(d)).collect();
            tree_roots.sort_unstable();
            tree_roots.dedup();
            if m.len() >= 2 && first_gpu(m).is_some() && tree_roots.len() >= 2 {
                node_of.insert((true, *root), self.nodes.len());
                self.nodes
                    .push(self.node(PcieKind::HostBridge, m, gpus, None));
            }
        }
        for (root, m) in &trees {
            if m.len() >= 2 && first_gpu(m).is_some() {
                let pix = parts.pix.find(m[0]);
                let kind = if m.iter().all(|&d| parts.pix.find(d) == pix) {
                    PcieKind::Switch
                } else {
                    PcieKind::Switches
                };
                let parent = node_of.get(&(true, parts.bridge.find(m[0]))).copied();
                node_of.insert((false, *root), self.nodes.len());
                self.nodes.push(self.node(kind, m, gpus, parent));
            }
        }
        // Each device right under the lowest drawn node holding it.
        for d in 0..devices {
            let up = node_of
                .get(&(false, parts.tree.find(d)))
                .or_else(|| node_of.get(&(true, parts.bridge.find(d))))
                .copied();
            let Some(up) = up else { continue };
            if d < gpus.len() {
                self.nodes[up].gpus.push(gpus[d]);
                self.gpu_up.insert(gpus[d], up);
            } else {
                self.nodes[up].nics.push(d - gpus.len());
            }
        }
    }

    fn node(&self, kind: PcieKind, members: &[usize], gpus: &[u32], parent: Option<usize>) -> Pcie {
        let mut all_gpus: Vec<u32> = members
            .iter()
            .filter(|&&d| d < gpus.len())
            .map(|&d| gpus[d])
            .collect();
        all_gpus.sort_unstable();
        Pcie {
            kind,
            gpus: Vec::new(),
            nics: Vec::new(),
            parent,
            all_gpus,
        }
    }

    /// The drawn node a GPU hangs from.
    pub fn up(&self, gpu: u32) -> Option<usize> {
        self.gpu_up.get(&gpu).copied()
    }

    /// Orders a GPU among its NUMA node's: by host bridge, then switch.
    pub fn sort_key(&self, gpu: u32) -> (u32, u32) {
        self.keys.get(&gpu).copied().unwrap_or((gpu, gpu))
    }
}

/// The PCIe class a NIC reaches its nearest GPUs with, and those GPUs.
pub fn nearest_gpus(links: &[NicGpuLink]) -> (Option<LinkType>, Vec<u32>) {
    let best = links.iter().map(|l| LinkClass::new(l.link_type, 0)).max();
    let near = links
        .iter()
        .filter(|l| Some(LinkClass::new(l.link_type, 0)) == best)
        .map(|l| l.gpu)
        .collect();
    (best.map(LinkClass::link_type), near)
}
