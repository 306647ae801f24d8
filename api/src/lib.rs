//! The gputopo contract (`docs/contract.md`) as Rust types.
//!
//! Everything here is plain data and pure functions: no I/O, no clock.
//! The agent writes these types, the scheduler and `scheduler-core` read them.

pub mod generation;
pub mod keys;
pub mod link;
pub mod quantity;
pub mod request;
pub mod topology;

/// Kubernetes types (`Node`, `Pod`, `Quantity`, …), so `scheduler-core` reads them
/// without a dependency of its own and both crates agree on one version.
pub use k8s_openapi;
pub use link::{LinkClass, LinkType, MAX_BONDED_NVLINKS};
pub use request::{
    Collective, GangRef, GangStructure, GpuRequest, GpuShare, PlacementStrategy, Rank,
    RequestError, SliceLayer, TierKey, WorkloadKind,
};

pub use topology::{
    CONDITION_DEGRADED, DeviceForm, GpuAllocation, GpuFabric, GpuHolder, GpuInfo, GpuLink,
    GpuTopology, GpuTopologySpec, GpuTopologyStatus, GpuVendor, Interconnect, LinkBandwidth,
    MAX_GPUS_PER_NODE, Nic, NicGpuLink, PodResourcesReading, TopologySource, TopologySummary,
    crd_yaml,
};
