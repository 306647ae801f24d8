//! Dynamic Resource Allocation (`resource.k8s.io/v1`), the pure part: the GPUs
//! gputopo chooses are the GPUs the container gets (docs/contract/dra.md,
//! "Dynamic Resource Allocation").
//!
//! # The pieces
//!
//! * [`DraInventory::build`]: node-local ResourceSlices of every driver;
//!   the configured GPU drivers' GPUs ([`DraConfig`], default
//!   `gpu.nvidia.com`) placed on a GPU index of the node's `GpuTopology` by
//!   their `uuid` attribute (by `index` when the topology names no UUID);
//!   busy devices, consumed counters and shared capacity from every
//!   ResourceClaim's `status.allocation`, whoever allocated it.
//! * [`DraPod::from_pod`] / [`DraPod::new`]: the pod's claims read: requests
//!   (`exactly`: class, count or all, class and request CEL selectors),
//!   `matchAttribute` constraints, configuration passed through; an
//!   already-allocated claim taken as it is. Anything gputopo cannot honour
//!   exactly is a [`ClaimError`] naming the field.
//! * [`DraPod::fit`]: one node. Each request's candidates (matching every
//!   selector, free, untainted, on the topology); the pod's whole GPU set
//!   chosen by the topology objective (`gpuset`: [`NodeShape::pick`] when the
//!   candidates are uniform, [`NodeShape::pick_constrained`] when GPUs are
//!   fixed or requests differ); the set split over the requests by a
//!   bipartite matching ([`matching::split`]); and the `AllocationResult` per
//!   claim, pinned to the node as upstream pins node-local devices. Or a
//!   [`NodeReason`].
//!
//! The decisions built on these (a claim pod over the cluster, over named
//! nodes, in a gang, explained, or reviewed after kube-scheduler allocated)
//! are in [`crate::dra_schedule`], a level above.
//!
//! Other drivers' devices (IMEX channels, NICs), GPU partitions (MIG) and
//! shared devices (consumable capacity) are allocated beside the GPU set,
//! closest to it (`others.rs`), within their pools' counters
//! (`counters.rs`) and capacities (`capacity.rs`), by the search in
//! `assign.rs`. `firstAvailable` subrequests are tried in upstream's order
//! ([`DraPod::fit`]).
//!
//! Files: `device.rs` (a device and the names of devices and claims), `cel.rs`,
//! `error.rs`, `inventory.rs` (the devices per node, and which are busy),
//! `place.rs` (devices on the topology), `counters.rs`, `capacity.rs`,
//! `claim/` (reading claims: requests, subrequests, constraints, config),
//! `extended.rs`, `candidates.rs`, `constraint.rs`, `matching.rs` (the GPU
//! split), `others.rs`, `assign.rs`, `allocate.rs`, `results.rs` (what an
//! allocation lists).
//!
//! # What a caller writes, in order (as kube-scheduler's DRA plugin)
//!
//! For the chosen node's [`DraFit`], for each claim of [`DraFit::to_write`]:
//! 1. add the finalizer `resource.kubernetes.io/delete-protection` to the
//!    claim (a normal update) if it lacks it;
//! 2. one `status` update: `status.allocation` = the claim's
//!    [`ClaimAllocation::allocation`] (refuse if the claim got allocated
//!    meanwhile) and `status.reservedFor` += `{resource: pods, name, uid}`;
//!
//! for an already-allocated claim only the `reservedFor` entry; then, once
//! every claim is written, bind the pod (with the GPU annotations). On a
//! failure before the bind, undo: remove the reservation and, for claims this
//! cycle allocated, the allocation. [`DraInventory::assume_allocated`] keeps
//! the next decision from reusing the devices before the watch sees them.
//!
//! [`NodeShape::pick`]: crate::gpuset::NodeShape::pick
//! [`NodeShape::pick_constrained`]: crate::gpuset::NodeShape::pick_constrained

mod allocate;
mod assign;
mod binding;
mod candidates;
mod capacity;
mod cel;
mod claim;
mod constraint;
mod counters;
mod device;
mod error;
mod extended;
mod inventory;
pub mod matching;
mod node_devices;
mod others;
mod place;
mod results;

pub use allocate::{AssignedDevice, ClaimAllocation, DraFit, pin};
pub use binding::{BINDING_TIMEOUT_SECONDS, BindingState, binding_state, fresh_state};
pub use cel::{CelEnv, DeviceValue, Selector};
pub use claim::{
    Allocated, Alternatives, ClaimPlan, DraPod, MAX_CHOICES, MAX_DEVICES_PER_CLAIM,
    MatchConstraint, Mode, RequestPlan, Variant, pod_claim_names,
};
pub use constraint::MAX_CONSTRAINT_COMBINATIONS;
pub use counters::{Consumption, CounterError, Counters};
pub use device::{DeviceId, DraDevice, claim_key};
pub use error::{CelError, ClaimError, ClaimErrorKind, NodeReason};
pub use extended::{
    EXTENDED_RESOURCE_CLAIM_ANNOTATION, ExtendedClaim, extended_claim, extended_resource_class,
};
pub use inventory::{DraConfig, DraInventory, NVIDIA_GPU_DRIVER, hold_snapshot};
pub use node_devices::{DraWarning, GpuMapping, NodeDevices, UnplacedReason, Wiring};
pub use others::{NUMA_NODE, PCIE_ROOT};

/// The claim finalizer kube-scheduler adds before writing an allocation.
pub const CLAIM_FINALIZER: &str = "resource.kubernetes.io/delete-protection";
