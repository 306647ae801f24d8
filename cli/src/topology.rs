//! Reading a node's topology from a file, whatever form it comes in:
//!
//! * a `GpuTopology` object (JSON or YAML, with `apiVersion`, `kind`,
//!   `metadata`, `spec`), as `gputopo-agent discover -o yaml` prints it;
//! * a bare `GpuTopology` spec (`nodeName`, `gpus`, `links`, …);
//! * an agent recording (`kind: Recording`, from `gputopo-agent record`),
//!   replayed through the agent's normalizer;
//! * verbatim `nvidia-smi topo -m` text, read by the agent's own parser.
//!
//! A document whose first meaningful line looks like YAML or JSON (`key:`,
//! `{`, `---`) is read as one of the first three; anything else as `topo -m`.

use gputopo_api::{GpuTopology, GpuTopologySpec};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::discover::{Source, build, gather};
use gputopo_topology::normalize::normalize;
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
        "{path}: not a GpuTopology (JSON or YAML), an agent recording, or nvidia-smi topo -m text: {message}"
    )]
    Topo { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Recording { path: PathBuf, message: String },
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

/// As [`load`], from text already read.
pub fn parse(path: &Path, text: &str) -> Result<GpuTopologySpec, TopologyFileError> {
    if looks_structured(text) {
        let value: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| TopologyFileError::Document {
                path: path.to_path_buf(),
                at: "(document)".into(),
                message: e.to_string(),
            })?;
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
            return build(&node, facts)
                .map(|d| d.spec)
                .map_err(|e| TopologyFileError::Recording {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                });
        }
        if value.get("spec").is_some() {
            let object: GpuTopology = deserialize(path, text)?;
            return Ok(object.spec);
        }
        return deserialize(path, text);
    }
    let facts = facts_from_topo(text).map_err(|e| TopologyFileError::Topo {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    normalize(&node_name(path), &facts).map_err(|e| TopologyFileError::Topo {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
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
}
