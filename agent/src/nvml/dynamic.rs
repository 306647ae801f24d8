//! The live dynamic read, every scan: which GPUs still answer, the state of
//! each NVLink the static answers list, MIG devices, the NVLink fabric
//! registration, and the critical XIDs the watcher collected. Cheap calls
//! only; nothing here asks for the topology again.

use gputopo_topology::backend::nvml::{
    DeviceState, DynamicAnswers, LinkState, MigDeviceAnswer, NvmlAnswers, NvmlError,
};
use nvml_wrapper::error::NvmlError as W;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings as sys;
use std::collections::BTreeSet;

/// Errors that mean the GPU itself is gone, not that a query is unsupported.
fn gone(e: &W) -> bool {
    matches!(e, W::GpuLost | W::ResetRequired)
}

/// Reads the dynamic state of the GPUs `known` lists and of any NVML lists
/// now. `xids`: (GPU index, XID) pairs the watcher saw since the last read.
/// Only a failing device count is an error: NVML itself is not answering.
pub(super) fn read(
    nvml: &Nvml,
    known: &NvmlAnswers,
    xids: Vec<(u32, u64)>,
) -> Result<DynamicAnswers, NvmlError> {
    let count = nvml.device_count().map_err(|e| NvmlError::System {
        call: "nvmlDeviceGetCount_v2",
        reason: e.to_string(),
    })?;
    let indices: BTreeSet<u32> = (0..count)
        .chain(known.devices.iter().map(|d| d.index))
        .collect();
    let mut devices = Vec::with_capacity(indices.len());
    for index in indices {
        let mut state = if index >= count {
            DeviceState::lost(
                index,
                format!("nvmlDeviceGetCount_v2 now lists {count} GPUs, not this one"),
            )
        } else {
            match nvml.device_by_index(index) {
                Ok(device) => device_state(nvml, index, &device, known),
                Err(e) => DeviceState::lost(index, format!("nvmlDeviceGetHandleByIndex_v2: {e}")),
            }
        };
        state.xid_errors = xids
            .iter()
            .filter(|(gpu, _)| *gpu == index)
            .map(|(_, xid)| *xid)
            .collect();
        devices.push(state);
    }
    Ok(DynamicAnswers { devices })
}

fn device_state(nvml: &Nvml, index: u32, d: &Device<'_>, known: &NvmlAnswers) -> DeviceState {
    let uuid = match d.uuid() {
        Ok(u) => Some(u),
        Err(e) if gone(&e) => return DeviceState::lost(index, format!("nvmlDeviceGetUUID: {e}")),
        Err(_) => None,
    };
    let known_links = known
        .devices
        .iter()
        .find(|k| k.index == index)
        .and_then(|k| k.nvlinks.as_ref());
    let nvlinks = match known_links {
        None => None,
        Some(links) => {
            let mut states = Vec::with_capacity(links.len());
            for l in links {
                match d.link_wrapper_for(l.link).is_active() {
                    Ok(active) => states.push(LinkState {
                        link: l.link,
                        active,
                    }),
                    Err(e) if gone(&e) => {
                        return DeviceState::lost(
                            index,
                            format!("nvmlDeviceGetNvLinkState (link {}): {e}", l.link),
                        );
                    }
                    // Unreadable now: the link keeps its known state.
                    Err(_) => {}
                }
            }
            Some(states)
        }
    };
    DeviceState {
        index,
        uuid,
        lost: None,
        nvlinks,
        mig_devices: mig_devices(d),
        xid_errors: Vec::new(),
        // Unreadable now (or not supported): the known answer stays.
        fabric: super::fabric::fabric(nvml, d).ok(),
    }
}

/// The MIG devices present on `d` while MIG mode is on; empty otherwise or
/// when NVML cannot say (a GPU without MIG answers NotSupported).
pub(super) fn mig_devices(d: &Device<'_>) -> Vec<MigDeviceAnswer> {
    let on = d
        .mig_mode()
        .is_ok_and(|m| m.current == sys::NVML_DEVICE_MIG_ENABLE);
    if !on {
        return Vec::new();
    }
    let slots = d.mig_device_count().unwrap_or(0);
    (0..slots)
        // An empty slot answers NotFound.
        .filter_map(|slot| d.mig_device_by_index(slot).ok())
        .filter_map(|mig| mig.uuid().ok())
        .map(|uuid| MigDeviceAnswer { uuid })
        .collect()
}
