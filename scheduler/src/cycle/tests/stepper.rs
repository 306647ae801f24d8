//! The pure steps (`steps/`) on literal worlds, without a driver: a
//! prepared cycle and its [`Work`] at a chosen time, so a step's answer
//! can be asserted value by value.

use super::fixtures::World;
use crate::config::Settings;
use crate::cycle::gang::GangUnit;
use crate::cycle::steps::DueStep;
use crate::cycle::work::{Member, Work};
use crate::cycle::{Clock, Cycle};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// A cycle over a world, at a time `at` after the fixtures' pods were
/// created (2026-01-01T00:00:00Z).
pub struct Stepper {
    pub world: World,
    pub cycle: Cycle,
    start: Instant,
}

impl Stepper {
    pub fn new(world: World, settings: Settings) -> Stepper {
        Stepper {
            world,
            cycle: Cycle::new(settings),
            start: Instant::now(),
        }
    }

    pub fn clock(&self, at: Duration) -> Clock {
        Clock {
            now: self.start + at,
            wall: Timestamp::from_second(1_767_225_600).expect("a time")
                + SignedDuration::try_from(at).expect("a duration"),
        }
    }

    /// Prepares a cycle at `at` and hands its work to `f`.
    pub fn at<R>(&mut self, at: Duration, f: impl FnOnce(&mut Cycle, &mut Work<'_>) -> R) -> R {
        let clock = self.clock(at);
        let objects = self.world.objects();
        let prepared = self
            .cycle
            .prepare(&objects, clock)
            .expect("a snapshot")
            .expect("a pod is due");
        let mut work = Work::new(prepared, &objects, clock, Duration::ZERO);
        f(&mut self.cycle, &mut work)
    }
}

/// What the cycle makes of the due pod `key`.
pub fn due(cycle: &mut Cycle, work: &Work<'_>, key: &str) -> DueStep {
    cycle.due_step(work, key, &mut HashSet::new())
}

/// The gang the due pod `key` belongs to.
pub fn gang_of(cycle: &mut Cycle, work: &Work<'_>, key: &str) -> GangUnit {
    match due(cycle, work, key) {
        DueStep::Gang { unit, .. } => unit,
        _ => panic!("{key} is not a gang member"),
    }
}

/// The due pod `key`, decided alone.
pub fn member_of(cycle: &mut Cycle, work: &Work<'_>, key: &str) -> Member {
    match due(cycle, work, key) {
        DueStep::Pod(member) => *member,
        _ => panic!("{key} is not a pod decided alone"),
    }
}
