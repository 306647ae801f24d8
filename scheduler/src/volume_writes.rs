//! The writes a pod's waiting claims need before its binding, as
//! kube-scheduler's VolumeBinding makes them in PreBind: a static volume
//! chosen for a claim gets the claim as its `claimRef` (the volume
//! controller then binds the pair), and a claim a provisioner must fill
//! gets the chosen node as `volume.kubernetes.io/selected-node`.
//!
//! A volume is written with its `resourceVersion`: if anyone claimed it
//! since it was read, the write conflicts and the pod is decided again;
//! a volume is never given to two claims. Then, as upstream's PreBind,
//! the binding waits until every written claim is bound (at most
//! [`BOUND_WAIT`]). Whatever happens between these writes and the
//! binding leaves nothing another pod can trip over: a claimed volume
//! binds its claim anyway and a claim keeps its selected node, so the next
//! decision (after a crash, by the next leader) takes the pod where they
//! are.

use crate::cycle::{WriteError, WriteErrorKind, WriteOp};
use crate::writer::{FIELD_MANAGER, write_error};
use gputopo_scheduler_core::snapshot::SELECTED_NODE;
use gputopo_scheduler_core::volumes::VolumePlan;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;
use tracing::{Instrument, info_span};

/// Set on a volume bound by a controller rather than by its author.
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// How long a binding waits for its claims to be bound (the volume
/// controller, a provisioner) before the pod is decided again.
pub const BOUND_WAIT: Duration = Duration::from_secs(120);

/// Writes `plan` for a pod in `namespace` placed on `node`, then waits
/// for the claims written to be bound.
pub async fn write_volume_plan(
    client: &kube::Client,
    namespace: &str,
    plan: &VolumePlan,
    node: &str,
) -> Result<(), WriteError> {
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
    let volumes = Api::<PersistentVolume>::all(client.clone());
    for (claim, volume) in &plan.binds {
        bind_volume(&claims, &volumes, namespace, claim, volume)
            .instrument(info_span!("bind_volume", claim = %format!("{namespace}/{claim}"), volume = %volume))
            .await?;
    }
    for claim in &plan.provisions {
        let key = format!("{namespace}/{claim}");
        let patch = json!({"metadata": {"annotations": {SELECTED_NODE: node}}});
        claims
            .patch(
                claim,
                // A merge patch of one annotation: `force` is for
                // server-side apply only, and the API refuses it here.
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .instrument(info_span!("select_node", claim = %key, node = %node))
            .await
            .map_err(|e| write_error(WriteOp::VolumeSelectNode, key, e))?;
    }
    let written = plan.binds.iter().map(|(c, _)| c).chain(&plan.provisions);
    for claim in written {
        wait_bound(&claims, namespace, claim)
            .instrument(info_span!("wait_claim_bound", claim = %format!("{namespace}/{claim}")))
            .await?;
    }
    Ok(())
}

/// Polls the claim until its phase is `Bound`, at most [`BOUND_WAIT`].
async fn wait_bound(
    claims: &Api<PersistentVolumeClaim>,
    namespace: &str,
    claim: &str,
) -> Result<(), WriteError> {
    let target = format!("{namespace}/{claim}");
    let deadline = tokio::time::Instant::now() + BOUND_WAIT;
    loop {
        let c = claims
            .get(claim)
            .await
            .map_err(|e| write_error(WriteOp::VolumeWait, target.clone(), e))?;
        if c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(WriteError {
                op: WriteOp::VolumeWait,
                kind: WriteErrorKind::Timeout,
                target,
                message: format!("not bound within {}s", BOUND_WAIT.as_secs()),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn bind_volume(
    claims: &Api<PersistentVolumeClaim>,
    volumes: &Api<PersistentVolume>,
    namespace: &str,
    claim: &str,
    volume: &str,
) -> Result<(), WriteError> {
    let target = format!("PersistentVolume {volume} for {namespace}/{claim}");
    let err = |e| write_error(WriteOp::VolumeBind, target.clone(), e);
    let uid = claims.get(claim).await.map_err(err)?.metadata.uid;
    let mut pv = volumes.get(volume).await.map_err(err)?;
    let spec = pv.spec.get_or_insert_with(Default::default);
    if let Some(r) = &spec.claim_ref {
        if r.namespace.as_deref() == Some(namespace) && r.name.as_deref() == Some(claim) {
            return Ok(());
        }
        return Err(WriteError {
            op: WriteOp::VolumeBind,
            kind: WriteErrorKind::Conflict,
            target,
            message: "the volume was claimed by another claim since it was read".into(),
        });
    }
    spec.claim_ref = Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some(namespace.to_string()),
        name: Some(claim.to_string()),
        uid,
        ..ObjectReference::default()
    });
    pv.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    // `replace` sends the resourceVersion read: a change since conflicts.
    volumes.replace(volume, &post, &pv).await.map_err(err)?;
    Ok(())
}
