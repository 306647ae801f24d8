//! The scheduler's verdicts now: one cycle of `gputopo-scheduler`'s own
//! [`Cycle`], freshly made, over the listed objects, with writes that go
//! nowhere ([`DryRunWrites`]): every binding, eviction and status write
//! answers success without a request, and what the cycle would have said
//! (its events) is kept. So each pending pod's outcome and message are
//! the ones the scheduler's next attempt would give, by construction.
//!
//! A fresh cycle differs from the running scheduler in what the running
//! one holds between cycles: gang reservations and preemptors'
//! nominations it made, assumptions not yet visible in the API, and how
//! long a gang has been partly bound (a gang's wait, and so its schedule
//! timeout, is read from its members' creation times, as a new leader
//! reads it). Pods are tried in the queue's order (priority, then
//! age), each seeing the placements decided before it.

use gputopo_scheduler::Settings;
use gputopo_scheduler::claims::ClaimWrite;
use gputopo_scheduler::cluster::{Objects, pod_key};
use gputopo_scheduler::cycle::gang_status::GangStatusWrite;
use gputopo_scheduler::cycle::node_trust::NodeConditionWrite;
use gputopo_scheduler::cycle::{Clock, ClusterWrites, Cycle, EventSpec, Outcome, WriteError};
use gputopo_scheduler_core::schedule::Placement;
use k8s_openapi::api::core::v1::{Pod, PodExtendedResourceClaimStatus};
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What the cycle decided and would have written.
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    /// Each pod tried (`namespace/name`): its outcome.
    pub outcomes: BTreeMap<String, Outcome>,
    /// The events it would have recorded, in order: (pod, event).
    pub events: Vec<(String, EventSpec)>,
    /// The pods it would have evicted to make room (`namespace/name`).
    pub evictions: Vec<String>,
    /// Preemptors and the node each would wait on.
    pub nominations: BTreeMap<String, String>,
    /// Why nothing could be decided (the snapshot could not be built).
    pub error: Option<String>,
}

impl Verdicts {
    /// The last event the cycle would have recorded on `pod`.
    pub fn event(&self, pod: &str) -> Option<&EventSpec> {
        self.events
            .iter()
            .rev()
            .find(|(p, _)| p == pod)
            .map(|(_, e)| e)
    }
}

/// Runs one fresh cycle over `objects` with `settings`; nothing is written.
pub async fn decide(objects: &Objects<'_>, settings: &Settings) -> Verdicts {
    let writes = DryRunWrites::default();
    let mut cycle = Cycle::new(settings.clone());
    let report = cycle.run(objects, &writes, Clock::system()).await;
    let recorded = writes
        .recorded
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Verdicts {
        outcomes: report
            .outcomes
            .into_iter()
            .map(|o| (o.pod, o.outcome))
            .collect(),
        error: report.snapshot_error.map(|e| e.to_string()),
        ..recorded
    }
}

/// [`ClusterWrites`] that writes nothing: each write succeeds at once, and
/// events, evictions and nominations are kept for the reader.
#[derive(Default)]
pub struct DryRunWrites {
    recorded: Mutex<Verdicts>,
}

impl DryRunWrites {
    fn record(&self, f: impl FnOnce(&mut Verdicts)) {
        let mut recorded = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut recorded);
    }
}

impl ClusterWrites for DryRunWrites {
    async fn bind(&self, _pod: &Pod, _placement: &Placement) -> Result<(), WriteError> {
        Ok(())
    }

    async fn evict(&self, victim: &str, dry_run: bool) -> Result<(), WriteError> {
        if !dry_run {
            self.record(|r| r.evictions.push(victim.to_string()));
        }
        Ok(())
    }

    async fn nominate(&self, pod: &Pod, node: &str) -> Result<(), WriteError> {
        self.record(|r| {
            r.nominations.insert(pod_key(pod), node.to_string());
        });
        Ok(())
    }

    async fn set_unschedulable(&self, _pod: &Pod, _message: &str) -> Result<(), WriteError> {
        Ok(())
    }

    async fn set_gang_status(&self, _write: &GangStatusWrite) -> Result<(), WriteError> {
        Ok(())
    }

    async fn set_node_condition(&self, _write: &NodeConditionWrite) -> Result<(), WriteError> {
        Ok(())
    }

    async fn reserve_claim(&self, _write: &ClaimWrite) -> Result<(), WriteError> {
        Ok(())
    }

    async fn release_claim(
        &self,
        _write: &ClaimWrite,
        _deallocate: bool,
    ) -> Result<(), WriteError> {
        Ok(())
    }

    async fn create_claim(&self, claim: &ResourceClaim) -> Result<ResourceClaim, WriteError> {
        // What the API server would answer: a name from generateName, a uid.
        let mut created = claim.clone();
        let name = format!(
            "{}dry-run",
            claim.metadata.generate_name.as_deref().unwrap_or_default()
        );
        created.metadata.uid = Some(format!("dry-run-{name}"));
        created.metadata.name = Some(name);
        Ok(created)
    }

    async fn delete_claim(&self, _write: &ClaimWrite) -> Result<(), WriteError> {
        Ok(())
    }

    async fn set_extended_claim_status(
        &self,
        _pod: &Pod,
        _status: &PodExtendedResourceClaimStatus,
    ) -> Result<(), WriteError> {
        Ok(())
    }

    fn emit_event(&self, pod: &Pod, event: EventSpec) {
        self.record(|r| r.events.push((pod_key(pod), event)));
    }
}
