//! Whether a node's `GpuTopology` can be believed, against what the API
//! server knows of the node and what its GPUs can physically have. The
//! agent on a node writes that node's object: a compromised node could
//! claim NVLinks it lacks to pull multi-GPU jobs onto itself. One that
//! fails is not scored on topology (its GPUs count as if it had none) and
//! the scheduler says why on the node (`GpuTopologyTrusted=False`).

use crate::resources::Resources;
use gputopo_api::generation::max_nvlinks;
use gputopo_api::keys::{RESOURCE_GPU, RESOURCE_GPU_AMD};
use gputopo_api::{GpuTopologySpec, GpuVendor, LinkType};

/// Why a node's `spec` is not believed given its `allocatable` resources
/// (the vendor's GPU count); `None` when it is.
pub fn implausible_topology(spec: &GpuTopologySpec, allocatable: &Resources) -> Option<String> {
    let (resource, count) = match spec.vendor_or_default() {
        GpuVendor::Amd => (
            RESOURCE_GPU_AMD,
            allocatable
                .extended
                .iter()
                .find(|(n, _)| n == RESOURCE_GPU_AMD)
                .map_or(0, |(_, a)| *a),
        ),
        _ => (RESOURCE_GPU, allocatable.gpus),
    };
    implausible(spec, count, resource)
}

/// Why `spec` is not believed for a node whose device plugin lists
/// `allocatable` GPUs of the vendor's resource `resource`; `None` when it is.
fn implausible(spec: &GpuTopologySpec, allocatable: i64, resource: &str) -> Option<String> {
    let listed = spec.gpus.len() as i64;
    // Fewer allocatable than listed: GPUs the device plugin marks unhealthy.
    // A multiple: time-slicing replicas. 0: no device plugin (yet), or MIG.
    if listed > 0 && allocatable > listed && allocatable % listed != 0 {
        return Some(format!(
            "it lists {listed} GPUs but the node's allocatable {resource} is {allocatable}: neither at most {listed} (some unhealthy) nor a time-slicing multiple of it"
        ));
    }
    for link in &spec.links {
        if link.link_type != LinkType::Nv {
            continue;
        }
        let product = spec
            .gpus
            .iter()
            .find(|g| g.index == link.a)
            .and_then(|g| g.product.as_deref())
            .or(spec.summary.product.as_deref());
        let Some(product) = product else {
            continue;
        };
        if let Some(max) = max_nvlinks(product)
            && link.nvlinks > max
        {
            return Some(format!(
                "GPUs {} and {} claim NV{}, but a {product} has at most {max} NVLinks",
                link.a, link.b, link.nvlinks
            ));
        }
    }
    None
}
