//! The extender's Dynamic Resource Allocation I/O: what a pod's claims are
//! judged by (from the watches: ResourceSlices, ResourceClaims,
//! DeviceClasses), and after a bind the review of kube-scheduler's
//! allocation (the claims read back from the API server), said in a
//! `SuboptimalGPUAllocation` event when gputopo would have chosen a better
//! set on that node. The decisions are scheduler-core's.

use super::protocol::PodClaims;
use crate::claims::{DraObjects, uses_claims};
use crate::cluster::pod_key;
use crate::watch::Watches;
use crate::writer::FIELD_MANAGER;
use gputopo_api::keys::RESOURCE_GPU;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::{
    DraConfig, DraInventory, DraPod, claim_key, extended_claim, extended_resource_class,
    hold_snapshot, pod_claim_names,
};
use gputopo_scheduler_core::dra_schedule::{AllocationReview, review_allocation};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Resource;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tracing::{Instrument, debug, info_span, warn};

/// The event reason of a review that found a worse set.
pub const SUBOPTIMAL_ALLOCATION: &str = "SuboptimalGPUAllocation";

/// The DRA half of the extender.
pub struct ExtenderDra {
    config: DraConfig,
    /// Every node's devices as of a watch generation, before holds.
    inventory: Mutex<Option<(u64, Arc<DraInventory>)>>,
    recorder: Recorder,
}

impl ExtenderDra {
    pub fn new(client: kube::Client, config: DraConfig) -> ExtenderDra {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok()),
        };
        ExtenderDra {
            config,
            inventory: Mutex::new(None),
            recorder: Recorder::new(client, reporter),
        }
    }

    /// The inventory of `generation` with `snapshot`'s held GPUs taken out.
    /// The events recorder the extender reports through.
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    fn inventory(
        &self,
        watches: &Watches,
        objects: &DraObjects,
        generation: u64,
        snapshot: &Snapshot,
    ) -> Arc<DraInventory> {
        let base = {
            let mut cached = self.inventory.lock().unwrap_or_else(|e| e.into_inner());
            match cached.as_ref() {
                Some((g, inventory)) if *g == generation => inventory.clone(),
                _ => {
                    let (topologies, _) = watches.topologies();
                    let inventory = Arc::new(objects.inventory(&self.config, &topologies));
                    *cached = Some((generation, inventory.clone()));
                    inventory
                }
            }
        };
        let mut held = (*base).clone();
        hold_snapshot(&mut held, snapshot);
        Arc::new(held)
    }

    /// What `pod`'s claims are judged by: its ResourceClaims, or its
    /// special claim where a DeviceClass serves `nvidia.com/gpu`. A claim
    /// not in the watch yet, or one gputopo cannot read, leaves the pod
    /// unjudged: kube-scheduler decides its devices anyway, and the
    /// extender must not stop it.
    pub fn pod_claims(
        &self,
        watches: &Watches,
        generation: u64,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> PodClaims {
        let (objects, _) = watches.dra();
        if objects.is_empty() {
            return PodClaims::Unjudged;
        }
        let classes = || objects.classes.iter().map(AsRef::as_ref);
        if uses_claims(pod) {
            let index = objects.claims_by_key();
            let read = DraPod::from_pod(
                pod,
                |namespace, name| index.get(&format!("{namespace}/{name}")).copied(),
                classes(),
            );
            return match read {
                Ok(dra) => PodClaims::Claims {
                    dra,
                    inventory: self.inventory(watches, &objects, generation, snapshot),
                },
                Err(e) => {
                    debug!(pod = %pod_key(pod), error = %e, "claims not judged");
                    PodClaims::Unjudged
                }
            };
        }
        let Some(class) = extended_resource_class(classes(), RESOURCE_GPU) else {
            return PodClaims::Unjudged;
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let special = objects.special_claims_by_owner();
        let existing = special.get(uid).copied();
        match extended_claim(pod, RESOURCE_GPU, class, classes(), existing) {
            Some(Ok(ext)) => PodClaims::Extended {
                dra: ext.dra,
                inventory: self.inventory(watches, &objects, generation, snapshot),
            },
            Some(Err(e)) => {
                debug!(pod = %pod_key(pod), error = %e, "special claim not judged");
                PodClaims::Unjudged
            }
            None => PodClaims::Unjudged,
        }
    }

    /// After the bind of a pod whose devices kube-scheduler allocated: its
    /// claims read back, compared with gputopo's set on the node; a worse
    /// allocation gets a Warning event on the pod. Failures are logged
    /// only: the pod is bound either way.
    pub async fn review(
        &self,
        client: &kube::Client,
        watches: &Watches,
        snapshot: &Snapshot,
        scheduler: &SchedulerConfig,
        pod: &Pod,
        pending: &PendingPod,
    ) -> Option<AllocationReview> {
        let key = pod_key(pod);
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        // The pod as kube-scheduler left it: its claim statuses and its
        // special claim's name are written before the bind.
        let fresh = match Api::<Pod>::namespaced(client.clone(), namespace)
            .get(name)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                warn!(pod = %key, error = %e, "reading the pod back for its claims");
                return None;
            }
        };
        let mut names = pod_claim_names(&fresh).unwrap_or_default();
        names.extend(
            fresh
                .status
                .as_ref()
                .and_then(|s| s.extended_resource_claim_status.as_ref())
                .map(|s| s.resource_claim_name.clone()),
        );
        let api = Api::<ResourceClaim>::namespaced(client.clone(), namespace);
        let mut claims = Vec::new();
        for claim in &names {
            match api.get(claim).await {
                Ok(c) => claims.push(c),
                Err(e) => {
                    warn!(pod = %key, claim, error = %e, "reading a claim back");
                    return None;
                }
            }
        }
        let (objects, _) = watches.dra();
        let own: HashSet<String> = claims.iter().map(claim_key).collect();
        let others = DraObjects {
            claims: objects
                .claims
                .iter()
                .filter(|c| !own.contains(&claim_key(c)))
                .cloned()
                .collect(),
            ..objects.clone()
        };
        let (topologies, _) = watches.topologies();
        let mut inventory = others.inventory(&self.config, &topologies);
        hold_snapshot(&mut inventory, snapshot);
        let refs: Vec<&ResourceClaim> = claims.iter().collect();
        let review = review_allocation(
            snapshot,
            &inventory,
            &refs,
            objects.classes.iter().map(AsRef::as_ref),
            pending,
            scheduler,
        )?;
        let event = Event {
            type_: EventType::Warning,
            reason: SUBOPTIMAL_ALLOCATION.into(),
            note: Some(review.message()),
            action: "Binding".into(),
            secondary: None,
        };
        let reference = fresh.object_ref(&());
        if let Err(e) = self
            .recorder
            .publish(&event, &reference)
            .instrument(info_span!("event", reason = SUBOPTIMAL_ALLOCATION))
            .await
        {
            warn!(pod = %key, error = %e, "event not written");
        }
        Some(review)
    }
}
