//! The dynamic state: what NVML says *now* about what changes while a node
//! runs — each NVLink's state, whether each GPU still answers, its MIG
//! devices, critical XID errors, its NVLink fabric registration (a GB200
//! tray's GPUs may finish registering after the agent started). The agent
//! reads it every scan and lays it over the static answers, which it reads
//! once (NVLink topology queries are slow). Pure: the live read is the agent's, a recording derives it from
//! its answers.

use super::answers::{DeviceAnswers, FabricAnswer, MigDeviceAnswer, NvmlAnswers};
use crate::health::{FindingKind, HealthFinding};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What NVML says now, one entry per GPU it knows or knew.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DynamicAnswers {
    pub devices: Vec<DeviceState>,
}

/// One GPU's dynamic state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceState {
    pub index: u32,
    /// `nvmlDeviceGetUUID` now; `None` when it did not answer.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Why the GPU does not answer (the call and NVML's error), when it does not.
    #[serde(default)]
    pub lost: Option<String>,
    /// `nvmlDeviceGetNvLinkState` of each link the static answers list;
    /// `None` when not read (the GPU is lost, or has no NVLink).
    #[serde(default)]
    pub nvlinks: Option<Vec<LinkState>>,
    #[serde(default)]
    pub mig_devices: Vec<MigDeviceAnswer>,
    /// Critical XID errors reported since the previous reading.
    #[serde(default)]
    pub xid_errors: Vec<u64>,
    /// `nvmlDeviceGetGpuFabricInfoV` now; `None` when not read (the GPU is
    /// lost, or NVML gives no fabric answer): the known one stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<FabricAnswer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkState {
    pub link: u32,
    pub active: bool,
}

impl DeviceState {
    /// A GPU that does not answer, for `reason`.
    pub fn lost(index: u32, reason: impl Into<String>) -> DeviceState {
        DeviceState {
            index,
            lost: Some(reason.into()),
            ..DeviceState::default()
        }
    }
}

impl DynamicAnswers {
    /// The dynamic state a set of answers holds: how a recording replays it.
    pub fn from_answers(answers: &NvmlAnswers) -> DynamicAnswers {
        DynamicAnswers {
            devices: answers.devices.iter().map(device_state).collect(),
        }
    }

    /// Every GPU of `known` lost for `reason`: NVML itself stopped answering
    /// (the driver unloaded or crashed), so no GPU can be trusted.
    pub fn all_lost(known: &NvmlAnswers, reason: &str) -> DynamicAnswers {
        DynamicAnswers {
            devices: known
                .devices
                .iter()
                .map(|d| DeviceState::lost(d.index, reason))
                .collect(),
        }
    }

    fn get(&self, index: u32) -> Option<&DeviceState> {
        self.devices.iter().find(|d| d.index == index)
    }
}

fn device_state(d: &DeviceAnswers) -> DeviceState {
    DeviceState {
        index: d.index,
        uuid: d.uuid.clone(),
        lost: d.lost.clone(),
        nvlinks: d.nvlinks.as_ref().map(|links| {
            links
                .iter()
                .map(|l| LinkState {
                    link: l.link,
                    active: l.active,
                })
                .collect()
        }),
        mig_devices: d.mig_devices.clone(),
        xid_errors: d.xid_errors.clone(),
        fabric: d.fabric.clone(),
    }
}

/// Whether the static answers `known` still describe the GPUs `state`
/// reads. Not when a GPU that answers has another UUID than `known` says
/// at its index, a GPU appeared that `known` lacks, or a link came up whose
/// far end `known` never learnt: then the static answers must be taken again.
pub fn still_describes(known: &NvmlAnswers, state: &DynamicAnswers) -> bool {
    state.devices.iter().filter(|s| s.lost.is_none()).all(|s| {
        let Some(k) = known.devices.iter().find(|d| d.index == s.index) else {
            return false;
        };
        let same_gpu = match (&k.uuid, &s.uuid) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            _ => true,
        };
        // Drivers that give no far end at all (before R450) never will: no
        // point asking again.
        let driver_names_far_ends = k
            .nvlinks
            .iter()
            .flatten()
            .any(|kl| kl.remote_pci_bus_id.is_some());
        let far_ends_known = !driver_names_far_ends
            || s.nvlinks.iter().flatten().filter(|l| l.active).all(|l| {
                k.nvlinks
                    .iter()
                    .flatten()
                    .find(|kl| kl.link == l.link)
                    .is_some_and(|kl| kl.remote_pci_bus_id.is_some() || kl.active)
            });
        same_gpu && far_ends_known
    })
}

