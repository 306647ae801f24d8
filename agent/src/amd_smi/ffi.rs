//! The few AMD SMI C functions gputopo calls, loaded at run time.
//!
//! Signatures from `include/amd_smi/amdsmi.h` (ROCm/amdsmi). Structs whose
//! layout grew between releases (`amdsmi_asic_info_t`,
//! `amdsmi_driver_info_t`) are read into a zeroed buffer larger than any
//! release's struct, and only their first field (a NUL-terminated string at
//! offset 0 in every release) is read.

use gputopo_topology::backend::amd_smi::{
    AmdDeviceAnswers, AmdLinkType, AmdPairAnswer, AmdSmiAnswers, AmdSmiError,
};
use libloading::Library;
use std::ffi::{CStr, c_char, c_uint, c_void};
use std::path::Path;

type Status = u32;
type Handle = *mut c_void;

const SUCCESS: Status = 0;
const NOT_SUPPORTED: Status = 2;
const NOT_YET_IMPLEMENTED: Status = 3;
const NOT_FOUND: Status = 31;
const INIT_AMD_GPUS: u64 = 1 << 1;
const IOLINK_PCIE: u32 = 1;
const IOLINK_XGMI: u32 = 2;
const MEM_TYPE_VRAM: u32 = 0;
/// `AMDSMI_GPU_UUID_SIZE` is 38; room to spare.
const UUID_BUFFER: usize = 64;
/// Larger than any release's `amdsmi_asic_info_t` / `amdsmi_driver_info_t`.
const STRUCT_BUFFER: usize = 4096;
/// `AMDSMI_MAX_DEVICES` per socket is 32; room for partitioned GPUs.
const MAX_HANDLES: usize = 256;

/// The library and the function pointers taken from it. The pointers stay
/// valid while `_lib` is loaded, which is as long as this value lives.
pub(super) struct AmdSmiLib {
    init: unsafe extern "C" fn(u64) -> Status,
    shut_down: unsafe extern "C" fn() -> Status,
    status_text: unsafe extern "C" fn(Status, *mut *const c_char) -> Status,
    socket_handles: unsafe extern "C" fn(*mut u32, *mut Handle) -> Status,
    processor_handles: unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> Status,
    bdf: unsafe extern "C" fn(Handle, *mut u64) -> Status,
    uuid: unsafe extern "C" fn(Handle, *mut c_uint, *mut c_char) -> Status,
    asic_info: unsafe extern "C" fn(Handle, *mut u8) -> Status,
    driver_info: unsafe extern "C" fn(Handle, *mut u8) -> Status,
    memory_total: unsafe extern "C" fn(Handle, u32, *mut u64) -> Status,
    numa_node: unsafe extern "C" fn(Handle, *mut u32) -> Status,
    link_type: unsafe extern "C" fn(Handle, Handle, *mut u64, *mut u32) -> Status,
    link_weight: unsafe extern "C" fn(Handle, Handle, *mut u64) -> Status,
    bandwidth: unsafe extern "C" fn(Handle, Handle, *mut u64, *mut u64) -> Status,
    _lib: Library,
}

/// Why the library cannot be used: not loadable, a symbol missing, or
/// `amdsmi_init` refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum LoadError {
    #[error("cannot load the AMD SMI library: {0}")]
    Library(libloading::Error),
    #[error("{symbol} is missing from {path}: {source}")]
    Symbol {
        symbol: &'static str,
        path: String,
        source: libloading::Error,
    },
    #[error("amdsmi_init failed: {0}")]
    Init(StatusText),
}

/// A failed call's status, in the library's own words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct StatusText(String);

// SAFETY: the library's functions are documented thread-safe after
// `amdsmi_init`; the pointers and handles are plain addresses.
unsafe impl Send for AmdSmiLib {}
unsafe impl Sync for AmdSmiLib {}

