//! [`NodeShape`]: one node model's GPUs and wiring, with its tables and a cache
//! of answers, shared by every node of that model through a [`ShapeCatalog`].

use super::cache::ChoiceCache;
use super::mask::{bit, bits, low_bits};
use super::tables::{LinkTables, MAX_EXACT_GPUS, MAX_LEVELS, NO_HOP, NONE};
use gputopo_api::{GpuTopologySpec, LinkClass, MAX_BONDED_NVLINKS};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The largest GPU index plus one that a shape may hold (GPU sets are `u32` masks).
pub const MAX_GPUS: u32 = 32;

/// A `GpuTopologySpec` that cannot be turned into a [`NodeShape`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeError {
    /// The spec lists no GPU.
    NoGpus,
    /// A GPU index is 32 or more.
    IndexTooLarge {
        index: u32,
    },
    DuplicateGpu {
        index: u32,
    },
    /// A link names a GPU that `gpus` does not list.
    LinkToUnknownGpu {
        a: u32,
        b: u32,
    },
    SelfLink {
        gpu: u32,
    },
    /// The same pair appears twice with different classes.
    ConflictingLinks {
        a: u32,
        b: u32,
        first: LinkClass,
        second: LinkClass,
    },
    /// A link claims more bonded NVLinks than any GPU has.
    ImplausibleNvLinks {
        a: u32,
        b: u32,
        nvlinks: u32,
    },
    /// More distinct link classes than a one-byte level can index.
    TooManyLinkClasses {
        count: usize,
    },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::NoGpus => f.write_str("the topology lists no GPU"),
            ShapeError::IndexTooLarge { index } => {
                write!(
                    f,
                    "GPU index {index} is too large; at most {MAX_GPUS} GPUs (indices 0..{MAX_GPUS}) per node"
                )
            }
            ShapeError::DuplicateGpu { index } => write!(f, "GPU index {index} is listed twice"),
            ShapeError::LinkToUnknownGpu { a, b } => {
                write!(f, "link {a}-{b} names a GPU the topology does not list")
            }
            ShapeError::SelfLink { gpu } => write!(f, "link {gpu}-{gpu} joins a GPU to itself"),
            ShapeError::ConflictingLinks {
                a,
                b,
                first,
                second,
            } => write!(f, "link {a}-{b} is listed as both {first} and {second}"),
            ShapeError::ImplausibleNvLinks { a, b, nvlinks } => write!(
                f,
                "link {a}-{b} claims NV{nvlinks}; no GPU has more than {MAX_BONDED_NVLINKS} NVLinks, so the topology is not trusted"
            ),
            ShapeError::TooManyLinkClasses { count } => write!(
                f,
                "{count} distinct link classes; at most {MAX_LEVELS} are supported"
            ),
        }
    }
}

impl std::error::Error for ShapeError {}

/// Identifies a link matrix: shapes with equal keys share one set of tables.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LinkMatrixKey {
    gpu_count: u32,
    /// `LinkClass::rank` of each pair `i < j`, row by row.
    ranks: Vec<u32>,
}

/// Identifies everything a choice depends on: equal keys share one [`NodeShape`]
/// (and its cache of answers).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapeKey {
    links: LinkMatrixKey,
    /// Per listed GPU: index, NUMA node, memory, MIG-enabled.
    gpus: Vec<(u32, Option<i32>, Option<u64>, bool)>,
}

/// What `from_spec` reads out of a spec before any table is built.
struct Parsed {
    n: u32,
    classes: Vec<LinkClass>,
    levels: Vec<u8>,
    key: ShapeKey,
}

/// A NUMA node and the GPUs on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NumaGroup {
    pub(crate) gpus: u32,
}

