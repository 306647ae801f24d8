//! What is asked of one node, what comes back, and why nothing may fit.

use super::mask::{bits, index_list, indices};
use gputopo_api::{Collective, GpuRequest, LinkClass};
use std::cmp::Ordering;
use std::fmt;

/// One pod's request for a GPU set on one node, with its hard constraints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SetRequest {
    /// Whole GPUs wanted (`k`).
    pub gpus: u32,
    pub collective: Collective,
    /// Hard: every pair of the set joined by at least this many NVLinks
    /// (`LinkClass::Nv(j)`, `j ≥ level`). `None` and `Some(0)` ask nothing. A
    /// single GPU has no pair and meets any level.
    pub min_nvlink_level: Option<u32>,
    /// Hard: per-GPU memory at least this. A GPU whose memory is unknown does not qualify.
    pub min_memory_mib: Option<u64>,
    /// MIG-enabled GPUs are left out unless this is set. A GPU whose MIG mode is
    /// unknown counts as MIG-disabled.
    pub allow_mig: bool,
    /// The node's kubelet runs the Topology Manager `single-numa-node` policy: the
    /// set must lie in one NUMA node. GPUs whose NUMA node is unknown belong to
    /// no NUMA node and so are never chosen in this mode.
    pub single_numa_node: bool,
}

impl SetRequest {
    /// `gpus` GPUs for `collective`, without constraints.
    pub fn new(gpus: u32, collective: Collective) -> SetRequest {
        SetRequest {
            gpus,
            collective,
            ..SetRequest::default()
        }
    }

    /// The node-independent part of a pod's parsed request. `single_numa_node`
    /// is a property of the node's kubelet, so the caller sets it per node.
    pub fn from_gpu_request(request: &GpuRequest) -> SetRequest {
        SetRequest {
            gpus: request.gpus,
            collective: request.collective,
            min_nvlink_level: request.min_nvlink_level,
            min_memory_mib: request.gpu_memory_mib,
            allow_mig: false,
            single_numa_node: false,
        }
    }
}

/// Why no GPU set on a node fits a request: the first hard constraint, in this
/// order, that leaves no candidate. `Display` gives the per-node detail;
/// [`NoFitReason::summary`] the node-independent phrase that a `FailedScheduling`
/// event counts over nodes (`24 no 4-GPU set with NV12`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoFitReason {
    /// Fewer free GPUs than requested.
    TooFewFreeGpus { requested: u32, free: u32 },
    /// Enough free GPUs, but too few once MIG-enabled GPUs are left out.
    MigEnabled { requested: u32, usable: u32 },
    /// Too few of the remaining GPUs have at least `min_memory_mib` (or their memory is unknown).
    InsufficientMemory {
        requested: u32,
        min_memory_mib: u64,
        eligible: u32,
    },
    /// No NUMA node holds `requested` eligible GPUs (`single-numa-node` policy).
    SingleNumaNode { requested: u32, largest_group: u32 },
    /// No set of eligible GPUs has every pair joined by at least `level` NVLinks
    /// (within one NUMA node when `single_numa_node`).
    NoNvlinkSet {
        requested: u32,
        level: u32,
        single_numa_node: bool,
    },
}

impl NoFitReason {
    /// The phrase for an aggregated `FailedScheduling` message: it depends on the
    /// request only, never on the node, so equal reasons count together.
    pub fn summary(&self) -> String {
        match *self {
            NoFitReason::TooFewFreeGpus { .. } => "too few free GPUs".to_string(),
            NoFitReason::MigEnabled { .. } => "too few free GPUs without MIG".to_string(),
            NoFitReason::InsufficientMemory { min_memory_mib, .. } => {
                format!("too few free GPUs with {min_memory_mib} MiB")
            }
            NoFitReason::SingleNumaNode { requested, .. } => {
                format!("no NUMA node with {requested} free GPUs")
            }
            NoFitReason::NoNvlinkSet {
                requested,
                level,
                single_numa_node,
            } => {
                let within = if single_numa_node {
                    " in one NUMA node"
                } else {
                    ""
                };
                format!("no {requested}-GPU set with NV{level}{within}")
            }
        }
    }
}

impl fmt::Display for NoFitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NoFitReason::TooFewFreeGpus { requested, free } => {
                write!(f, "too few free GPUs: {free} free, {requested} requested")
            }
            NoFitReason::MigEnabled { requested, usable } => write!(
                f,
                "too few free GPUs without MIG: {usable} usable, {requested} requested"
            ),
            NoFitReason::InsufficientMemory {
                requested,
                min_memory_mib,
                eligible,
            } => write!(
                f,
                "too few free GPUs with at least {min_memory_mib} MiB: {eligible} eligible, {requested} requested"
            ),
            NoFitReason::SingleNumaNode {
                requested,
                largest_group,
            } => write!(
                f,
                "no NUMA node with {requested} eligible free GPUs (single-numa-node policy; the most in one NUMA node is {largest_group})"
            ),
            NoFitReason::NoNvlinkSet { .. } => f.write_str(&self.summary()),
        }
    }
}

impl std::error::Error for NoFitReason {}

/// Which rule, in the design's order, separated the chosen set from the runner-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecidedBy {
    /// No other set was feasible.
    OnlyCandidate,
    /// A stronger bottleneck (ring hop or pair).
    Bottleneck,
    /// Equal bottleneck, fewer NUMA nodes.
    NumaNodes,
    /// Equal bottleneck and NUMA nodes; leaves the free GPUs better connected.
    Leftover,
    /// Equal on everything else; the lexicographically lower index set.
    LowestIndices,
}

