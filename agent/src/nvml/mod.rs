//! The live NVML: the only code in gputopo that loads `libnvidia-ml.so.1`
//! (through `nvml-wrapper`).
//!
//! [`RealNvml`] is an [`NvmlSource`]: it takes one
//! [`NvmlAnswers`] snapshot from the driver (`live.rs`) and caches it, since
//! NVIDIA's device plugin measured ~600 ms per GPU pair for NVLink queries.
//! Everything after the snapshot (the answers' types, answers → facts, the
//! recorded source) is pure and lives in `gputopo_topology::backend::nvml`,
//! whose module docs say how answers become links.

use gputopo_topology::backend::nvml::{NvmlAnswers, NvmlError, NvmlSource};
use std::path::Path;
use std::sync::OnceLock;

mod live;

/// NVML's link index bound (`NVML_NVLINK_MAX_LINKS`): 18 on Hopper/Blackwell.
pub const MAX_NVLINKS: u32 = nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS;

/// The NVML library, loaded at run time (`libnvidia-ml.so.1`).
pub struct RealNvml {
    nvml: nvml_wrapper::Nvml,
    cache: OnceLock<NvmlAnswers>,
}

impl std::fmt::Debug for RealNvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNvml")
            .field("snapshot_taken", &self.cache.get().is_some())
            .finish()
    }
}

impl RealNvml {
    /// Loads `libnvidia-ml.so.1` and initializes NVML. On a machine without the
    /// driver this is [`NvmlError::Unavailable`] (`NVML not available: …`), never a panic.
    pub fn init() -> Result<RealNvml, NvmlError> {
        Self::from_init(nvml_wrapper::Nvml::init())
    }

    /// As [`RealNvml::init`], with the library at a given path (drivers
    /// installed outside the loader path, e.g. `/run/nvidia/driver/...`).
    pub fn init_with_library(path: &Path) -> Result<RealNvml, NvmlError> {
        Self::from_init(
            nvml_wrapper::Nvml::builder()
                .lib_path(path.as_os_str())
                .init(),
        )
    }

    fn from_init(
        result: Result<nvml_wrapper::Nvml, nvml_wrapper::error::NvmlError>,
    ) -> Result<RealNvml, NvmlError> {
        match result {
            Ok(nvml) => Ok(RealNvml {
                nvml,
                cache: OnceLock::new(),
            }),
            Err(e) => Err(NvmlError::Unavailable {
                reason: unavailable_reason(&e),
            }),
        }
    }
}

/// The reason text after `NVML not available: `.
fn unavailable_reason(e: &nvml_wrapper::error::NvmlError) -> String {
    use nvml_wrapper::error::NvmlError as W;
    match e {
        // libloading's own text names the file: "libnvidia-ml.so.1: cannot open shared object file: ...".
        W::LibloadingError(inner) => format!("cannot load the NVML library: {inner}"),
        W::FailedToLoadSymbol(s) => format!("nvmlInit_v2 is missing from the library: {s}"),
        other => format!("nvmlInit_v2 failed: {other}"),
    }
}

impl NvmlSource for RealNvml {
    fn snapshot(&self) -> Result<NvmlAnswers, NvmlError> {
        if let Some(answers) = self.cache.get() {
            return Ok(answers.clone());
        }
        let answers = live::snapshot(&self.nvml)?;
        Ok(self.cache.get_or_init(|| answers).clone())
    }
}
