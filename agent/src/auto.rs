//! `--backend auto`: one agent image and one DaemonSet for NVIDIA and AMD
//! nodes. The vendor is the one whose library answers on this node: NVML
//! first (the NVIDIA driver loaded), then AMD SMI with at least one GPU (the
//! library alone may be baked into an image that runs on every node). Asked
//! again until one answers, since a GPU Operator installs the driver after
//! the agent starts; the scanner keeps the answer until SIGHUP.

use crate::amd_smi::RealAmdSmi;
use crate::nvml::RealNvml;
use gputopo_topology::backend::amd_smi::{AmdSmiError, AmdSmiSource};
use gputopo_topology::backend::nvml::NvmlError;
use std::path::PathBuf;

/// `--backend`: which library the agent asks on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// NVML if the NVIDIA driver answers, else AMD SMI if it finds a GPU.
    Auto,
    /// NVIDIA's NVML, as `--nvml`.
    Nvml,
    /// AMD SMI, as `--amd-smi`.
    AmdSmi,
}

/// Where each vendor's library is, for `--backend auto`.
#[derive(Debug, Clone)]
pub struct AutoSource {
    pub nvml_library: Option<PathBuf>,
    pub sysfs_root: PathBuf,
    pub amd_smi_library: Option<PathBuf>,
}

/// Neither vendor's library answered: what each said.
#[derive(Debug, thiserror::Error)]
#[error(
    "no GPU backend answered on this node (--backend auto tried NVML, then AMD SMI): {nvml}; {amd_smi}"
)]
pub struct NoBackend {
    pub nvml: Box<NvmlError>,
    pub amd_smi: Box<AmdSmiError>,
}

/// The vendor `--backend auto` settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Nvidia,
    Amd,
}

/// NVML first: a node with both drivers is read as NVIDIA (the AMD probe is
/// not even tried then). Each probe says why it failed.
pub fn choose(
    nvml: impl FnOnce() -> Result<(), NvmlError>,
    amd_smi: impl FnOnce() -> Result<(), AmdSmiError>,
) -> Result<Vendor, NoBackend> {
    let nvml = match nvml() {
        Ok(()) => return Ok(Vendor::Nvidia),
        Err(e) => Box::new(e),
    };
    match amd_smi() {
        Ok(()) => Ok(Vendor::Amd),
        Err(e) => Err(NoBackend {
            nvml,
            amd_smi: Box::new(e),
        }),
    }
}

impl AutoSource {
    /// The vendor whose library answers now (see [`choose`]).
    pub fn detect(&self) -> Result<Vendor, NoBackend> {
        choose(|| self.probe_nvml(), || self.probe_amd_smi())
    }

    fn probe_nvml(&self) -> Result<(), NvmlError> {
        match &self.nvml_library {
            Some(path) => RealNvml::init_with_library(path),
            None => RealNvml::init(),
        }
        .map(drop)
    }

    fn probe_amd_smi(&self) -> Result<(), AmdSmiError> {
        let amd = match &self.amd_smi_library {
            Some(path) => RealAmdSmi::init_with_library(path),
            None => RealAmdSmi::init(),
        }?;
        if amd.snapshot()?.devices.is_empty() {
            return Err(AmdSmiError::Unavailable {
                reason: "it lists no AMD GPU".to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn no_nvml(why: &str) -> NvmlError {
        NvmlError::Unavailable {
            reason: why.to_owned(),
        }
    }

    fn no_amd_smi(why: &str) -> AmdSmiError {
        AmdSmiError::Unavailable {
            reason: why.to_owned(),
        }
    }

    #[test]
    fn nvml_wins_and_amd_smi_is_not_asked_then() {
        let asked = Cell::new(false);
        let vendor = choose(
            || Ok(()),
            || {
                asked.set(true);
                Ok(())
            },
        );
        assert!(matches!(vendor, Ok(Vendor::Nvidia)), "{vendor:?}");
        assert!(!asked.get());
    }

    #[test]
    fn amd_smi_answers_where_nvml_does_not() {
        let vendor = choose(|| Err(no_nvml("no driver")), || Ok(()));
        assert!(matches!(vendor, Ok(Vendor::Amd)), "{vendor:?}");
    }

    #[test]
    fn nothing_answering_names_what_was_tried_and_why() {
        let e = choose(
            || Err(no_nvml("libnvidia-ml.so.1 missing")),
            || Err(no_amd_smi("libamd_smi.so missing")),
        )
        .expect_err("neither answered");
        assert_eq!(
            e.to_string(),
            "no GPU backend answered on this node (--backend auto tried NVML, then AMD SMI): \
             NVML not available: libnvidia-ml.so.1 missing; \
             AMD SMI not available: libamd_smi.so missing"
        );
    }

    fn nowhere() -> AutoSource {
        AutoSource {
            nvml_library: Some("/nonexistent/libnvidia-ml.so.1".into()),
            sysfs_root: "/sys".into(),
            amd_smi_library: Some("/nonexistent/libamd_smi.so".into()),
        }
    }

    #[test]
    fn detect_without_either_library_is_no_backend() {
        let e = nowhere().detect().expect_err("no library at those paths");
        assert!(matches!(*e.nvml, NvmlError::Unavailable { .. }), "{e}");
        let amd = e.amd_smi.to_string();
        assert!(amd.starts_with("AMD SMI not available: "), "{amd}");
        assert!(amd.contains("/nonexistent/libamd_smi.so"), "{amd}");
    }

    #[test]
    fn the_daemons_scanner_asks_again_every_scan_until_one_answers() {
        use crate::discover::{DiscoverError, Source};
        use crate::scan::{ScanError, Scanner};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let mut scanner = Scanner::new("n".into(), Source::Auto(nowhere()));
        for _ in 0..2 {
            let e = runtime.block_on(scanner.scan()).expect_err("no library");
            assert!(
                matches!(e, ScanError::Discover(DiscoverError::NoBackend(_))),
                "{e}"
            );
        }
    }
}
