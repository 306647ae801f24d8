//! Answers → facts: the same for the live NVML and a recording.

use super::answers::{
    DeviceAnswers, FABRIC_STATUS_SUCCESS, FabricAnswer, FabricState, NvLinkAnswer, NvmlAnswers,
    RemoteDeviceType, TopologyLevel,
};
use super::{NvmlError, NvmlSource};
use crate::backend::pcie_path::nic_facts;
use crate::backend::sysfs::{SysfsSource, canonical_pci_bus_id, format_cpulist, parse_cpulist};
use crate::clique::NIL_CLUSTER_UUID as NIL_UUID;
use crate::facts::{GpuFacts, NodeFacts, NvLinkFact, PairFact, RemoteEnd};
use gputopo_api::{GpuFabric, GpuVendor, LinkClass, TopologySource};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Snapshots `src` and builds facts; `source` is `src.topology_source()`.
pub fn facts_from_nvml(
    src: &dyn NvmlSource,
    sysfs: &dyn SysfsSource,
) -> Result<NodeFacts, NvmlError> {
    facts_from_answers(&src.snapshot()?, sysfs, src.topology_source())
}

/// Turns a snapshot (plus sysfs, for what NVML lacks) into [`NodeFacts`].
/// Pure: no NVML, no clock; sysfs is whatever `sysfs` answers.
pub fn facts_from_answers(
    answers: &NvmlAnswers,
    sysfs: &dyn SysfsSource,
    source: TopologySource,
) -> Result<NodeFacts, NvmlError> {
    let devices = sorted_devices(answers)?;
    let by_bus = bus_index(&devices)?;
    let gpus: Vec<GpuFacts> = devices
        .iter()
        .map(|d| gpu_facts(d, sysfs, &by_bus))
        .collect();
    let counts: Vec<LinkCounts> = devices.iter().map(|d| LinkCounts::of(d, &by_bus)).collect();
    let ancestors = common_ancestors(answers, &devices)?;
    let mut gpu_pairs = Vec::new();
    for (i, (da, ca)) in devices.iter().zip(&counts).enumerate() {
        for (db, cb) in devices[i + 1..].iter().zip(&counts[i + 1..]) {
            let (a, b) = (da.index, db.index);
            let nvlinks = ca.nvlinks_with(a, cb, b);
            let class = if nvlinks > 0 {
                LinkClass::Nv(nvlinks)
            } else {
                match ancestors.get(&(a, b)) {
                    Some(level) => LinkClass::new(level.link_type(), 0),
                    None => return Err(NvmlError::UnknownPath { a, b }),
                }
            };
            gpu_pairs.push(PairFact::new(a, b, class));
        }
    }
    // NVML says nothing of NICs; sysfs says where they sit.
    let nics = nic_facts(&gpus, sysfs);
    Ok(NodeFacts {
        source,
        vendor: Some(GpuVendor::Nvidia),
        driver_version: answers.driver_version.clone(),
        cuda_version: answers.cuda_driver_version.and_then(cuda_version_text),
        gpus,
        gpu_pairs,
        nics,
    })
}

/// The devices by index; two with one index are an error.
fn sorted_devices(answers: &NvmlAnswers) -> Result<Vec<&DeviceAnswers>, NvmlError> {
    let mut devices: Vec<&DeviceAnswers> = answers.devices.iter().collect();
    devices.sort_by_key(|d| d.index);
    for w in devices.windows(2) {
        if w[0].index == w[1].index {
            return Err(NvmlError::Inconsistent {
                what: format!("two devices have index {}", w[0].index),
            });
        }
    }
    Ok(devices)
}

/// Canonical bus id -> GPU index, to resolve NVLink remote ends.
fn bus_index(devices: &[&DeviceAnswers]) -> Result<HashMap<String, u32>, NvmlError> {
    let mut by_bus: HashMap<String, u32> = HashMap::new();
    for d in devices {
        let Some(bus) = d.pci_bus_id.as_deref() else {
            continue;
        };
        let bus = canonical_or_lower(bus);
        if let Some(other) = by_bus.insert(bus.clone(), d.index) {
            return Err(NvmlError::Inconsistent {
                what: format!("GPUs {other} and {} both have PCI bus id {bus}", d.index),
            });
        }
    }
    Ok(by_bus)
}

/// One GPU's active NVLinks: direct links to each peer, switch links, and
/// whether the driver gave remote ids at all (see the module docs).
struct LinkCounts {
    direct: BTreeMap<u32, u32>,
    switch: u32,
    knows_remotes: bool,
}

