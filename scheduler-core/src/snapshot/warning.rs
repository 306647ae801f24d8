//! What was odd in a snapshot's inputs ([`SnapshotWarning`]), what stopped
//! one being built ([`SnapshotError`]), and where each warning came from.

use crate::gpuset::ShapeError;
use gputopo_api::RequestError;

/// Something in the inputs that was odd but did not stop the snapshot; each
/// names the object and what was assumed instead.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SnapshotWarning {
    #[error("node {node}: GpuTopology cannot be used ({error}); GPU pods will not be placed there")]
    InvalidTopology { node: String, error: ShapeError },
    #[error(
        "node {node}: its GpuTopology is not believed ({reason}); its GPUs are placed as if it had none"
    )]
    ImplausibleTopology { node: String, reason: String },
    #[error("node {node}: label {key}={value:?} ignored: {detail}")]
    BadLabel {
        node: String,
        key: String,
        value: String,
        detail: String,
    },
    #[error("pod {pod}: bound to node {node}, which the snapshot does not have; ignored")]
    UnknownNode { pod: String, node: String },
    #[error("pod {pod} is listed twice; the second is ignored")]
    DuplicatePod { pod: String },
    #[error(
        "pod {pod}: gputopo.dev/assigned-gpus {value:?} is not a GPU index list; its GPUs are counted as of unknown indices"
    )]
    UnreadableAssignment { pod: String, value: String },
    #[error(
        "pod {pod}: gputopo.dev/assigned-gpus names {listed} usable GPU(s) on node {node} but the pod holds {requested}; the rest charged to GPUs {charged}"
    )]
    ShortAssignment {
        pod: String,
        node: String,
        listed: u32,
        requested: u32,
        charged: String,
    },
    #[error("pod {pod}: GPU {gpu} is not on node {node}; ignored")]
    GpuNotOnNode { pod: String, node: String, gpu: u32 },
    #[error("pod {pod}: GPU {gpu} on node {node} is already held by another pod; counted for both")]
    GpuHeldTwice { pod: String, node: String, gpu: u32 },
    #[error(
        "pod {pod}: holds {count} GPUs on node {node} but neither the node's GpuTopology status nor the pod's gputopo.dev/assigned-gpus says which; charged to GPUs {charged}"
    )]
    UnknownGpus {
        pod: String,
        node: String,
        count: u32,
        charged: String,
    },
    #[error(
        "pod {pod}: holds {count} more GPUs than node {node} has free; the excess is not placed"
    )]
    TooFewGpus {
        pod: String,
        node: String,
        count: u32,
    },
    #[error(
        "pod {pod}: GPU request not read ({error}); its GPUs are counted, its annotations ignored"
    )]
    BadRequest { pod: String, error: RequestError },
}

/// Why a snapshot could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("node {name} is listed twice")]
    DuplicateNode { name: String },
    #[error("PodGroup {namespace}/{name} is listed twice")]
    DuplicatePodGroup { namespace: String, name: String },
    #[error("pod {pod}: node {node} does not exist")]
    UnknownNode { pod: String, node: String },
    #[error("pod {pod} is already in the snapshot")]
    DuplicatePod { pod: String },
}

/// [`Snapshot::warnings`](super::Snapshot::warnings) by source, in the
/// order they are listed: the nodes', then each node's pods' (in node
/// order), then pods on unknown nodes. Pods added later
/// ([`Snapshot::add_pod`](super::Snapshot::add_pod)) add to the list only.
#[derive(Clone, Debug, Default)]
pub(crate) struct WarningParts {
    pub(crate) nodes: Vec<SnapshotWarning>,
    /// By node index, only nodes whose pods raised any: rejoining costs
    /// the warnings, not the cluster's size.
    pub(crate) pods: std::collections::BTreeMap<u32, Vec<SnapshotWarning>>,
    pub(crate) orphans: Vec<SnapshotWarning>,
}
