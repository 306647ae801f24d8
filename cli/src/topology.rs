//! Reading a node's topology from a file, whatever form it comes in:
//!
//! * a `GpuTopology` object (JSON or YAML, with `apiVersion`, `kind`,
//!   `metadata`, `spec`), as `gputopo-agent discover -o yaml` prints it;
//! * a bare `GpuTopology` spec (`nodeName`, `gpus`, `links`, …);
//! * an agent recording (`kind: Recording`, from `gputopo-agent record`),
//!   replayed through the agent's normalizer;
//! * verbatim `nvidia-smi topo -m` text, read by the agent's own parser;
//! * AMD's tools' text, as the agent reads it: `rocm-smi --showtopo` /
//!   `--showtoponuma` (first line a `====` banner) and `amd-smi topology`,
//!   its tables (first line `ACCESS TABLE:`, …) or `--json` (a list of
//!   `{"gpu": …}`).
//!
//! A document whose first meaningful line looks like YAML or JSON (`key:`,
//! `{`, `---`) is read as one of the first three or as `amd-smi --json`; a
//! `====` banner or a `… TABLE:` title as AMD's tools; anything else as
//! `topo -m`.

use gputopo_api::{GpuTopology, GpuTopologySpec, GpuTopologyStatus, TopologySource};
use gputopo_topology::backend::amd_smi::{AmdSmiAnswers, facts_from_answers};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::discover::{Source, build, gather};
use gputopo_topology::normalize::normalize;
use gputopo_topology::parse::{AmdTextError, amd_smi, rocm_smi};
use std::path::{Path, PathBuf};

/// A topology file that could not be read; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TopologyFileError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a GpuTopology object or spec: {at}: {message}")]
    Document {
        path: PathBuf,
        at: String,
        message: String,
    },
    #[error(
        "{path}: not a GpuTopology (JSON or YAML), an agent recording, nvidia-smi topo -m, rocm-smi --showtopo or amd-smi topology text: {message}"
    )]
    Topo { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Recording { path: PathBuf, message: String },
    #[error("{path}: read as {tool} output: {message}")]
    Amd {
        path: PathBuf,
        tool: &'static str,
        message: String,
    },
}

/// The topology in `path`; a node name is taken from the document or, for
/// `topo -m` text, from the file name.
pub fn load(path: &Path) -> Result<GpuTopologySpec, TopologyFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TopologyFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// As [`load`], with the status of a `GpuTopology` object (`None` for
/// every other form): what `gputopo draw` shows as the node's allocation.
pub fn load_with_status(
    path: &Path,
) -> Result<(GpuTopologySpec, Option<GpuTopologyStatus>), TopologyFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TopologyFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_with_status(path, &text)
}

/// As [`load`], from text already read.
pub fn parse(path: &Path, text: &str) -> Result<GpuTopologySpec, TopologyFileError> {
    parse_with_status(path, text).map(|(spec, _)| spec)
}