impl LinkCounts {
    fn of(d: &DeviceAnswers, by_bus: &HashMap<String, u32>) -> LinkCounts {
        let mut c = LinkCounts {
            direct: BTreeMap::new(),
            switch: 0,
            knows_remotes: false,
        };
        for link in d.nvlinks.iter().flatten().filter(|l| l.active) {
            let remote_gpu = link
                .remote_pci_bus_id
                .as_deref()
                .and_then(|bus| by_bus.get(&canonical_or_lower(bus)).copied());
            c.knows_remotes |= link.remote_pci_bus_id.is_some();
            match link.remote_device_type {
                Some(RemoteDeviceType::Switch) => c.switch += 1,
                Some(RemoteDeviceType::Ibmnpu) => {}
                Some(RemoteDeviceType::Gpu | RemoteDeviceType::Unknown) | None => {
                    if let Some(peer) = remote_gpu.filter(|p| *p != d.index) {
                        *c.direct.entry(peer).or_default() += 1;
                    }
                }
            }
        }
        c
    }

    /// NVLinks between GPU `a` (these counts) and GPU `b` (`other`): the
    /// direct ones both ends agree on (or the one end that knows remotes
    /// says), plus those through switches both reach.
    fn nvlinks_with(&self, a: u32, other: &LinkCounts, b: u32) -> u32 {
        let ab = self.direct.get(&b).copied().unwrap_or(0);
        let ba = other.direct.get(&a).copied().unwrap_or(0);
        let direct = match (self.knows_remotes, other.knows_remotes) {
            (true, true) => ab.min(ba),
            (true, false) => ab,
            (false, true) => ba,
            (false, false) => 0,
        };
        let switched = if self.switch > 0 && other.switch > 0 {
            self.switch.min(other.switch)
        } else {
            0
        };
        direct + switched
    }
}

/// Each GPU pair's common PCIe ancestor; a pair naming an unknown GPU, or
/// told twice differently, is an error.
fn common_ancestors(
    answers: &NvmlAnswers,
    devices: &[&DeviceAnswers],
) -> Result<HashMap<(u32, u32), TopologyLevel>, NvmlError> {
    let known: HashSet<u32> = devices.iter().map(|d| d.index).collect();
    let mut ancestors: HashMap<(u32, u32), TopologyLevel> = HashMap::new();
    for p in &answers.pairs {
        if p.a == p.b {
            return Err(NvmlError::Inconsistent {
                what: format!("pair entry joins GPU {} to itself", p.a),
            });
        }
        if !known.contains(&p.a) || !known.contains(&p.b) {
            return Err(NvmlError::Inconsistent {
                what: format!(
                    "pair entry {}-{} names a GPU with no device entry",
                    p.a, p.b
                ),
            });
        }
        let key = (p.a.min(p.b), p.a.max(p.b));
        if let Some(level) = p.common_ancestor
            && ancestors.insert(key, level).is_some_and(|old| old != level)
        {
            return Err(NvmlError::Inconsistent {
                what: format!(
                    "pair {}-{} has two different common ancestors",
                    key.0, key.1
                ),
            });
        }
    }
    Ok(ancestors)
}

fn gpu_facts(
    d: &DeviceAnswers,
    sysfs: &dyn SysfsSource,
    by_bus: &HashMap<String, u32>,
) -> GpuFacts {
    let bus = d.pci_bus_id.as_deref().map(canonical_or_lower);
    let nvml_numa = d
        .memory_affinity
        .as_deref()
        .and_then(|list| parse_cpulist(list).ok())
        .and_then(|nodes| match nodes.as_slice() {
            [one] => i32::try_from(*one).ok(),
            _ => None,
        });
    let numa_node = nvml_numa.or_else(|| bus.as_deref().and_then(|b| sysfs.numa_node(b)));
    let nvml_cpus = d
        .cpu_affinity
        .as_deref()
        .and_then(|list| parse_cpulist(list).ok())
        .filter(|cpus| !cpus.is_empty())
        .map(format_cpulist);
    let cpu_affinity = nvml_cpus.or_else(|| bus.as_deref().and_then(|b| sysfs.local_cpulist(b)));
    GpuFacts {
        index: d.index,
        uuid: d.uuid.clone(),
        product: d.name.clone(),
        memory_mib: d.memory_mib,
        pci_bus_id: bus,
        numa_node,
        cpu_affinity,
        mig_enabled: d.mig_mode.map(|m| m.current),
        fabric: d.fabric.as_ref().and_then(gpu_fabric),
        nvlinks: d.nvlinks.as_ref().map(|links| {
            links
                .iter()
                .map(|l| NvLinkFact {
                    link: l.link,
                    active: l.active,
                    speed_gbps: None,
                    remote: remote_end(l, by_bus),
                })
                .collect()
        }),
    }
}

