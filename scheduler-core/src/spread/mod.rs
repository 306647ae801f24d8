//! Pod topology spread, judged as kube-scheduler's PodTopologySpread plugin
//! judges it.
//!
//! Data flow, once per decision: [`constraints`] picks the constraints that
//! apply (the pod's own of one `whenUnsatisfiable`, or, when it states
//! none, the configured defaults over its Services' and controller's pods)
//! and counts the matching bound pods per node; [`domains`] sums those
//! counts per topology domain over the nodes the inclusion policies admit;
//! then the filter (`filter.rs`, `DoNotSchedule`) reads the skew per node
//! and the score (`score.rs`, `ScheduleAnyway`) ranks the feasible nodes.

mod constraints;
mod domains;
mod filter;
mod score;

pub(crate) use constraints::score_may_apply;
pub(crate) use filter::SpreadFilter;
pub(crate) use score::normalized_scores;

/// What the caller's filter says of one node for the pod, which the
/// constraints' `nodeAffinityPolicy` and `nodeTaintsPolicy` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeEligibility {
    /// The node matches the pod's `nodeSelector` and required node affinity.
    pub(crate) affinity: bool,
    /// The pod tolerates every `NoSchedule` and `NoExecute` taint of the node.
    pub(crate) taints: bool,
}

/// Why topology spread refuses a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpreadRefusal {
    /// The node lacks a constraint's topology key — *node(s) didn't match
    /// pod topology spread constraints (missing required label)*.
    MissingLabel,
    /// Placing the pod there would exceed `maxSkew` — *node(s) didn't
    /// match pod topology spread constraints*.
    Skew,
}

impl SpreadRefusal {
    /// kube-scheduler's reason text.
    pub fn summary(self) -> &'static str {
        match self {
            SpreadRefusal::MissingLabel => {
                "node(s) didn't match pod topology spread constraints (missing required label)"
            }
            SpreadRefusal::Skew => "node(s) didn't match pod topology spread constraints",
        }
    }

    /// Whether evicting pods could lift it.
    pub fn resolvable(self) -> bool {
        matches!(self, SpreadRefusal::Skew)
    }
}

#[cfg(test)]
mod tests;