/// As [`load_with_status`], from text already read.
pub fn parse_with_status(
    path: &Path,
    text: &str,
) -> Result<(GpuTopologySpec, Option<GpuTopologyStatus>), TopologyFileError> {
    let structured = looks_structured(text)
        .then(|| {
            serde_yaml::from_str::<serde_yaml::Value>(text).map_err(|e| {
                TopologyFileError::Document {
                    path: path.to_path_buf(),
                    at: "(document)".into(),
                    message: e.to_string(),
                }
            })
        })
        .transpose()?;
    let amd = match &structured {
        Some(value) if is_amd_smi_json(value) => {
            Some(("amd-smi topology --json", amd_smi::parse(text)))
        }
        Some(_) => None,
        None => amd_text(text),
    };
    if let Some((tool, answers)) = amd {
        let amd_err = |message: String| TopologyFileError::Amd {
            path: path.to_path_buf(),
            tool,
            message,
        };
        let answers = answers.map_err(|e| amd_err(e.to_string()))?;
        let facts = facts_from_answers(&answers, TopologySource::RocmSmi)
            .map_err(|e| amd_err(e.to_string()))?;
        let spec = normalize(&node_name(path), &facts).map_err(|e| amd_err(e.to_string()))?;
        return Ok((spec, None));
    }
    if let Some(value) = structured {
        let kind = value.get("kind").and_then(|k| k.as_str());
        if kind == Some("Recording") {
            let facts = gather(&Source::Fixture(path.to_path_buf())).map_err(|e| {
                TopologyFileError::Recording {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                }
            })?;
            let (facts, node) = facts;
            let node = node.unwrap_or_else(|| node_name(path));
            return build(&node, facts).map(|d| (d.spec, None)).map_err(|e| {
                TopologyFileError::Recording {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                }
            });
        }
        if value.get("spec").is_some() {
            let object: GpuTopology = deserialize(path, text)?;
            return Ok((object.spec, object.status));
        }
        return deserialize(path, text).map(|spec| (spec, None));
    }
    let facts = facts_from_topo(text).map_err(|e| TopologyFileError::Topo {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    normalize(&node_name(path), &facts)
        .map(|spec| (spec, None))
        .map_err(|e| TopologyFileError::Topo {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// AMD's tools' output, by its first meaningful line: the tool's name and
/// what its parser read; `None` for every other text.
fn amd_text(text: &str) -> Option<(&'static str, Result<AmdSmiAnswers, AmdTextError>)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let rocm_banner = |l: &str| {
        l.starts_with("==")
            && [
                "ROCm System Management Interface",
                "between two GPUs",
                "Numa Nodes",
            ]
            .iter()
            .any(|title| l.contains(title))
    };
    if first.starts_with("==") && text.lines().map(str::trim).any(rocm_banner) {
        return Some(("rocm-smi --showtopo", rocm_smi::parse(text)));
    }
    if first.ends_with("TABLE:") {
        return Some(("amd-smi topology", amd_smi::parse(text)));
    }
    None
}

/// `amd-smi topology --json`: a list of `{"gpu": …}` entries.
fn is_amd_smi_json(value: &serde_yaml::Value) -> bool {
    value
        .as_sequence()
        .and_then(|items| items.first())
        .is_some_and(|item| item.get("gpu").is_some())
}

/// Deserializes with the path of the offending field in the error.
pub(crate) fn deserialize<T: serde::de::DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<T, TopologyFileError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        TopologyFileError::Document {
            path: path.to_path_buf(),
            at: if at == "." { "(document)".into() } else { at },
            message: e.into_inner().to_string(),
        }
    })
}

/// The file's stem: `dgx1-v100-…-topo-m` for `fixtures/nvidia/dgx1-v100-…-topo-m.txt`.
fn node_name(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("node")
        .to_string()
}

/// Whether the first meaningful line reads as YAML or JSON rather than a matrix.
pub(crate) fn looks_structured(text: &str) -> bool {
    let Some(line) = text
        .lines()
        .map(str::trim_end)
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    else {
        return false;
    };
    if line.starts_with('{') || line.starts_with("---") || line.starts_with('[') {
        return true;
    }
    // `key:` or `key: value` at the start of the line, the key one word.
    match line.split_once(':') {
        Some((key, rest)) => {
            !key.is_empty()
                && !key.starts_with(char::is_whitespace)
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./\"'".contains(c))
                && (rest.is_empty() || rest.starts_with(' '))
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrices_are_not_mistaken_for_yaml() {
        assert!(!looks_structured(
            "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV1\t0-19\n"
        ));
        assert!(!looks_structured(
            "        GPU0    GPU1\nGPU0     X      NV4\n"
        ));
        assert!(looks_structured(
            "apiVersion: gputopo.dev/v1alpha1\nkind: GpuTopology\n"
        ));
        assert!(looks_structured("# comment\n{\"nodeName\": \"n\"}"));
        assert!(looks_structured("nodeName: n\ngpus: []\n"));
    }

    #[test]
    fn amd_tools_texts_are_read_and_nvidia_smi_q_is_not_taken_for_them() {
        use gputopo_api::GpuVendor;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        for (file, gpus) in [
            (
                "amd/amd-mi308x-8gpu-0x74a2-rocm72-rocm-smi-showtopo-lowpower-warning.txt",
                8,
            ),
            (
                "amd/amd-smi-8gpu-all-xgmi-mi300x-class-changelog-sample-RECONSTRUCTED-topology.txt",
                8,
            ),
            ("amd/amd-smi-2gpu-xgmi-topology-json-RECONSTRUCTED.json", 2),
        ] {
            let spec = load(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(spec.vendor, Some(GpuVendor::Amd), "{file}");
            assert_eq!(spec.gpus.len(), gpus, "{file}");
        }
        // `nvidia-smi -q` opens with a `====` banner too, but names no ROCm section.
        let q = load(&dir.join("nvidia/v100-pcie-32gb-driver410-nvidia-smi-q.txt"));
        assert!(matches!(q, Err(TopologyFileError::Topo { .. })), "{q:?}");
        // A rocm-smi text that is not a topology says which tool it was read as.
        let info = load(&dir.join("amd/amd-mi308x-8gpu-0x74a2-rocm72-rocm-smi-concise-info.txt"));
        let message = info.expect_err("not a topology").to_string();
        assert!(
            message.contains("read as rocm-smi --showtopo output"),
            "{message}"
        );
    }
}
