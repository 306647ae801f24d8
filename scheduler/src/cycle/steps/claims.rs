//! Reading a pod's ResourceClaims against the watched claims and classes
//! (a claim gputopo cannot honour exactly is refused, naming the field).
//! Pure.

use crate::claims::AssumedClaims;
use crate::cluster::pod_key;
use crate::cycle::Outcome;
use crate::cycle::work::{Member, Work};
use gputopo_scheduler_core::dra::{ClaimErrorKind, DraPod};
use k8s_openapi::api::core::v1::Pod;

/// The pod's claims, read against the watched claims and classes; or the
/// outcome that says why not. A claim not created yet (its template's) is
/// a wait, anything gputopo cannot honour an invalid pod naming the field.
pub(super) fn read_claims(
    work: &Work<'_>,
    assumed: &AssumedClaims,
    pod: &Pod,
) -> Result<DraPod, Outcome> {
    let read = DraPod::from_pod(
        pod,
        |namespace, name| {
            let key = format!("{namespace}/{name}");
            assumed.get(&key, work.claim_index.get(&key).copied())
        },
        work.dra.classes.iter().map(AsRef::as_ref),
    );
    read.map_err(|e| match e.kind {
        ClaimErrorKind::TemplateClaimPending | ClaimErrorKind::ClaimNotFound(_) => {
            Outcome::Unschedulable {
                message: format!("waiting for its ResourceClaim: {e}"),
            }
        }
        _ => Outcome::Invalid {
            message: format!("invalid {}: {e}", e.field),
        },
    })
}

/// The claims of a gang's members, when any member uses claims: `None`
/// for a device-plugin gang; an outcome for every member when one
/// member's claims cannot be read (the gang waits, or is invalid, as one).
pub(super) fn gang_claims(
    work: &Work<'_>,
    assumed: &AssumedClaims,
    members: &[Member],
) -> Result<Option<Vec<DraPod>>, Outcome> {
    if !members.iter().any(|(p, _)| crate::claims::uses_claims(p)) {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(members.len());
    for (pod, pending) in members {
        if pending.request.gpus > 0 {
            return Err(Outcome::Invalid {
                message: format!(
                    "gang member {}: asks for GPUs as nvidia.com/gpu while its gang uses ResourceClaims; accepted: every member through claims, or none",
                    pod_key(pod)
                ),
            });
        }
        out.push(read_claims(work, assumed, pod)?);
    }
    Ok(Some(out))
}