fn remote_end(link: &NvLinkAnswer, by_bus: &HashMap<String, u32>) -> Option<RemoteEnd> {
    let bus = link.remote_pci_bus_id.as_deref().map(canonical_or_lower);
    match link.remote_device_type {
        Some(RemoteDeviceType::Switch) => Some(RemoteEnd::Nvswitch { pci_bus_id: bus }),
        Some(RemoteDeviceType::Ibmnpu) => Some(RemoteEnd::Cpu { pci_bus_id: bus }),
        Some(RemoteDeviceType::Gpu) => bus.map(|pci_bus_id| RemoteEnd::Gpu { pci_bus_id }),
        Some(RemoteDeviceType::Unknown) | None => bus
            .filter(|b| by_bus.contains_key(b))
            .map(|pci_bus_id| RemoteEnd::Gpu { pci_bus_id }),
    }
}

/// A fabric membership worth publishing: registration completed and a real
/// (non-nil) cluster UUID, as GPU Feature Discovery requires for its clique label.
fn gpu_fabric(f: &FabricAnswer) -> Option<GpuFabric> {
    if f.state != FabricState::Completed || f.status != FABRIC_STATUS_SUCCESS {
        return None;
    }
    let cluster_uuid = f.cluster_uuid.clone().filter(|u| u != NIL_UUID);
    cluster_uuid.as_ref()?;
    Some(GpuFabric {
        cluster_uuid,
        clique_id: f.clique_id,
    })
}

