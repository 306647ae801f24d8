//! NodePorts: a pod's host ports against those the node's bound pods take.

use super::PodContext;
use crate::pod_constraints::HostPort;

impl PodContext<'_> {
    /// The pod's host ports that a pod bound to the node at `index` takes
    /// already; empty when the pod asks none or all are free.
    pub(crate) fn taken_ports(&self, index: usize) -> Vec<HostPort> {
        let wanted = &self.pod.constraints.host_ports;
        if wanted.is_empty() {
            return Vec::new();
        }
        let snapshot = self.snapshot;
        let node = &snapshot.nodes[index];
        let mut taken: Vec<HostPort> = wanted
            .iter()
            .filter(|want| {
                node.pods.iter().any(|&id| {
                    snapshot
                        .pod(id)
                        .is_some_and(|p| p.constraints.host_ports.iter().any(|h| h.conflicts(want)))
                })
            })
            .cloned()
            .collect();
        taken.dedup();
        taken
    }

    /// Whether every host port the pod asks is free on the node at `index`.
    pub(crate) fn ports_free(&self, index: usize) -> bool {
        let wanted = &self.pod.constraints.host_ports;
        if wanted.is_empty() {
            return true;
        }
        !self.a_pod_on(index, |p| {
            p.constraints
                .host_ports
                .iter()
                .any(|h| wanted.iter().any(|w| w.conflicts(h)))
        })
    }

    /// Whether some pod on the node at `index` is `such`.
    fn a_pod_on(&self, index: usize, such: impl Fn(&crate::snapshot::BoundPod) -> bool) -> bool {
        let snapshot = self.snapshot;
        snapshot.nodes[index]
            .pods
            .iter()
            .any(|&id| snapshot.pod(id).is_some_and(&such))
    }

    /// VolumeRestrictions: no pod on the node mounts one of the pod's
    /// exclusive in-tree disks in a conflicting way.
    pub(crate) fn disks_free(&self, index: usize) -> bool {
        let wanted = &self.pod.constraints.disks;
        if wanted.is_empty() {
            return true;
        }
        !self.a_pod_on(index, |p| {
            p.constraints
                .disks
                .iter()
                .any(|d| wanted.iter().any(|w| w.conflicts(d)))
        })
    }
}
