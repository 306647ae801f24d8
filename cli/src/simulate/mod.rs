//! `gputopo simulate`: a deterministic replay of a workload on a cluster.
//!
//! # Why a module of the `gputopo` crate
//!
//! The engine reads files (openb CSVs, the cluster YAML that
//! [`crate::cluster`] already loads, workload YAML) and draws plots; it drives
//! `scheduler-core` only through its public API (`schedule`, `Snapshot::add_pod`,
//! `remove_pod`), so scheduler-core stays free of I/O. A crate of its own
//! would have had to depend on this one for the cluster loader; a module
//! keeps one place for the file formats and the tests call it as a library.
//!
//! # The protocol (FGD, Weng et al. ATC'23)
//!
//! Arrival units (a pod, or a gang's members together) arrive one at a time.
//! With `--inflate X`, pods are resampled with replacement (seeded) and
//! appended until the arrived GPU demand reaches X × the cluster's GPUs.
//! Order: `Order::Shuffle` (the default for CSV traces) puts the trace's own
//! pods in seeded random order and the copies after them, in the order they
//! were drawn, as the FGD simulator does (it shuffles the pod list, then
//! appends its "tuned" copies); `Order::Arrival` (the default for workload
//! YAML) keeps arrival times, and pods with a duration end and free their
//! resources. Under `Shuffle` a unit the policy cannot place fails for
//! good; under `Arrival` it waits in a queue and is tried again, oldest
//! first, each time pods end (as a pending pod is), and fails only if it
//! still does not fit when nothing is left to end. Nothing is evicted.
//! After each arrival the arrived demand (sum of GPU requests in milli-GPU,
//! placed or not) is compared with 10 %, 20 %, … 130 % of capacity and a
//! point is recorded at each threshold crossed: GPU allocation and FGD
//! fragmentation, both as % of the cluster's GPU milli (and, on clusters
//! with wiring, the complete 8-GPU NVLink slots left).
//!
//! The FGD simulator also names every node with a seeded random prefix
//! (`0042-openb-node-0007`) before creating it; its baselines' equal scores
//! go to the node that comes first in that order (see [`policy`]). Trace
//! nodes get the same: a third seeded stream orders them ([`World::node_order`]),
//! and the `gputopo` policy sees them named with that prefix.
//!
//! # Topology metrics
//!
//! On clusters whose nodes have a wiring (a `GpuTopology`, or the one
//! synthesised for trace nodes) the result carries [`TopologyMetrics`]:
//! multi-GPU pods on an optimal set (ring bottleneck as good as the best any
//! set of that many of the node's free GPUs offered at the time), the mean
//! and distribution of their bottleneck links, gangs spread over more than
//! one leaf (the innermost network tier), and complete 8-GPU NVLink slots
//! left; under `Arrival`, queue time p50/p99 and makespan.
//!
//! # Whole domains free
//!
//! On clusters whose nodes carry the configured network tiers' labels
//! (cluster YAML; trace nodes carry none) the result carries, per tier,
//! how many domains had every GPU free: at the start, the mean and the
//! least over the instants just after each arrival (either order), and at
//! the last arrival ([`WholeDomainsFree`], `domains.rs`). It is the
//! scheduler's `gputopo_free_domains{tier}`, and what the domain-fit part
//! of `gputopo`'s score keeps up for gangs.
//!
//! # Determinism
//!
//! Three ChaCha8 streams seeded from `--seed`: one for the workload
//! (resampling, shuffle), identical for every policy, one for the policy's
//! random choices (`random`, kube-scheduler's ties), one for the node order.
//! No hash-map order reaches a result.

mod books;
mod cluster;
mod domains;
pub mod frag;
pub mod generate;
pub mod input;
mod load;
pub mod plot;
pub mod policy;
mod result;
mod rng;
mod run;
pub mod topo;
mod workload;
mod world;

pub use cluster::{Models, NodeUse, SimCluster, SimNode};
pub use load::{load_cluster, load_workload};
pub use result::{Point, SimResult, TopologyMetrics, WholeDomainsFree};
pub use rng::below;
pub use run::simulate;
pub use workload::{SimPod, Workload, arrival_plan};
pub use world::{Assignment, State, World};

use input::InputError;
use policy::PolicyKind;
use serde::Serialize;

/// How arrival units are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    Shuffle,
    Arrival,
}

/// Run settings.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub policy: PolicyKind,
    pub seed: u64,
    /// Resample until arrived demand reaches this × capacity; `None`: the workload as is.
    pub inflate: Option<f64>,
    pub order: Order,
    /// FGD's `podPopularityThreshold`.
    pub popularity_pct: f64,
    pub progress: bool,
    /// Leave `runtimeMs` out of the result so that runs compare byte for byte.
    pub omit_runtime: bool,
}

/// Something went wrong while simulating.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("--inflate {0}: accepted: a finite number >= 1 (1.3 in the FGD protocol)")]
    Inflate(f64),
    #[error("the cluster has no GPUs: arrived demand cannot be measured")]
    NoGpus,
    #[error("the workload has no pod")]
    EmptyWorkload,
    #[error("policy {policy}: placed pod {pod} on node {node} beyond its capacity ({what})")]
    Overallocated {
        policy: String,
        pod: String,
        node: String,
        what: String,
    },
    #[error("policy {policy}: {message}")]
    Policy { policy: String, message: String },
}
