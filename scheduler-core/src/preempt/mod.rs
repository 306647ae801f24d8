//! Cost-aware preemption: when a pod or a gang cannot fit, the cheapest set of
//! victims whose eviction frees a *usable* GPU set in the right domain, not
//! merely enough GPUs (kueue#5243), including a full required domain
//! (KAI-Scheduler#1591).
//!
//! # Rules
//!
//! * **Never a pod of equal or higher priority.** A gang is a candidate only if
//!   every member has a lower priority than the preemptor.
//! * **A gang is a victim whole or not at all.** Victims are *units*: a pod not
//!   in a gang, or every pod of a gang (by gang id, on every node of the input).
//!   Evicting a unit costs all its pods and frees all their GPUs, everywhere.
//! * **Inference before training.** The search runs in passes: first only
//!   inference units may be evicted; if that frees no usable set, unprotected
//!   training units too; only if that fails, protected ones. A unit with any
//!   training member, or a member of unknown workload kind, counts as training
//!   (its loss is unknown, so it is not assumed cheap).
//! * **Protected training pods** ([`PreemptionPolicy::protected`]): a last
//!   checkpoint (or start, without one) older than 30 minutes, or an expected
//!   completion within 2 hours, protects a training pod unless nothing else
//!   works (the last pass, which then evicts as few protected units as it can).
//! * **Fewest GPU-hours lost.** Within a pass, victim sets compare by protected
//!   units, then GPU-seconds lost, then units, then GPUs freed. A training pod
//!   loses its GPUs × the time since its last checkpoint (since its start if it
//!   has none); an inference pod its GPUs × [`PreemptionPolicy::inference_restart`]
//!   (6 minutes by default: a restart and model reload, not lost progress).
//!
//! # Search
//!
//! Per node, the candidate units are those holding GPUs there. With at most
//! [`PreemptionPolicy::exact_units_per_node`] (12) of them every subset is
//! tried: the node's free GPUs plus the subset's are handed to the `gpuset`
//! picker, repeatedly, to count how many preemptor members they host (so 4
//! scattered GPUs do not count as a 4-GPU NVLink set). This gives the node's
//! *menu*: for each member count, the cheapest subset. With more units, they
//! are added cheapest per freed GPU first until each member count is reached,
//! then units that are not needed are dropped again (greedy, documented as such).
//!
//! A gang preemptor's members are spread over nodes by a min-cost knapsack over
//! the menus (costs add up within a pass), inside each candidate *scope*: every
//! domain of the required tier ([`Within`]), or, without a requirement, the
//! whole cluster and every domain (a cheaper scope wins; at equal cost, the
//! one spanning fewer leaves). A gang victim that appears on several nodes is
//! charged once in the answer; units whose GPUs no member ends up using are
//! dropped. The members' GPU sets are those the picker chose on the freed masks.
//!
//! Time is an argument (`now`); nothing here reads a clock.

mod cost;
mod search;

pub use cost::{Cost, PreemptionPolicy};

use crate::gang::{GangNode, MemberSlot, TierSpan, Within};
use crate::gpuset::SetRequest;
use gputopo_api::WorkloadKind;
use std::fmt;
use std::time::SystemTime;

/// A running pod that might be evicted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    /// The snapshot's id for the pod.
    pub id: usize,
    /// `namespace/name`.
    pub name: String,
    pub priority: i32,
    /// `None` when the pod does not say; treated as training.
    pub workload: Option<WorkloadKind>,
    /// Whole GPUs it holds on this node (bit i = GPU i).
    pub gpus: u32,
    pub start: SystemTime,
    /// `gputopo.dev/checkpoint-time`.
    pub checkpoint: Option<SystemTime>,
    /// `gputopo.dev/expected-completion`.
    pub expected_completion: Option<SystemTime>,
    /// The gang it belongs to; its members may run on other nodes.
    pub gang: Option<String>,
}

