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

/// An in-tree disk a pod mounts that only one pod may write (kube-
/// scheduler's VolumeRestrictions): the same disk on one node conflicts
/// unless every pod mounts it read-only (an EBS volume always conflicts).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExclusiveDisk {
    /// `gcePersistentDisk.pdName`.
    Gce { name: String, read_only: bool },
    /// `awsElasticBlockStore.volumeID`.
    Ebs { id: String },
    /// `iscsi.iqn`.
    Iscsi { iqn: String, read_only: bool },
    /// `rbd`: the same image is the same pool and image behind any shared
    /// monitor.
    Rbd {
        monitors: Vec<String>,
        pool: String,
        image: String,
        read_only: bool,
    },
}

impl ExclusiveDisk {
    /// Whether two pods mounting these on one node conflict.
    pub fn conflicts(&self, other: &ExclusiveDisk) -> bool {
        use ExclusiveDisk::{Ebs, Gce, Iscsi, Rbd};
        match (self, other) {
            (
                Gce {
                    name: a,
                    read_only: ra,
                },
                Gce {
                    name: b,
                    read_only: rb,
                },
            ) => a == b && !(*ra && *rb),
            (Ebs { id: a }, Ebs { id: b }) => a == b,
            (
                Iscsi {
                    iqn: a,
                    read_only: ra,
                },
                Iscsi {
                    iqn: b,
                    read_only: rb,
                },
            ) => a == b && !(*ra && *rb),
            (
                Rbd {
                    monitors: ma,
                    pool: pa,
                    image: ia,
                    read_only: ra,
                },
                Rbd {
                    monitors: mb,
                    pool: pb,
                    image: ib,
                    read_only: rb,
                },
            ) => ma.iter().any(|m| mb.contains(m)) && pa == pb && ia == ib && !(*ra && *rb),
            _ => false,
        }
    }
}

/// The pod's exclusive in-tree disks, in `spec.volumes` order.
pub(super) fn exclusive_disks(spec: &k8s::PodSpec) -> Vec<ExclusiveDisk> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(d) = &v.gce_persistent_disk {
                Some(ExclusiveDisk::Gce {
                    name: d.pd_name.clone(),
                    read_only: d.read_only.unwrap_or(false),
                })
            } else if let Some(d) = &v.aws_elastic_block_store {
                Some(ExclusiveDisk::Ebs {
                    id: d.volume_id.clone(),
                })
            } else if let Some(d) = &v.iscsi {
                Some(ExclusiveDisk::Iscsi {
                    iqn: d.iqn.clone(),
                    read_only: d.read_only.unwrap_or(false),
                })
            } else {
                v.rbd.as_ref().map(|d| ExclusiveDisk::Rbd {
                    monitors: d.monitors.clone(),
                    // The API server defaults an absent pool to `rbd`.
                    pool: d.pool.clone().unwrap_or_else(|| "rbd".into()),
                    image: d.image.clone(),
                    read_only: d.read_only.unwrap_or(false),
                })
            }
        })
        .collect()
}
