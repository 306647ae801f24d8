//! Answers → facts: the same for the live AMD SMI, a recording and saved text.

use super::answers::{AmdLinkType, AmdSmiAnswers};
use super::{AmdSmiError, AmdSmiSource};
use crate::facts::{GpuFacts, NodeFacts, PairFact};
use crate::pci::canonical_pci_bus_id;
use gputopo_api::{GpuVendor, LinkBandwidth, LinkType, TopologySource};
use std::collections::{BTreeMap, BTreeSet};

/// Snapshots `src` and builds facts; `source` is `src.topology_source()`.
pub fn facts_from_amd_smi(src: &dyn AmdSmiSource) -> Result<NodeFacts, AmdSmiError> {
    facts_from_answers(&src.snapshot()?, src.topology_source())
}

/// Turns a snapshot into [`NodeFacts`] (see the module docs of
/// [`super`] for how link types become classes). Pure.
pub fn facts_from_answers(
    answers: &AmdSmiAnswers,
    source: TopologySource,
) -> Result<NodeFacts, AmdSmiError> {
    let inconsistent = |what: String| AmdSmiError::Inconsistent { what };
    let mut devices: Vec<_> = answers.devices.iter().collect();
    devices.sort_by_key(|d| d.index);
    let mut numa: BTreeMap<u32, Option<i32>> = BTreeMap::new();
    let mut buses = BTreeSet::new();
    for d in &devices {
        if numa
            .insert(d.index, d.numa_node.filter(|n| *n >= 0))
            .is_some()
        {
            return Err(inconsistent(format!("two devices have index {}", d.index)));
        }
        if let Some(bus) = &d.pci_bus_id
            && !buses.insert(bus.clone())
        {
            return Err(inconsistent(format!("two GPUs have PCI bus id {bus}")));
        }
    }

    let mut gpu_pairs = Vec::with_capacity(answers.pairs.len());
    let mut seen = BTreeSet::new();
    for p in &answers.pairs {
        let (a, b) = (p.a.min(p.b), p.a.max(p.b));
        if a == b {
            return Err(inconsistent(format!("a pair joins GPU {a} to itself")));
        }
        if !numa.contains_key(&a) || !numa.contains_key(&b) {
            return Err(inconsistent(format!(
                "the pair {a}-{b} names a GPU with no device entry"
            )));
        }
        if !seen.insert((a, b)) {
            return Err(inconsistent(format!("the pair {a}-{b} is listed twice")));
        }
        let link_type = match p.link_type {
            Some(AmdLinkType::Xgmi) => LinkType::Xgmi,
            // The worst PCIe path the NUMA facts allow (module docs).
            Some(AmdLinkType::Pcie) => match (numa[&a], numa[&b]) {
                (Some(x), Some(y)) if x == y => LinkType::Node,
                _ => LinkType::Sys,
            },
            None => {
                return Err(inconsistent(format!(
                    "no link type for GPUs {a} and {b} (XGMI or PCIE); how they are connected is unknown"
                )));
            }
        };
        let bandwidth = match (p.min_bandwidth_mbps, p.max_bandwidth_mbps) {
            (Some(min_mbps), Some(max_mbps)) if max_mbps > 0 => {
                Some(LinkBandwidth { min_mbps, max_mbps })
            }
            _ => None,
        };
        gpu_pairs.push(PairFact {
            a,
            b,
            link_type,
            nvlinks: 0,
            hops: p.hops,
            weight: p.weight,
            bandwidth,
        });
    }

    let gpus = devices
        .iter()
        .map(|d| GpuFacts {
            index: d.index,
            uuid: d.uuid.clone(),
            product: d.name.clone(),
            memory_mib: d.memory_mib,
            pci_bus_id: d
                .pci_bus_id
                .as_deref()
                .map(|b| canonical_pci_bus_id(b).unwrap_or_else(|| b.to_ascii_lowercase())),
            numa_node: numa[&d.index],
            ..GpuFacts::default()
        })
        .collect();

    Ok(NodeFacts {
        source,
        vendor: Some(GpuVendor::Amd),
        driver_version: answers.driver_version.clone(),
        cuda_version: None,
        gpus,
        gpu_pairs,
        nics: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::amd_smi::{AmdDeviceAnswers, AmdPairAnswer};
    use gputopo_api::LinkClass;

    fn device(index: u32, numa: i32) -> AmdDeviceAnswers {
        AmdDeviceAnswers {
            index,
            numa_node: Some(numa),
            ..AmdDeviceAnswers::default()
        }
    }

    fn pair(a: u32, b: u32, t: Option<AmdLinkType>, hops: u32) -> AmdPairAnswer {
        AmdPairAnswer {
            a,
            b,
            link_type: t,
            hops: Some(hops),
            ..AmdPairAnswer::default()
        }
    }

    #[test]
    fn pcie_is_the_worst_class_the_numa_facts_allow() {
        let answers = AmdSmiAnswers {
            devices: vec![device(0, 0), device(1, 0), device(2, 1)],
            pairs: vec![
                pair(0, 1, Some(AmdLinkType::Pcie), 2),
                pair(0, 2, Some(AmdLinkType::Pcie), 3),
                pair(1, 2, Some(AmdLinkType::Xgmi), 2),
            ],
            ..AmdSmiAnswers::default()
        };
        let f = facts_from_answers(&answers, TopologySource::AmdSmi).unwrap();
        let classes: Vec<LinkClass> = f.gpu_pairs.iter().map(|p| p.class()).collect();
        assert_eq!(
            classes,
            [LinkClass::Node, LinkClass::Sys, LinkClass::XgmiRouted]
        );
        assert_eq!(f.vendor, Some(GpuVendor::Amd));
    }

    #[test]
    fn an_unknown_link_type_is_an_error_naming_the_pair() {
        let answers = AmdSmiAnswers {
            devices: vec![device(0, 0), device(1, 0)],
            pairs: vec![pair(0, 1, None, 1)],
            ..AmdSmiAnswers::default()
        };
        let e = facts_from_answers(&answers, TopologySource::AmdSmi).unwrap_err();
        assert!(e.to_string().contains("GPUs 0 and 1"), "{e}");
    }
}
