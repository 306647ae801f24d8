//! The live NVML: the only code in gputopo that loads `libnvidia-ml.so.1`
//! (through `nvml-wrapper`).
//!
//! [`RealNvml`] is an [`NvmlSource`]: it takes an [`NvmlAnswers`] snapshot
//! from the driver (`live.rs`; the daemon keeps it, since NVIDIA's device
//! plugin measured ~600 ms per GPU pair for NVLink queries) and reads the
//! dynamic state every scan (`dynamic.rs`), with critical XID errors
//! collected in between by a watcher thread (`events.rs`). Everything after
//! the answers (their types, answers → facts, the recorded source) is pure
//! and lives in `gputopo_topology::backend::nvml`, whose module docs say how
//! answers become links. [`RecordingNvml`] replays a recording file as NVML.

use gputopo_topology::backend::nvml::{DynamicAnswers, NvmlAnswers, NvmlError, NvmlSource};
use std::path::Path;
use std::sync::{Arc, OnceLock};

mod dynamic;
mod events;
mod fabric;
mod live;
mod recording;

pub use recording::RecordingNvml;

/// NVML's link index bound (`NVML_NVLINK_MAX_LINKS`): 18 on Hopper/Blackwell.
pub const MAX_NVLINKS: u32 = nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS;

/// The NVML library, loaded at run time (`libnvidia-ml.so.1`).
pub struct RealNvml {
    // Shared with the XID watcher thread, which outlives a scan.
    nvml: Arc<nvml_wrapper::Nvml>,
    /// Started by the first dynamic read: `discover` and `record` need none.
    xids: OnceLock<events::XidWatcher>,
}

impl std::fmt::Debug for RealNvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNvml")
            .field("watching_xids", &self.xids.get().is_some())
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
                nvml: Arc::new(nvml),
                xids: OnceLock::new(),
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
        live::snapshot(&self.nvml)
    }

    fn dynamic_state(&self, known: &NvmlAnswers) -> Result<DynamicAnswers, NvmlError> {
        let watcher = self
            .xids
            .get_or_init(|| events::XidWatcher::start(self.nvml.clone()));
        dynamic::read(&self.nvml, known, watcher.drain())
    }
}
