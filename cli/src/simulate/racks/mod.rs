//! `gputopo simulate --scenario nvl72`: structured training gangs on GB200 /
//! GB300 NVL72 racks, four placement policies side by side.
//!
//! # The cluster
//!
//! `--racks` racks (default 36) of 18 compute trays of 4 GPUs (NV18 between
//! all four, one NVLink domain per rack: `nvidia.com/gpu.clique`), 4 racks
//! per leaf, 3 leaves per spine: 36 racks are 9 leaves under 3 spines, 648
//! nodes, 2,592 GPUs. Host names are a seeded shuffle, so name order says
//! nothing about racks.
//!
//! # The workload (`workload.rs`)
//!
//! Three Poisson arrival streams over `--hours` (default 336), one seeded
//! ChaCha8 stream each, identical for every policy; durations log-normal
//! (median, σ), at least a minute, at most a week. Each stream asks its share
//! of an offered load of 0.85 (GPU-hours asked per hour over the cluster's
//! GPUs), which sets its arrival rate from its mean size and duration:
//!
//! | stream | share of load | classes (by count) | duration median, σ |
//! | --- | --- | --- | --- |
//! | training gangs | 60 % | 16 members in 4 slices of 4 (4), 32 in 4 × 8 (3), 64 in 4 × 16 (2), all preferring one leaf; 128 in 8 × 16 (1) preferring one spine | 4 h, 0.75 |
//! | multi-node jobs | 15 % | 2–8 members, uniform, no topology constraint | 2 h, 0.75 |
//! | inference pods | 25 % | 1, 2, 3, 4 GPUs (4 : 3 : 1 : 2) | 1 h, 1.0 |
//!
//! Every gang member asks 4 GPUs (a whole tray). A training gang's members,
//! in rank order, are cut into slices, each **required** inside one rack;
//! the whole gang **prefers** one leaf (one spine for the 128-member
//! gangs). Classes an empty cluster cannot hold are left out (on 6 racks,
//! the 128-member gangs).
//!
//! # The run (`engine.rs`)
//!
//! Events in time order; after each instant one pass over the waiting units
//! in arrival order, each tried as a whole (all members or none), the ones
//! that fit placed, the others left waiting: FIFO with backfill, as Kueue's
//! `BestEffortFIFO` and KAI's allocate action do. A unit that failed is
//! tried again only once GPUs were given back since (its answer cannot have
//! changed), and a cheap necessary condition (enough free trays; for the
//! policies that keep slices, enough whole slices per rack) skips hopeless
//! tries; neither changes an outcome. Every placement is checked against
//! the GPUs the policy was shown (a GPU given twice, or part of a gang, is
//! an error, not a figure).
//!
//! gputopo-scheduler's gang reservations are part of both gputopo policies
//! (`gangs.reservations` and `gangs.scheduleTimeout`, their defaults: a
//! gang that fits nowhere holds, for 15 minutes, renewed on its next failed
//! try while it has waited at most 10 minutes, the GPUs it would take once
//! every running pod ended; at most 4 gangs and 25 % of the GPUs; the
//! holder's own decision sees them, everyone else's does not;
//! `scheduler/src/cycle/reservations.rs`). Kueue and KAI have none
//! (KAI-Scheduler#1969 asks for it).
//!
//! # The policies
//!
//! - **`gputopo`**: gangs by scheduler-core's `gang::place_gang` with the
//!   structure: `GangSpec::uniform(n, 4 GPUs).preferring(tier)
//!   .sliced([Slice { size, tier: rack, required: true }])`; multi-node
//!   jobs `GangSpec::uniform(n, 4 GPUs)` (no structure: the contract's
//!   fewest domains, best fit). Single pods: scheduler-core's own per-pod
//!   decision, `schedule::schedule` with the default weights, on a
//!   snapshot of the fabric (tiers `gputopo.dev/spine`, `gputopo.dev/leaf`,
//!   `nvidia.com/gpu.clique`) kept equal to what the policy is shown (one
//!   stand-in pod per node holding its taken GPUs; `pods.rs`), so the
//!   domain-fit part of its score (`score/domain_fit.rs`: a partly used
//!   domain before an untouched one, the fullest in GPUs left first, every
//!   tier, the innermost counting most) is the one the scheduler runs.
//! - **`gputopo-flat`**: the same scheduler without structure: every gang
//!   `GangSpec::uniform(n, 4 GPUs)` (no slices, no preference), single pods
//!   by `schedule` with the domain-fit part off (`weights.domainFit: 0`).
//! - Investigations (`--policy NAME`, not in `all`):
//!   `gputopo-no-domain-fit` is `gputopo` with the domain-fit part off;
//!   `gputopo-stable` is `gputopo` with single pods by a rule emulated on
//!   scheduler-core's GPU-set picker (`NodeShape::picker`): best fit on the
//!   node, then a partly used rack before an untouched one, a partly used
//!   leaf before an untouched one, then the rack's name (one stable order
//!   of racks, as Kueue's `levelValues` tie-break gives, instead of the
//!   fullest first).
//! - **`kueue-tas`** (`kueue.rs`; read in kubernetes-sigs/kueue at
//!   `ff69552`, 2026-08-22, `pkg/cache/scheduler/tas_flavor_snapshot.go`,
//!   `findTopologyAssignment` and what it calls, and
//!   `pkg/features/kube_features.go`): per host the pods that fit its free
//!   GPUs, summed up the tree; slices counted at the slice level (`pods /
//!   size`) and summed above it. The preferred level's domains sorted by
//!   slices descending, pods ascending, `levelValues`; if the first holds
//!   every slice, BestFit takes the first domain with the fewest slices that
//!   still hold them; if not, the level above is tried (the preferred-level
//!   fallback), and at the top level domains are taken greedily, largest
//!   first, the last by best fit. Descending: above the slice level all
//!   children of the chosen domains together take the slices greedily
//!   (largest first, the last by best fit); at the slice level and below,
//!   each domain hands its pods to its own children the same way. Ranks
//!   follow the hosts' `levelValues`. Pods and multi-node jobs carry no
//!   topology request, which under a TAS flavor is implied, unconstrained,
//!   at the host level, and `TASProfileMixed` (on by default since 0.15)
//!   makes that LeastFreeCapacity: the host with the fewest pods' room that
//!   still holds them all, else hosts from the least room up.
//! - **`kai`** (`kai.rs`; read in NVIDIA/KAI-Scheduler at `72de64f`,
//!   2026-03-07, `pkg/scheduler/plugins/topology/job_filtering.go`,
//!   `node_scoring.go`, `topology_utils.go`, `actions/common/allocate.go`,
//!   `plugins/nodeplacement/pack.go`, and `docs/topology/`): a gang is a
//!   PodGroup with the preferred level, its slices child subgroups each
//!   with a required rack (the segment design). The job's candidate domains
//!   are every domain from the preferred level up to the root that can
//!   allocate all its pods, each parent's children sorted by the job's GPUs
//!   over the child's idle GPUs, descending (the fullest first), then ID,
//!   taken preferred level first in breadth-first order; in each, slice by
//!   slice, the first rack (same order, with the slice's GPUs) that holds
//!   the slice takes it; a slice that finds none rolls the domain back and
//!   the next one is tried. Tasks go to the node with the fewest idle GPUs
//!   that fits (binpack), equal scores in no defined order (here host
//!   name). Pods and multi-node jobs have no topology constraint: task by
//!   task, binpack.
//!
//! # What is reported (`result.rs`)
//!
//! Per policy: the share of placed training gangs whose required slices
//! held (the nodes host a whole number of slices per rack; for
//! `gputopo-flat`, which is not told of slices, a broken one counts as not
//! held), the share whose ranks are laid out slice by slice, the share
//! inside one domain of their preferred tier, queue time p50 / p99 of the
//! largest gangs (and of every class), whole racks free (no GPU allocated
//! or reserved), racks that can take a 16-tray slice (16 whole trays
//! available) and GPU allocation, the last three time-weighted over the
//! last 90 % of the arrival period.
//!
//! # Determinism
//!
//! Same seed, same bytes (`--no-runtime`): the workload and the host names
//! come from seeded streams, and no hash-map order reaches a decision.

