//! Gang placement across network tiers (docs/contract.md, "Network domains"), gang
//! reservations, and the cluster-level placement measures.
//!
//! # Input
//!
//! The snapshot fills a [`GangCluster`]: the tier names (label keys, outermost
//! first) and, per candidate node, its id, tier path, [`NodeShape`], free
//! whole-GPU mask and a `node_score` hook (the snapshot's own per-node score:
//! preferred domain, latency, …) that is added to each member's GPU-set score.
//! The gang is a [`GangSpec`]: `n` members with one [`SetRequest`], or one
//! request per member, a [`PlacementStrategy`] and an optional hard domain
//! constraint ([`Within`]). This module has no node model of its own.
//!
//! # The rule (consolidated and balanced)
//!
//! For each node, how many members it hosts is found by picking GPU sets with
//! the `gpuset` picker on the shrinking free mask. A lowest-tier domain ("leaf")
//! holds the sum of its nodes' member slots. Nodes and GPU sets are then chosen
//! in one decision, comparing candidate sets of leaves by, in order:
//!
//! 1. **fewest leaves** that hold the gang;
//! 2. **fewest domains at each outer tier**, outermost first: leaves under one
//!    parent beat leaves spread across parents. Two leaves under the same spine
//!    are the design's "adjacent leaves";
//! 3. **fills its leaves most completely**: fewest member slots left free in the
//!    chosen leaves (best fit), so a 4-node gang takes a whole leaf of 4 and
//!    leaves a bigger leaf whole for a bigger gang;
//! 4. **best quality**: the sum over members of the GPU-set score (0–100, from
//!    the picker) plus the node's `node_score`;
//! 5. **names**: the lower leaf paths (digit runs compared as numbers).
//!
//! So a gang of 2 nodes goes to one leaf, 4 to a whole leaf of 4 (an empty leaf
//! beats two half-empty ones: rule 1), 8 to two leaves under one spine, 16 to
//! four (one spine's worth, with four leaves of four per spine).
//!
//! Inside the chosen leaves, members are placed one at a time on the node that
//! is best for the strategy: `balanced` (the design's default) takes the best
//! GPU-set score plus node score; `consolidated` takes the node with the fewest
//! free GPUs that can host the member (best fit, packing nodes), then the score.
//! Both minimise domains as above; node ids break ties.
//!
//! # Distributed
//!
//! `distributed` spreads members deliberately (failure isolation): members go
//! round-robin over the leaves that can host them, one per leaf per round, the
//! leaves ordered so that consecutive ones sit under different parents (each
//! parent's first leaf, then each parent's second, …); inside a leaf the node
//! hosting the fewest gang members so far is preferred. It spans as many leaves
//! as it has members, where the cluster allows.
//!
//! # Missing labels
//!
//! A node's domain at a tier is named by its labels down to that tier. A label
//! missing at an outer tier is a value of its own, shared under the same parent
//! (a cluster that labels only leaves still groups by leaf). A node missing its
//! innermost label is a leaf of its own: no locality is assumed that the labels
//! do not show. A cluster with no tiers is one domain.
//!
//! # Search bounds
//!
//! The fewest leaves `k` is exact (the `k` leaves holding the most). Candidate
//! sets of `k` leaves are enumerated exactly while there are at most
//! [`EXACT_LEAF_SETS`] of them; beyond, the candidates are, for every domain of
//! the scope, its leaves taken largest first with the last one swapped for the
//! smallest that still completes the gang (the Kueue TAS best fit). At most
//! [`QUALITY_CANDIDATES`] candidates are filled to compare quality; the rest
//! lose on names. A gang with mixed requests is bounded by GPU counts (a leaf
//! holds its free whole GPUs) and checked by filling; where the fewest leaves
//! do not pack it, up to 8 more leaf counts are tried, then the whole scope.
//!
//! # All or nothing
//!
//! [`place_gang`] returns a placement for every member or a [`GangNoFit`]; it
//! never holds or returns part of a gang, so a gang that does not fit holds
//! nothing (scheduler-plugins#114, #117). Which gang is tried when, and the
//! GPUs held for a waiting gang against a stream of small pods
//! (KAI-Scheduler#1969), are the scheduler cycle's bookkeeping
//! (`gputopo-scheduler`'s `cycle/`).