/// A node with its running pods.
#[derive(Clone, Debug)]
pub struct PreemptNode {
    pub node: GangNode,
    pub victims: Vec<Victim>,
    /// Indices into `victims` that go whenever a member goes to this node:
    /// the pods whose host port, disk, anti-affinity or spread keeps the
    /// preemptor out (they may hold no GPU). Empty on most nodes.
    pub required: Vec<usize>,
}

/// The nodes and tier names.
#[derive(Clone, Debug, Default)]
pub struct PreemptCluster {
    pub tier_names: Vec<String>,
    pub nodes: Vec<PreemptNode>,
}

/// Who needs room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemptor {
    pub priority: i32,
    /// What each member asks of its node.
    pub request: SetRequest,
    /// 1 for a pod; the gang's size for a gang.
    pub members: u32,
    /// Where the members must go.
    pub within: Within,
}

/// Which victims the winning pass allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pass {
    /// Inference pods only (or nothing evicted).
    Inference,
    /// Inference and unprotected training pods.
    Training,
    /// Everything of lower priority, protected training pods included.
    Protected,
}

/// One pod to evict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VictimRef {
    pub id: usize,
    pub name: String,
    /// The node id it runs on.
    pub node: usize,
    pub gang: Option<String>,
    pub gpus: u32,
    /// Evicted although protected (nothing else worked).
    pub protected: bool,
}

/// The cheapest eviction found, and where the preemptor goes after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// Every pod to evict (all members of an evicted gang), by node id then pod id.
    pub victims: Vec<VictimRef>,
    /// Where each preemptor member goes once they are gone.
    pub members: Vec<MemberSlot>,
    /// Domains per tier the members span.
    pub spans: Vec<TierSpan>,
    pub cost: Cost,
    pub pass: Pass,
    pub explanation: String,
}

/// What could not be freed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub members: u32,
    /// Per member, e.g. `4 free GPUs with NV12 between every pair`.
    pub need: String,
    /// `one spine` / `leaf leaf-3` when the members must stay in one domain.
    pub within: Option<String>,
    /// Members that could be hosted at most (in the best scope) after evicting
    /// every lower-priority unit.
    pub most: u32,
    /// That best scope's path (the whole cluster: `None`).
    pub most_in: Option<String>,
    /// Lower-priority victim units (pods or gangs) considered.
    pub units: u32,
    /// Pods never evicted because their priority (or a gang member's) is not lower.
    pub not_lower: u32,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.members;
        write!(
            f,
            "evicting every lower-priority victim ({} unit(s)) still leaves no room for {m} member(s) of {}",
            self.units, self.need
        )?;
        if let Some(within) = &self.within {
            write!(f, " in {within}")?;
        }
        write!(f, "; at most {} would fit", self.most)?;
        if let Some(scope) = &self.most_in {
            write!(f, " (in {scope})")?;
        }
        if self.not_lower > 0 {
            write!(
                f,
                "; {} pod(s) of equal or higher priority are never evicted",
                self.not_lower
            )?;
        }
        Ok(())
    }
}

/// Why no eviction helps.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreemptNoFit {
    #[error("the preemptor has no members")]
    NoMembers,
    #[error("the preemptor asks for tier {tier}, but the cluster has {tiers} network tiers")]
    NoSuchTier { tier: usize, tiers: usize },
    #[error("no {tier} domain is named {name:?}")]
    NoSuchDomain { tier: String, name: String },
    #[error("{0}")]
    Short(Shortfall),
}

/// The cheapest eviction that makes room for `preemptor`; see the module docs.
/// An answer with no victims means it fits already.
pub fn propose(
    preemptor: &Preemptor,
    cluster: &PreemptCluster,
    policy: &PreemptionPolicy,
    now: SystemTime,
) -> Result<Proposal, PreemptNoFit> {
    search::propose(preemptor, cluster, policy, now)
}
