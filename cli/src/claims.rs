//! `gputopo explain` for a pod whose GPUs come through ResourceClaims: the
//! cluster file's ResourceSlices, ResourceClaims and DeviceClasses read as
//! the scheduler reads them, every node judged with the claims' devices.

use crate::cluster::Cluster;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_scheduler_core::dra::{DraConfig, DraInventory, DraPod, DraWarning, hold_snapshot};
use gputopo_scheduler_core::dra_schedule::explain_claims;
use gputopo_scheduler_core::explain::Explanation;
use gputopo_scheduler_core::pod::PendingPod;

/// Whether the pod names any ResourceClaim (`spec.resourceClaims`).
pub fn uses_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// Why a pod with claims cannot be explained: the pod or one of its claims
/// is malformed, missing from the cluster file, or asks what gputopo does
/// not allocate (the message names the object and field).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClaimsExplainError(String);

/// The explanation, and the inventory's warnings (devices not placed on a
/// topology, unusable pools).
pub fn explain_pod_claims(
    cluster: &Cluster,
    pod: &Pod,
    config: &DraConfig,
) -> Result<(Explanation, Vec<DraWarning>), ClaimsExplainError> {
    let pending = PendingPod::from_k8s(pod)
        .map_err(|e| ClaimsExplainError(format!("invalid {}: {e}", e.key())))?;
    let dra = &cluster.dra;
    let claims = DraPod::from_pod(
        pod,
        |namespace, name| {
            dra.claims.iter().find(|c| {
                c.metadata.namespace.as_deref() == Some(namespace)
                    && c.metadata.name.as_deref() == Some(name)
            })
        },
        &dra.classes,
    )
    .map_err(|e| ClaimsExplainError(e.to_string()))?;
    let mut inventory = DraInventory::build(config, &dra.slices, &dra.topologies, &dra.claims);
    hold_snapshot(&mut inventory, &cluster.snapshot);
    let warnings = std::mem::take(&mut inventory.warnings);
    let explanation = explain_claims(
        &cluster.snapshot,
        &inventory,
        &claims,
        &pending,
        &cluster.config,
    );
    Ok((explanation, warnings))
}