pub(crate) mod domain;
pub mod metrics;
pub(crate) mod select;

use crate::gpuset::{NodeShape, SetRequest};
use crate::snapshot::NodeRef;
use gputopo_api::PlacementStrategy;
use std::fmt;
use std::sync::Arc;

/// Candidate sets of `k` leaves enumerated exactly up to this many.
pub const EXACT_LEAF_SETS: u64 = 20_000;
/// Candidates tied on leaves, spans and fill that are filled to compare quality.
pub const QUALITY_CANDIDATES: usize = 256;

/// One candidate node, as the snapshot sees it.
#[derive(Clone, Debug)]
pub struct GangNode {
    /// The snapshot's node id, reported back in placements.
    pub id: usize,
    /// Domain names, outermost first (`["spine-1", "leaf-3"]`); `None` where the
    /// node lacks that tier's label.
    pub tiers: Vec<Option<String>>,
    pub shape: Arc<NodeShape>,
    /// Free whole GPUs (bit i = GPU i), after anything the snapshot holds back.
    pub free: u32,
    /// Added to each member's GPU-set score on this node: the snapshot's hook
    /// for its own per-node preferences. 0 when it has none.
    pub node_score: i32,
}

impl GangNode {
    /// A node with no score of its own.
    pub fn new(id: usize, tiers: Vec<Option<String>>, shape: Arc<NodeShape>, free: u32) -> Self {
        GangNode {
            id,
            tiers,
            shape,
            free,
            node_score: 0,
        }
    }

    /// A snapshot's node with its topology `shape`: its domain names and free
    /// GPUs as the snapshot holds them, no score of its own.
    pub(crate) fn of(node: &NodeRef<'_>, shape: &Arc<NodeShape>) -> Self {
        let tiers = node
            .domain_names()
            .map(|name| name.map(str::to_string))
            .collect();
        GangNode::new(node.id().0 as usize, tiers, shape.clone(), node.free_gpus())
    }
}

/// The candidate nodes and the names of the network tiers.
#[derive(Clone, Debug, Default)]
pub struct GangCluster {
    /// The tier label keys, outermost first (`gputopo.dev/spine`, `gputopo.dev/leaf`).
    pub tier_names: Vec<String>,
    pub nodes: Vec<GangNode>,
}

/// What the members ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Members {
    /// `count` members with one request (the usual gang: one pod template).
    Uniform { count: u32, request: SetRequest },
    /// One request per member (a leader and workers, say). Members are placed
    /// largest request first.
    Each(Vec<SetRequest>),
}

impl Members {
    pub fn len(&self) -> usize {
        match self {
            Members::Uniform { count, .. } => *count as usize,
            Members::Each(each) => each.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The request of member `i`.
    pub fn request(&self, i: usize) -> Option<&SetRequest> {
        match self {
            Members::Uniform { count, request } => (i < *count as usize).then_some(request),
            Members::Each(each) => each.get(i),
        }
    }
}

/// A hard domain constraint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Within {
    #[default]
    Anywhere,
    /// All members inside one domain of this tier (0 = outermost), any one.
    OneDomainAt { tier: usize },
    /// All members inside the domain of this tier whose label is `name`. Where
    /// several parents hold a domain of that name, each is a candidate.
    Domain { tier: usize, name: String },
}

/// A gang to place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangSpec {
    pub members: Members,
    pub strategy: PlacementStrategy,
    pub within: Within,
    /// At most this many members on one node: 1 for members whose required
    /// anti-affinity over hostnames keeps each other apart.
    pub max_per_node: Option<u32>,
    /// Soft: every member inside one domain of this tier if one has room,
    /// else of the next tier outward, and so on (`structured.rs`).
    pub preferred: Option<usize>,
    /// Members in order cut into slices, each inside one domain of its
    /// tier; layers outermost (largest) first, each size a multiple of the
    /// next (`slices.rs`).
    pub slices: Vec<Slice>,
}

