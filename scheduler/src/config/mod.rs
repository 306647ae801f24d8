//! The configuration file (`--config FILE`): YAML, every field optional, the
//! scheduler core's knobs ([`SchedulerConfig`]) plus the scheduler's own
//! (names it answers to, backoff). Unknown fields are errors; every error
//! names the file, the line and column, and the field path.
//!
//! ```yaml
//! schedulerNames: [gputopo-scheduler]     # pods' spec.schedulerName values served
//! networkTiers: {preset: gputopo}         # or {keys: [example.com/spine, example.com/rack]}
//! weights: {gpuSet: 40, allocation: 20, memoryFit: 15, interference: 15,
//!           preferredDomain: 10, cost: 10, nodePreference: 5, generation: 10}
//! gpuGeneration: off                      # off | newest | oldest: which GPU generation pods lean to
//! defaultTopologyManagerPolicy: none      # none | best-effort | restricted | single-numa-node
//! memoryTarget: {low: 0.70, high: 0.80}   # shared/inference GPU memory fill target
//! spotInstanceTypes: []                   # node.kubernetes.io/instance-type values that are spot
//! backoff: {initial: 1s, max: 30s, unschedulableTimeout: 60s}
//! preemption:                             # evict lower-priority pods for a pod or gang that cannot fit
//!   enabled: true
//!   checkpointMaxAge: 30m                 # a training pod unsaved for longer is protected
//!   finishWindow: 2h                      # a training pod finishing within this is protected
//!   inferenceRestart: 6m                  # what evicting an inference pod costs per GPU
//! gangs:
//!   scheduleTimeout: 10m                  # a PodGroup's scheduleTimeoutSeconds, where it sets none
//!   partialBindTimeout: 5m                # a partly bound gang is undone after this
//!   mixedModels: false                    # gangs keep to one GPU model unless their pods say otherwise
//!   reservations: {enabled: true, maxFraction: 0.25, maxReservations: 4, ttl: 15m}
//! accounting:
//!   reportedAllocationsMaxAge: 15m        # a node's kubelet reading older than this is not trusted
//! targetWorkload:                         # the pods the cluster expects: turns on the fragmentation score
//!   modelLabel: nvidia.com/gpu.product    # node label naming the GPU model (the default)
//!   podTypes:
//!     - {cpuMilli: 8000, gpus: 1, weight: 5}
//!     - {cpuMilli: 4000, gpus: 1, gpuMilli: 250, weight: 3}   # a quarter of one GPU
//!     - {cpuMilli: 32000, gpus: 8, models: [NVIDIA-H100-80GB-HBM3], weight: 1}
//! profiles:                               # more spec.schedulerName values, each with its own scoring
//!   - schedulerName: gputopo-cost
//!     weights: {cost: 60}
//!     preemption: {enabled: false}
//!   - schedulerName: gputopo-training
//!     gpuGeneration: newest               # training here goes to the newest GPUs first
//! ```
//!
//! A profile starts from the file's top-level settings and overrides
//! `weights`, `gpuGeneration`, `memoryTarget`, `spotInstanceTypes` and `preemption`: what
//! decides between nodes. Network tiers and the Topology Manager policy
//! describe the cluster, not a preference, so all profiles share them.

use gputopo_scheduler_core::config::{DEFAULT_MODEL_LABEL, PodType, TargetWorkload};
use gputopo_scheduler_core::config::{
    GenerationPreference, MemoryTarget, NetworkTiers, PreferenceWeights, SchedulerConfig,
    ScoreWeights, SpreadDefaults, TopologyManagerPolicy,
};
use gputopo_scheduler_core::pod_constraints::SpreadConstraint;
use gputopo_scheduler_core::preempt::PreemptionPolicy;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The name pods set in `spec.schedulerName` when none is configured.
pub const DEFAULT_SCHEDULER_NAME: &str = "gputopo-scheduler";

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("reading {}: {error}", file.display())]
    Read {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error("{}{location}: {field}: {message}", file.display())]
    Invalid {
        file: PathBuf,
        /// `:line:column`, or empty when the parser gave none.
        location: String,
        /// The field path, `backoff.max`; `.` for the document.
        field: String,
        message: String,
    },
    #[error("{}: {field}: {message}", file.display())]
    Inconsistent {
        file: PathBuf,
        field: &'static str,
        message: String,
    },
}

/// A `--scheduler-name` that a profile of the configuration file also names.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--scheduler-name {name} is also a profile's schedulerName in the configuration file; a name is served by one profile"
)]
pub struct NameClash {
    pub name: String,
}

/// How long an unschedulable pod waits before its next try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// After the first failure; doubled after each further one.
    pub initial: Duration,
    /// The cap of the doubling.
    pub max: Duration,
    /// With no change in the cluster, an unschedulable pod is tried again
    /// after this long anyway (kube-scheduler: podMaxInUnschedulablePodsDuration).
    pub unschedulable_timeout: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            unschedulable_timeout: Duration::from_secs(60),
        }
    }
}