/// One node model's GPUs, wiring and per-GPU facts, with the tables that make
/// choosing cheap and a cache of answers by free mask.
///
/// Build it once per distinct topology ([`ShapeCatalog`]) and share it: the
/// tables are immutable and the cache is thread-safe, so `&NodeShape` may be
/// used from many threads.
pub struct NodeShape {
    pub(crate) tables: Arc<LinkTables>,
    key: ShapeKey,
    /// GPUs the spec lists (indices may have gaps, e.g. GPUs hidden by cgroups).
    pub(crate) present: u32,
    /// Listed GPUs with MIG enabled.
    pub(crate) mig: u32,
    /// Listed GPUs without MIG: what a whole-GPU request uses by default.
    pub(crate) whole_gpus: u32,
    pub(crate) memory_mib: Vec<Option<u64>>,
    /// A dense NUMA bit per GPU; all GPUs of unknown NUMA share one bit.
    pub(crate) numa_bit: Vec<u64>,
    /// Known NUMA nodes, sorted by id, each with its GPUs.
    pub(crate) numa_groups: Vec<NumaGroup>,
    /// Per listed-GPU group sizes (known nodes and the unknown bucket), largest first.
    numa_group_sizes: Vec<u32>,
    /// NUMA nodes spanned by each subset, for `n ≤ 16`.
    pub(crate) numa_count: Option<Box<[u8]>>,
    /// The NVLink count every pair of listed GPUs has at least (`u32::MAX` with
    /// fewer than two GPUs): a `min_nvlink_level` up to it removes nothing.
    pub(crate) nvlink_level_everywhere: u32,
    /// Every listed GPU sits on one known NUMA node: `single_numa_node` removes nothing.
    pub(crate) one_numa_node: bool,
    /// Memory every listed GPU has at least (`None` if any is unknown).
    pub(crate) min_memory_all: Option<u64>,
    /// Best quality on the empty node, per collective and size (lazily).
    pub(super) best_empty: [Box<[OnceLock<u8>]>; 2],
    pub(crate) cache: ChoiceCache,
}

impl fmt::Debug for NodeShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeShape")
            .field("gpu_count", &self.gpu_count())
            .field("present", &format_args!("{:#x}", self.present))
            .field("mig", &format_args!("{:#x}", self.mig))
            .field("exact", &self.is_exact())
            .finish_non_exhaustive()
    }
}

impl NodeShape {
    /// Reads a spec and builds its tables. A pair missing from `links` reads as
    /// `SYS`, the worst class, so an incomplete object never makes a set look
    /// better than it may be.
    pub fn from_spec(spec: &GpuTopologySpec) -> Result<NodeShape, ShapeError> {
        let parsed = parse(spec)?;
        let tables = Arc::new(LinkTables::new(parsed.n, parsed.classes, parsed.levels));
        Ok(NodeShape::with_tables(spec, parsed.key, tables))
    }

    fn with_tables(spec: &GpuTopologySpec, key: ShapeKey, tables: Arc<LinkTables>) -> NodeShape {
        let n = tables.gpu_count();
        let mut present = 0u32;
        let mut mig = 0u32;
        let mut memory_mib = vec![None; n as usize];
        let mut numa_id: Vec<Option<i32>> = vec![None; n as usize];
        for gpu in &spec.gpus {
            // `parse` checked every index is below n.
            let i = gpu.index as usize;
            present |= bit(gpu.index);
            if gpu.mig_enabled == Some(true) {
                mig |= bit(gpu.index);
            }
            memory_mib[i] = gpu.memory_mib;
            numa_id[i] = gpu.numa_node;
        }

        let mut known: Vec<i32> = numa_id.iter().flatten().copied().collect();
        known.sort_unstable();
        known.dedup();
        let unknown_bit = 1u64 << known.len().min(63);
        let mut numa_bit = vec![0u64; n as usize];
        let mut numa_groups = vec![NumaGroup { gpus: 0 }; known.len()];
        let mut unknown_gpus = 0u32;
        for i in bits(present) {
            match numa_id[i as usize].and_then(|id| known.binary_search(&id).ok()) {
                Some(g) => {
                    numa_bit[i as usize] = 1u64 << g.min(63);
                    numa_groups[g].gpus |= bit(i);
                }
                None => {
                    numa_bit[i as usize] = unknown_bit;
                    unknown_gpus |= bit(i);
                }
            }
        }
        let mut numa_group_sizes: Vec<u32> = numa_groups
            .iter()
            .map(|g| g.gpus.count_ones())
            .chain((unknown_gpus != 0).then(|| unknown_gpus.count_ones()))
            .collect();
        numa_group_sizes.sort_unstable_by(|a, b| b.cmp(a));

        let numa_count = (n <= MAX_EXACT_GPUS).then(|| {
            let mut union = vec![0u64; 1 << n];
            let mut count = vec![0u8; 1 << n].into_boxed_slice();
            for s in 1..(1usize << n) {
                let lo = s.trailing_zeros();
                union[s] = union[s & (s - 1)] | numa_bit[lo as usize];
                count[s] = union[s].count_ones() as u8;
            }
            count
        });

        let mut worst_level = NO_HOP;
        for i in bits(present) {
            for j in bits(present & !low_bits(i + 1)) {
                worst_level = worst_level.min(tables.level(i, j));
            }
        }
        let min_memory_all = bits(present)
            .map(|i| memory_mib[i as usize])
            .try_fold(u64::MAX, |acc, m| m.map(|m| acc.min(m)));

        let empty_row = || (0..=n).map(|_| OnceLock::new()).collect::<Box<[_]>>();
        let nvlink_level_everywhere = match tables.class(worst_level) {
            None => u32::MAX,
            Some(worst) => worst.nvlinks(),
        };
        let one_numa_node = numa_groups.len() == 1 && numa_groups[0].gpus == present;
        NodeShape {
            cache: ChoiceCache::new(n),
            tables,
            key,
            present,
            mig,
            whole_gpus: present & !mig,
            memory_mib,
            numa_bit,
            numa_groups,
            numa_group_sizes,
            numa_count,
            nvlink_level_everywhere,
            one_numa_node,
            min_memory_all,
            best_empty: [empty_row(), empty_row()],
        }
    }