/// `known` with the link states, lost GPUs, MIG devices and fabric
/// registrations of `state`. A lost GPU keeps its last known links and
/// fabric (NVML cannot read them) and is named by [`findings`]; a link
/// `state` does not mention keeps its known state, as does a fabric it
/// does not read.
pub fn overlay(known: &NvmlAnswers, state: &DynamicAnswers) -> NvmlAnswers {
    let mut out = known.clone();
    for d in &mut out.devices {
        let Some(s) = state.get(d.index) else {
            continue;
        };
        d.lost = s.lost.clone();
        d.xid_errors = s.xid_errors.clone();
        if s.lost.is_some() {
            continue;
        }
        d.mig_devices = s.mig_devices.clone();
        if let Some(fabric) = &s.fabric {
            d.fabric = Some(fabric.clone());
        }
        for link in d.nvlinks.iter_mut().flatten() {
            if let Some(now) = s.nvlinks.iter().flatten().find(|l| l.link == link.link) {
                link.active = now.active;
            }
        }
    }
    out
}

/// XIDs the NVIDIA device plugin treats as the application's fault, not the
/// GPU's (graphics engine exception, memory page fault, GPU stopped
/// processing, preemptive cleanup, video processor exception, context switch
/// timeout): they do not make a GPU unhealthy.
pub const APPLICATION_XIDS: &[u64] = &[13, 31, 43, 45, 68, 109];

/// Whether an XID error says something is wrong with the GPU itself.
pub fn is_critical_xid(xid: u64) -> bool {
    !APPLICATION_XIDS.contains(&xid)
}

/// What only the dynamic state shows: a GPU that stopped answering, and GPUs
/// with critical XID errors. `xids` holds, per GPU, every critical XID seen
/// since the agent started or was told to rescan (SIGHUP): an XID is an
/// event, and the GPU stays suspect after it.
pub fn findings(state: &DynamicAnswers, xids: &BTreeMap<u32, BTreeSet<u64>>) -> Vec<HealthFinding> {
    let mut out: Vec<HealthFinding> = state
        .devices
        .iter()
        .filter_map(|d| {
            d.lost.as_ref().map(|why| HealthFinding {
                gpu: d.index,
                kind: FindingKind::GpuLost,
                detail: format!("lost, not answering NVML ({why})"),
            })
        })
        .collect();
    for (gpu, seen) in xids.iter().filter(|(_, s)| !s.is_empty()) {
        let list: Vec<String> = seen.iter().map(u64::to_string).collect();
        out.push(HealthFinding {
            gpu: *gpu,
            kind: FindingKind::CriticalXid,
            detail: format!(
                "critical XID {} reported by the driver (held until the agent rescans on SIGHUP or restarts)",
                list.join(",")
            ),
        });
    }
    out.sort_by_key(|f| f.gpu);
    out
}

