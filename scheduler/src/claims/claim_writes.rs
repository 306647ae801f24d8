//! The claim writes over `kube::Client`, in kube-scheduler's order and with
//! its guards: every write carries the `resourceVersion` just read, so a
//! claim changed meanwhile (allocated by another scheduler, replaced) is a
//! conflict, never overwritten.

use super::ClaimWrite;
use crate::cycle::{WriteError, WriteErrorKind, WriteOp};
use crate::writer::{FIELD_MANAGER, write_error};
use gputopo_scheduler_core::dra::CLAIM_FINALIZER;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimConsumerReference};
use kube::api::{Api, PostParams};
use tracing::{Instrument, info_span};

fn post() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

fn conflict(op: WriteOp, w: &ClaimWrite, message: String) -> WriteError {
    WriteError {
        op,
        kind: WriteErrorKind::Conflict,
        target: w.target(),
        message,
    }
}

fn reserved(claim: &ResourceClaim, pod_uid: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| r.iter().any(|c| c.uid == pod_uid))
}

/// Allocates (finalizer, then `allocation` and `reservedFor` in one status
/// update) or only reserves the claim. Idempotent: a claim that already
/// holds this allocation for this pod (a write repeated after a restart) is
/// success.
pub async fn reserve(client: &kube::Client, w: &ClaimWrite) -> Result<(), WriteError> {
    let op = WriteOp::ClaimReserve;
    let api = Api::<ResourceClaim>::namespaced(client.clone(), &w.namespace);
    let span = info_span!("reserve_claim", claim = %w.target(), pod = %w.pod_name);
    async {
        let mut claim = api
            .get(&w.name)
            .await
            .map_err(|e| write_error(op, w.target(), e))?;
        if w.uid.is_some() && claim.metadata.uid != w.uid {
            return Err(conflict(
                op,
                w,
                "the claim was replaced since it was decided on".into(),
            ));
        }
        let current = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
        if let Some(wanted) = &w.allocation {
            match current {
                None => {}
                Some(a) if same_devices(a, wanted) && reserved(&claim, &w.pod_uid) => {
                    return Ok(());
                }
                Some(_) => {
                    return Err(conflict(
                        op,
                        w,
                        "the claim was allocated meanwhile (by another scheduler or an earlier decision)".into(),
                    ));
                }
            }
            let finalizers = claim.metadata.finalizers.get_or_insert_with(Vec::new);
            if !finalizers.iter().any(|f| f == CLAIM_FINALIZER) {
                finalizers.push(CLAIM_FINALIZER.to_string());
                claim = api
                    .replace(&w.name, &post(), &claim)
                    .await
                    .map_err(|e| write_error(op, w.target(), e))?;
            }
        } else if current.is_none() {
            return Err(conflict(
                op,
                w,
                "the claim was deallocated meanwhile".into(),
            ));
        }
        if reserved(&claim, &w.pod_uid) && w.allocation.is_none() {
            return Ok(());
        }
        let status = claim.status.get_or_insert_with(Default::default);
        if let Some(wanted) = &w.allocation {
            status.allocation = Some(wanted.clone());
        }
        let entries = status.reserved_for.get_or_insert_with(Vec::new);
        if !entries.iter().any(|c| c.uid == w.pod_uid) {
            entries.push(ResourceClaimConsumerReference {
                api_group: None,
                resource: "pods".into(),
                name: w.pod_name.clone(),
                uid: w.pod_uid.clone(),
            });
        }
        api.replace_status(&w.name, &post(), &claim)
            .await
            .map(|_| ())
            .map_err(|e| write_error(op, w.target(), e))
    }
    .instrument(span)
    .await
}

/// Undoes [`reserve`] when the pod is not bound after all: takes the pod
/// out of `reservedFor` and, when `deallocate` (the claim was allocated for
/// it by this decision) and no other pod holds it, clears the allocation and
/// the finalizer. A claim already gone is success.
pub async fn release(
    client: &kube::Client,
    w: &ClaimWrite,
    deallocate: bool,
) -> Result<(), WriteError> {
    let op = WriteOp::ClaimRelease;
    let api = Api::<ResourceClaim>::namespaced(client.clone(), &w.namespace);
    let span = info_span!("release_claim", claim = %w.target(), pod = %w.pod_name);
    async {
        let mut claim = match api.get(&w.name).await {
            Ok(c) => c,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(write_error(op, w.target(), e)),
        };
        if w.uid.is_some() && claim.metadata.uid != w.uid {
            return Ok(());
        }
        let status = claim.status.get_or_insert_with(Default::default);
        let entries = status.reserved_for.get_or_insert_with(Vec::new);
        entries.retain(|c| c.uid != w.pod_uid);
        let unused = entries.is_empty();
        if unused {
            status.reserved_for = None;
        }
        let deallocate = deallocate && unused;
        if deallocate {
            status.allocation = None;
        }
        claim = api
            .replace_status(&w.name, &post(), &claim)
            .await
            .map_err(|e| write_error(op, w.target(), e))?;
        if deallocate
            && let Some(f) = claim.metadata.finalizers.as_mut()
            && f.iter().any(|f| f == CLAIM_FINALIZER)
        {
            f.retain(|f| f != CLAIM_FINALIZER);
            api.replace(&w.name, &post(), &claim)
                .await
                .map_err(|e| write_error(op, w.target(), e))?;
        }
        Ok(())
    }
    .instrument(span)
    .await
}

/// The same devices (driver, pool, device, request), in any order.
fn same_devices(
    a: &k8s_openapi::api::resource::v1::AllocationResult,
    b: &k8s_openapi::api::resource::v1::AllocationResult,
) -> bool {
    let list = |x: &k8s_openapi::api::resource::v1::AllocationResult| {
        let mut v: Vec<(String, String, String, String)> = x
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| {
                (
                    r.driver.clone(),
                    r.pool.clone(),
                    r.device.clone(),
                    r.request.clone(),
                )
            })
            .collect();
        v.sort();
        v
    };
    list(a) == list(b)
}

/// Creates a pod's special claim (from its `generateName`).
pub async fn create(
    client: &kube::Client,
    claim: &ResourceClaim,
) -> Result<ResourceClaim, WriteError> {
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let target = format!(
        "{namespace}/{}",
        claim.metadata.generate_name.as_deref().unwrap_or_default()
    );
    let mut body = claim.clone();
    // The name was a stand-in: the API server generates it.
    body.metadata.name = None;
    Api::<ResourceClaim>::namespaced(client.clone(), &namespace)
        .create(&post(), &body)
        .instrument(info_span!("create_claim", claim = %target))
        .await
        .map_err(|e| write_error(WriteOp::ClaimCreate, target, e))
}

/// Deletes a claim this decision created; one already gone is success.
pub async fn delete(client: &kube::Client, w: &ClaimWrite) -> Result<(), WriteError> {
    let api = Api::<ResourceClaim>::namespaced(client.clone(), &w.namespace);
    let params = kube::api::DeleteParams {
        preconditions: w.uid.clone().map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::default()
    };
    match api
        .delete(&w.name, &params)
        .instrument(info_span!("delete_claim", claim = %w.target()))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(write_error(WriteOp::ClaimDelete, w.target(), e)),
    }
}