/// `12040` → `12.4`, as nvidia-smi's "CUDA Version".
pub fn cuda_version_text(v: i32) -> Option<String> {
    (v > 0).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// A PCI bus id in canonical form (`00000000:17:00.0`), else trimmed and lowercased.
pub fn canonical_or_lower(bus: &str) -> String {
    canonical_pci_bus_id(bus).unwrap_or_else(|| bus.trim().to_ascii_lowercase())
}

/// A 16-byte UUID as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::nvml::{PairAnswer, RecordedNvml};
    use crate::backend::sysfs::{NoSysfs, RecordedSysfs, SysfsDevice};
    use gputopo_api::LinkType;

    fn device(index: u32, bus: &str) -> DeviceAnswers {
        DeviceAnswers {
            index,
            pci_bus_id: Some(bus.to_string()),
            ..DeviceAnswers::default()
        }
    }

    fn link(
        link: u32,
        active: bool,
        remote: Option<&str>,
        kind: Option<RemoteDeviceType>,
    ) -> NvLinkAnswer {
        NvLinkAnswer {
            link,
            active,
            remote_pci_bus_id: remote.map(str::to_string),
            remote_device_type: kind,
        }
    }

    #[test]
    fn topology_levels_map_like_nvidia_smi() {
        use TopologyLevel::*;
        let got: Vec<LinkType> = [Internal, Single, Multiple, HostBridge, Node, System]
            .iter()
            .map(|l| l.link_type())
            .collect();
        assert_eq!(
            got,
            [
                LinkType::Pix,
                LinkType::Pix,
                LinkType::Pxb,
                LinkType::Phb,
                LinkType::Node,
                LinkType::Sys
            ]
        );
    }

    #[test]
    fn cuda_and_uuid_texts() {
        assert_eq!(cuda_version_text(12040).as_deref(), Some("12.4"));
        assert_eq!(cuda_version_text(13000).as_deref(), Some("13.0"));
        assert_eq!(cuda_version_text(0), None);
        let mut bytes = [0u8; 16];
        bytes[0] = 0xab;
        bytes[15] = 0x01;
        assert_eq!(uuid_text(&bytes), "ab000000-0000-0000-0000-000000000001");
    }

    #[test]
    fn nvml_memory_affinity_beats_sysfs_and_sysfs_fills_gaps() {
        let mut with_nvml = device(0, "00000000:18:00.0");
        with_nvml.memory_affinity = Some("1".into());
        with_nvml.cpu_affinity = Some("56-111,168-223".into());
        let mut wide = device(1, "00000000:2a:00.0");
        wide.memory_affinity = Some("0-3".into()); // several nodes: not one node
        let answers = NvmlAnswers {
            devices: vec![with_nvml, wide],
            pairs: vec![PairAnswer {
                a: 0,
                b: 1,
                common_ancestor: Some(TopologyLevel::System),
            }],
            ..NvmlAnswers::default()
        };
        let mut map = BTreeMap::new();
        for (bus, node, cpus) in [("0000:18:00.0", 0, "0-7"), ("0000:2a:00.0", 2, "16-23")] {
            map.insert(
                bus.to_string(),
                SysfsDevice {
                    numa_node: Some(node),
                    local_cpulist: Some(cpus.to_string()),
                    ..SysfsDevice::default()
                },
            );
        }
        let facts =
            facts_from_answers(&answers, &RecordedSysfs::new(&map), TopologySource::Nvml).unwrap();
        assert_eq!(facts.gpus[0].numa_node, Some(1));
        assert_eq!(
            facts.gpus[0].cpu_affinity.as_deref(),
            Some("56-111,168-223")
        );
        assert_eq!(facts.gpus[1].numa_node, Some(2));
        assert_eq!(facts.gpus[1].cpu_affinity.as_deref(), Some("16-23"));

        let bare = facts_from_answers(&answers, &NoSysfs, TopologySource::Nvml).unwrap();
        assert_eq!(bare.gpus[1].numa_node, None, "unknown stays unknown");
    }

    #[test]
    fn direct_links_count_the_smaller_end_and_infer_gpus_without_device_type() {
        let (b0, b1) = ("00000000:06:00.0", "00000000:07:00.0");
        let mut g0 = device(0, b0);
        g0.nvlinks = Some(vec![
            link(0, true, Some(b1), None),
            link(1, true, Some(b1), None),
        ]);
        let mut g1 = device(1, b1);
        // GPU 1 sees only one of the two links up.
        g1.nvlinks = Some(vec![
            link(0, true, Some(b0), Some(RemoteDeviceType::Gpu)),
            link(1, false, Some(b0), Some(RemoteDeviceType::Gpu)),
        ]);
        let answers = NvmlAnswers {
            devices: vec![g0, g1],
            ..NvmlAnswers::default()
        };
        let facts = facts_from_answers(&answers, &NoSysfs, TopologySource::Nvml).unwrap();
        assert_eq!(facts.gpu_pairs[0].class(), LinkClass::Nv(1));
        assert_eq!(
            facts.gpus[0].nvlinks.as_ref().unwrap()[0].remote,
            Some(RemoteEnd::Gpu {
                pci_bus_id: b1.to_string()
            })
        );
    }

    #[test]
    fn a_pair_with_no_path_is_an_error_naming_it() {
        let answers = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0"), device(1, "0000:07:00.0")],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&answers, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert_eq!(e, NvmlError::UnknownPath { a: 0, b: 1 });
        assert!(e.to_string().starts_with("GPUs 0 and 1:"), "{e}");
    }

    #[test]
    fn inconsistent_answers_are_named() {
        let dup = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0"), device(0, "0000:07:00.0")],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&dup, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert!(e.to_string().contains("two devices have index 0"), "{e}");
        let same_bus = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0"), device(1, "00000000:06:00.0")],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&same_bus, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert!(
            e.to_string()
                .contains("both have PCI bus id 00000000:06:00.0"),
            "{e}"
        );
        let ghost = NvmlAnswers {
            devices: vec![device(0, "0000:06:00.0")],
            pairs: vec![PairAnswer {
                a: 0,
                b: 5,
                common_ancestor: None,
            }],
            ..NvmlAnswers::default()
        };
        let e = facts_from_answers(&ghost, &NoSysfs, TopologySource::Nvml).unwrap_err();
        assert!(e.to_string().contains("pair entry 0-5"), "{e}");
    }

    #[test]
    fn fabric_needs_completion_success_and_a_real_cluster() {
        let mut f = FabricAnswer {
            state: FabricState::Completed,
            status: FABRIC_STATUS_SUCCESS.into(),
            cluster_uuid: Some("5b1e7c1a-0000-4000-8000-000000000001".into()),
            clique_id: Some(32766),
            health_mask: None,
        };
        assert_eq!(
            gpu_fabric(&f),
            Some(GpuFabric {
                cluster_uuid: f.cluster_uuid.clone(),
                clique_id: Some(32766)
            })
        );
        f.cluster_uuid = Some(NIL_UUID.into());
        assert_eq!(gpu_fabric(&f), None, "single-node NVSwitch: nil cluster");
        f.cluster_uuid = Some("5b1e7c1a-0000-4000-8000-000000000001".into());
        f.state = FabricState::InProgress;
        assert_eq!(gpu_fabric(&f), None);
    }

    #[test]
    fn recorded_source_says_fixture() {
        let src = RecordedNvml {
            answers: NvmlAnswers::default(),
        };
        let facts = facts_from_nvml(&src, &NoSysfs).unwrap();
        assert_eq!(facts.source, TopologySource::Fixture);
        assert!(facts.gpus.is_empty() && facts.gpu_pairs.is_empty());
    }
}
