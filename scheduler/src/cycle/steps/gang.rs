//! One gang's decision, as pure steps around the writes: [`Cycle::gang_step`]
//! decides (bind every member, undo a gang partly bound too long, preempt,
//! or leave it waiting, reserved or timed out), and the `gang_*` functions
//! after it take in what the writes answered. The gang's own reservation
//! and nominations are lifted for its decision and put back (with any new
//! reservation) when it is left waiting.

use super::claims::gang_claims;
use crate::cluster::pod_key;
use crate::cycle::domains::domain_selectors;
use crate::cycle::gang::{GangReadiness, GangUnit};
use crate::cycle::slice_recovery;
use crate::cycle::work::{Member, Work};
use crate::cycle::writes::{EventSpec, WriteError};
use crate::cycle::{Clock, Cycle, EvictionResult, Outcome};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{DraInventory, DraPod};
use gputopo_scheduler_core::dra_schedule::{ClaimGangDecision, DraPlacement, schedule_claim_gang};
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::warn;

/// A gang being decided: what its steps carry from one to the next.
#[derive(Debug)]
pub struct GangAttempt {
    pub unit: GangUnit,
    member_keys: Vec<String>,
    /// How long it has waited, and been partly bound, as of this attempt.
    waited: Duration,
    partial: Option<Duration>,
}

/// What to do with a gang.
#[derive(Debug, PartialEq)]
pub enum GangStep {
    /// Every member placed: bind them in order (a placement per member),
    /// then [`Cycle::gang_bound`].
    Bind(Vec<Placement>),
    /// Every member placed with its claims: write them, bind the members
    /// in order, then [`Cycle::gang_bound`].
    BindClaims(Vec<DraPlacement>),
    /// Partly bound for longer than `gangs.partialBindTimeout` and not
    /// placeable now: evict these bound members (`namespace/name`), then
    /// [`Cycle::gang_undone`].
    UndoPartial { bound: Vec<String> },
    /// Fits nowhere now: try preemption for every member, then
    /// [`Cycle::gang_unplaced`] with its result.
    Preempt { message: String },
    /// Every member ends with this outcome (incomplete, its claims
    /// unreadable, timed out, or reserved for).
    Finish(Outcome),
    /// The decision placed some members only: every member is retried
    /// later, nothing written.
    RetryLater,
}

/// Where a complete gang fits, if anywhere.
#[derive(Debug, PartialEq)]
pub enum GangFit {
    Placed {
        placements: Vec<Placement>,
        claims: Option<Vec<DraPlacement>>,
    },
    Waiting {
        message: String,
    },
}

impl GangAttempt {
    /// The same attempt for fewer of the gang's members (`elastic.rs`).
    pub(super) fn narrowed(self, unit: GangUnit, member_keys: Vec<String>) -> GangAttempt {
        GangAttempt {
            unit,
            member_keys,
            ..self
        }
    }
}

impl Cycle {
    /// Starts `unit`'s attempt: its clocks read, its holds lifted.
    pub(in crate::cycle) fn gang_attempt(
        &mut self,
        work: &mut Work<'_>,
        unit: GangUnit,
    ) -> GangAttempt {
        let member_keys: Vec<String> = unit.members.iter().map(|(p, _)| pod_key(p)).collect();
        let partial = self.clocks.partly_bound_for(&unit, work.clock.now);
        // The gang's own reservation and nominations are free for it.
        self.holds
            .lift(&mut work.snapshot, Some(&unit.key), &member_keys);
        let waited = self.clocks.waited(&unit.key, work.clock.now);
        GangAttempt {
            unit,
            member_keys,
            waited,
            partial,
        }
    }

