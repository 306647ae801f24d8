//! One entry point over every source the agent knows: the live NVML (with
//! sysfs for what NVML lacks) here, the saved files through
//! [`gputopo_topology::discover`], or whichever vendor's library answers
//! ([`crate::auto`]). `NodeFacts` and the normalized topology
//! with its health out. The daemon and `gputopo-agent discover` call this;
//! [`NvmlPaths`] are the flags naming NVML's library and sysfs, which the
//! device plugin takes too.

use crate::amd_smi::RealAmdSmi;
use crate::auto::{AutoSource, NoBackend, Vendor};
use crate::nvml::RealNvml;
use gputopo_topology::backend::amd_smi::{AmdSmiError, facts_from_amd_smi};
use gputopo_topology::backend::nvml::{NvmlError, facts_from_nvml};
use gputopo_topology::backend::sysfs::RealSysfs;
use gputopo_topology::discover as saved;
use gputopo_topology::facts::NodeFacts;
use std::path::PathBuf;

pub use gputopo_topology::discover::{Discovered, build};

/// Where the agent looks.
#[derive(Debug, Clone)]
pub enum Source {
    /// The NVIDIA driver's NVML, loaded at run time, with sysfs for what NVML lacks.
    Nvml {
        /// `libnvidia-ml.so.1` outside the loader path (e.g. under `/run/nvidia/driver`).
        library: Option<PathBuf>,
        sysfs_root: PathBuf,
    },
    /// The AMD SMI library (`libamd_smi.so`), loaded at run time.
    AmdSmi {
        /// `libamd_smi.so` outside the loader path and `/opt/rocm/lib`.
        library: Option<PathBuf>,
    },
    /// Saved `nvidia-smi` / `rocm-smi` / `amd-smi` outputs or a recording, read as the topology crate reads them.
    Saved(saved::Source),
    /// NVML or AMD SMI, whichever answers on this node (`--backend auto`).
    Auto(AutoSource),
}

/// `--nvml-library` and `--sysfs-root`: where the host's NVIDIA driver
/// library and sysfs are inside the container. The agent's and the device
/// plugin's flags, with their environment variables.
#[derive(Clone, Debug, clap::Args)]
pub struct NvmlPaths {
    /// Path of libnvidia-ml.so.1 when it is not on the loader path.
    #[arg(long, env = "GPUTOPO_NVML_LIBRARY", value_name = "FILE")]
    pub nvml_library: Option<PathBuf>,
    /// Where sysfs is mounted.
    #[arg(long, env = "GPUTOPO_SYSFS_ROOT", default_value = "/sys")]
    pub sysfs_root: PathBuf,
}

impl NvmlPaths {
    /// The live NVML at these paths.
    pub fn source(&self) -> Source {
        Source::Nvml {
            library: self.nvml_library.clone(),
            sysfs_root: self.sysfs_root.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error(transparent)]
    Nvml(Box<NvmlError>),
    #[error(transparent)]
    AmdSmi(Box<AmdSmiError>),
    #[error(transparent)]
    Saved(#[from] saved::DiscoverError),
    #[error(transparent)]
    NoBackend(#[from] NoBackend),
}

impl From<NvmlError> for DiscoverError {
    fn from(e: NvmlError) -> Self {
        DiscoverError::Nvml(Box::new(e))
    }
}

impl From<AmdSmiError> for DiscoverError {
    fn from(e: AmdSmiError) -> Self {
        DiscoverError::AmdSmi(Box::new(e))
    }
}

/// Gathers the facts from `source`. For a fixture, also the node name it was recorded on.
pub fn gather(source: &Source) -> Result<(NodeFacts, Option<String>), DiscoverError> {
    match source {
        Source::Nvml {
            library,
            sysfs_root,
        } => {
            let nvml = match library {
                Some(path) => RealNvml::init_with_library(path)?,
                None => RealNvml::init()?,
            };
            let facts = facts_from_nvml(&nvml, &RealSysfs::new(sysfs_root))?;
            Ok((facts, None))
        }
        Source::AmdSmi { library } => {
            let amd = match library {
                Some(path) => RealAmdSmi::init_with_library(path)?,
                None => RealAmdSmi::init()?,
            };
            Ok((facts_from_amd_smi(&amd)?, None))
        }
        Source::Saved(source) => Ok(saved::gather(source)?),
        Source::Auto(auto) => gather(&detect(auto)?),
    }
}

/// The live source of the vendor whose library answers now (`--backend auto`).
pub fn detect(auto: &AutoSource) -> Result<Source, NoBackend> {
    Ok(match auto.detect()? {
        Vendor::Nvidia => Source::Nvml {
            library: auto.nvml_library.clone(),
            sysfs_root: auto.sysfs_root.clone(),
        },
        Vendor::Amd => Source::AmdSmi {
            library: auto.amd_smi_library.clone(),
        },
    })
}
