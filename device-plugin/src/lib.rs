//! gputopo-device-plugin as a library: an optional kubelet device plugin for
//! `nvidia.com/gpu` that hands a pod exactly the GPUs gputopo chose for it
//! (`docs/device-plugin.md`).
//!
//! [`choose`] is the pure decision behind `GetPreferredAllocation`.

pub mod choose;