impl AmdSmiLib {
    /// Loads the library and every symbol; the error names what is missing.
    pub(super) fn load(path: &Path) -> Result<AmdSmiLib, LoadError> {
        // SAFETY: loading runs the library's initializers; libamd_smi's are
        // the vendor's own and have no preconditions.
        let lib = unsafe { Library::new(path.as_os_str()) }.map_err(LoadError::Library)?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the type is the header's signature for this symbol.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|source| {
                    LoadError::Symbol {
                        symbol: $name,
                        path: path.display().to_string(),
                        source,
                    }
                })?
            };
        }
        Ok(AmdSmiLib {
            init: sym!("amdsmi_init"),
            shut_down: sym!("amdsmi_shut_down"),
            status_text: sym!("amdsmi_status_code_to_string"),
            socket_handles: sym!("amdsmi_get_socket_handles"),
            processor_handles: sym!("amdsmi_get_processor_handles"),
            bdf: sym!("amdsmi_get_gpu_device_bdf"),
            uuid: sym!("amdsmi_get_gpu_device_uuid"),
            asic_info: sym!("amdsmi_get_gpu_asic_info"),
            driver_info: sym!("amdsmi_get_gpu_driver_info"),
            memory_total: sym!("amdsmi_get_gpu_memory_total"),
            numa_node: sym!("amdsmi_topo_get_numa_node_number"),
            link_type: sym!("amdsmi_topo_get_link_type"),
            link_weight: sym!("amdsmi_topo_get_link_weight"),
            bandwidth: sym!("amdsmi_get_minmax_bandwidth_between_processors"),
            _lib: lib,
        })
    }

    /// `amdsmi_init(AMDSMI_INIT_AMD_GPUS)`.
    pub(super) fn init(&self) -> Result<(), LoadError> {
        // SAFETY: plain integer argument.
        let status = unsafe { (self.init)(INIT_AMD_GPUS) };
        self.check(status).map_err(LoadError::Init)
    }

    fn text(&self, status: Status) -> String {
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: the library writes a pointer to a static string.
        let ok = unsafe { (self.status_text)(status, &mut out) } == SUCCESS && !out.is_null();
        if ok {
            // SAFETY: a NUL-terminated static string owned by the library.
            unsafe { CStr::from_ptr(out) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("status {status}")
        }
    }

    fn check(&self, status: Status) -> Result<(), StatusText> {
        match status {
            SUCCESS => Ok(()),
            s => Err(StatusText(self.text(s))),
        }
    }

    /// `Some` on success, `None` on "not supported", `None` plus a warning otherwise.
    fn optional<T>(
        &self,
        status: Status,
        value: T,
        call: &str,
        what: &str,
        warnings: &mut Vec<String>,
    ) -> Option<T> {
        match status {
            SUCCESS => Some(value),
            NOT_SUPPORTED | NOT_YET_IMPLEMENTED | NOT_FOUND => None,
            s => {
                warnings.push(format!("{call} ({what}): {}", self.text(s)));
                None
            }
        }
    }

    fn handles(&self) -> Result<Vec<Handle>, AmdSmiError> {
        let call = |call: &'static str, status: Status| {
            self.check(status)
                .map_err(|StatusText(reason)| AmdSmiError::Call { call, reason })
        };
        let mut sockets = vec![std::ptr::null_mut(); MAX_HANDLES];
        let mut count = MAX_HANDLES as u32;
        // SAFETY: `sockets` holds `count` writable handles.
        call("amdsmi_get_socket_handles", unsafe {
            (self.socket_handles)(&mut count, sockets.as_mut_ptr())
        })?;
        sockets.truncate((count as usize).min(MAX_HANDLES));
        let mut out = Vec::new();
        for socket in sockets {
            let mut procs = vec![std::ptr::null_mut(); MAX_HANDLES];
            let mut n = MAX_HANDLES as u32;
            // SAFETY: `procs` holds `n` writable handles; `socket` came from the library.
            call("amdsmi_get_processor_handles", unsafe {
                (self.processor_handles)(socket, &mut n, procs.as_mut_ptr())
            })?;
            procs.truncate((n as usize).min(MAX_HANDLES));
            out.extend(procs);
        }
        Ok(out)
    }

    /// Every answer gputopo needs, asked once.
    pub(super) fn snapshot(&self) -> Result<AmdSmiAnswers, AmdSmiError> {
        let handles = self.handles()?;
        let mut warnings = Vec::new();
        let mut devices = Vec::with_capacity(handles.len());
        let mut driver_version = None;
        for (i, &h) in handles.iter().enumerate() {
            devices.push(self.device(i, h, &mut warnings));
            // The driver is one for the node: the first GPU that says it.
            if driver_version.is_none() {
                driver_version = self.driver_version(h, &format!("GPU {i}"), &mut warnings);
            }
        }
        let mut pairs = Vec::new();
        for (a, &ha) in handles.iter().enumerate() {
            for (b, &hb) in handles.iter().enumerate().skip(a + 1) {
                pairs.push(self.pair((a, ha), (b, hb), &mut warnings));
            }
        }
        Ok(AmdSmiAnswers {
            driver_version,
            library_version: None,
            devices,
            pairs,
            warnings,
        })
    }

    /// GPU `i`'s answers; a failed optional call leaves its field out and a warning.
    fn device(&self, i: usize, h: Handle, warnings: &mut Vec<String>) -> AmdDeviceAnswers {
        let what = format!("GPU {i}");
        let mut bdf = 0u64;
        // SAFETY: out-pointers to owned locals and buffers of the stated sizes.
        let bdf = self.optional(
            unsafe { (self.bdf)(h, &mut bdf) },
            bdf,
            "amdsmi_get_gpu_device_bdf",
            &what,
            warnings,
        );
        let mut uuid = [0 as c_char; UUID_BUFFER];
        let mut len = UUID_BUFFER as c_uint;
        let uuid = self
            .optional(
                unsafe { (self.uuid)(h, &mut len, uuid.as_mut_ptr()) },
                (),
                "amdsmi_get_gpu_device_uuid",
                &what,
                warnings,
            )
            .map(|()| c_string(&uuid));
        let mut asic = vec![0u8; STRUCT_BUFFER];
        let name = self
            .optional(
                unsafe { (self.asic_info)(h, asic.as_mut_ptr()) },
                (),
                "amdsmi_get_gpu_asic_info",
                &what,
                warnings,
            )
            .and_then(|()| bytes_string(&asic));
        let mut bytes = 0u64;
        let memory = self.optional(
            unsafe { (self.memory_total)(h, MEM_TYPE_VRAM, &mut bytes) },
            bytes,
            "amdsmi_get_gpu_memory_total",
            &what,
            warnings,
        );
        let mut node = 0u32;
        let numa = self.optional(
            unsafe { (self.numa_node)(h, &mut node) },
            node,
            "amdsmi_topo_get_numa_node_number",
            &what,
            warnings,
        );
        AmdDeviceAnswers {
            index: i as u32,
            uuid: uuid.filter(|u| !u.is_empty()),
            name,
            memory_mib: memory.map(|b| b / (1024 * 1024)).filter(|m| *m > 0),
            pci_bus_id: bdf.map(bdf_text),
            // The library returns -1 (as u32) for "no NUMA node".
            numa_node: numa.and_then(|n| i32::try_from(n).ok()),
        }
    }

    /// The driver's version as GPU `h` reports it.
    fn driver_version(&self, h: Handle, what: &str, warnings: &mut Vec<String>) -> Option<String> {
        let mut info = vec![0u8; STRUCT_BUFFER];
        // SAFETY: an out-buffer of the stated size.
        self.optional(
            unsafe { (self.driver_info)(h, info.as_mut_ptr()) },
            (),
            "amdsmi_get_gpu_driver_info",
            what,
            warnings,
        )
        .and_then(|()| bytes_string(&info))
    }

    /// The link between GPUs `a` and `b`.
    fn pair(
        &self,
        (a, ha): (usize, Handle),
        (b, hb): (usize, Handle),
        warnings: &mut Vec<String>,
    ) -> AmdPairAnswer {
        let what = format!("GPUs {a} and {b}");
        let (mut hops, mut kind) = (0u64, 0u32);
        // SAFETY: out-pointers to owned locals; handles came from the library.
        let link = self.optional(
            unsafe { (self.link_type)(ha, hb, &mut hops, &mut kind) },
            (hops, kind),
            "amdsmi_topo_get_link_type",
            &what,
            warnings,
        );
        let mut weight = 0u64;
        let weight = self.optional(
            unsafe { (self.link_weight)(ha, hb, &mut weight) },
            weight,
            "amdsmi_topo_get_link_weight",
            &what,
            warnings,
        );
        let link_type = link.and_then(|(_, k)| match k {
            IOLINK_XGMI => Some(AmdLinkType::Xgmi),
            IOLINK_PCIE => Some(AmdLinkType::Pcie),
            _ => None,
        });
        // Only defined for XGMI at one hop; elsewhere it fails by design.
        let (mut min, mut max) = (0u64, 0u64);
        let range = (link_type == Some(AmdLinkType::Xgmi))
            .then(|| unsafe { (self.bandwidth)(ha, hb, &mut min, &mut max) })
            .and_then(|s| {
                self.optional(
                    s,
                    (min, max),
                    "amdsmi_get_minmax_bandwidth_between_processors",
                    &what,
                    warnings,
                )
            });
        AmdPairAnswer {
            a: a as u32,
            b: b as u32,
            link_type,
            hops: link.and_then(|(h, _)| u32::try_from(h).ok()),
            weight,
            min_bandwidth_mbps: range.map(|r| r.0),
            max_bandwidth_mbps: range.map(|r| r.1),
        }
    }
}

impl Drop for AmdSmiLib {
    fn drop(&mut self) {
        // SAFETY: no argument; after this no handle is used (they die with self).
        let _ = unsafe { (self.shut_down)() };
    }
}

/// `amdsmi_bdf_t` (function 3 bits, device 5, bus 8, domain 48) as `00000000:0c:00.0`.
fn bdf_text(v: u64) -> String {
    let function = v & 0x7;
    let device = (v >> 3) & 0x1f;
    let bus = (v >> 8) & 0xff;
    let domain = v >> 16;
    format!("{domain:08x}:{bus:02x}:{device:02x}.{function}")
}

fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

fn bytes_string(buf: &[u8]) -> Option<String> {
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let s = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    (!s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_bits_read_as_canonical_text() {
        // domain 0, bus 0x0c, device 0, function 0
        assert_eq!(bdf_text(0x0c << 8), "00000000:0c:00.0");
        assert_eq!(
            bdf_text((1 << 16) | (0xdf << 8) | (3 << 3) | 1),
            "00000001:df:03.1"
        );
    }
}
