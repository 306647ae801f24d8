//! gputopo-agent as a library: what discovery needs a GPU node, a Kubernetes
//! API or an async runtime for. The binary (`src/main.rs`) is a thin CLI over
//! this; everything pure (parsers, `NodeFacts`, the normalizer, link health,
//! labels, recordings, NVML answers → facts) is in `gputopo_topology`.
//!
//! [`nvml`] is the live NVML (the only code linking `nvml-wrapper`), [`host`]
//! reads the machine a recording is taken on, [`discover`] puts the live NVML
//! in front of the topology crate's file sources ([`auto`]: NVML or AMD SMI,
//! whichever answers), [`scan`] runs discovery off
//! the async runtime (static topology kept, dynamic state read every scan),
//! [`podres`] reads what the kubelet allocated, [`daemon`] rescans and
//! [`publish`]es labels and the `GpuTopology` (and, with link devices on,
//! the node's ResourceSlice of gputopo's link devices, whose kubelet plugin
//! is [`link_plugin`]); [`metrics`] are its metrics, [`health`] its
//! liveness and probe routes.

pub mod amd_smi;
pub mod auto;
pub mod daemon;
pub mod discover;
pub mod health;
pub mod host;
pub mod link_plugin;
pub mod metrics;
pub mod nvml;
pub mod podres;
pub mod publish;
pub mod scan;