    /// GPU index range of the node: the largest listed index plus one.
    pub fn gpu_count(&self) -> u32 {
        self.tables.gpu_count()
    }

    /// Mask of the GPUs the spec lists.
    pub fn gpus_mask(&self) -> u32 {
        self.present
    }

    /// Mask of the listed GPUs with MIG enabled.
    pub fn mig_mask(&self) -> u32 {
        self.mig
    }

    /// Whether choices are exact (every subset tabulated, `n ≤ 16`).
    pub fn is_exact(&self) -> bool {
        self.tables.is_exact()
    }

    /// What identifies this shape; nodes with equal keys may share it.
    pub fn key(&self) -> &ShapeKey {
        &self.key
    }

    /// The link between two distinct GPUs.
    pub fn link(&self, a: u32, b: u32) -> Option<LinkClass> {
        if a == b || a >= self.gpu_count() || b >= self.gpu_count() {
            return None;
        }
        self.tables.class(self.tables.level(a, b))
    }

    /// Bytes held by this shape's link tables (shared with equal link matrices)
    /// and by its own NUMA table; the answer cache is extra (see `gpuset` docs).
    pub fn table_bytes(&self) -> usize {
        self.tables.table_bytes() + self.numa_count.as_ref().map_or(0, |t| t.len())
    }

    /// NUMA nodes a set spans (GPUs of unknown NUMA together count as one).
    pub fn numa_nodes(&self, set: u32) -> u32 {
        let set = set & self.present;
        match &self.numa_count {
            Some(table) => u32::from(table[set as usize]),
            None => self.numa_union(set).count_ones(),
        }
    }

    pub(crate) fn numa_union(&self, set: u32) -> u64 {
        bits(set).fold(0u64, |u, i| u | self.numa_bit[i as usize])
    }

    /// The fewest NUMA nodes (known ones and the unknown bucket) `k` listed GPUs can span.
    pub(crate) fn min_numa_span(&self, k: u32) -> u32 {
        let mut covered = 0u32;
        for (i, size) in self.numa_group_sizes.iter().enumerate() {
            covered += size;
            if covered >= k {
                return i as u32 + 1;
            }
        }
        (self.numa_group_sizes.len() as u32).max(1)
    }

    /// Mask of listed GPUs with at least `min` MiB (unknown memory never qualifies).
    pub(crate) fn memory_at_least(&self, min: u64) -> u32 {
        bits(self.present)
            .filter(|&i| self.memory_mib[i as usize].is_some_and(|m| m >= min))
            .fold(0, |m, i| m | bit(i))
    }

    /// The weakest pair of `set`; `None` for fewer than two GPUs.
    pub fn all_to_all_bottleneck(&self, set: u32) -> Option<LinkClass> {
        let set = set & low_bits(self.gpu_count());
        self.tables.class(self.tables.all_to_all_level(set))
    }
}

