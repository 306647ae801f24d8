//! What evicting a pod costs, and which pods are protected.

use super::Victim;
use gputopo_api::WorkloadKind;
use std::ops::Add;
use std::time::{Duration, SystemTime};

/// The preemption thresholds and cost constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreemptionPolicy {
    /// A training pod whose last checkpoint (or start, if it never
    /// checkpointed) is older than this is protected: it would lose too much.
    pub checkpoint_max_age: Duration,
    /// A training pod expected to finish within this is protected: waiting for
    /// it costs less than redoing it.
    pub finish_window: Duration,
    /// What evicting an inference pod costs per GPU, in GPU-time: a restart and
    /// a model reload, not lost progress. Small, since it restarts cheaply.
    pub inference_restart: Duration,
    /// Per node, victim units (pods, or whole gangs) searched exactly over all
    /// subsets up to this many; beyond, greedily (see the `preempt` docs).
    pub exact_units_per_node: usize,
}

impl Default for PreemptionPolicy {
    /// 30 minutes, 2 hours, 6 minutes per GPU, 12 units.
    fn default() -> Self {
        PreemptionPolicy {
            checkpoint_max_age: Duration::from_secs(30 * 60),
            finish_window: Duration::from_secs(2 * 3600),
            inference_restart: Duration::from_secs(6 * 60),
            exact_units_per_node: 12,
        }
    }
}

impl PreemptionPolicy {
    /// Whether a training pod is protected: its last checkpoint (its start when
    /// it has none) is older than `checkpoint_max_age`, or it expects to finish
    /// within `finish_window` of `now`. An expected completion already past is
    /// a stale estimate and protects nothing. Inference pods are never
    /// protected; the caller asks this for training pods only.
    pub fn protected(
        &self,
        now: SystemTime,
        checkpoint_time: Option<SystemTime>,
        expected_completion: Option<SystemTime>,
        start_time: SystemTime,
    ) -> bool {
        let since = checkpoint_time.unwrap_or(start_time);
        let age = now.duration_since(since).unwrap_or(Duration::ZERO);
        if age > self.checkpoint_max_age {
            return true;
        }
        expected_completion.is_some_and(|done| {
            done.duration_since(now)
                .is_ok_and(|left| left <= self.finish_window)
        })
    }

    /// GPU-seconds lost by evicting a training pod holding `gpus` GPUs: the work
    /// since its last checkpoint (or start).
    pub fn training_loss(
        &self,
        now: SystemTime,
        gpus: u32,
        checkpoint_time: Option<SystemTime>,
        start_time: SystemTime,
    ) -> u64 {
        let since = checkpoint_time.unwrap_or(start_time);
        let age = now.duration_since(since).unwrap_or(Duration::ZERO);
        u64::from(gpus).saturating_mul(age.as_secs())
    }

    /// GPU-seconds charged for evicting an inference pod holding `gpus` GPUs.
    pub fn inference_loss(&self, gpus: u32) -> u64 {
        u64::from(gpus).saturating_mul(self.inference_restart.as_secs())
    }

    /// GPU-seconds evicting `victim` loses with `held` of its GPUs: an
    /// inference pod's restart, else (training, or a pod that does not say)
    /// the work since its last checkpoint.
    pub(crate) fn loss(&self, victim: &Victim, held: u32, now: SystemTime) -> u64 {
        match victim.workload {
            Some(WorkloadKind::Inference) => self.inference_loss(held),
            Some(WorkloadKind::Training) | None => {
                self.training_loss(now, held, victim.checkpoint, victim.start)
            }
        }
    }
}

/// What a set of evictions costs. Within one search pass (see the `preempt`
/// docs) sets compare by `protected`, then `gpu_seconds`, then `units`, then
/// `gpus`: all additive, so per-node costs add up across nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cost {
    /// Protected training units evicted.
    pub protected: u32,
    /// Training units evicted (protected ones included). A unit is a pod, or a
    /// whole gang.
    pub training: u32,
    /// Inference units evicted.
    pub inference: u32,
    /// GPU-seconds lost.
    pub gpu_seconds: u64,
    /// Pods evicted (every member of an evicted gang counts).
    pub pods: u32,
    /// GPUs freed, on every node.
    pub gpus: u32,
}

impl Cost {
    /// GPU-hours lost.
    pub fn gpu_hours(&self) -> f64 {
        self.gpu_seconds as f64 / 3600.0
    }

    /// Victim units: pods not in a gang, and gangs.
    pub fn units(&self) -> u32 {
        self.training + self.inference
    }

    /// The order within a pass; lower is cheaper.
    pub(crate) fn key(&self) -> (u32, u64, u32, u32) {
        (self.protected, self.gpu_seconds, self.units(), self.gpus)
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.units() == 0
    }
}

impl Add for Cost {
    type Output = Cost;

    fn add(self, other: Cost) -> Cost {
        Cost {
            protected: self.protected + other.protected,
            training: self.training + other.training,
            inference: self.inference + other.inference,
            gpu_seconds: self.gpu_seconds.saturating_add(other.gpu_seconds),
            pods: self.pods + other.pods,
            gpus: self.gpus + other.gpus,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + minutes * 60)
    }

    #[test]
    fn losses_count_gpu_time_since_checkpoint() {
        let p = PreemptionPolicy::default();
        assert_eq!(p.training_loss(at(90), 4, Some(at(60)), at(0)), 4 * 30 * 60);
        assert_eq!(p.training_loss(at(90), 4, None, at(0)), 4 * 90 * 60);
        assert_eq!(p.training_loss(at(0), 4, Some(at(10)), at(0)), 0);
        assert_eq!(p.inference_loss(2), 2 * 6 * 60);
    }

    #[test]
    fn stale_completion_protects_nothing() {
        let p = PreemptionPolicy::default();
        assert!(!p.protected(at(100), Some(at(95)), Some(at(50)), at(0)));
        assert!(p.protected(at(100), Some(at(95)), Some(at(200)), at(0)));
    }
}
