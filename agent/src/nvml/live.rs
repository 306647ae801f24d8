//! The live snapshot: the only code that calls NVML.

use super::MAX_NVLINKS;
use super::fabric::fabric;
use gputopo_topology::backend::nvml::{
    DeviceAnswers, MigModeAnswer, NvLinkAnswer, NvmlAnswers, NvmlError, PairAnswer,
    RemoteDeviceType, TopologyLevel, canonical_or_lower,
};
use gputopo_topology::backend::sysfs::{bits_from_mask, format_cpulist};
use nvml_wrapper::error::{NvmlError as W, nvml_try};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings as sys;

/// Words in the CPU/NUMA masks we ask for: 64 × 64 = 4096 CPUs.
const MASK_WORDS: usize = 64;

/// Whether an error means "this GPU/driver has no such answer" (→ `None`, quietly).
fn absent(e: &W) -> bool {
    matches!(
        e,
        W::NotSupported | W::NotFound | W::FunctionNotFound | W::FailedToLoadSymbol(_)
    )
}

/// `Some` on success; `None` on "absent"; `None` plus a warning otherwise.
fn optional<T>(
    result: Result<T, W>,
    call: &str,
    what: &str,
    warnings: &mut Vec<String>,
) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) if absent(&e) => None,
        Err(e) => {
            warnings.push(format!("{call} ({what}): {e}"));
            None
        }
    }
}

pub(super) fn snapshot(nvml: &Nvml) -> Result<NvmlAnswers, NvmlError> {
    let mut warnings = Vec::new();
    let count = nvml.device_count().map_err(|e| NvmlError::System {
        call: "nvmlDeviceGetCount_v2",
        reason: e.to_string(),
    })?;
    let driver_version = optional(
        nvml.sys_driver_version(),
        "nvmlSystemGetDriverVersion",
        "system",
        &mut warnings,
    );
    let cuda_driver_version = optional(
        nvml.sys_cuda_driver_version(),
        "nvmlSystemGetCudaDriverVersion_v2",
        "system",
        &mut warnings,
    );
    let nvml_version = optional(
        nvml.sys_nvml_version(),
        "nvmlSystemGetNVMLVersion",
        "system",
        &mut warnings,
    );

    let mut handles = Vec::new();
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(|e| NvmlError::Device {
            call: "nvmlDeviceGetHandleByIndex_v2",
            index,
            reason: e.to_string(),
        })?;
        handles.push((index, device));
    }

    let devices = handles
        .iter()
        .map(|(index, device)| device_answers(nvml, *index, device, &mut warnings))
        .collect();

    let mut pairs = Vec::new();
    for (i, (a, da)) in handles.iter().enumerate() {
        for (b, db) in &handles[i + 1..] {
            let level = optional(
                common_ancestor(nvml, da, db),
                "nvmlDeviceGetTopologyCommonAncestor",
                &format!("GPUs {a} and {b}"),
                &mut warnings,
            );
            pairs.push(PairAnswer {
                a: *a,
                b: *b,
                common_ancestor: level,
            });
        }
    }

    Ok(NvmlAnswers {
        driver_version,
        cuda_driver_version,
        nvml_version,
        devices,
        pairs,
        warnings,
    })
}

fn device_answers(
    nvml: &Nvml,
    index: u32,
    d: &Device<'_>,
    warnings: &mut Vec<String>,
) -> DeviceAnswers {
    let what = format!("GPU {index}");
    let w = warnings;
    DeviceAnswers {
        index,
        uuid: optional(d.uuid(), "nvmlDeviceGetUUID", &what, w),
        name: optional(d.name(), "nvmlDeviceGetName", &what, w),
        memory_mib: optional(memory_total(nvml, d), "nvmlDeviceGetMemoryInfo", &what, w)
            .map(|bytes| bytes / (1024 * 1024)),
        pci_bus_id: optional(d.pci_info(), "nvmlDeviceGetPciInfo_v3", &what, w)
            .map(|p| canonical_or_lower(&p.bus_id)),
        numa_node_id: optional(d.numa_node_id(), "nvmlDeviceGetNumaNodeId", &what, w),
        memory_affinity: optional(memory_affinity(d), "nvmlDeviceGetMemoryAffinity", &what, w)
            .filter(|s| !s.is_empty()),
        cpu_affinity: optional(cpu_affinity(d), "nvmlDeviceGetCpuAffinity", &what, w)
            .filter(|s| !s.is_empty()),
        mig_mode: optional(d.mig_mode(), "nvmlDeviceGetMigMode", &what, w).map(|m| MigModeAnswer {
            current: m.current == sys::NVML_DEVICE_MIG_ENABLE,
            pending: m.pending == sys::NVML_DEVICE_MIG_ENABLE,
        }),
        nvlinks: nvlinks(nvml, index, d, w),
        fabric: optional(fabric(nvml, d), "nvmlDeviceGetGpuFabricInfoV", &what, w),
        // Recorded too, so a recording can map the kubelet's MIG devices.
        mig_devices: super::dynamic::mig_devices(d),
        lost: None,
        xid_errors: Vec::new(),
    }
}

