//! Preemption for a gang whose members ask different things (a Ray head
//! without GPUs and workers with 4, an MPI launcher and its workers, JobSets
//! whose replicated jobs ask different GPU counts).
//!
//! The eviction search prices one request for many members, so the gang's
//! GPU members are taken group by group, the largest request first: each
//! group's evictions are proposed on the cluster as the groups before it
//! left it (their victims gone, their members placed). Members without GPUs
//! take no part in the search. The proposal stands only if the whole gang,
//! every member with its own request, would then be placed by the gang
//! decision on the cluster without the victims; the nominations are that
//! decision's nodes, so a member without GPUs is nominated where the gang
//! decision puts it.

use super::{PreemptionError, PreemptionPlan, propose_preemption_sparing};
use crate::config::SchedulerConfig;
use crate::filter::PodContext;
use crate::gang_schedule::{GangDecision, schedule_gang};
use crate::gpuset::SetRequest;
use crate::pod::PendingPod;
use crate::preempt::PreemptionPolicy;
use crate::snapshot::{BoundPodInput, GpuHolding, Snapshot};
use gputopo_api::k8s_openapi::jiff::Timestamp;
use std::collections::BTreeSet;

/// Whether `members` ask different GPU sets (or some none): a mixed gang.
pub(super) fn is_mixed(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
) -> bool {
    let mut requests = members
        .iter()
        .map(|m| PodContext::new(snapshot, m, config).set_request().copied());
    let first = requests.next().flatten();
    members.len() > 1 && requests.any(|r| r != first)
}

pub(super) fn propose(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
    policy: &PreemptionPolicy,
    now: Timestamp,
    spared: &BTreeSet<String>,
) -> Result<PreemptionPlan, PreemptionError> {
    let groups = groups(snapshot, members, config);
    if groups.is_empty() {
        let first = members.first().ok_or(PreemptionError::NoMembers)?;
        return Err(PreemptionError::NoWholeGpus { pod: first.key() });
    }
    let mut work = snapshot.clone();
    let mut victims: Vec<String> = Vec::new();
    let mut hours = 0.0;
    let mut parts: Vec<String> = Vec::new();
    for (request, group) in &groups {
        let group: Vec<PendingPod> = group.iter().map(|&i| members[i].clone()).collect();
        let plan = propose_preemption_sparing(&work, &group, config, policy, now, spared)?;
        remove(&mut work, &plan.victims);
        for (member, (node, gpus)) in group.iter().zip(&plan.members) {
            let mut placed = BoundPodInput::new(&member.namespace, &member.name, node);
            placed.requests = member.requests.clone();
            placed.holding = GpuHolding::Whole(gpus.clone());
            placed.request = Ok(member.request.clone());
            placed.priority = member.priority;
            // A member the group's plan placed: later groups see its GPUs taken.
            let _ = work.add_pod(placed);
        }
        victims.extend(plan.victims.iter().cloned());
        hours += plan.gpu_hours_lost;
        parts.push(format!(
            "{} member(s) of {} GPU(s): {}",
            group.len(),
            request.gpus,
            plan.explanation
        ));
    }
    let mut freed = snapshot.clone();
    remove(&mut freed, &victims);
    match schedule_gang(&freed, members, config) {
        GangDecision::Placed(placements) => Ok(PreemptionPlan {
            members: placements
                .iter()
                .map(|p| (p.node.clone(), p.gpus.clone()))
                .collect(),
            victims,
            gpu_hours_lost: hours,
            explanation: format!(
                "members asking different GPU sets, freed group by group, largest first: {}",
                parts.join("; ")
            ),
        }),
        GangDecision::Waiting { message } => Err(PreemptionError::MixedGangUnmet {
            victims: victims.len(),
            why: message,
        }),
    }
}

/// The GPU members grouped by request, the largest request first (then by
/// first member); members without whole GPUs are left out.
fn groups(
    snapshot: &Snapshot,
    members: &[PendingPod],
    config: &SchedulerConfig,
) -> Vec<(SetRequest, Vec<usize>)> {
    let mut groups: Vec<(SetRequest, Vec<usize>)> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let Some(request) = PodContext::new(snapshot, m, config).set_request().copied() else {
            continue;
        };
        if request.gpus == 0 {
            continue;
        }
        match groups.iter_mut().find(|(r, _)| *r == request) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((request, vec![i])),
        }
    }
    groups.sort_by_key(|(r, idx)| (std::cmp::Reverse(r.gpus), idx[0]));
    groups
}

fn remove(snapshot: &mut Snapshot, victims: &[String]) {
    for v in victims {
        if let Some((ns, name)) = v.split_once('/')
            && let Some(id) = snapshot.pod_id(ns, name)
        {
            snapshot.remove_pod(id);
        }
    }
}