    /// Decides the gang of `attempt`.
    pub(in crate::cycle) fn gang_step(
        &mut self,
        work: &mut Work<'_>,
        attempt: &GangAttempt,
        core: &SchedulerConfig,
    ) -> GangStep {
        let unit = &attempt.unit;
        let claims = match gang_claims(work, self.holds.claims(), &unit.members) {
            Ok(c) => c,
            Err(outcome) => {
                self.gang_restore(work, attempt);
                return GangStep::Finish(outcome);
            }
        };
        let t = Instant::now();
        let fit = (unit.readiness == GangReadiness::Complete).then(|| {
            gang_fit(
                &work.snapshot,
                work.inventory.as_ref(),
                unit,
                claims.as_deref(),
                core,
            )
        });
        work.decided(t);
        let outcome = match fit {
            Some(GangFit::Placed { placements, claims })
                if placements.len() == unit.members.len() =>
            {
                return match claims {
                    Some(placed) => GangStep::BindClaims(placed),
                    None => GangStep::Bind(placements),
                };
            }
            // Not placeable now, and partly bound for too long: undone, so
            // that no bound member holds GPUs for members that cannot come.
            _ if attempt
                .partial
                .is_some_and(|p| p > self.settings.gangs.partial_bind_timeout) =>
            {
                self.gang_restore(work, attempt);
                let bound = unit.bound_members.iter().map(|(m, _)| m.clone()).collect();
                return GangStep::UndoPartial { bound };
            }
            Some(GangFit::Placed { placements, .. }) => {
                warn!(gang = %unit.key, members = unit.members.len(), placements = placements.len(), "the gang decision does not place every member; retrying later");
                for k in &attempt.member_keys {
                    self.queue.retry_later(k, work.clock.now);
                }
                self.gang_restore(work, attempt);
                return GangStep::RetryLater;
            }
            Some(GangFit::Waiting { message }) => return GangStep::Preempt { message },
            None => Outcome::WaitingForGang {
                message: unit.waiting_message().unwrap_or_default(),
            },
        };
        GangStep::Finish(self.gang_unplaced(work, attempt, outcome, core))
    }

    /// A gang left pending with `outcome`: told it timed out once it has
    /// waited past its timeout (its reservation released), or given a
    /// reservation when it fits nowhere; its holds are put back.
    pub(in crate::cycle) fn gang_unplaced(
        &mut self,
        work: &mut Work<'_>,
        attempt: &GangAttempt,
        outcome: Outcome,
        core: &SchedulerConfig,
    ) -> Outcome {
        let unit = &attempt.unit;
        let outcome = if attempt.waited > unit.timeout {
            let message = outcome.message().unwrap_or_default();
            let released = self.holds.release(&unit.key);
            timed_out(unit, attempt.waited, released, &message)
        } else if let Outcome::Unschedulable { message } = &outcome {
            let pendings: Vec<PendingPod> = unit.members.iter().map(|(_, p)| p.clone()).collect();
            match self
                .holds
                .reserve(&work.snapshot, &unit.key, &pendings, core, work.clock.now)
            {
                Some(note) => Outcome::Unschedulable {
                    message: format!("{message}; {note}"),
                },
                None => outcome,
            }
        } else {
            outcome
        };
        if let Outcome::Unschedulable { message } | Outcome::GangTimedOut { message } = &outcome {
            self.written.gang_unplaced(&unit.key, message);
        }
        self.gang_restore(work, attempt);
        outcome
    }

    /// After [`GangStep::Bind`]'s bindings (each member's outcome already
    /// recorded in the report): a gang bound whole stops its clocks and
    /// ends its reservation; members that joined running ones (a lost
    /// member's replacement) are told so, by the returned events. A gang
    /// not bound whole has its holds put back.
    pub(in crate::cycle) fn gang_bound(
        &mut self,
        work: &mut Work<'_>,
        attempt: &GangAttempt,
        placements: &[Placement],
    ) -> Vec<(Arc<Pod>, EventSpec)> {
        let unit = &attempt.unit;
        let all_bound = attempt
            .member_keys
            .iter()
            .all(|k| matches!(work.report.outcome(k), Some(Outcome::Scheduled(_))));
        if !all_bound {
            self.gang_restore(work, attempt);
            return Vec::new();
        }
        let mut events = Vec::new();
        if !unit.bound_members.is_empty() {
            let replaced = recovery_event(&work.snapshot, unit, placements);
            for (i, (pod, _)) in unit.members.iter().enumerate() {
                // Member N of the gang: up to its minimum it replaces a lost
                // one (timed as a recovery); beyond, it joins an elastic gang.
                let n = unit.bound + i as u32 + 1;
                match unit.size.filter(|&size| n > size) {
                    Some(size) => {
                        let event = joined_event(&work.snapshot, unit, placements, (n, size));
                        events.push((pod.clone(), event));
                    }
                    None => {
                        work.report
                            .gang_recoveries
                            .push(since_created(pod, work.clock));
                        events.push((pod.clone(), replaced.clone()));
                    }
                }
            }
        }
        self.written.gang_placed(&unit.key);
        self.holds.release(&unit.key);
        if let Some(w) = self.clocks.placed(&unit.key, work.clock.now) {
            work.report.gang_waits.push(w);
        }
        events
    }

