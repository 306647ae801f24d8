//! What a placement writes on its pod, the same in both modes: the chosen
//! GPUs, their UUIDs and the bottleneck link.

use gputopo_api::keys::pod as pod_keys;
use gputopo_scheduler_core::schedule::Placement;
use std::collections::BTreeMap;

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
        (None, known) if (p.by_count || !known) && p.gpus.len() > 1 && p.shared.is_none() => {
            "unknown".into()
        }
        (None, _) => "none".into(),
    }
}

/// The placement's annotations (`gputopo.dev/assigned-gpus`,
/// `gputopo.dev/assigned-gpu-uuids`, `scheduler.gputopo.dev/bottleneck`), as
/// a `pods/binding` request carries them: the API server copies them onto
/// the pod as it binds it, so node and GPUs are written by one request. A
/// UUID that is not known is left out.
pub fn assignment_annotations(p: &Placement) -> BTreeMap<String, String> {
    let mut a = BTreeMap::from([
        (pod_keys::ASSIGNED_GPUS.to_string(), p.assigned_gpus()),
        (BOTTLENECK_ANNOTATION.to_string(), bottleneck_text(p)),
    ]);
    if let Some(uuids) = p.assigned_gpu_uuids() {
        a.insert(pod_keys::ASSIGNED_GPU_UUIDS.to_string(), uuids);
    }
    a
}