/// Total framebuffer bytes: the safe `_v2` call, or the v1 call on drivers
/// older than R510 that lack `_v2`.
fn memory_total(nvml: &Nvml, d: &Device<'_>) -> Result<u64, W> {
    match d.memory_info() {
        Ok(info) => Ok(info.total),
        Err(W::FailedToLoadSymbol(_)) => {
            let sym = nvml
                .lib()
                .nvmlDeviceGetMemoryInfo
                .as_ref()
                .map_err(|e| W::FailedToLoadSymbol(e.to_string()))?;
            let mut info = sys::nvmlMemory_t {
                total: 0,
                free: 0,
                used: 0,
            };
            // SAFETY: `d` borrows the live `Nvml`, so its handle is valid;
            // `info` is a writable nvmlMemory_t, the type nvml.h declares for
            // this symbol, which nvml-wrapper-sys resolved with that signature.
            let rc = unsafe { sym(d.handle(), &mut info) };
            nvml_try(rc)?;
            Ok(info.total)
        }
        Err(e) => Err(e),
    }
}

#[cfg(target_os = "linux")]
fn cpu_affinity(d: &Device<'_>) -> Result<String, W> {
    Ok(format_cpulist(bits_from_mask(&d.cpu_affinity(MASK_WORDS)?)))
}

#[cfg(target_os = "linux")]
fn memory_affinity(d: &Device<'_>) -> Result<String, W> {
    let words = d.memory_affinity(MASK_WORDS, sys::NVML_AFFINITY_SCOPE_NODE)?;
    Ok(format_cpulist(bits_from_mask(&words)))
}

/// nvml-wrapper's level as the snapshot stores it.
#[cfg(target_os = "linux")]
fn topology_level(level: nvml_wrapper::enum_wrappers::device::TopologyLevel) -> TopologyLevel {
    use nvml_wrapper::enum_wrappers::device::TopologyLevel as L;
    match level {
        L::Internal => TopologyLevel::Internal,
        L::Single => TopologyLevel::Single,
        L::Multiple => TopologyLevel::Multiple,
        L::HostBridge => TopologyLevel::HostBridge,
        L::Node => TopologyLevel::Node,
        L::System => TopologyLevel::System,
    }
}

#[cfg(target_os = "linux")]
fn common_ancestor(nvml: &Nvml, a: &Device<'_>, b: &Device<'_>) -> Result<TopologyLevel, W> {
    nvml.topology_common_ancestor(a, b).map(topology_level)
}

// NVML's topology and affinity queries exist on Linux only; elsewhere
// (a developer's laptop building the crate) they are "not supported".
#[cfg(not(target_os = "linux"))]
fn cpu_affinity(_: &Device<'_>) -> Result<String, W> {
    Err(W::NotSupported)
}

#[cfg(not(target_os = "linux"))]
fn memory_affinity(_: &Device<'_>) -> Result<String, W> {
    Err(W::NotSupported)
}

#[cfg(not(target_os = "linux"))]
fn common_ancestor(_: &Nvml, _: &Device<'_>, _: &Device<'_>) -> Result<TopologyLevel, W> {
    Err(W::NotSupported)
}

/// Every link NVML answers for: a link index it rejects (NotSupported,
/// InvalidArg) does not exist on this GPU. `None` when no link answers.
fn nvlinks(
    nvml: &Nvml,
    index: u32,
    d: &Device<'_>,
    warnings: &mut Vec<String>,
) -> Option<Vec<NvLinkAnswer>> {
    let mut links = Vec::new();
    for link in 0..MAX_NVLINKS {
        let what = format!("GPU {index} link {link}");
        let wrapper = d.link_wrapper_for(link);
        let active = match wrapper.is_active() {
            Ok(active) => active,
            Err(e) if absent(&e) || matches!(e, W::InvalidArg) => continue,
            Err(e) => {
                warnings.push(format!("nvmlDeviceGetNvLinkState ({what}): {e}"));
                continue;
            }
        };
        // The far end of a link that is down may not answer; that is no news.
        let mut quiet = Vec::new();
        let w = if active { &mut *warnings } else { &mut quiet };
        let remote_pci_bus_id = optional(
            wrapper.remote_pci_info(),
            "nvmlDeviceGetNvLinkRemotePciInfo_v2",
            &what,
            w,
        )
        .map(|p| canonical_or_lower(&p.bus_id));
        let remote_device_type = optional(
            remote_device_type(nvml, d, link),
            "nvmlDeviceGetNvLinkRemoteDeviceType",
            &what,
            w,
        );
        links.push(NvLinkAnswer {
            link,
            active,
            remote_pci_bus_id,
            remote_device_type,
        });
    }
    (!links.is_empty()).then_some(links)
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType` through the raw symbol:
/// nvml-wrapper 0.13's `NvLink::remote_device_type` passes a pointer to a
/// temporary and always returns `Unknown`.
fn remote_device_type(nvml: &Nvml, d: &Device<'_>, link: u32) -> Result<RemoteDeviceType, W> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetNvLinkRemoteDeviceType
        .as_ref()
        .map_err(|e| W::FailedToLoadSymbol(e.to_string()))?;
    let mut kind: sys::nvmlIntNvLinkDeviceType_t =
        sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    // SAFETY: `d` borrows the live `Nvml`, so its handle is valid; `kind` is a
    // writable nvmlIntNvLinkDeviceType_t as nvml.h declares; the symbol was
    // resolved by nvml-wrapper-sys with nvml.h's signature.
    let rc = unsafe { sym(d.handle(), link, &mut kind) };
    nvml_try(rc)?;
    Ok(match kind {
        sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_GPU => RemoteDeviceType::Gpu,
        sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_IBMNPU => {
            RemoteDeviceType::Ibmnpu
        }
        sys::nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_SWITCH => {
            RemoteDeviceType::Switch
        }
        _ => RemoteDeviceType::Unknown,
    })
}
