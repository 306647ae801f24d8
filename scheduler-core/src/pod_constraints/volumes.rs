//! The PersistentVolumeClaims a pod mounts: `persistentVolumeClaim`
//! volumes by name, and `ephemeral` volumes, whose claim the ephemeral
//! volume controller creates as `<pod>-<volume>`. Other volume kinds
//! (emptyDir, configMap, secret, hostPath, CSI inline, …) need nothing from
//! a scheduler.

use gputopo_api::k8s_openapi::api::core::v1 as k8s;
use std::borrow::Cow;

/// One claim a pod mounts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PodClaim {
    /// `persistentVolumeClaim.claimName`.
    Named(String),
    /// An `ephemeral` volume, by volume name.
    Ephemeral(String),
}

impl PodClaim {
    /// The claim's name for a pod named `pod`.
    pub fn claim_name<'a>(&'a self, pod: &str) -> Cow<'a, str> {
        match self {
            PodClaim::Named(name) => Cow::Borrowed(name),
            PodClaim::Ephemeral(volume) => Cow::Owned(format!("{pod}-{volume}")),
        }
    }
}

/// The pod's claims, in `spec.volumes` order.
pub(super) fn claims(spec: &k8s::PodSpec) -> Vec<PodClaim> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(PodClaim::Named(c.claim_name.clone()))
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| PodClaim::Ephemeral(v.name.clone()))
            }
        })
        .collect()
}
