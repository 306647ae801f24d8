//! One scheduling cycle, read as I/O → pure → I/O.
//!
//! * **In**: the watched objects ([`Objects`](crate::cluster::Objects))
//!   and a [`Clock`], passed in by the daemon (`scheduler.rs`), which owns
//!   the watches.
//! * **Pure** (no `async`, no API), a ladder from the bottom up:
//!   - the state between cycles, each part owning its rules: `queue.rs`,
//!     `holds.rs` (assumed pods, gang reservations (`reservations.rs`),
//!     preemptors' nominations (`nominations.rs`), claims assumed),
//!     `clocks.rs` (gang waits, partial binds), `written.rs` (what was
//!     reported and written already: warnings, `accounting.rs`'s
//!     mismatches, `node_trust.rs`'s conditions, `gang_status.rs`'s
//!     statuses), with `gang.rs` (gang assembly), `domains.rs`,
//!     `outcome.rs` (the typed [`Outcome`]), `preempt.rs` (preemption's
//!     proposals) and `writes.rs` (the [`ClusterWrites`] trait);
//!   - `prepare.rs`: the snapshot and the pods due; `work.rs`: what one
//!     cycle's decisions work with;
//!   - `steps/`: every decision a step, from the state, the snapshot and
//!     the clock to a typed step (`PodStep`, `GangStep`, preemption's
//!     `PreemptStep`, the claim writes' `ClaimBindStep`, ...), and the
//!     functions that take in what the writes answered.
//! * **Out** (`drive/`, the only async part; it decides nothing itself):
//!   carries out each step through [`ClusterWrites`] (bind, evict with a
//!   dry run first, nominate, set the PodScheduled condition, write claims,
//!   statuses and node conditions, record an event) and hands each answer
//!   back to the steps (a refused eviction spares its pod; a failed bind
//!   backs the pod off). Metrics derive from the returned [`CycleReport`].
//!
//! The tests (`tests/`) drive whole cycles over literal objects with a
//! recording [`ClusterWrites`] that fails on demand, and run the steps on
//! literal worlds (`steps_*.rs`).

pub mod accounting;
mod clocks;
mod domains;
mod drive;
pub mod gang;
pub mod gang_status;
mod holds;
pub mod node_trust;
pub mod nominations;
pub mod outcome;
mod preempt;
mod prepare;
pub mod queue;
pub mod reservations;
mod slice_recovery;
mod steps;
mod work;
pub mod writes;
mod written;

#[cfg(test)]
mod tests;

pub use drive::DEFAULT_BINDS_IN_FLIGHT;
pub use outcome::Outcome;
pub use prepare::{PrepareError, Prepared};
pub use writes::{ClusterWrites, EventSpec, WriteError, WriteErrorKind, WriteOp};

use crate::cluster::Usage;
use crate::config::Settings;
use clocks::GangClocks;
use gputopo_scheduler_core::reported::AssignmentMismatch;
use holds::Holds;
use k8s_openapi::jiff::Timestamp;
use queue::SchedulingQueue;
use std::sync::Arc;
use std::time::{Duration, Instant};
use written::Written;

/// How long a preemptor keeps its claim on the GPUs its victims free: well
/// beyond the victims' default 30 s grace period.
pub const NOMINATION_TTL: Duration = Duration::from_secs(5 * 60);

/// The cycle's notion of now: monotonic for waits and lapses, wall time for
/// what pods' timestamps are compared with (preemption's cost of lost work).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub now: Instant,
    pub wall: Timestamp,
}

impl Clock {
    pub fn system() -> Clock {
        Clock {
            now: Instant::now(),
            wall: Timestamp::now(),
        }
    }
}

/// The scheduler's state between cycles: what it decided and has not yet
/// seen in the API, and what it holds for whom. Each part owns its rules.
#[derive(Debug)]
pub struct Cycle {
    /// Shared so that a decision can hold its profile while the cycle's
    /// state changes, without copying the configuration per pod.
    settings: Arc<Settings>,
    queue: SchedulingQueue,
    /// Pods assumed bound, GPUs reserved and nominated, claims assumed.
    holds: Holds,
    /// How long each gang has waited, and been partly bound.
    clocks: GangClocks,
    /// What was said already: warnings, mismatches, conditions, statuses.
    written: Written,
    /// The most bindings outstanding at once (`drive/binds.rs`).
    binds_in_flight: usize,
    /// The snapshot kept from cycle to cycle (`live_cluster.rs`).
    live: crate::live_cluster::LiveCluster,
}

impl Cycle {
    pub fn new(settings: Settings) -> Cycle {
        Cycle {
            queue: SchedulingQueue::new(settings.backoff),
            holds: Holds::new(settings.gangs.reservations),
            clocks: GangClocks::default(),
            written: Written::default(),
            binds_in_flight: DEFAULT_BINDS_IN_FLIGHT,
            live: crate::live_cluster::LiveCluster::new(
                &settings.core,
                settings.all_scheduler_names(),
            ),
            settings: Arc::new(settings),
        }
    }