    /// After [`GangStep::UndoPartial`]'s evictions (one answer per bound
    /// member, in order): a gang whose bound members are all gone starts
    /// over (its clocks and reservation end); every pending member is told
    /// why.
    pub(in crate::cycle) fn gang_undone(
        &mut self,
        work: &mut Work<'_>,
        attempt: &GangAttempt,
        answers: Vec<Result<(), WriteError>>,
    ) -> Outcome {
        let unit = &attempt.unit;
        let mut evicted = Vec::new();
        let mut failed = Vec::new();
        for ((member, _), answer) in unit.bound_members.iter().zip(answers) {
            match answer {
                Ok(()) => {
                    work.report.evictions.push(EvictionResult::Evicted);
                    evicted.push(member.clone());
                }
                Err(e) => {
                    work.report.evictions.push(EvictionResult::failed(&e));
                    failed.push(e.to_string());
                }
            }
        }
        if failed.is_empty() {
            self.clocks.undone(&unit.key);
            self.holds.release(&unit.key);
        }
        warn!(gang = %unit.key, ?evicted, ?failed, "undoing a partly bound gang");
        Outcome::GangTimedOut {
            message: format!(
                "{} stayed partly bound ({} bound, {} pending) for {}s, longer than gangs.partialBindTimeout ({}s): evicted {} so that the gang is placed again as one{}",
                unit.key,
                unit.bound_members.len(),
                unit.members.len(),
                attempt.partial.unwrap_or_default().as_secs(),
                self.settings.gangs.partial_bind_timeout.as_secs(),
                if evicted.is_empty() {
                    "none of its bound members".to_string()
                } else {
                    evicted.join(", ")
                },
                if failed.is_empty() {
                    String::new()
                } else {
                    format!("; not evicted: {}", failed.join("; "))
                }
            ),
        }
    }

    fn gang_restore(&self, work: &mut Work<'_>, attempt: &GangAttempt) {
        self.holds.restore(
            &mut work.snapshot,
            Some(&attempt.unit.key),
            &attempt.member_keys,
        );
    }
}

/// Where a complete gang fits: the rest of a partly bound gang goes as
/// close to its bound members as fits (their leaf, else their spine, else
/// anywhere); a gang whose members use claims gets each member's devices.
pub fn gang_fit(
    snapshot: &Snapshot,
    inventory: Option<&DraInventory>,
    unit: &GangUnit,
    claims: Option<&[DraPod]>,
    core: &SchedulerConfig,
) -> GangFit {
    let nodes: Vec<String> = unit.bound_members.iter().map(|(_, n)| n.clone()).collect();
    let model = shared_model(snapshot, &nodes);
    // A partly bound gang's rest keeps to its required domain, each member
    // to its slice's domain where bound slice-mates name one; the slices
    // themselves are not formed anew among the rest.
    let required = unit
        .members
        .iter()
        .find_map(|(_, p)| p.request.gang_structure.required.as_ref())
        .map(|t| t.key.clone());
    let partly_bound = !unit.bound_members.is_empty();
    let slice_domains = slice_recovery::slice_selectors(snapshot, unit);
    let selectors = if partly_bound {
        slice_recovery::within_required(domain_selectors(snapshot, &nodes), required.as_deref())
    } else {
        domain_selectors(snapshot, &nodes)
    };
    let mut last = None;
    for selector in selectors {
        let list: Vec<PendingPod> = unit
            .members
            .iter()
            .zip(&slice_domains)
            .map(|((_, p), slice_domain)| {
                let mut p = p.clone();
                p.node_selector.extend(selector.clone());
                if partly_bound {
                    p.request.gang_structure.slices.clear();
                }
                if let Some((key, value)) = slice_domain {
                    p.node_selector.insert(key.clone(), value.clone());
                }
                // The bound members' GPU model, as the gang was placed
                // under (unless the gang may mix models).
                if let Some(model) = model
                    && !p
                        .request
                        .gang_mixed_models
                        .unwrap_or(core.gang_mixed_models)
                {
                    p.node_selector
                        .insert(MODEL_LABEL.to_string(), model.to_string());
                }
                p
            })
            .collect();
        let fit = match claims {
            None => match schedule_gang(snapshot, &list, core) {
                GangDecision::Placed(placements) => GangFit::Placed {
                    placements,
                    claims: None,
                },
                GangDecision::Waiting { message } => GangFit::Waiting { message },
            },
            Some(dras) => {
                let empty = DraInventory::default();
                let inventory = inventory.unwrap_or(&empty);
                match schedule_claim_gang(snapshot, inventory, &list, dras, core) {
                    ClaimGangDecision::Placed(placed) => GangFit::Placed {
                        placements: placed.iter().map(|d| d.placement.clone()).collect(),
                        claims: Some(placed),
                    },
                    ClaimGangDecision::Waiting { message } => GangFit::Waiting { message },
                }
            }
        };
        if matches!(fit, GangFit::Placed { .. }) {
            return fit;
        }
        last = Some(fit);
    }
    last.unwrap_or(GangFit::Waiting {
        message: format!("{}: nothing to place", unit.key),
    })
}

