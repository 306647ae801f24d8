//! Dynamic Resource Allocation in the cluster: the `resource.k8s.io/v1`
//! objects the watches hold, and the claim writes the cycle makes. The
//! decisions are scheduler-core's (`gputopo_scheduler_core::dra`); the
//! cycle's path is `cycle/claims.rs`; the requests over `kube::Client`
//! are `claim_writes.rs`.

pub mod claim_writes;

use gputopo_api::GpuTopology;
use gputopo_scheduler_core::dra::{
    ClaimAllocation, DraConfig, DraInventory, EXTENDED_RESOURCE_CLAIM_ANNOTATION,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice,
};
use std::collections::HashMap;
use std::sync::Arc;

/// What the watches hold of DRA (each empty where `resource.k8s.io/v1` is
/// not served).
#[derive(Clone, Debug, Default)]
pub struct DraObjects {
    pub slices: Vec<Arc<ResourceSlice>>,
    pub claims: Vec<Arc<ResourceClaim>>,
    pub classes: Vec<Arc<DeviceClass>>,
    /// `DeviceTaintRule`s (empty where they are not served).
    pub taint_rules: Vec<Arc<DeviceTaintRule>>,
}

impl DraObjects {
    /// Whether the watches hold no DRA object at all (a cluster without
    /// DRA): the cycle then builds no inventory.
    pub fn is_empty(&self) -> bool {
        self.slices.is_empty() && self.claims.is_empty()
    }

    /// Every node's devices and the busy ones.
    pub fn inventory(&self, config: &DraConfig, topologies: &[Arc<GpuTopology>]) -> DraInventory {
        let mut inventory = DraInventory::build(
            config,
            self.slices.iter().map(AsRef::as_ref),
            topologies.iter().map(AsRef::as_ref),
            self.claims.iter().map(AsRef::as_ref),
        );
        inventory.apply_taint_rules(self.taint_rules.iter().map(AsRef::as_ref));
        inventory
    }

    /// Pods' special claims (KEP-5004) by the uid of the pod owning each.
    pub fn special_claims_by_owner(&self) -> HashMap<&str, &ResourceClaim> {
        self.claims
            .iter()
            .filter(|c| {
                c.metadata.annotations.as_ref().is_some_and(|a| {
                    a.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION)
                        .map(String::as_str)
                        == Some("true")
                })
            })
            .filter_map(|c| {
                let owner = c
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.kind == "Pod" && o.controller == Some(true))?;
                Some((owner.uid.as_str(), c.as_ref()))
            })
            .collect()
    }

    /// The claims by `namespace/name`.
    pub fn claims_by_key(&self) -> HashMap<String, &ResourceClaim> {
        self.claims
            .iter()
            .map(|c| (gputopo_scheduler_core::dra::claim_key(c), c.as_ref()))
            .collect()
    }
}

/// Whether `pod` lists any ResourceClaim (directly or by template).
pub fn uses_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// One claim write for one pod, as kube-scheduler's DRA plugin makes it
/// before binding: for an unallocated claim the finalizer
/// `resource.kubernetes.io/delete-protection` first, then one status
/// update setting `allocation` and adding the pod to `reservedFor`; for an
/// allocated (shared) claim only the `reservedFor` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimWrite {
    pub namespace: String,
    pub name: String,
    /// The claim decided on: the write is refused if the claim was
    /// replaced (another uid) since.
    pub uid: Option<String>,
    /// `None`: the claim is allocated already; only reserve it.
    pub allocation: Option<AllocationResult>,
    pub pod_name: String,
    pub pod_uid: String,
}

impl ClaimWrite {
    /// The write for `claim` of `pod`.
    pub fn new(claim: &ClaimAllocation, pod: &Pod) -> ClaimWrite {
        ClaimWrite {
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            uid: claim.uid.clone(),
            allocation: claim.allocation.clone(),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }

    /// `namespace/name` of the claim.
    pub fn target(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Claims this scheduler wrote and the watch does not show yet, as the
/// assume cache holds bound pods: a second pod of a shared claim decided
/// before the watch catches up finds it allocated (and does not allocate it
/// again), and the next inventory counts its devices busy.
#[derive(Debug, Default)]
pub struct AssumedClaims {
    /// By `namespace/name`: the `resourceVersion` the decision read, and
    /// the claim as written.
    claims: HashMap<String, (Option<String>, Arc<ResourceClaim>)>,
}

impl AssumedClaims {
    /// `claim` (as read, `resourceVersion` included) now has `allocation`
    /// and `pod` in `reservedFor`.
    pub fn assume(&mut self, claim: &ResourceClaim, write: &ClaimWrite) {
        let mut assumed = claim.clone();
        let status = assumed.status.get_or_insert_with(Default::default);
        if let Some(a) = &write.allocation {
            status.allocation = Some(a.clone());
        }
        let entries = status.reserved_for.get_or_insert_with(Vec::new);
        if !entries.iter().any(|c| c.uid == write.pod_uid) {
            entries.push(
                k8s_openapi::api::resource::v1::ResourceClaimConsumerReference {
                    api_group: None,
                    resource: "pods".into(),
                    name: write.pod_name.clone(),
                    uid: write.pod_uid.clone(),
                },
            );
        }
        let key = gputopo_scheduler_core::dra::claim_key(claim);
        let version = match self.claims.remove(&key) {
            // Still the version first read: the watch has not moved.
            Some((v, _)) => v,
            None => claim.metadata.resource_version.clone(),
        };
        self.claims.insert(key, (version, Arc::new(assumed)));
    }

    /// Forgets the claims the watch now shows changed (or gone).
    pub fn reconcile(&mut self, dra: &DraObjects) {
        let current = dra.claims_by_key();
        self.claims.retain(|key, (version, _)| {
            current
                .get(key)
                .is_some_and(|c| c.metadata.resource_version == *version)
        });
    }

    /// The claim `key` as this scheduler last wrote it while the watch
    /// still shows `watched` (the version it read), else `watched`.
    pub fn get<'a>(
        &'a self,
        key: &str,
        watched: Option<&'a ResourceClaim>,
    ) -> Option<&'a ResourceClaim> {
        match (self.claims.get(key), watched) {
            (Some((version, assumed)), Some(w)) if w.metadata.resource_version == *version => {
                Some(assumed.as_ref())
            }
            _ => watched,
        }
    }

    /// The assumed claims' devices, for an inventory built from the watch.
    pub fn mark_busy(&self, inventory: &mut DraInventory) {
        for (key, (_, claim)) in &self.claims {
            let results = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_ref());
            inventory.assume_allocated(key, results.map(Vec::as_slice).unwrap_or_default());
        }
    }
}
