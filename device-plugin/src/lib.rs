//! gputopo-device-plugin as a library: an optional kubelet device plugin for
//! `nvidia.com/gpu` that hands a pod exactly the GPUs gputopo chose for it
//! (`docs/device-plugin.md`).
//!
//! [`choose`] is the pure decision behind `GetPreferredAllocation`; [`pods`]
//! the view of this node's pods it reads; [`health`] which GPUs are lost;
//! [`allocate`] how `Allocate` names the devices to the container runtime;
//! [`plugin`] the gRPC service, registration and restart handling;
//! [`metrics`] what `/metrics` shows.

pub mod allocate;
pub mod choose;
pub mod health;
pub mod metrics;
pub mod plugin;
pub mod pods;
