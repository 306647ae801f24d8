//! The device list ListAndWatch streams: every GPU by UUID, its health, and
//! its NUMA node as a topology hint for the kubelet's Topology Manager.

use crate::choose::Inventory;
use gputopo_kubelet_api::deviceplugin::{Device, HEALTHY, NumaNode, TopologyInfo, UNHEALTHY};
use std::collections::BTreeSet;

/// What ListAndWatch sends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceList {
    pub devices: Vec<Device>,
}

impl DeviceList {
    /// The inventory's GPUs, `lost` ones unhealthy.
    pub fn new(inventory: &Inventory, lost: &BTreeSet<String>) -> DeviceList {
        let devices = inventory
            .gpus()
            .map(|g| Device {
                id: g.uuid.clone(),
                health: if lost.contains(&g.uuid) {
                    UNHEALTHY
                } else {
                    HEALTHY
                }
                .to_string(),
                // A negative NUMA node (sysfs's -1: none) is no hint.
                topology: g.numa_node.filter(|n| *n >= 0).map(|n| TopologyInfo {
                    nodes: vec![NumaNode { id: i64::from(n) }],
                }),
            })
            .collect();
        DeviceList { devices }
    }

    pub fn unhealthy(&self) -> usize {
        self.devices
            .iter()
            .filter(|d| d.health == UNHEALTHY)
            .count()
    }
}