fn parse(spec: &GpuTopologySpec) -> Result<Parsed, ShapeError> {
    if spec.gpus.is_empty() {
        return Err(ShapeError::NoGpus);
    }
    let mut present = 0u32;
    for gpu in &spec.gpus {
        if gpu.index >= MAX_GPUS {
            return Err(ShapeError::IndexTooLarge { index: gpu.index });
        }
        if present & bit(gpu.index) != 0 {
            return Err(ShapeError::DuplicateGpu { index: gpu.index });
        }
        present |= bit(gpu.index);
    }
    let n = 32 - present.leading_zeros();
    let nu = n as usize;

    let mut class: Vec<Option<LinkClass>> = vec![None; nu * nu];
    for link in &spec.links {
        let (a, b) = (link.a.min(link.b), link.a.max(link.b));
        if a == b {
            return Err(ShapeError::SelfLink { gpu: a });
        }
        if b >= n || present & bit(a) == 0 || present & bit(b) == 0 {
            return Err(ShapeError::LinkToUnknownGpu { a, b });
        }
        let new = link.class();
        if new.nvlinks() > MAX_BONDED_NVLINKS {
            return Err(ShapeError::ImplausibleNvLinks {
                a,
                b,
                nvlinks: new.nvlinks(),
            });
        }
        let cell = &mut class[a as usize * nu + b as usize];
        match *cell {
            Some(first) if first != new => {
                return Err(ShapeError::ConflictingLinks {
                    a,
                    b,
                    first,
                    second: new,
                });
            }
            _ => *cell = Some(new),
        }
    }

    let mut ranks = Vec::with_capacity(nu * nu.saturating_sub(1) / 2);
    let mut distinct: Vec<LinkClass> = Vec::new();
    for i in 0..nu {
        for j in i + 1..nu {
            let c = class[i * nu + j].unwrap_or(LinkClass::Sys);
            class[i * nu + j] = Some(c);
            ranks.push(c.rank());
            distinct.push(c);
        }
    }
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.is_empty() {
        // A single GPU: give the level table one class so levels stay well formed.
        distinct.push(LinkClass::Sys);
    }
    if distinct.len() > MAX_LEVELS {
        return Err(ShapeError::TooManyLinkClasses {
            count: distinct.len(),
        });
    }
    let mut levels = vec![NONE; nu * nu];
    for i in 0..nu {
        for j in i + 1..nu {
            let c = class[i * nu + j].unwrap_or(LinkClass::Sys);
            let l = distinct.binary_search(&c).map_or(1, |p| p + 1) as u8;
            levels[i * nu + j] = l;
            levels[j * nu + i] = l;
        }
    }

    let mut gpus: Vec<(u32, Option<i32>, Option<u64>, bool)> = spec
        .gpus
        .iter()
        .map(|g| {
            (
                g.index,
                g.numa_node,
                g.memory_mib,
                g.mig_enabled == Some(true),
            )
        })
        .collect();
    gpus.sort_unstable();
    Ok(Parsed {
        n,
        classes: distinct,
        levels,
        key: ShapeKey {
            links: LinkMatrixKey {
                gpu_count: n,
                ranks,
            },
            gpus,
        },
    })
}

/// Shares shapes between nodes: nodes of one model share one link matrix (and
/// so one set of tables), and nodes equal in every per-GPU fact too share one
/// [`NodeShape`] and its answer cache.
#[derive(Default)]
pub struct ShapeCatalog {
    tables: HashMap<LinkMatrixKey, Arc<LinkTables>>,
    shapes: HashMap<ShapeKey, Arc<NodeShape>>,
}

impl ShapeCatalog {
    pub fn new() -> ShapeCatalog {
        ShapeCatalog::default()
    }

    /// The shape for a spec, built on first sight of its key and shared after.
    pub fn shape(&mut self, spec: &GpuTopologySpec) -> Result<Arc<NodeShape>, ShapeError> {
        let parsed = parse(spec)?;
        if let Some(shape) = self.shapes.get(&parsed.key) {
            return Ok(Arc::clone(shape));
        }
        let tables = match self.tables.entry(parsed.key.links.clone()) {
            Entry::Occupied(e) => Arc::clone(e.get()),
            Entry::Vacant(e) => Arc::clone(e.insert(Arc::new(LinkTables::new(
                parsed.n,
                parsed.classes,
                parsed.levels,
            )))),
        };
        let key = parsed.key;
        let shape = Arc::new(NodeShape::with_tables(spec, key.clone(), tables));
        self.shapes.insert(key, Arc::clone(&shape));
        Ok(shape)
    }

    /// Distinct shapes held.
    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    /// Distinct link matrices (table sets) held.
    pub fn link_matrices(&self) -> usize {
        self.tables.len()
    }
}
