//! The node models of the benchmark cluster and what a GPU set is worth on
//! them: built from recorded `nvidia-smi topo -m` outputs with the agent's
//! parser and normalizer, as `gputopo-agent --nvidia-smi-topo` publishes them.

use anyhow::{Context, Result, bail};
use gputopo_api::{GpuTopologySpec, LinkClass};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use std::path::Path;

/// One machine type of the cluster.
pub struct ModelDef {
    /// Short name, used in tables and JSON.
    pub key: &'static str,
    pub description: &'static str,
    /// Under the fixtures directory.
    pub fixture: &'static str,
}

/// The four machine types, in the order leaves cycle through them.
pub const MODEL_DEFS: [ModelDef; 4] = [
    ModelDef {
        key: "hgx-h100",
        description: "HGX H100 SXM, 8 GPUs on NVSwitch (NV18 every pair)",
        fixture: "nvidia/hgx-h100-80gb-hbm3-8gpu-12nic-driver580-header-no-leading-tab-topo-m.txt",
    },
    ModelDef {
        key: "dgx-a100",
        description: "DGX A100, 8 GPUs on NVSwitch (NV12 every pair)",
        fixture: "nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt",
    },
    ModelDef {
        key: "dgx1-v100",
        description: "DGX-1 V100, 8 GPUs in a hybrid cube-mesh (NV1/NV2, some pairs SYS)",
        fixture: "nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt",
    },
    ModelDef {
        key: "pcie-4090",
        description: "8x RTX 4090 PCIe, two sockets (PHB pairs, NODE, SYS across sockets)",
        fixture: "nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt",
    },
];

/// A machine type with its link table and, for every set of its GPUs (a
/// bit mask), the weakest hop of the best ring through it.
pub struct Model {
    pub key: &'static str,
    pub description: &'static str,
    pub fixture: &'static str,
    pub spec: GpuTopologySpec,
    pub gpus: usize,
    link: Vec<Vec<Option<LinkClass>>>,
    /// `ring[mask]`: the best ring's weakest hop (`None` below 2 GPUs).
    ring: Vec<Option<LinkClass>>,
    /// `best[k]`: the best `ring` over every k-GPU set of an empty node.
    best: Vec<Option<LinkClass>>,
}

impl Model {
    /// Parses and normalizes the fixture.
    pub fn load(def: &ModelDef, fixtures: &Path) -> Result<Model> {
        let path = fixtures.join(def.fixture);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let facts = facts_from_topo(&text)
            .with_context(|| format!("parsing {} as nvidia-smi topo -m", path.display()))?;
        let spec = normalize(def.key, &facts)
            .with_context(|| format!("normalizing {}", path.display()))?;
        Model::from_spec(def, spec)
    }

    fn from_spec(def: &ModelDef, spec: GpuTopologySpec) -> Result<Model> {
        let n = spec.gpus.len();
        if n == 0 || n > 12 {
            bail!(
                "{}: {n} GPUs; the benchmark handles 1 to 12 per node",
                def.fixture
            );
        }
        let mut link = vec![vec![None; n]; n];
        for l in &spec.links {
            let (a, b) = (l.a as usize, l.b as usize);
            if a < n && b < n {
                link[a][b] = Some(l.class());
                link[b][a] = Some(l.class());
            }
        }
        let mut model = Model {
            key: def.key,
            description: def.description,
            fixture: def.fixture,
            spec,
            gpus: n,
            link,
            ring: Vec::new(),
            best: vec![None; n + 1],
        };
        model.ring = (0..1u32 << n).map(|m| model.compute_ring(m)).collect();
        for mask in 0..1u32 << n {
            let k = mask.count_ones() as usize;
            model.best[k] = model.best[k].max(model.ring[mask as usize]);
        }
        Ok(model)
    }

    /// The link between two GPUs (`SYS` when the topology lists none).
    pub fn link(&self, a: usize, b: usize) -> LinkClass {
        self.link[a][b].unwrap_or(LinkClass::Sys)
    }