    /// At most `n` bindings outstanding at once (at least one).
    pub fn with_binds_in_flight(mut self, n: usize) -> Cycle {
        self.binds_in_flight = n.max(1);
        self
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Something in the cluster changed that may make an unschedulable pod
    /// fit: its backoff, not the unschedulable timeout, now decides.
    pub fn cluster_changed(&mut self) {
        self.queue.cluster_changed();
    }

    /// When the queue next has a pod due.
    pub fn next_wake(&self) -> Option<Instant> {
        self.queue.next_wake()
    }

    /// Whether `pod` (`namespace/name`) is queued: pending for this scheduler.
    pub fn is_queued(&self, pod: &str) -> bool {
        self.queue.contains(pod)
    }

    /// Pods placed and not yet seen bound.
    pub fn assumed(&self) -> usize {
        self.holds.assumed().len()
    }

    /// Gangs holding a reservation.
    pub fn reservations(&self) -> usize {
        self.holds.reservations()
    }

    /// Preemptors holding a nomination.
    pub fn nominations(&self) -> usize {
        self.holds.nominations().len()
    }
}

/// One pod's attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct PodOutcome {
    /// `namespace/name`.
    pub pod: String,
    /// `training` | `inference` | `unspecified`.
    pub workload: &'static str,
    pub outcome: Outcome,
}

/// What an eviction for preemption came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionResult {
    Evicted,
    /// A PodDisruptionBudget said no (in the dry run or for real).
    Refused,
    Error,
}

impl EvictionResult {
    /// An eviction the API server did not carry out.
    pub fn failed(e: &WriteError) -> EvictionResult {
        if e.budget_refused() {
            EvictionResult::Refused
        } else {
            EvictionResult::Error
        }
    }

    pub fn metric_label(self) -> &'static str {
        match self {
            EvictionResult::Evicted => "evicted",
            EvictionResult::Refused => "refused",
            EvictionResult::Error => "error",
        }
    }
}

/// A network domain's GPUs in use, for `gputopo_domain_utilization_ratio`.
#[derive(Clone, Debug, PartialEq)]
pub struct DomainUse {
    /// The tier's node label key (`gputopo.dev/leaf`).
    pub tier: String,
    /// The label value naming the domain (`leaf-3`).
    pub domain: String,
    pub ratio: f64,
}

/// A network tier's whole free domains, for `gputopo_free_domains`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeDomains {
    /// The tier's node label key (`gputopo.dev/leaf`).
    pub tier: String,
    /// Its domains with GPUs and every one of them free.
    pub count: u32,
}

/// What one cycle did: the metrics derive from it.
#[derive(Clone, Debug, Default)]
pub struct CycleReport {
    /// Every attempt, in the order made.
    pub outcomes: Vec<PodOutcome>,
    /// Per decision (a pod or a whole gang): the time to decide, the
    /// snapshot's build charged to the cycle's first.
    pub decisions: Vec<Duration>,
    /// Gangs placed whole: how long since their first member was seen.
    pub gang_waits: Vec<Duration>,
    /// Members placed beside their gang's bound members (a lost member's
    /// replacement): how long since each was created.
    pub gang_recoveries: Vec<Duration>,
    pub evictions: Vec<EvictionResult>,
    /// GPU use after the cycle's placements; `None` when nothing was due.
    pub usage: Option<Usage>,
    pub domains: Vec<DomainUse>,
    /// Per tier, outermost first.
    pub free_domains: Vec<FreeDomains>,
    /// The snapshot could not be built; every due pod backs off.
    pub snapshot_error: Option<PrepareError>,
    /// Pods found running on other GPUs than chosen, each reported once.
    pub assignment_mismatches: Vec<AssignmentMismatch>,
    /// GPU records not believed (edited after binding, contradicting the
    /// status record), each reported once.
    pub record_findings: Vec<crate::assignment_record::RecordFinding>,
    /// What the cycle carries to the next, after this one.
    pub held: HeldState,
}

/// How much the cycle carries between cycles; every count is 0 on an idle
/// cluster (`gputopo_scheduler_state`; the soak bench watches it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldState {
    /// Pods bound (or being bound) that the watch has not shown bound yet.
    pub assumed_pods: usize,
    /// Gangs holding GPUs while they wait for members.
    pub gang_reservations: usize,
    /// Preemptors holding the GPUs their victims free.
    pub nominations: usize,
    /// Gangs waiting (first member seen pending, not all bound).
    pub waiting_gangs: usize,
    /// Gangs with some members bound and others pending.
    pub partial_gangs: usize,
}

impl HeldState {
    /// `(kind label, count)` for the gauge.
    pub fn by_kind(&self) -> [(&'static str, usize); 5] {
        [
            ("assumed_pods", self.assumed_pods),
            ("gang_reservations", self.gang_reservations),
            ("nominations", self.nominations),
            ("waiting_gangs", self.waiting_gangs),
            ("partial_gangs", self.partial_gangs),
        ]
    }
}

impl Cycle {
    /// See [`HeldState`].
    pub fn held_state(&self) -> HeldState {
        HeldState {
            assumed_pods: self.assumed(),
            gang_reservations: self.reservations(),
            nominations: self.nominations(),
            waiting_gangs: self.clocks.waiting(),
            partial_gangs: self.clocks.partial(),
        }
    }
}

impl CycleReport {
    /// The outcome of `pod`'s last attempt in this cycle.
    pub fn outcome(&self, pod: &str) -> Option<&Outcome> {
        self.outcomes
            .iter()
            .rev()
            .find(|o| o.pod == pod)
            .map(|o| &o.outcome)
    }
}
