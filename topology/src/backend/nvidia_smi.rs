//! The `nvidia-smi` text backend: turns `topo -m`, `nvlink -s` and `-q` outputs into
//! [`NodeFacts`].
//!
//! `topo -m` is required and gives the GPUs (indices, CPU and NUMA affinity), every GPU pair and
//! the NICs. `nvlink -s` adds per-GPU NVLink state, matched by GPU index. `-q` adds product,
//! UUID, memory, PCI bus id, MIG mode, fabric and driver version, matched by position (it lists
//! GPUs in index order). Where both name a GPU's product or UUID they must agree.
//!
//! Nothing is invented: the NUMA node comes from `NUMA Affinity` only when it is one number (a
//! range such as `0-1` says the node is not known), a GPU absent from `nvlink -s`, or cut short in
//! a snipped paste, keeps `nvlinks: None`, and a UUID from `nvlink -s` is taken only when it is a
//! well-formed `GPU-<hex>` one (pastes redact them).

use crate::facts::{GpuFacts, NicFacts, NodeFacts, NvLinkFact, PairFact};
use crate::parse::nvlink_status::{self, LinkState, NvlinkParseError, NvlinkStatus};
use crate::parse::smi_query::{self, SmiQuery, SmiQueryError};
use crate::parse::topo_matrix::{self, TopoMatrix, TopoParseError};
use gputopo_api::{GpuVendor, TopologySource};

