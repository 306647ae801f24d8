//! The GPU's NVLink fabric registration (`nvmlDeviceGetGpuFabricInfoV`):
//! read once with the snapshot (`live.rs`) and again every scan
//! (`dynamic.rs`), since a GB200/GB300 tray's GPUs may finish registering
//! after the agent started.

use gputopo_topology::backend::nvml::{
    FABRIC_STATUS_SUCCESS, FabricAnswer, FabricState, uuid_text,
};
use nvml_wrapper::error::{NvmlError as W, nvml_try};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings as sys;

/// `nvmlDeviceGetGpuFabricInfoV` (v3, then v2 for drivers that reject v3),
/// else the older `nvmlDeviceGetGpuFabricInfo`. nvml-wrapper 0.13 has no safe
/// call for either.
pub(super) fn fabric(nvml: &Nvml, d: &Device<'_>) -> Result<FabricAnswer, W> {
    let lib = nvml.lib();
    if let Ok(sym) = lib.nvmlDeviceGetGpuFabricInfoV.as_ref() {
        // NVML_STRUCT_VERSION(GpuFabricInfo, v) = sizeof(struct) | v << 24.
        let v3 = std::mem::size_of::<sys::nvmlGpuFabricInfo_v3_t>() as u32 | 3 << 24;
        let v2 = std::mem::size_of::<sys::nvmlGpuFabricInfo_v2_t>() as u32 | 2 << 24;
        for version in [v3, v2] {
            // The v3 struct extends v2 at its end, so one buffer serves both.
            let mut info = sys::nvmlGpuFabricInfo_v3_t {
                version,
                clusterUuid: [0; 16],
                status: 0,
                cliqueId: 0,
                state: 0,
                healthMask: 0,
                healthSummary: 0,
            };
            // SAFETY: `d` borrows the live `Nvml`, so its handle is valid;
            // `info` is a writable struct at least as large as the version
            // it declares; the symbol has nvml.h's signature.
            let rc = unsafe { sym(d.handle(), &mut info) };
            if rc == sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH && version == v3 {
                continue;
            }
            nvml_try(rc)?;
            return fabric_answer(
                &info.clusterUuid,
                info.status,
                info.cliqueId,
                info.state,
                Some(info.healthMask),
            );
        }
    }
    let sym = lib
        .nvmlDeviceGetGpuFabricInfo
        .as_ref()
        .map_err(|e| W::FailedToLoadSymbol(e.to_string()))?;
    let mut info = sys::nvmlGpuFabricInfo_t {
        clusterUuid: [0; 16],
        status: 0,
        cliqueId: 0,
        state: 0,
    };
    // SAFETY: as above, with the legacy nvmlGpuFabricInfo_t.
    let rc = unsafe { sym(d.handle(), &mut info) };
    nvml_try(rc)?;
    fabric_answer(
        &info.clusterUuid,
        info.status,
        info.cliqueId,
        info.state,
        None,
    )
}

fn fabric_answer(
    cluster_uuid: &[u8; 16],
    status: sys::nvmlReturn_t,
    clique_id: u32,
    state: sys::nvmlGpuFabricState_t,
    health_mask: Option<u32>,
) -> Result<FabricAnswer, W> {
    let state = match u32::from(state) {
        sys::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED => FabricState::NotSupported,
        sys::NVML_GPU_FABRIC_STATE_NOT_STARTED => FabricState::NotStarted,
        sys::NVML_GPU_FABRIC_STATE_IN_PROGRESS => FabricState::InProgress,
        sys::NVML_GPU_FABRIC_STATE_COMPLETED => FabricState::Completed,
        other => return Err(W::UnexpectedVariant(other)),
    };
    let status = match nvml_try(status) {
        Ok(()) => FABRIC_STATUS_SUCCESS.to_string(),
        Err(e) => e.to_string(),
    };
    let registered = state == FabricState::Completed && status == FABRIC_STATUS_SUCCESS;
    Ok(FabricAnswer {
        state,
        status,
        cluster_uuid: registered.then(|| uuid_text(cluster_uuid)),
        clique_id: registered.then_some(clique_id),
        health_mask,
    })
}
