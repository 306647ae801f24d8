//! Which advertised GPUs are healthy. A GPU the driver reports lost
//! (`NVML_ERROR_GPU_IS_LOST`: fell off the bus, needs a reset) goes
//! `Unhealthy` in ListAndWatch, so the kubelet stops handing it out.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Why the health of the GPUs could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("NVML not available for health checks: {reason}")]
    Unavailable { reason: String },
}

/// Asks which of `uuids` are lost. Called on every health interval.
pub trait HealthProbe: Send + Sync + 'static {
    fn lost(&self, uuids: &[String]) -> Result<BTreeSet<String>, HealthError>;
}

/// Every GPU healthy: for a recorded machine (dry runs), where no driver answers.
#[derive(Debug, Default, Clone, Copy)]
pub struct AlwaysHealthy;

impl HealthProbe for AlwaysHealthy {
    fn lost(&self, _: &[String]) -> Result<BTreeSet<String>, HealthError> {
        Ok(BTreeSet::new())
    }
}

/// Lost GPUs set by hand: tests and demos mark a GPU lost as NVML would.
#[derive(Debug, Default, Clone)]
pub struct ManualHealth {
    lost: Arc<Mutex<BTreeSet<String>>>,
}

impl ManualHealth {
    pub fn set_lost(&self, uuid: &str, lost: bool) {
        let mut set = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        if lost {
            set.insert(uuid.to_string());
        } else {
            set.remove(uuid);
        }
    }
}

impl HealthProbe for ManualHealth {
    fn lost(&self, uuids: &[String]) -> Result<BTreeSet<String>, HealthError> {
        let set = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        Ok(uuids.iter().filter(|u| set.contains(*u)).cloned().collect())
    }
}

/// The live driver: a GPU is lost when NVML answers `GpuLost` for its handle
/// or its PCI info (a cheap query that touches the device), or no longer
/// finds its UUID.
pub struct NvmlHealth {
    nvml: nvml_wrapper::Nvml,
}

impl NvmlHealth {
    pub fn init(library: Option<&Path>) -> Result<NvmlHealth, HealthError> {
        let nvml = match library {
            Some(path) => nvml_wrapper::Nvml::builder()
                .lib_path(path.as_os_str())
                .init(),
            None => nvml_wrapper::Nvml::init(),
        };
        nvml.map(|nvml| NvmlHealth { nvml })
            .map_err(|e| HealthError::Unavailable {
                reason: e.to_string(),
            })
    }
}

impl HealthProbe for NvmlHealth {
    fn lost(&self, uuids: &[String]) -> Result<BTreeSet<String>, HealthError> {
        use nvml_wrapper::error::NvmlError as E;
        let mut lost = BTreeSet::new();
        for uuid in uuids {
            let gone = match self.nvml.device_by_uuid(uuid.as_str()) {
                // The driver no longer knows the GPU it enumerated at start.
                Err(E::GpuLost | E::NotFound) => true,
                Ok(device) => matches!(device.pci_info(), Err(E::GpuLost)),
                // Other failures (a busy driver, a query this driver lacks)
                // say nothing about the GPU being gone.
                Err(_) => false,
            };
            if gone {
                lost.insert(uuid.clone());
            }
        }
        Ok(lost)
    }
}
