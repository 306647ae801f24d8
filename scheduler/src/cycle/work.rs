//! What one cycle's decisions work with, and what they add to its report:
//! the snapshot (with every assumption and hold), the pods, the gang and
//! DRA objects read once, the clock. The pure steps read and update it;
//! the driver only hands it on. Pure.

use super::{Clock, CycleReport};
use gputopo_scheduler_core::dra::DraInventory;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A pod with its readable request.
pub type Member = (Arc<Pod>, PendingPod);

/// What one decision works with.
pub struct Work<'a> {
    pub snapshot: Snapshot,
    pub by_key: crate::live_cluster::PodsByKey,
    pub gangs: &'a crate::gangs::GangObjects,
    pub dra: &'a crate::claims::DraObjects,
    /// The watched claims by `namespace/name`, and the special claims by
    /// their pod's uid: read once per cycle.
    pub claim_index: HashMap<String, &'a ResourceClaim>,
    pub special_claims: HashMap<&'a str, &'a ResourceClaim>,
    /// The DRA devices and the busy ones; `None` while no DRA object exists.
    pub inventory: Option<DraInventory>,
    pub clock: Clock,
    pub report: CycleReport,
    /// The snapshot's build time, charged to the cycle's first decision.
    pub build_time: Duration,
}

impl<'a> Work<'a> {
    /// The work of a prepared cycle over `objects`.
    pub fn new(
        prepared: super::Prepared,
        objects: &crate::cluster::Objects<'a>,
        clock: Clock,
        build_time: Duration,
    ) -> Work<'a> {
        Work {
            snapshot: prepared.snapshot,
            by_key: prepared.by_key,
            gangs: objects.gangs,
            dra: objects.dra,
            claim_index: objects.dra.claims_by_key(),
            special_claims: objects.dra.special_claims_by_owner(),
            inventory: prepared.inventory,
            clock,
            report: CycleReport::default(),
            build_time,
        }
    }

    /// One decision made, started at `started`: its time joins the report.
    pub fn decided(&mut self, started: Instant) {
        let took = std::mem::take(&mut self.build_time) + started.elapsed();
        self.report.decisions.push(took);
    }
}