pub mod engine;
pub mod fabric;
mod gputopo;
mod kai;
mod kueue;
mod pods;
pub mod result;
pub mod workload;

use crate::simulate::SimError;
pub use engine::Reservations;
pub use fabric::{Fabric, FabricSize};
pub use gputopo::PodRule;
pub use result::{RacksResult, class_table, table};
use std::time::Instant;
pub use workload::Workload;

/// The policies, in report order.
pub const POLICIES: [&str; 4] = ["gputopo", "gputopo-flat", "kueue-tas", "kai"];

/// Variants run to find out why (docs/benchmarks/structured-gangs.md).
pub const INVESTIGATIONS: [&str; 2] = ["gputopo-no-domain-fit", "gputopo-stable"];

/// The offered load.
pub const LOAD: f64 = 0.85;

/// One run's settings.
#[derive(Clone, Debug)]
pub struct RacksOptions {
    pub racks: usize,
    pub hours: f64,
    pub seed: u64,
    /// gputopo-scheduler's `gangs.scheduleTimeout` for both gputopo
    /// policies (seconds; default 600).
    pub gang_timeout: Option<u64>,
    pub omit_runtime: bool,
}

impl Default for RacksOptions {
    fn default() -> Self {
        RacksOptions {
            racks: 36,
            hours: 336.0,
            seed: 42,
            gang_timeout: None,
            omit_runtime: false,
        }
    }
}

