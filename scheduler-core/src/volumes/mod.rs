//! The volume plugins, judged as kube-scheduler judges them:
//! VolumeRestrictions (a `ReadWriteOncePod` claim in use by another pod;
//! exclusive in-tree disks, checked per node in `filter/ports.rs`),
//! VolumeBinding (bound claims' volumes must reach the node; unbound
//! `WaitForFirstConsumer` claims need a matching available volume there or
//! a provisioner allowed there) and VolumeZone (zonal volumes' zones).
//!
//! Data flow, once per decision: [`check::VolumeCheck`] reads the pod's
//! claims from the snapshot's [`Storage`](crate::snapshot::Storage), refusing
//! the pod on every node for what no node can change (a missing claim, an
//! unbound `Immediate` claim); then per node it checks the bound volumes'
//! node affinity and zones and finds volumes for the waiting claims
//! (`matching.rs`). For the chosen node, [`volume_plan`] says what the
//! scheduler writes before the binding: each static volume's `claimRef`, and
//! the `selected-node` annotation of each claim a provisioner must fill.
//!
//! NodeVolumeLimits (`limits.rs`) caps each CSI driver's volumes per node.
//!
//! Not modelled: CSIStorageCapacity (*did not have enough free storage*);
//! docs/contract says so.

mod check;
mod limits;
mod matching;

pub use crate::snapshot::VolumePlan;
pub(crate) use check::VolumeCheck;
pub use check::volume_plan;

/// Why the volume plugins refuse a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VolumeRefusal {
    /// The pod mounts a claim that does not exist.
    ClaimNotFound,
    /// The pod mounts a claim being deleted.
    ClaimDeleting,
    /// The ephemeral volume controller has not made the pod's claim yet.
    EphemeralClaimPending,
    /// An unbound claim whose class binds at once (or that names no class):
    /// the volume controller, not a scheduler, must bind it first.
    UnboundImmediate,
    /// A waiting claim's class does not exist.
    ClassNotFound,
    /// Another pod uses a `ReadWriteOncePod` claim of the pod.
    ReadWriteOncePod,
    /// A pod on the node mounts one of the pod's exclusive in-tree disks
    /// (GCE PD, EBS, iSCSI, RBD) in a conflicting way.
    DiskConflict,
    /// A bound claim's volume does not exist.
    VolumeNotFound,
    /// A bound claim's volume cannot be reached from the node.
    NodeConflict,
    /// A waiting claim finds no volume and no provisioner for the node.
    BindConflict,
    /// A zonal volume is in another zone.
    ZoneConflict,
    /// The node's CSI attach limit would be exceeded.
    TooManyVolumes,
    /// A claim to provision: no CSIStorageCapacity of its class that
    /// reaches the node holds its size.
    NotEnoughSpace,
}

impl VolumeRefusal {
    /// kube-scheduler's phrase; `claim` names the claim where upstream's does.
    pub fn summary(self, claim: &str) -> String {
        match self {
            VolumeRefusal::ClaimNotFound => format!("persistentvolumeclaim \"{claim}\" not found"),
            VolumeRefusal::ClaimDeleting => {
                format!("persistentvolumeclaim \"{claim}\" is being deleted")
            }
            VolumeRefusal::EphemeralClaimPending => format!(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{claim}\""
            ),
            VolumeRefusal::UnboundImmediate => {
                "pod has unbound immediate PersistentVolumeClaims".into()
            }
            VolumeRefusal::ClassNotFound => {
                format!("storageclass of persistentvolumeclaim \"{claim}\" not found")
            }
            VolumeRefusal::ReadWriteOncePod => "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode".into(),
            VolumeRefusal::DiskConflict => "node(s) had no available disk".into(),
            VolumeRefusal::VolumeNotFound => {
                "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".into()
            }
            VolumeRefusal::NodeConflict => "node(s) had volume node affinity conflict".into(),
            VolumeRefusal::BindConflict => {
                "node(s) didn't find available persistent volumes to bind".into()
            }
            VolumeRefusal::ZoneConflict => "node(s) had no available volume zone".into(),
            VolumeRefusal::TooManyVolumes => "node(s) exceed max volume count".into(),
            VolumeRefusal::NotEnoughSpace => "node(s) did not have enough free storage".into(),
        }
    }

    /// Whether evicting pods could lift it: another pod's hold on a
    /// `ReadWriteOncePod` claim, an exclusive disk, or attached volumes.
    pub fn resolvable(self) -> bool {
        matches!(
            self,
            VolumeRefusal::ReadWriteOncePod
                | VolumeRefusal::DiskConflict
                | VolumeRefusal::TooManyVolumes
        )
    }
}