    fn compute_ring(&self, mask: u32) -> Option<LinkClass> {
        let set = indices(mask);
        match set.len() {
            0 | 1 => None,
            2 => Some(self.link(set[0], set[1])),
            _ => {
                // Fix the first GPU; search the rest, keeping the best
                // weakest hop (k ≤ 12, and 8 at most in practice).
                let mut best = None;
                let mut path = vec![set[0]];
                let mut used = vec![false; set.len()];
                used[0] = true;
                self.search(&set, &mut path, &mut used, None, &mut best);
                best
            }
        }
    }

    fn search(
        &self,
        set: &[usize],
        path: &mut Vec<usize>,
        used: &mut [bool],
        weakest: Option<LinkClass>,
        best: &mut Option<LinkClass>,
    ) {
        let last = *path.last().expect("a path starts with one GPU");
        if path.len() == set.len() {
            let closing = self.link(last, path[0]);
            let w = weakest.map_or(closing, |w| w.min(closing));
            if best.is_none_or(|b| w > b) {
                *best = Some(w);
            }
            return;
        }
        for i in 1..set.len() {
            if used[i] {
                continue;
            }
            let hop = self.link(last, set[i]);
            let w = weakest.map_or(hop, |w| w.min(hop));
            if best.is_some_and(|b| w <= b) {
                continue; // cannot beat the best ring found
            }
            used[i] = true;
            path.push(set[i]);
            self.search(set, path, used, Some(w), best);
            path.pop();
            used[i] = false;
        }
    }

    /// The weakest hop of the best ring through `mask`'s GPUs.
    pub fn ring(&self, mask: u32) -> Option<LinkClass> {
        self.ring[mask as usize]
    }

    /// The best ring bottleneck any k GPUs of an empty node reach.
    pub fn best(&self, k: usize) -> Option<LinkClass> {
        self.best.get(k).copied().flatten()
    }

    /// The best ring bottleneck of k GPUs taken from `free` (None when
    /// fewer than k are free, or k < 2).
    pub fn best_within(&self, free: u32, k: usize) -> Option<LinkClass> {
        if (free.count_ones() as usize) < k || k < 2 {
            return None;
        }
        let mut best = None;
        let mut sub = free;
        loop {
            if sub.count_ones() as usize == k {
                best = best.max(self.ring(sub));
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & free;
        }
        best
    }

    /// Whether every pair of the set is joined by NVLink.
    pub fn all_pairs_nvlink(&self, mask: u32) -> bool {
        let set = indices(mask);
        set.iter().enumerate().all(|(i, &a)| {
            set[i + 1..]
                .iter()
                .all(|&b| matches!(self.link(a, b), LinkClass::Nv(_)))
        })
    }

    /// Whether the node has any NVLink.
    pub fn has_nvlink(&self) -> bool {
        matches!(self.best(2), Some(LinkClass::Nv(_)))
    }

    /// go-gpuallocator's pair score, the best-effort policy's objective
    /// (NVIDIA k8s-device-plugin's GetPreferredAllocation): SYS 10, NODE 20,
    /// PHB 30, PXB 40, PIX 50, NV<k> 100·k. go-gpuallocator knows no XGMI;
    /// it scores between PIX and NV1, as gputopo's `LinkClass` order has it.
    pub fn pair_score(&self, a: usize, b: usize) -> u32 {
        match self.link(a, b) {
            LinkClass::Sys => 10,
            LinkClass::Node => 20,
            LinkClass::Phb => 30,
            LinkClass::Pxb => 40,
            LinkClass::Pix => 50,
            LinkClass::XgmiRouted => 55,
            LinkClass::Xgmi => 60,
            LinkClass::Nv(k) => 100 * k,
        }
    }
}

/// The GPU indices of a mask, ascending.
pub fn indices(mask: u32) -> Vec<usize> {
    (0..32).filter(|i| mask & (1 << i) != 0).collect()
}

/// The mask of GPU indices.
pub fn mask_of(gpus: &[u32]) -> u32 {
    gpus.iter().fold(0, |m, g| m | (1 << g))
}

/// How the stock kube-scheduler's pods get their GPUs: kube-scheduler only
/// counts `nvidia.com/gpu`; which GPUs a pod gets is the kubelet's device
/// manager's and the device plugin's choice, made on the node at admission,
/// which kwok does not run. We replay it in bind order per node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceModel {
    /// The lowest free indices: a device plugin with no preferred allocation.
    FirstFit,
    /// The k free GPUs with the highest sum of go-gpuallocator pair scores
    /// (ties to the lower indices): the NVIDIA device plugin's best-effort
    /// GetPreferredAllocation, as a plain maximisation of its objective.
    BestEffort,
}

