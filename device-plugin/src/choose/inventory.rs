//! The node's GPUs as the plugin advertises them: index ↔ UUID, NUMA node,
//! and the wiring scheduler-core chooses sets on.

use super::assignment::{AnnotationProblem, parse_indices};
use gputopo_api::GpuTopologySpec;
use gputopo_scheduler_core::gpuset::{NodeShape, ShapeError};
use std::collections::BTreeMap;

/// One advertised GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub numa_node: Option<i32>,
}

/// Why a topology cannot be advertised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    #[error("the topology lists no GPU")]
    NoGpus,
    #[error(
        "GPU {index} has no UUID; the device plugin advertises GPUs by UUID, so a source that knows them is needed (NVML or a recording)"
    )]
    MissingUuid { index: u32 },
    #[error("GPUs {first} and {second} have the same UUID {uuid}")]
    DuplicateUuid {
        uuid: String,
        first: u32,
        second: u32,
    },
    #[error("GPU index {index} is listed twice")]
    DuplicateIndex { index: u32 },
    #[error("GPU index {index} is too large; at most 32 GPUs (indices 0..32) per node")]
    IndexTooLarge { index: u32 },
}

/// The node's GPUs, by index and by UUID.
#[derive(Debug)]
pub struct Inventory {
    gpus: BTreeMap<u32, Gpu>,
    by_uuid: BTreeMap<String, u32>,
    shape: Result<NodeShape, ShapeError>,
}

impl Inventory {
    /// Reads the GPUs of `spec`; every GPU needs a UUID (the device ID the
    /// kubelet and the container toolkit know it by). The wiring is read too;
    /// if it cannot be, the inventory is still usable and the topology rule
    /// gives no preference.
    pub fn from_spec(spec: &GpuTopologySpec) -> Result<Inventory, InventoryError> {
        if spec.gpus.is_empty() {
            return Err(InventoryError::NoGpus);
        }
        let mut gpus = BTreeMap::new();
        let mut by_uuid = BTreeMap::new();
        for g in &spec.gpus {
            if g.index >= 32 {
                return Err(InventoryError::IndexTooLarge { index: g.index });
            }
            let uuid = g
                .uuid
                .clone()
                .ok_or(InventoryError::MissingUuid { index: g.index })?;
            if let Some(&first) = by_uuid.get(&uuid) {
                return Err(InventoryError::DuplicateUuid {
                    uuid,
                    first,
                    second: g.index,
                });
            }
            let gpu = Gpu {
                index: g.index,
                uuid: uuid.clone(),
                numa_node: g.numa_node,
            };
            if gpus.insert(g.index, gpu).is_some() {
                return Err(InventoryError::DuplicateIndex { index: g.index });
            }
            by_uuid.insert(uuid, g.index);
        }
        Ok(Inventory {
            gpus,
            by_uuid,
            shape: NodeShape::from_spec(spec),
        })
    }

    /// GPUs in index order.
    pub fn gpus(&self) -> impl Iterator<Item = &Gpu> {
        self.gpus.values()
    }

    pub fn index_of(&self, uuid: &str) -> Option<u32> {
        self.by_uuid.get(uuid).copied()
    }

    pub fn uuid_of(&self, index: u32) -> Option<&str> {
        self.gpus.get(&index).map(|g| g.uuid.as_str())
    }

    pub(crate) fn example_uuid(&self) -> &str {
        self.gpus.values().next().map_or("", |g| g.uuid.as_str())
    }

    pub(crate) fn shape(&self) -> Result<&NodeShape, ShapeError> {
        self.shape.as_ref().map_err(Clone::clone)
    }

    /// UUIDs of the GPUs in `mask`, in index order.
    pub(crate) fn uuids(&self, mask: u32) -> Vec<String> {
        self.gpus
            .values()
            .filter(|g| mask & (1 << g.index) != 0)
            .map(|g| g.uuid.clone())
            .collect()
    }

    /// The GPUs an `assigned-gpus` value names, as a mask.
    pub fn mask_of(&self, assigned: &str) -> Result<u32, AnnotationProblem> {
        let mut mask = 0u32;
        for index in parse_indices(assigned)? {
            if !self.gpus.contains_key(&index) {
                return Err(AnnotationProblem::UnknownGpu {
                    value: assigned.to_string(),
                    index,
                    present: self
                        .gpus
                        .keys()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                });
            }
            if mask & (1 << index) != 0 {
                return Err(AnnotationProblem::Duplicate {
                    value: assigned.to_string(),
                    index,
                });
            }
            mask |= 1 << index;
        }
        Ok(mask)
    }
}