/// The outcome of a gang that waited past its timeout (what
/// coscheduling's Permit timeout means here).
fn timed_out(unit: &GangUnit, waited: Duration, released: bool, message: &str) -> Outcome {
    Outcome::GangTimedOut {
        message: format!(
            "{} has waited {}s, longer than its schedule timeout ({}s){}: {message}",
            unit.key,
            waited.as_secs(),
            unit.timeout.as_secs(),
            if released {
                "; its reservation is released"
            } else {
                ""
            }
        ),
    }
}

/// The members of `unit` paired with their placements, in order.
pub fn members_placed(unit: &GangUnit, placements: &[Placement]) -> Vec<(Member, Placement)> {
    unit.members
        .iter()
        .cloned()
        .zip(placements.iter().cloned())
        .collect()
}

/// The GPU product label the gang's bound members' nodes share, if one.
const MODEL_LABEL: &str = "nvidia.com/gpu.product";

/// The `nvidia.com/gpu.product` every node of `nodes` carries, when they
/// all carry the same one.
fn shared_model<'a>(snapshot: &'a Snapshot, nodes: &[String]) -> Option<&'a str> {
    let mut models = nodes.iter().map(|n| {
        snapshot
            .node_id(n)
            .and_then(|id| snapshot.node(id).label(MODEL_LABEL))
    });
    let first = models.next()??;
    models.all(|m| m == Some(first)).then_some(first)
}

/// The event on a member beyond the gang's minimum (an elastic gang's
/// scale-up): which member it is, and where it joined the others.
fn joined_event(
    snapshot: &Snapshot,
    unit: &GangUnit,
    placements: &[Placement],
    (member, minimum): (u32, u32),
) -> EventSpec {
    let nodes: Vec<String> = unit.bound_members.iter().map(|(_, n)| n.clone()).collect();
    let model = shared_model(snapshot, &nodes)
        .map_or(String::new(), |m| format!(" on their GPU model {m},"));
    EventSpec::normal(
        "GangMemberJoined",
        "Scheduling",
        format!(
            "joined gang {} (member {member} of minimum {minimum}), beside its {} bound member(s){model} in {}",
            unit.key,
            unit.bound_members.len(),
            shared_domain(snapshot, unit, placements)
        ),
    )
}

/// The closest network domain the bound members and `placements` share.
fn shared_domain(snapshot: &Snapshot, unit: &GangUnit, placements: &[Placement]) -> String {
    let nodes: Vec<String> = unit
        .bound_members
        .iter()
        .map(|(_, n)| n.clone())
        .chain(placements.iter().map(|p| p.node.clone()))
        .collect();
    domain_selectors(snapshot, &nodes)
        .into_iter()
        .next()
        .filter(|s| !s.is_empty())
        .map_or("no shared network domain".to_string(), |s| {
            s.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
}

/// The event on a member placed beside its gang's bound members: how many,
/// and the closest network domain they now share.
fn recovery_event(snapshot: &Snapshot, unit: &GangUnit, placements: &[Placement]) -> EventSpec {
    let shared = shared_domain(snapshot, unit, placements);
    EventSpec::normal(
        "GangMemberReplaced",
        "Scheduling",
        format!(
            "{}: {} member(s) placed beside its {} bound member(s), by the gang's own rule (their domain first); together in {shared}",
            unit.key,
            placements.len(),
            unit.bound_members.len()
        ),
    )
}

/// How long since `pod` was created, by the cycle's wall clock.
fn since_created(pod: &Pod, clock: Clock) -> Duration {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| clock.wall.duration_since(t.0).try_into().ok())
        .unwrap_or_default()
}
