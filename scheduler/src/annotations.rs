//! What a placement writes on its pod, the same in both modes: the chosen
//! GPUs, their UUIDs and the bottleneck link, as merge patches.

use gputopo_api::keys::pod as pod_keys;
use gputopo_scheduler_core::schedule::Placement;
use serde_json::{Value, json};

/// Annotation with the placement's weakest link class (`NV2`, `PIX`, ...).
/// Not under `gputopo.dev/`, where every key is a pod's request and an
/// unknown one is an error.
pub const BOTTLENECK_ANNOTATION: &str = "scheduler.gputopo.dev/bottleneck";

/// The placement's weakest link as the bottleneck annotation says it:
/// `NV2`, `PIX`; `unknown` for several GPUs on a node without
/// `GpuTopology`; `none` for one GPU, a shared GPU or no GPU.
pub fn bottleneck_text(p: &Placement) -> String {
    match (p.bottleneck, p.topology_known) {
        (Some(b), _) => b.to_string(),
        (None, false) if p.gpus.len() > 1 && p.shared.is_none() => "unknown".into(),
        (None, _) => "none".into(),
    }
}

/// The merge patch that writes the placement on the pod, as the secondary
/// scheduler writes it: `gputopo.dev/assigned-gpus`,
/// `gputopo.dev/assigned-gpu-uuids` (removed when a UUID is unknown) and
/// `scheduler.gputopo.dev/bottleneck`.
pub fn assignment_patch(p: &Placement) -> Value {
    json!({"metadata": {"annotations": {
        pod_keys::ASSIGNED_GPUS: p.assigned_gpus(),
        pod_keys::ASSIGNED_GPU_UUIDS: p.assigned_gpu_uuids(),
        BOTTLENECK_ANNOTATION: bottleneck_text(p),
    }}})
}

/// The merge patch that takes the assignment off again (a binding that
/// failed after the annotations were written).
pub fn unassignment_patch() -> Value {
    json!({"metadata": {"annotations": {
        pod_keys::ASSIGNED_GPUS: null,
        pod_keys::ASSIGNED_GPU_UUIDS: null,
        BOTTLENECK_ANNOTATION: null,
    }}})
}
