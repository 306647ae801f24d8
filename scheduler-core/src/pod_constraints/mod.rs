//! What a pod states about its place among other pods and on its node's
//! host resources, beyond node labels, taints and resources: its labels
//! (what other pods' rules select), its host ports, its inter-pod affinity
//! and anti-affinity, its topology spread constraints and the claims it
//! mounts.
//!
//! Both the pod being scheduled ([`crate::pod::PendingPod`]) and every bound
//! pod ([`crate::snapshot::BoundPod`]) hold one, shared behind an `Arc`: a
//! bound pod's required anti-affinity keeps other pods away (symmetry), its
//! labels count toward spread and affinity, its ports are taken.
//!
//! Read as kube-scheduler reads them (`framework.PodInfo`, NodePorts,
//! PodTopologySpread); what each judges is in `crate::inter_pod`,
//! `crate::spread` and `crate::filter`.

mod affinity;
mod label_selector;
mod migrated;
mod node_features;
mod ports;
mod spread;
mod volumes;

pub use affinity::{AffinityTerm, PodAffinity, WeightedTerm};
pub use label_selector::{LabelSelector, matches as selector_matches};
pub use migrated::{MIGRATED_PLUGINS, MigratedVolume};
pub use node_features::{NodeFeatures, SCHEDULING_FEATURES};
pub use ports::HostPort;
pub use spread::{InclusionPolicy, SpreadConstraint, WhenUnsatisfiable};
pub use volumes::{ExclusiveDisk, PodClaim};

use crate::selector::SelectorError;
use gputopo_api::k8s_openapi::api::core::v1 as k8s;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

/// One pod's labels and the rules it states about other pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodConstraints {
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    pub host_ports: Vec<HostPort>,
    pub affinity: PodAffinity,
    /// `spec.topologySpreadConstraints`, in order.
    pub spread: Vec<SpreadConstraint>,
    /// The PersistentVolumeClaims it mounts, in `spec.volumes` order.
    pub claims: Vec<PodClaim>,
    /// In-tree disks only one pod may write (GCE PD, EBS, iSCSI, RBD).
    pub disks: Vec<ExclusiveDisk>,
    /// Inline in-tree volumes CSI migration moves to a driver (counted
    /// against the driver's attach limit where the node migrated them).
    pub migrated: Vec<MigratedVolume>,
    /// What the pod needs its node to declare (NodeDeclaredFeatures).
    pub node_features: NodeFeatures,
}

static EMPTY: LazyLock<Arc<PodConstraints>> = LazyLock::new(Arc::default);

impl PodConstraints {
    /// A pod with no labels, ports or rules; one allocation shared by all.
    pub fn none() -> Arc<PodConstraints> {
        Arc::clone(&EMPTY)
    }

    /// A pod with these labels and no rules.
    pub fn labelled(pairs: &[(&str, &str)]) -> PodConstraints {
        PodConstraints {
            labels: pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            ..PodConstraints::default()
        }
    }

    /// Whether the pod states anything beyond its labels.
    pub fn has_rules(&self) -> bool {
        !self.host_ports.is_empty()
            || !self.affinity.is_empty()
            || !self.spread.is_empty()
            || !self.claims.is_empty()
            || !self.disks.is_empty()
            || !self.migrated.is_empty()
            || !self.node_features.is_empty()
    }

    /// Reads a pod's labels, ports, affinity, spread, claims and the node
    /// features it needs. The namespace is
    /// the pod's (a term naming no namespace looks there).
    pub fn from_k8s(
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
        spec: &k8s::PodSpec,
    ) -> Result<PodConstraints, SelectorError> {
        let labels = labels.cloned().unwrap_or_default();
        let affinity = PodAffinity::from_k8s(spec.affinity.as_ref(), namespace, &labels)?;
        let spread = spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, c)| {
                SpreadConstraint::from_k8s(c, &labels, &format!("topologySpreadConstraints[{i}]"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PodConstraints {
            host_ports: ports::host_ports(spec),
            affinity,
            spread,
            claims: volumes::claims(spec),
            disks: volumes::exclusive_disks(spec),
            migrated: spec
                .volumes
                .iter()
                .flatten()
                .filter_map(MigratedVolume::inline)
                .collect(),
            node_features: NodeFeatures::required_by(spec),
            labels,
        })
    }

    /// [`PodConstraints::from_k8s`] shared: pods without labels or rules
    /// share one allocation.
    pub fn shared_from_k8s(
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
        spec: &k8s::PodSpec,
    ) -> Result<Arc<PodConstraints>, SelectorError> {
        let c = PodConstraints::from_k8s(namespace, labels, spec)?;
        Ok(if c == PodConstraints::default() {
            PodConstraints::none()
        } else {
            Arc::new(c)
        })
    }
}

#[cfg(test)]
mod tests;
