//! Whole cycles over literal objects, with [`fake::FakeWrites`] standing in
//! for the API server: every path the end-to-end suite covers, in
//! milliseconds, plus the failures a real server produces only by chance.

mod accounting;
mod binds;
mod claims;
mod cluster_objects;
mod elastic_gangs;
mod extended;
pub mod fake;
pub mod fixtures;
mod gangs;
mod live;
mod node_trust;
mod pods;
mod preemption;
mod records;
mod stepper;
mod steps_claims;
mod steps_gang;
mod steps_pod;
mod steps_preempt;
mod structured_gangs;
mod workload_gangs;

use super::{Clock, Cycle, CycleReport, Outcome};
use crate::config::Settings;
use fake::{FakeWrites, Write};
use fixtures::World;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A cycle, its world, its fake API server and its clock.
pub struct Harness {
    pub world: World,
    pub cycle: Cycle,
    pub writes: FakeWrites,
    start: Instant,
    now: Instant,
    runtime: tokio::runtime::Runtime,
}

impl Harness {
    pub fn new(world: World, settings: Settings) -> Harness {
        let now = Instant::now();
        Harness {
            world,
            cycle: Cycle::new(settings),
            writes: FakeWrites::default(),
            start: now,
            now,
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime"),
        }
    }

    /// Settings with preemption off.
    pub fn no_preemption() -> Settings {
        let mut s = Settings::default();
        s.preemption.enabled = false;
        s
    }

    /// Settings with preemption off and reservations allowed to hold the
    /// whole (small) test cluster.
    pub fn reserving() -> Settings {
        let mut s = Harness::no_preemption();
        if let Some(r) = &mut s.gangs.reservations {
            r.max_fraction = 1.0;
        }
        s
    }

    /// One cycle, then what the API server does with its writes: a bound
    /// pod gets its node and the binding's annotations, an evicted pod is
    /// gone (grace period 0). Returns the report and the writes.
    pub fn cycle(&mut self) -> (CycleReport, Vec<Write>) {
        // The fixtures' pods were created at 2026-01-01T00:00:00Z: the
        // harness starts then.
        let wall = Timestamp::from_second(1_767_225_600).expect("a time")
            + SignedDuration::try_from(self.now - self.start).expect("a duration");
        let clock = Clock {
            now: self.now,
            wall,
        };
        let report = {
            let objects = self.world.objects();
            self.runtime
                .block_on(self.cycle.run(&objects, &self.writes, clock))
        };
        let writes = self.writes.take();
        for w in &writes {
            match w {
                Write::Bind {
                    pod,
                    node,
                    annotations,
                    ok: true,
                    ..
                } => {
                    let name = pod.split_once('/').map_or(pod.as_str(), |(_, n)| n);
                    self.world.bind(name, node, annotations);
                }
                Write::Evict {
                    pod,
                    dry_run: false,
                    ok: true,
                } => {
                    let name = pod.split_once('/').map_or(pod.as_str(), |(_, n)| n);
                    self.world.remove(name);
                }
                _ => {}
            }
        }
        (report, writes)
    }

    /// Time passes, and (as any watch event would) the cluster changed.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        self.cycle.cluster_changed();
    }

    /// Pod name to node, for every bound pod.
    pub fn bound(&self) -> BTreeMap<String, String> {
        self.world
            .pods
            .iter()
            .filter_map(|p| {
                Some((
                    p.metadata.name.clone()?,
                    p.spec.as_ref()?.node_name.clone()?,
                ))
            })
            .collect()
    }

    /// Every GPU held, as `(node, gpu)`, asserting none is held twice.
    pub fn held_gpus(&self) -> Vec<(String, u32)> {
        let mut held = Vec::new();
        for p in &self.world.pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let list = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("gputopo.dev/assigned-gpus"))
                .cloned()
                .unwrap_or_default();
            for g in list.split(',').filter(|g| !g.is_empty()) {
                let gpu: u32 = g.parse().expect("a GPU index");
                assert!(
                    !held.contains(&(node.clone(), gpu)),
                    "GPU {gpu} of {node} is held twice"
                );
                held.push((node.clone(), gpu));
            }
        }
        held
    }
}

/// The binds in `writes` that went through: pod to node.
pub fn binds(writes: &[Write]) -> Vec<(String, String)> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::Bind {
                pod,
                node,
                ok: true,
                ..
            } => Some((pod.clone(), node.clone())),
            _ => None,
        })
        .collect()
}

/// The message of `pod`'s outcome, which must be one left pending.
pub fn message(report: &CycleReport, pod: &str) -> String {
    report
        .outcome(pod)
        .and_then(Outcome::message)
        .unwrap_or_else(|| panic!("{pod} has no pending outcome: {:?}", report.outcomes))
}