/// One layer of slices: consecutive members, `size` at a time, each slice
/// inside one domain of `tier`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub size: u32,
    pub tier: usize,
    /// Required: the gang waits rather than break a slice. Preferred: a
    /// slice that fits no domain of its tier tries the next tier outward,
    /// then goes unsliced.
    pub required: bool,
}

impl GangSpec {
    /// `count` members each asking `request`, balanced, anywhere.
    pub fn uniform(count: u32, request: SetRequest) -> GangSpec {
        GangSpec {
            members: Members::Uniform { count, request },
            strategy: PlacementStrategy::default(),
            within: Within::Anywhere,
            max_per_node: None,
            preferred: None,
            slices: Vec::new(),
        }
    }

    /// One request per member, balanced, anywhere.
    pub fn each(requests: Vec<SetRequest>) -> GangSpec {
        GangSpec {
            members: Members::Each(requests),
            strategy: PlacementStrategy::default(),
            within: Within::Anywhere,
            max_per_node: None,
            preferred: None,
            slices: Vec::new(),
        }
    }

    pub fn with_strategy(mut self, strategy: PlacementStrategy) -> GangSpec {
        self.strategy = strategy;
        self
    }

    pub fn within(mut self, within: Within) -> GangSpec {
        self.within = within;
        self
    }

    /// At most `max` members per node.
    pub fn at_most_per_node(mut self, max: u32) -> GangSpec {
        self.max_per_node = Some(max);
        self
    }

    /// Prefer one domain of `tier`, then each tier outward.
    pub fn preferring(mut self, tier: usize) -> GangSpec {
        self.preferred = Some(tier);
        self
    }

    /// Cut the members, in order, into slices (layers outermost first).
    pub fn sliced(mut self, slices: Vec<Slice>) -> GangSpec {
        self.slices = slices;
        self
    }
}

/// Where one member goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemberSlot {
    /// The node's id ([`GangNode::id`]).
    pub node: usize,
    /// The GPUs (bit i = GPU i).
    pub gpus: u32,
    /// The GPU set's score on that node (0–100), without the node score.
    pub score: u8,
}

/// The domains of one tier that a placement spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierSpan {
    /// The tier's label key.
    pub tier: String,
    /// Domain paths (`spine-1/leaf-3`), in name order.
    pub domains: Vec<String>,
}

/// A whole gang's placement: every member has its node and GPU set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangPlacement {
    /// Member `i`'s slot at index `i` (in [`Members`] order).
    pub members: Vec<MemberSlot>,
    /// Per tier, outermost first, the domains spanned. Empty without tiers.
    pub spans: Vec<TierSpan>,
    pub strategy: PlacementStrategy,
    /// Sum over members of GPU-set score plus node score.
    pub quality: i64,
    pub explanation: String,
}

impl GangPlacement {
    /// Lowest-tier domains spanned (1 when the cluster has no tiers).
    pub fn leaf_domains(&self) -> usize {
        self.spans.last().map_or(1, |s| s.domains.len())
    }

    /// Distinct nodes used.
    pub fn node_count(&self) -> usize {
        let mut nodes: Vec<usize> = self.members.iter().map(|m| m.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len()
    }
}

/// The domain of one tier holding the most of something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainCapacity {
    /// The tier's short name (`spine`).
    pub tier: String,
    /// The domain's path.
    pub domain: String,
    /// Members it could host.
    pub members: u32,
}

/// What was short when a gang does not fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortage {
    pub members: u32,
    /// What the members ask, e.g. `8 free GPUs with NV12 between every pair each`.
    pub need: String,
    /// Members the cluster (or the required domains) could host at most.
    pub fit: u32,
    /// Nodes that could host at least one member.
    pub hosts: u32,
    /// `one spine` when the gang must stay inside one domain of a tier.
    pub within: Option<String>,
    /// Per tier, outermost first, the domain hosting the most members.
    pub best: Vec<DomainCapacity>,
    /// Nodes that host no member, counted by the `gpuset` reason summary, most first.
    pub node_reasons: Vec<(String, u32)>,
    /// Where slices are required: how many whole slices fit.
    pub slices: Option<Box<SliceShortage>>,
}

