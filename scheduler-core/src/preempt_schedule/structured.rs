//! Preemption for a gang with structure (docs/contract/gang-structure.md):
//! the eviction search stays inside the gang's required domain, and a
//! proposal stands only if the gang, with its victims gone, would then be
//! placed whole with its structure. Where the cheapest evictions would leave
//! room that breaks the slices, the search is tried again freeing one domain
//! of the slice tier; failing that, nothing is evicted, rather than a
//! scattered set that leaves the constraint unmet.

use super::PreemptionError;
use crate::config::SchedulerConfig;
use crate::gang::Within;
use crate::gang_schedule::structure::{self, Structure};
use crate::gang_schedule::{GangDecision, schedule_gang};
use crate::pod::PendingPod;
use crate::preempt::Proposal;
use crate::snapshot::{PodId, Snapshot};

/// The gang's structure, where its members state one, and the domain the
/// eviction search is held to (the required tier, unless it is the
/// hostname, which the search does not know as a tier).
pub(super) fn read(
    snapshot: &Snapshot,
    members: &[PendingPod],
) -> Result<Option<(Structure, Within)>, PreemptionError> {
    let all: Vec<&PendingPod> = members.iter().collect();
    let s = structure::read(snapshot, &all).map_err(PreemptionError::Structure)?;
    if s == Structure::default() {
        return Ok(None);
    }
    let tiers = snapshot.tiers().len();
    let within = match &s.within {
        Within::OneDomainAt { tier } if *tier < tiers => s.within.clone(),
        _ => Within::Anywhere,
    };
    Ok(Some((s, within)))
}

/// A narrower search to try when the first proposal's room breaks the
/// slices: one domain of the outermost slice tier, if the search knows it.
pub(super) fn slice_scope(s: &Structure, snapshot: &Snapshot) -> Option<Within> {
    let tier = s.slices.first()?.tier;
    (tier < snapshot.tiers().len()).then_some(Within::OneDomainAt { tier })
}

/// Why the gang would not be placed whole, with its structure, once the
/// proposal's victims are gone (the decision's reason); `None` when it would.
pub(super) fn room_breaks(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
    proposal: &Proposal,
) -> Option<String> {
    let mut without = snapshot.clone();
    for v in &proposal.victims {
        without.remove_pod(PodId(v.id as u32));
    }
    match schedule_gang(&without, members, config) {
        GangDecision::Placed(_) => None,
        GangDecision::Waiting { message } => Some(message),
    }
}