/// How the set was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// Every feasible set compared on the full order (nodes of up to 16 GPUs).
    Exact,
    /// Greedy growth from each seed plus local swaps (larger nodes); see `gpuset::heuristic`.
    Heuristic,
}

/// One size's share of the leftover measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeftoverSlot {
    /// The request size looked at (8, 4 or 2).
    pub size: u32,
    /// The best ring bottleneck of any `size` of the left free GPUs; `None` if fewer than `size` are left.
    pub best_ring: Option<LinkClass>,
    /// How many `size`-subsets of the left GPUs reach `best_ring` (saturates at 8191).
    /// The heuristic counts at most one 4- or 8-GPU set.
    pub sets: u32,
}

/// What a placement leaves behind: the free whole GPUs (MIG-disabled) not in the
/// chosen set, and for sizes 8, 4, 2 the best ring they could still form and how
/// many ways. Compared lexicographically, size 8 first, better quality first,
/// then more sets: the measure keeps big, well-connected slots whole, so small
/// and odd requests take the GPUs that are worst connected to the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Leftover {
    /// Mask of the free GPUs left (bit i = GPU i).
    pub gpus: u32,
    pub slots: [LeftoverSlot; 3],
}

impl Leftover {
    pub fn gpu_indices(&self) -> Vec<u32> {
        indices(self.gpus)
    }

    pub fn slot(&self, size: u32) -> Option<&LeftoverSlot> {
        self.slots.iter().find(|s| s.size == size)
    }

    /// The measure's order (the GPU mask itself does not count): `Greater`
    /// when `self` leaves the free GPUs better connected than `other`.
    pub fn cmp_connectivity(&self, other: &Leftover) -> Ordering {
        self.slots
            .iter()
            .zip(&other.slots)
            .map(|(a, b)| (a.best_ring, a.sets).cmp(&(b.best_ring, b.sets)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    /// `best 4-GPU ring NV1 (1 set), best pair NV2 (2)`: the non-empty slots.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .slots
            .iter()
            .filter_map(|slot| {
                let class = slot.best_ring?;
                let what = if slot.size == 2 {
                    "pair".to_string()
                } else {
                    format!("{}-GPU ring", slot.size)
                };
                let sets = if slot.sets == 1 { "set" } else { "sets" };
                Some(format!("best {what} {class} ({} {sets})", slot.sets))
            })
            .collect();
        parts.join(", ")
    }
}

/// A chosen set without its explanation: `Copy`, no allocation, what the
/// filter and score plugins read for each of thousands of nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SetPick {
    /// Mask of the chosen GPUs (bit i = GPU i).
    pub gpus: u32,
    /// The ring's weakest hop or the weakest pair; `None` for a single GPU (no hop:
    /// the best possible quality) or an empty request.
    pub bottleneck: Option<LinkClass>,
    /// NUMA nodes the set spans; GPUs of unknown NUMA count as one more node together.
    pub numa_nodes: u32,
    pub leftover: Leftover,
    /// 0–100; see the `gpuset` module docs for the formula.
    pub score: u8,
    pub decided_by: DecidedBy,
    /// The best set that lost, if any.
    pub runner_up: Option<u32>,
    /// Feasible sets compared (exact) or grown and swapped (heuristic).
    pub candidates: u32,
    pub method: Method,
}

impl SetPick {
    /// No GPU, on a node whose wiring is not looked at: a pod whose claims
    /// ask only for other drivers' devices.
    pub fn empty() -> SetPick {
        let slot = |size| LeftoverSlot {
            size,
            best_ring: None,
            sets: 0,
        };
        SetPick {
            gpus: 0,
            bottleneck: None,
            numa_nodes: 0,
            leftover: Leftover {
                gpus: 0,
                slots: [slot(8), slot(4), slot(2)],
            },
            score: 100,
            decided_by: DecidedBy::OnlyCandidate,
            runner_up: None,
            candidates: 1,
            method: Method::Exact,
        }
    }

    pub fn gpu_indices(&self) -> Vec<u32> {
        indices(self.gpus)
    }

    pub fn gpu_count(&self) -> u32 {
        self.gpus.count_ones()
    }
}

/// The chosen GPU set with a plain-English explanation, as `gputopo place`
/// prints it and a `Scheduled` event says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuSetChoice {
    /// Sorted GPU indices.
    pub gpus: Vec<u32>,
    pub bottleneck: Option<LinkClass>,
    pub numa_nodes: u32,
    pub leftover: Leftover,
    pub score: u8,
    pub explanation: String,
    pub decided_by: DecidedBy,
    pub method: Method,
}

impl GpuSetChoice {
    /// `0,1,2,3`, the value of the `gputopo.dev/assigned-gpus` annotation.
    pub fn assigned_gpus(&self) -> String {
        let mask = self.gpus.iter().fold(0u32, |m, &g| m | (1 << (g & 31)));
        index_list(mask)
    }
}

/// `GPU 3` or `GPUs 0,1,2,3`.
pub(crate) fn name_set(mask: u32) -> String {
    match mask.count_ones() {
        0 => "no GPUs".to_string(),
        1 => format!("GPU {}", bits(mask).next().unwrap_or_default()),
        _ => format!("GPUs {}", index_list(mask)),
    }
}