/// Whether and how the scheduler evicts lower-priority pods.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preemption {
    pub enabled: bool,
    pub policy: PreemptionPolicy,
}

impl Default for Preemption {
    /// On, as kube-scheduler's, with scheduler-core's default costs.
    fn default() -> Preemption {
        Preemption {
            enabled: true,
            policy: PreemptionPolicy::default(),
        }
    }
}

/// Bounds on what waiting gangs' reservations may hold, so that a gang
/// that will never fit cannot idle the cluster.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReservationPolicy {
    /// At most this fraction (0..=1) of the cluster's GPUs reserved at once.
    pub max_fraction: f64,
    /// At most this many gangs hold a reservation at once.
    pub max_reservations: usize,
    /// A reservation lapses this long after it was made.
    pub ttl: Duration,
}

impl Default for ReservationPolicy {
    /// A quarter of the GPUs, four gangs, fifteen minutes.
    fn default() -> Self {
        ReservationPolicy {
            max_fraction: 0.25,
            max_reservations: 4,
            ttl: Duration::from_secs(15 * 60),
        }
    }
}

/// How gangs wait.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gangs {
    /// How long a gang may wait for a placement before its reservation is
    /// released and its members are told so; a PodGroup's own
    /// `scheduleTimeoutSeconds` takes precedence.
    pub schedule_timeout: Duration,
    /// How long a gang may stay partly bound (some members bound, the rest
    /// not placeable) before its bound members are evicted, so that their
    /// controllers recreate them and no GPU is held idle.
    pub partial_bind_timeout: Duration,
    /// Whether a waiting gang holds GPUs so that a stream of small pods
    /// cannot starve it; `None`: it does not.
    pub reservations: Option<ReservationPolicy>,
}

impl Default for Gangs {
    fn default() -> Gangs {
        Gangs {
            schedule_timeout: Duration::from_secs(10 * 60),
            partial_bind_timeout: Duration::from_secs(5 * 60),
            reservations: Some(ReservationPolicy::default()),
        }
    }
}

/// How far what nodes report about held GPUs is trusted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Accounting {
    /// A node's reading of the kubelet's allocations (its `GpuTopology`
    /// `status.podResources.observedAt`) older than this is stale: the pods'
    /// `gputopo.dev/assigned-gpus` count instead, and no mismatch is
    /// reported from it. Three of the agent's 5-minute heartbeats.
    pub reported_allocations_max_age: Duration,
}

impl Default for Accounting {
    fn default() -> Accounting {
        Accounting {
            reported_allocations_max_age: gputopo_scheduler_core::reported::DEFAULT_READING_MAX_AGE,
        }
    }
}

/// What one `spec.schedulerName` decides with.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub scheduler_name: String,
    pub core: SchedulerConfig,
    pub preemption: Preemption,
}

/// Everything the scheduler process is configured with.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `spec.schedulerName` values served with the top-level settings.
    pub scheduler_names: Vec<String>,
    pub core: SchedulerConfig,
    pub backoff: Backoff,
    pub preemption: Preemption,
    pub gangs: Gangs,
    pub accounting: Accounting,
    /// The DRA drivers whose devices gputopo allocates (default NVIDIA's
    /// `gpu.nvidia.com`).
    pub dra: gputopo_scheduler_core::dra::DraConfig,
    /// Further names, each with its own scoring (see the module docs).
    pub profiles: Vec<Profile>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            scheduler_names: vec![DEFAULT_SCHEDULER_NAME.to_string()],
            core: SchedulerConfig::default(),
            backoff: Backoff::default(),
            preemption: Preemption::default(),
            gangs: Gangs::default(),
            accounting: Accounting::default(),
            dra: Default::default(),
            profiles: Vec::new(),
        }
    }
}

impl Settings {
    /// Every `spec.schedulerName` served: the top-level names, then the profiles'.
    pub fn all_scheduler_names(&self) -> Vec<String> {
        let mut names = self.scheduler_names.clone();
        names.extend(self.profiles.iter().map(|p| p.scheduler_name.clone()));
        names
    }

    /// The scoring and preemption settings for pods naming `scheduler_name`
    /// (the top-level ones unless a profile has that name).
    pub fn profile_for(&self, scheduler_name: &str) -> (&SchedulerConfig, &Preemption) {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)
            .map_or((&self.core, &self.preemption), |p| (&p.core, &p.preemption))
    }

    /// Replaces the top-level names (the `--scheduler-name` flag); an error
    /// when one of them is also a profile's.
    pub fn set_scheduler_names(&mut self, names: Vec<String>) -> Result<(), NameClash> {
        if let Some(clash) = names
            .iter()
            .find(|n| self.profiles.iter().any(|p| &p.scheduler_name == *n))
        {
            return Err(NameClash {
                name: clash.clone(),
            });
        }
        self.scheduler_names = names;
        Ok(())
    }
}

mod file;
mod file_scoring;
mod problem;