/// How far a sliced gang is from fitting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceShortage {
    /// Members per slice, and the tier each slice stays in (`rack`).
    pub size: u32,
    pub tier: String,
    /// Slices the gang has, and how many whole ones fit where it may go.
    pub needed: u32,
    pub fit: u32,
    /// The domain of the slices' tier holding the most whole slices.
    pub best: Option<(String, u32)>,
}

impl fmt::Display for Shortage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let members = self.members;
        let plural = if members == 1 {
            "member needs"
        } else {
            "members need"
        };
        write!(f, "{members} {plural} {}", self.need)?;
        let hosts = self.hosts;
        let nodes = if hosts == 1 { "node" } else { "nodes" };
        match &self.within {
            Some(within) => write!(
                f,
                ", all in {within}; {hosts} {nodes} can host members, at most {} of them inside {within}",
                self.fit
            )?,
            None => write!(f, "; {hosts} {nodes} can host members, {} in all", self.fit)?,
        }
        if let Some(sl) = &self.slices {
            write!(
                f,
                "; in slices of {} each inside one {}: {} of {} slices fit",
                sl.size, sl.tier, sl.fit, sl.needed
            )?;
            if let Some((domain, n)) = &sl.best {
                write!(f, ", the most in one {} is {n} ({domain})", sl.tier)?;
            }
        }
        for best in &self.best {
            write!(
                f,
                ", the most under one {} is {} ({})",
                best.tier, best.members, best.domain
            )?;
        }
        if !self.node_reasons.is_empty() {
            let total: u32 = self.node_reasons.iter().map(|(_, n)| n).sum();
            let parts: Vec<String> = self
                .node_reasons
                .iter()
                .map(|(reason, n)| format!("{n} {reason}"))
                .collect();
            write!(f, "; {total} nodes host none: {}", parts.join(", "))?;
        }
        Ok(())
    }
}

/// Why a gang cannot be placed whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GangNoFit {
    #[error("the gang has no members")]
    NoMembers,
    #[error("the gang asks for tier {tier}, but the cluster has {tiers} network tiers")]
    NoSuchTier { tier: usize, tiers: usize },
    #[error("no {tier} domain is named {name:?}")]
    NoSuchDomain { tier: String, name: String },
    /// Too few member slots where the gang may go.
    #[error("{0}")]
    Short(Shortage),
    #[error(
        "{members} members cannot be cut into slices of {size}; the slice size must divide the gang's members"
    )]
    SlicesUneven { members: usize, size: u32 },
    #[error(
        "slices of {outer} cannot be cut into slices of {inner}; each layer's size must divide the one outside it"
    )]
    SlicesNotNested { outer: u32, inner: u32 },
    #[error(
        "slices in one {outer} cannot hold inner slices in one {inner}, a tier outward of it; list the layers outermost first"
    )]
    SlicesOutward { outer: String, inner: String },
    #[error(
        "a sliced gang's GPU members must ask for the same GPUs (these ask {sizes}); slice a gang of alike members"
    )]
    SlicesNeedOneRequest { sizes: String },
}

/// Places a whole gang or says why it cannot; see the module docs for the rule.
pub fn place_gang(spec: &GangSpec, cluster: &GangCluster) -> Result<GangPlacement, GangNoFit> {
    select::place(spec, cluster)
}

/// `8 free GPUs with NV12 between every pair`: a request as the messages say it.
pub(crate) fn describe_request(request: &SetRequest) -> String {
    let k = request.gpus;
    let mut out = format!("{k} free GPU{}", if k == 1 { "" } else { "s" });
    if let Some(level) = request.min_nvlink_level.filter(|&l| l > 0 && k > 1) {
        out.push_str(&format!(" with NV{level} between every pair"));
    }
    if let Some(mib) = request.min_memory_mib {
        out.push_str(&format!(", {mib} MiB each"));
    }
    if request.single_numa_node && k > 1 {
        out.push_str(", in one NUMA node");
    }
    out
}
