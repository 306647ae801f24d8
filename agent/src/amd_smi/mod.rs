//! The live AMD SMI: the only code in gputopo that loads `libamd_smi.so`.
//!
//! No maintained crate fits: `amdsmi`/`amdsmi-sys` (0.1) generate bindings
//! with bindgen from the ROCm headers at build time (so the agent would not
//! build without ROCm installed) and bind none of the topology calls;
//! `rocm_smi_lib` links the older rocm-smi library at build time. So this
//! module loads the library at run time with `libloading`, like
//! `nvml-wrapper` does for NVML, and binds only the dozen functions it needs
//! (`ffi.rs`). [`RealAmdSmi`] is an [`AmdSmiSource`]: one snapshot, cached.

mod ffi;

use gputopo_topology::backend::amd_smi::{AmdSmiAnswers, AmdSmiError, AmdSmiSource};
use std::path::Path;
use std::sync::OnceLock;

/// Where ROCm installs the library when it is not on the loader path.
const DEFAULT_PATHS: [&str; 2] = ["libamd_smi.so", "/opt/rocm/lib/libamd_smi.so"];

/// The AMD SMI library, loaded and initialized for AMD GPUs.
pub struct RealAmdSmi {
    lib: ffi::AmdSmiLib,
    cache: OnceLock<AmdSmiAnswers>,
}

impl std::fmt::Debug for RealAmdSmi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealAmdSmi")
            .field("snapshot_taken", &self.cache.get().is_some())
            .finish()
    }
}

impl RealAmdSmi {
    /// Loads `libamd_smi.so` (the loader path, then `/opt/rocm/lib`) and
    /// initializes it. Without the library or the amdgpu driver this is
    /// [`AmdSmiError::Unavailable`] (`AMD SMI not available: …`), never a panic.
    pub fn init() -> Result<RealAmdSmi, AmdSmiError> {
        let mut reasons = Vec::new();
        for path in DEFAULT_PATHS {
            match ffi::AmdSmiLib::load(Path::new(path)) {
                Ok(lib) => return Self::start(lib),
                Err(e) => reasons.push(e.to_string()),
            }
        }
        Err(AmdSmiError::Unavailable {
            reason: reasons.join("; "),
        })
    }

    /// As [`RealAmdSmi::init`], with the library at a given path.
    pub fn init_with_library(path: &Path) -> Result<RealAmdSmi, AmdSmiError> {
        let lib = ffi::AmdSmiLib::load(path).map_err(|e| AmdSmiError::Unavailable {
            reason: e.to_string(),
        })?;
        Self::start(lib)
    }

    fn start(lib: ffi::AmdSmiLib) -> Result<RealAmdSmi, AmdSmiError> {
        lib.init().map_err(|e| AmdSmiError::Unavailable {
            reason: e.to_string(),
        })?;
        Ok(RealAmdSmi {
            lib,
            cache: OnceLock::new(),
        })
    }
}

impl AmdSmiSource for RealAmdSmi {
    fn snapshot(&self) -> Result<AmdSmiAnswers, AmdSmiError> {
        if let Some(answers) = self.cache.get() {
            return Ok(answers.clone());
        }
        let answers = self.lib.snapshot()?;
        Ok(self.cache.get_or_init(|| answers).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_unavailable_not_a_panic() {
        let e = RealAmdSmi::init_with_library(Path::new("/nonexistent/libamd_smi.so"))
            .expect_err("no such library");
        let text = e.to_string();
        assert!(text.starts_with("AMD SMI not available: "), "{text}");
        assert!(text.contains("libamd_smi.so"), "{text}");
    }
}
