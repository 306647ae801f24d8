//! Elastic gangs: members beyond the gang's minimum never hold the minimum
//! back (docs/contract/pod-requests.md, "Gangs"). A gang whose pending
//! members do not all fit is narrowed to the ones it needs now, in rank
//! order: its minimum less the members already bound (at least one); the
//! rest stay pending and join the bound members as they find room, each
//! told so by the `GangMemberJoined` event.

use super::gang::{GangAttempt, GangFit, gang_fit};
use crate::cluster::pod_key;
use crate::cycle::Cycle;
use crate::cycle::gang::GangReadiness;
use crate::cycle::work::Work;
use gputopo_scheduler_core::config::SchedulerConfig;

impl Cycle {
    /// `attempt`, or the same gang narrowed to the members it needs now
    /// where all of its pending members do not fit but those do. Gangs with
    /// ResourceClaims are left whole (their devices are decided together).
    pub(in crate::cycle) fn gang_minimum_first(
        &mut self,
        work: &mut Work<'_>,
        attempt: GangAttempt,
        core: &SchedulerConfig,
    ) -> GangAttempt {
        let unit = &attempt.unit;
        let Some(minimum) = unit.size else {
            return attempt;
        };
        let needed = (minimum.saturating_sub(unit.bound) as usize).max(1);
        let claims = unit.members.iter().any(|(pod, _)| {
            pod.spec
                .as_ref()
                .and_then(|s| s.resource_claims.as_ref())
                .is_some_and(|c| !c.is_empty())
        });
        if unit.readiness != GangReadiness::Complete || unit.members.len() <= needed || claims {
            return attempt;
        }
        let fits = |unit| {
            matches!(
                gang_fit(&work.snapshot, work.inventory.as_ref(), unit, None, core),
                GangFit::Placed { .. }
            )
        };
        if fits(unit) {
            return attempt;
        }
        let mut narrowed = unit.clone();
        narrowed.members.sort_by(|(_, a), (_, b)| {
            (a.request.rank.is_none(), &a.request.rank, &a.name).cmp(&(
                b.request.rank.is_none(),
                &b.request.rank,
                &b.name,
            ))
        });
        narrowed.members.truncate(needed);
        if !fits(&narrowed) {
            return attempt;
        }
        let member_keys = narrowed.members.iter().map(|(p, _)| pod_key(p)).collect();
        attempt.narrowed(narrowed, member_keys)
    }
}
