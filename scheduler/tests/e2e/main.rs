//! End to end on a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kwok; see gputopo-testenv): GPU nodes simulated
//! by kwok with `GpuTopology` objects made from recorded `nvidia-smi topo -m`
//! outputs, and `gputopo-scheduler` run as its own process with an admin
//! kubeconfig, as in a cluster.
//!
//! Tests share one control plane. Each gets its own nodes (selected by a
//! unique `e2e-group` label in its pods' nodeSelector) and its own scheduler
//! process with a unique scheduler name, so they cannot take each other's pods.
//!
//! Grouped by what they exercise: `placement` (which GPUs, which node, and
//! why not), `gangs` (and `structured_gangs`: a GB200 NVL72 cluster,
//! racks, slices and a PodGroup's topology), `preemption`,
//! `leader_election` and `restarts`.

// `common/` is shared with the other test binaries, one folder up.
#[path = "../common/mod.rs"]
mod common;

mod constraints;
mod differential;
mod gang_rules;
mod gangs;
mod leader_election;
mod placement;
mod preempt_rules;
mod preemption;
mod provisioning;
mod records;
mod restarts;
mod structured_gangs;
mod volumes;

use common::gpu_pod;
use k8s_openapi::api::core::v1::Pod;

/// A pod pinned to the node labelled `e2e-slot=<slot>` of `group`.
fn slot_pod(
    name: &str,
    scheduler: &str,
    group: &str,
    slot: &str,
    gpus: u32,
    annotations: &[(&str, &str)],
) -> Pod {
    let mut p = gpu_pod(name, scheduler, group, gpus, annotations);
    if let Some(spec) = p.spec.as_mut() {
        spec.node_selector
            .get_or_insert_default()
            .insert("e2e-slot".into(), slot.into());
    }
    p
}
