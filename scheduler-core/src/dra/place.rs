//! Where a node's published devices sit on its `GpuTopology`: whole GPUs
//! on their GPU index (by UUID, else by index), partitions under the GPU of
//! their `parentUUID`, and the node's wiring (GPU NUMA nodes, NICs) kept
//! for putting other devices close to the pod's GPUs.

use super::node_devices::{DraWarning, GpuMapping, NodeDevices, UnplacedReason, Wiring};
use gputopo_api::GpuTopology;
use std::collections::BTreeSet;

/// Maps each whole GPU of a GPU driver on `node` to a topology GPU: by
/// `uuid`, or by `index` when the topology names no UUID; one that matches
/// no GPU, or one already taken, is left unplaced with a warning. A
/// partition (`type` other than `gpu`) gets the GPU of its `parentUUID`;
/// other drivers' devices are not placed.
pub(super) fn place(
    node: &mut NodeDevices,
    topology: Option<&GpuTopology>,
    warnings: &mut Vec<DraWarning>,
) {
    let Some(topology) = topology else {
        node.mapping = GpuMapping::NoTopology;
        for d in node.devices.iter().filter(|d| d.gpu_driver) {
            warnings.push(DraWarning::UnplacedDevice {
                node: node.node.clone(),
                device: d.id.clone(),
                reason: UnplacedReason::NoTopology,
            });
        }
        return;
    };
    let gpus = &topology.spec.gpus;
    node.wiring = Wiring {
        gpu_numa: gpus
            .iter()
            .filter_map(|g| Some((g.index, i64::from(g.numa_node?))))
            .collect(),
        nics: topology.spec.nics.clone(),
    };
    if !node.devices.iter().any(|d| d.gpu_driver) {
        return;
    }
    let by_uuid = gpus.iter().any(|g| g.uuid.is_some());
    node.mapping = if by_uuid {
        GpuMapping::Uuid
    } else {
        warnings.push(DraWarning::IndexFallback {
            node: node.node.clone(),
        });
        GpuMapping::Index
    };
    let mut taken = BTreeSet::new();
    for d in node.devices.iter_mut().filter(|d| d.partition) {
        d.parent_gpu = d.string_attribute("parentUUID").and_then(|uuid| {
            gpus.iter()
                .find(|g| g.uuid.as_deref() == Some(uuid))
                .map(|g| g.index)
        });
    }
    for d in node
        .devices
        .iter_mut()
        .filter(|d| d.gpu_driver && !d.partition)
    {
        let found: Result<u32, UnplacedReason> = if by_uuid {
            match d.string_attribute("uuid") {
                None => Err(UnplacedReason::NoUuid),
                Some(uuid) => gpus
                    .iter()
                    .find(|g| g.uuid.as_deref() == Some(uuid))
                    .map(|g| g.index)
                    .ok_or_else(|| UnplacedReason::UnknownUuid {
                        uuid: uuid.to_string(),
                    }),
            }
        } else {
            match d.int_attribute("index") {
                None => Err(UnplacedReason::NoIndex),
                Some(index) => gpus
                    .iter()
                    .find(|g| i64::from(g.index) == index)
                    .map(|g| g.index)
                    .ok_or(UnplacedReason::UnknownIndex { index }),
            }
        };
        match found {
            Ok(gpu) if taken.insert(gpu) => d.gpu = Some(gpu),
            Ok(gpu) => warnings.push(DraWarning::UnplacedDevice {
                node: node.node.clone(),
                device: d.id.clone(),
                reason: UnplacedReason::GpuTaken { gpu },
            }),
            Err(reason) => warnings.push(DraWarning::UnplacedDevice {
                node: node.node.clone(),
                device: d.id.clone(),
                reason,
            }),
        }
    }
}
