//! `--backend auto`: one agent image and one DaemonSet for NVIDIA and AMD
//! nodes. The vendor is the one whose library answers on this node: NVML
//! first (the NVIDIA driver loaded), then AMD SMI with at least one GPU (the
//! library alone may be baked into an image that runs on every node). Asked
//! again until one answers, since a GPU Operator installs the driver after
//! the agent starts; the scanner keeps the answer until SIGHUP.

use crate::amd_smi::RealAmdSmi;
use crate::discover::Source;
use crate::nvml::RealNvml;
use gputopo_topology::backend::amd_smi::AmdSmiSource;
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no GPU backend answered on this node (--backend auto tried NVML, then AMD SMI): {nvml}; {amd_smi}"
)]
pub struct NoBackend {
    pub nvml: String,
    pub amd_smi: String,
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
    nvml: impl FnOnce() -> Result<(), String>,
    amd_smi: impl FnOnce() -> Result<(), String>,
) -> Result<Vendor, NoBackend> {
    let nvml = match nvml() {
        Ok(()) => return Ok(Vendor::Nvidia),
        Err(e) => e,
    };
    match amd_smi() {
        Ok(()) => Ok(Vendor::Amd),
        Err(amd_smi) => Err(NoBackend { nvml, amd_smi }),
    }
}

impl AutoSource {
    /// The live source of the vendor whose library answers now.
    pub fn detect(&self) -> Result<Source, NoBackend> {
        let vendor = choose(|| self.probe_nvml(), || self.probe_amd_smi())?;
        Ok(match vendor {
            Vendor::Nvidia => Source::Nvml {
                library: self.nvml_library.clone(),
                sysfs_root: self.sysfs_root.clone(),
            },
            Vendor::Amd => Source::AmdSmi {
                library: self.amd_smi_library.clone(),
            },
        })
    }

    fn probe_nvml(&self) -> Result<(), String> {
        match &self.nvml_library {
            Some(path) => RealNvml::init_with_library(path),
            None => RealNvml::init(),
        }
        .map(drop)
        .map_err(|e| e.to_string())
    }

    fn probe_amd_smi(&self) -> Result<(), String> {
        let amd = match &self.amd_smi_library {
            Some(path) => RealAmdSmi::init_with_library(path),
            None => RealAmdSmi::init(),
        }
        .map_err(|e| e.to_string())?;
        let answers = amd.snapshot().map_err(|e| e.to_string())?;
        if answers.devices.is_empty() {
            return Err("AMD SMI not available: it lists no AMD GPU".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

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
        assert_eq!(vendor, Ok(Vendor::Nvidia));
        assert!(!asked.get());
    }

    #[test]
    fn amd_smi_answers_where_nvml_does_not() {
        let vendor = choose(|| Err("NVML not available: no driver".into()), || Ok(()));
        assert_eq!(vendor, Ok(Vendor::Amd));
    }

    #[test]
    fn nothing_answering_names_what_was_tried_and_why() {
        let e = choose(
            || Err("NVML not available: libnvidia-ml.so.1 missing".into()),
            || Err("AMD SMI not available: libamd_smi.so missing".into()),
        )
        .expect_err("neither answered");
        let text = e.to_string();
        assert!(
            text.contains("--backend auto tried NVML, then AMD SMI"),
            "{text}"
        );
        assert!(text.contains("libnvidia-ml.so.1 missing"), "{text}");
        assert!(text.contains("libamd_smi.so missing"), "{text}");
    }

    #[test]
    fn detect_without_either_library_is_no_backend() {
        let auto = AutoSource {
            nvml_library: Some("/nonexistent/libnvidia-ml.so.1".into()),
            sysfs_root: "/sys".into(),
            amd_smi_library: Some("/nonexistent/libamd_smi.so".into()),
        };
        let e = auto.detect().expect_err("no library at those paths");
        assert!(e.nvml.starts_with("NVML not available: "), "{e}");
        assert!(e.amd_smi.starts_with("AMD SMI not available: "), "{e}");
        assert!(e.amd_smi.contains("/nonexistent/libamd_smi.so"), "{e}");
    }

    #[test]
    fn the_daemons_scanner_asks_again_every_scan_until_one_answers() {
        use crate::discover::DiscoverError;
        use crate::scan::{ScanError, Scanner};
        let auto = AutoSource {
            nvml_library: Some("/nonexistent/libnvidia-ml.so.1".into()),
            sysfs_root: "/sys".into(),
            amd_smi_library: Some("/nonexistent/libamd_smi.so".into()),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let mut scanner = Scanner::new("n".into(), Source::Auto(auto));
        for _ in 0..2 {
            let e = runtime.block_on(scanner.scan()).expect_err("no library");
            assert!(
                matches!(e, ScanError::Discover(DiscoverError::NoBackend(_))),
                "{e}"
            );
        }
    }
}