impl DeviceModel {
    pub fn key(self) -> &'static str {
        match self {
            DeviceModel::FirstFit => "first-fit",
            DeviceModel::BestEffort => "best-effort",
        }
    }

    /// The k GPUs this model takes from `free`, or None when fewer are free.
    pub fn allocate(self, model: &Model, free: u32, k: usize) -> Option<u32> {
        if (free.count_ones() as usize) < k {
            return None;
        }
        if k == 0 {
            return Some(0);
        }
        match self {
            DeviceModel::FirstFit => Some(
                indices(free)
                    .into_iter()
                    .take(k)
                    .fold(0, |m, g| m | (1 << g)),
            ),
            DeviceModel::BestEffort => {
                // Lower-indices-first order among equal scores: compare the
                // sorted index lists.
                let mut best: Option<(u32, Vec<usize>, u32)> = None;
                let mut sub = free;
                loop {
                    if sub.count_ones() as usize == k {
                        let set = indices(sub);
                        let score: u32 = set
                            .iter()
                            .enumerate()
                            .flat_map(|(i, &a)| set[i + 1..].iter().map(move |&b| (a, b)))
                            .map(|(a, b)| model.pair_score(a, b))
                            .sum();
                        let better = match &best {
                            None => true,
                            Some((s, idx, _)) => score > *s || (score == *s && set < *idx),
                        };
                        if better {
                            best = Some((score, set, sub));
                        }
                    }
                    if sub == 0 {
                        break;
                    }
                    sub = (sub - 1) & free;
                }
                best.map(|(_, _, m)| m)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(i: usize) -> Model {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        Model::load(&MODEL_DEFS[i], &fixtures).expect("fixture loads")
    }

    #[test]
    fn dgx1_rings_and_best_sets() {
        let m = model(2);
        assert_eq!(m.gpus, 8);
        assert_eq!(m.best(2), Some(LinkClass::Nv(2)));
        // {0,1,2,3}: ring 0-3-2-1-0 = NV2, NV2, NV2, NV1.
        assert_eq!(m.ring(0b1111), Some(LinkClass::Nv(1)));
        assert_eq!(m.best(4), Some(LinkClass::Nv(1)));
        // 0 and 5 share no NVLink.
        assert_eq!(m.ring(0b10_0001), Some(LinkClass::Sys));
        assert!(!m.all_pairs_nvlink(0b1111_0000 | 0b1));
        assert!(m.all_pairs_nvlink(0b1111));
        // First fit on an empty node takes {0,1}: NV1, not the best pair.
        let ff = DeviceModel::FirstFit.allocate(&m, 0xff, 2).unwrap();
        assert_eq!(ff, 0b11);
        let be = DeviceModel::BestEffort.allocate(&m, 0xff, 2).unwrap();
        assert_eq!(m.ring(be), Some(LinkClass::Nv(2)));
        // go-gpuallocator's tests: best-effort size 4 on an empty DGX-1 is {0,1,2,3}.
        assert_eq!(DeviceModel::BestEffort.allocate(&m, 0xff, 4), Some(0b1111));
    }

    #[test]
    fn pcie_box_and_nvswitch() {
        let p = model(3);
        assert!(!p.has_nvlink());
        assert_eq!(p.best(2), Some(LinkClass::Phb));
        assert_eq!(p.best_within(0b1010_1010, 2), Some(LinkClass::Node));
        let h = model(0);
        assert_eq!(h.best(8), Some(LinkClass::Nv(18)));
        assert_eq!(h.best_within(0b1000_0001, 2), Some(LinkClass::Nv(18)));
        assert_eq!(h.best_within(0b1000_0000, 2), None);
    }
}