/// Why the `nvidia-smi` texts could not be turned into facts.
#[derive(Debug, thiserror::Error)]
pub enum NvidiaSmiError {
    #[error("nvidia-smi topo -m: {0}")]
    Topo(#[from] TopoParseError),
    #[error("nvidia-smi nvlink -s: {0}")]
    Nvlink(#[from] NvlinkParseError),
    #[error("nvidia-smi -q: {0}")]
    Query(#[from] SmiQueryError),
    #[error("nvidia-smi topo -m lists {topo} GPUs but nvidia-smi -q lists {query}")]
    GpuCount { topo: usize, query: usize },
    #[error("nvidia-smi nvlink -s lists GPU {index}, which nvidia-smi topo -m does not have")]
    UnknownNvlinkGpu { index: u32 },
    #[error(
        "GPU {index}: nvidia-smi {first_source} says {field} {first:?} but nvidia-smi \
         {second_source} says {second:?}"
    )]
    Disagree {
        index: u32,
        field: &'static str,
        first_source: &'static str,
        first: String,
        second_source: &'static str,
        second: String,
    },
}

/// Facts from a bare `nvidia-smi topo -m` text.
pub fn facts_from_topo(topo: &str) -> Result<NodeFacts, NvidiaSmiError> {
    facts_from_texts(topo, None, None)
}

/// Facts from `nvidia-smi topo -m`, and optionally `nvidia-smi nvlink -s` and `nvidia-smi -q`
/// (text or `-x` XML) of the same node.
pub fn facts_from_texts(
    topo: &str,
    nvlink_status: Option<&str>,
    query: Option<&str>,
) -> Result<NodeFacts, NvidiaSmiError> {
    let matrix = topo_matrix::parse(topo)?;
    let nvlink = nvlink_status.map(nvlink_status::parse).transpose()?;
    let query = query.map(smi_query::parse).transpose()?;
    facts_from_parsed(&matrix, nvlink.as_ref(), query.as_ref())
}

/// Facts from already parsed outputs (see [`facts_from_texts`]).
pub fn facts_from_parsed(
    matrix: &TopoMatrix,
    nvlink: Option<&NvlinkStatus>,
    query: Option<&SmiQuery>,
) -> Result<NodeFacts, NvidiaSmiError> {
    if let Some(q) = query
        && q.gpus.len() != matrix.gpus.len()
    {
        return Err(NvidiaSmiError::GpuCount {
            topo: matrix.gpus.len(),
            query: q.gpus.len(),
        });
    }
    if let Some(n) = nvlink
        && let Some(g) = n.gpus.iter().find(|g| matrix.gpu(g.index).is_none())
    {
        return Err(NvidiaSmiError::UnknownNvlinkGpu { index: g.index });
    }

    let mut gpus = Vec::with_capacity(matrix.gpus.len());
    for (position, mg) in matrix.gpus.iter().enumerate() {
        let index = mg.index;
        let q = query.and_then(|q| q.gpus.get(position));
        let n = nvlink.and_then(|n| n.gpu(index));

        let topo_numa = mg.numa_affinity.as_deref().and_then(single_node);
        let numa_node = match (topo_numa, q.and_then(|q| q.numa_node)) {
            (Some(a), Some(b)) if a != b => {
                return Err(disagree(index, "NUMA node", "topo -m", a, "-q", b));
            }
            (a, b) => a.or(b),
        };

        let product = pick(
            index,
            "product",
            n.and_then(|n| n.product.clone()),
            q.and_then(|q| q.product.clone()),
        )?;
        let uuid = pick(
            index,
            "UUID",
            n.and_then(|n| n.uuid.clone()),
            q.and_then(|q| q.uuid.clone()),
        )?
        .filter(|u| q.is_some_and(|q| q.uuid.as_deref() == Some(u)) || is_gpu_uuid(u));

        let nvlinks = n.filter(|n| !n.maybe_incomplete).map(|n| {
            n.links
                .iter()
                .map(|l| NvLinkFact {
                    link: l.link,
                    active: matches!(l.state, LinkState::Active { .. }),
                    speed_gbps: match l.state {
                        LinkState::Active { speed_gbps } => Some(speed_gbps),
                        LinkState::Inactive => None,
                    },
                    remote: None,
                })
                .collect()
        });

        gpus.push(GpuFacts {
            index,
            uuid,
            product,
            memory_mib: q.and_then(|q| q.memory_mib),
            pci_bus_id: q.and_then(|q| q.pci_bus_id.clone()),
            numa_node,
            cpu_affinity: mg.cpu_affinity.clone(),
            mig_enabled: q.and_then(|q| q.mig_enabled),
            fabric: q.and_then(|q| q.fabric.clone()),
            nvlinks,
        });
    }

    let mut gpu_pairs = Vec::new();
    for (i, a) in matrix.gpus.iter().enumerate() {
        for b in matrix.gpus.iter().skip(i + 1) {
            if let Some(class) = matrix.gpu_link(a.index, b.index) {
                gpu_pairs.push(PairFact::new(a.index, b.index, class));
            }
        }
    }

    let nics = matrix
        .nics
        .iter()
        .enumerate()
        .map(|(column, nic)| NicFacts {
            name: nic.name.clone(),
            numa_node: None,
            gpu_links: matrix
                .gpus
                .iter()
                .filter_map(|g| Some((g.index, g.nic_links.get(column)?.link_type())))
                .collect(),
        })
        .collect();

    Ok(NodeFacts {
        source: TopologySource::NvidiaSmi,
        vendor: Some(GpuVendor::Nvidia),
        driver_version: query.and_then(|q| q.driver_version.clone()),
        cuda_version: query.and_then(|q| q.cuda_version.clone()),
        gpus,
        gpu_pairs,
        nics,
    })
}

/// `3` → 3; `0-1`, `0,8,252-255` (several nodes) → unknown.
fn single_node(affinity: &str) -> Option<i32> {
    affinity.parse().ok()
}

/// `GPU-` followed by hex digits and dashes: what NVML prints, not a redacted paste.
fn is_gpu_uuid(s: &str) -> bool {
    s.strip_prefix("GPU-").is_some_and(|rest| {
        rest.len() >= 32 && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    })
}

/// The value both sources agree on (or the one that has it).
fn pick(
    index: u32,
    field: &'static str,
    from_nvlink: Option<String>,
    from_query: Option<String>,
) -> Result<Option<String>, NvidiaSmiError> {
    match (from_nvlink, from_query) {
        (Some(a), Some(b)) if a != b => Err(disagree(index, field, "nvlink -s", a, "-q", b)),
        (a, b) => Ok(b.or(a)),
    }
}

fn disagree(
    index: u32,
    field: &'static str,
    first_source: &'static str,
    first: impl ToString,
    second_source: &'static str,
    second: impl ToString,
) -> NvidiaSmiError {
    NvidiaSmiError::Disagree {
        index,
        field,
        first_source,
        first: first.to_string(),
        second_source,
        second: second.to_string(),
    }
}