/// Adds `state`'s critical XIDs to `held` (see [`findings`]).
pub fn hold_critical_xids(held: &mut BTreeMap<u32, BTreeSet<u64>>, state: &DynamicAnswers) {
    for d in &state.devices {
        let critical: Vec<u64> = d
            .xid_errors
            .iter()
            .copied()
            .filter(|x| is_critical_xid(*x))
            .collect();
        if !critical.is_empty() {
            held.entry(d.index).or_default().extend(critical);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::nvml::NvLinkAnswer;

    fn gpu(index: u32, links: &[(u32, bool)]) -> DeviceAnswers {
        DeviceAnswers {
            index,
            uuid: Some(format!("GPU-{index}")),
            nvlinks: Some(
                links
                    .iter()
                    .map(|(link, active)| NvLinkAnswer {
                        link: *link,
                        active: *active,
                        remote_pci_bus_id: Some("00000000:05:00.0".into()),
                        remote_device_type: None,
                    })
                    .collect(),
            ),
            ..DeviceAnswers::default()
        }
    }

    fn known() -> NvmlAnswers {
        NvmlAnswers {
            devices: vec![
                gpu(0, &[(0, true), (1, true)]),
                gpu(1, &[(0, true), (1, true)]),
            ],
            ..NvmlAnswers::default()
        }
    }

    #[test]
    fn a_link_going_down_is_laid_over_the_static_answers() {
        let mut state = DynamicAnswers::from_answers(&known());
        state.devices[1].nvlinks = Some(vec![
            LinkState {
                link: 0,
                active: true,
            },
            LinkState {
                link: 1,
                active: false,
            },
        ]);
        assert!(still_describes(&known(), &state));
        let now = overlay(&known(), &state);
        let links = now.devices[1].nvlinks.as_ref().unwrap();
        assert_eq!((links[0].active, links[1].active), (true, false));
        assert_eq!(
            links[1].remote_pci_bus_id.as_deref(),
            Some("00000000:05:00.0")
        );
        assert_eq!(now.devices[0], known().devices[0]);
        assert!(findings(&state, &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_lost_gpu_keeps_its_links_and_is_a_finding() {
        let mut state = DynamicAnswers::from_answers(&known());
        state.devices[0] = DeviceState::lost(0, "nvmlDeviceGetUUID: GPU is lost");
        let now = overlay(&known(), &state);
        assert_eq!(now.devices[0].nvlinks, known().devices[0].nvlinks);
        assert_eq!(
            now.devices[0].lost.as_deref(),
            Some("nvmlDeviceGetUUID: GPU is lost")
        );
        let f = findings(&state, &BTreeMap::new());
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].gpu, f[0].kind), (0, FindingKind::GpuLost));
        assert!(f[0].detail.contains("GPU is lost"), "{}", f[0].detail);
        let all = DynamicAnswers::all_lost(&known(), "nvmlDeviceGetCount_v2: Driver Not Loaded");
        assert_eq!(findings(&all, &BTreeMap::new()).len(), 2);
    }

    #[test]
    fn another_gpu_at_an_index_or_a_new_gpu_needs_new_static_answers() {
        let mut state = DynamicAnswers::from_answers(&known());
        state.devices[1].uuid = Some("GPU-other".into());
        assert!(!still_describes(&known(), &state));
        let mut state = DynamicAnswers::from_answers(&known());
        state.devices.push(DeviceState {
            index: 2,
            uuid: Some("GPU-2".into()),
            ..DeviceState::default()
        });
        assert!(!still_describes(&known(), &state));
        // A lost GPU says nothing about which GPU sits where.
        let mut state = DynamicAnswers::from_answers(&known());
        state.devices[1] = DeviceState::lost(1, "gone");
        assert!(still_describes(&known(), &state));
    }

    #[test]
    fn a_link_coming_up_whose_far_end_is_unknown_needs_new_static_answers() {
        let mut k = known();
        let link = &mut k.devices[0].nvlinks.as_mut().unwrap()[1];
        link.active = false;
        link.remote_pci_bus_id = None;
        let mut state = DynamicAnswers::from_answers(&k);
        assert!(still_describes(&k, &state));
        state.devices[0].nvlinks.as_mut().unwrap()[1].active = true;
        assert!(!still_describes(&k, &state));
    }

    #[test]
    fn a_fabric_registration_read_now_replaces_the_known_one() {
        use crate::backend::nvml::FabricState;
        let fabric = |state| FabricAnswer {
            state,
            status: "Success".into(),
            cluster_uuid: None,
            clique_id: None,
            health_mask: None,
        };
        let mut k = known();
        k.devices[0].fabric = Some(fabric(FabricState::InProgress));
        let mut state = DynamicAnswers::from_answers(&k);
        state.devices[0].fabric = Some(fabric(FabricState::Completed));
        assert!(still_describes(&k, &state));
        let now = overlay(&k, &state);
        assert_eq!(now.devices[0].fabric, Some(fabric(FabricState::Completed)));
        // Not read now (or the GPU lost): the known registration stays.
        state.devices[0].fabric = None;
        assert_eq!(overlay(&k, &state).devices[0].fabric, k.devices[0].fabric);
    }

    #[test]
    fn critical_xids_are_held_and_application_ones_ignored() {
        let mut state = DynamicAnswers::from_answers(&known());
        state.devices[1].xid_errors = vec![13, 79];
        let mut held = BTreeMap::new();
        hold_critical_xids(&mut held, &state);
        // The next reading reports nothing new: the XID is still held.
        hold_critical_xids(&mut held, &DynamicAnswers::from_answers(&known()));
        let f = findings(&DynamicAnswers::from_answers(&known()), &held);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].gpu, f[0].kind), (1, FindingKind::CriticalXid));
        assert!(f[0].detail.contains("XID 79"), "{}", f[0].detail);
        assert!(!f[0].detail.contains("13"), "{}", f[0].detail);
    }
}