/// The fabric and workload of `options` (the same for every policy).
pub fn setup(options: &RacksOptions) -> (Fabric, Workload) {
    let fabric = Fabric::new(FabricSize::nvl72(options.racks), options.seed);
    let workload = workload::generate(&fabric, LOAD, options.hours, options.seed);
    (fabric, workload)
}

/// Runs `policy` (one of [`POLICIES`]) on the scenario.
pub fn run(policy: &str, options: &RacksOptions) -> Result<RacksResult, SimError> {
    let (fabric, workload) = setup(options);
    run_on(policy, options, &fabric, &workload)
}

/// Runs `policy` on a fabric and workload made by [`setup`].
pub fn run_on(
    policy: &str,
    options: &RacksOptions,
    fabric: &Fabric,
    workload: &Workload,
) -> Result<RacksResult, SimError> {
    let started = Instant::now();
    let outcome = outcome(policy, options, fabric, workload)?;
    let mut result = result::summarize(policy, options.seed, fabric, workload, &outcome);
    if !options.omit_runtime {
        result.runtime_ms = Some(started.elapsed().as_millis() as u64);
    }
    Ok(result)
}

/// What happened to every unit under `policy`: the engine's own record,
/// for audits.
pub fn outcome(
    policy: &str,
    options: &RacksOptions,
    fabric: &Fabric,
    workload: &Workload,
) -> Result<engine::Outcome, SimError> {
    let mut reservations = Reservations::defaults();
    if let Some(t) = options.gang_timeout {
        reservations.schedule_timeout = t;
    }
    let gputopo = |structured, rule| -> Result<Box<dyn engine::Policy>, SimError> {
        let name = POLICIES
            .iter()
            .chain(&INVESTIGATIONS)
            .find(|p| **p == policy)
            .copied()
            .unwrap_or("gputopo");
        Ok(Box::new(gputopo::Gputopo::new(
            name, fabric, structured, rule,
        )?))
    };
    let (mut chosen, reservations, slices): (Box<dyn engine::Policy>, _, _) = match policy {
        "gputopo" => (gputopo(true, PodRule::DomainFit)?, Some(reservations), true),
        "gputopo-stable" => (gputopo(true, PodRule::Stable)?, Some(reservations), true),
        "gputopo-no-domain-fit" => (gputopo(true, PodRule::Plain)?, Some(reservations), true),
        "gputopo-flat" => (gputopo(false, PodRule::Plain)?, Some(reservations), false),
        "kueue-tas" => (Box::new(kueue::KueueTas), None, true),
        "kai" => (Box::new(kai::Kai), None, true),
        other => {
            return Err(SimError::Policy {
                policy: other.to_string(),
                message: format!(
                    "unknown; accepted: {}, {}",
                    POLICIES.join(", "),
                    INVESTIGATIONS.join(", ")
                ),
            });
        }
    };
    engine::run(fabric, workload, chosen.as_mut(), reservations, slices)
}
