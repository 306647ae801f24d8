//! One entry point over the sources that are files: where to look in,
//! `NodeFacts` and the normalized topology with its health out. The CLI calls
//! this; the agent's `discover` adds the live NVML in front of it.

use crate::backend::amd_smi::{self, AmdSmiError};
use crate::backend::nvidia_smi::{self, NvidiaSmiError};
use crate::backend::recording::{
    Recording, RecordingError, replay_amd_smi, replay_commands, replay_nvml,
};
use crate::facts::NodeFacts;
use crate::health::{HealthFinding, assess};
use crate::normalize::{NormalizeError, normalize};
use crate::parse::{AmdTextError, amd_smi as amd_smi_text, rocm_smi};
use gputopo_api::{GpuTopologySpec, TopologySource};
use std::path::{Path, PathBuf};

/// Where to look: saved outputs of a node, read anywhere.
#[derive(Debug, Clone)]
pub enum Source {
    /// Saved `nvidia-smi` outputs: `topo -m`, optionally `nvlink -s` and `-q`.
    NvidiaSmi {
        topo: PathBuf,
        nvlink_status: Option<PathBuf>,
        query: Option<PathBuf>,
    },
    /// Saved `rocm-smi --showtopo` / `--showtoponuma` outputs of one node
    /// (one file may hold both; several files are read as one text).
    RocmSmi { texts: Vec<PathBuf> },
    /// A saved `amd-smi topology` output, its tables or `--json`.
    AmdSmi { text: PathBuf },
    /// A recording made by `gputopo-agent record`.
    Fixture(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    NvidiaSmi {
        path: PathBuf,
        source: Box<NvidiaSmiError>,
    },
    #[error("{path}: {tool}: {source}")]
    AmdText {
        path: PathBuf,
        tool: &'static str,
        source: AmdTextError,
    },
    #[error("{what}: {source}")]
    AmdSmi { what: String, source: AmdSmiError },
    #[error(transparent)]
    Recording(Box<RecordingError>),
    #[error("{what}: {source}")]
    Normalize {
        what: String,
        source: NormalizeError,
    },
}

/// What one look at a node found.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub facts: NodeFacts,
    pub spec: GpuTopologySpec,
    pub findings: Vec<HealthFinding>,
}

impl From<RecordingError> for DiscoverError {
    fn from(e: RecordingError) -> Self {
        DiscoverError::Recording(Box::new(e))
    }
}

fn read(path: &Path) -> Result<String, DiscoverError> {
    std::fs::read_to_string(path).map_err(|source| DiscoverError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Gathers the facts from `source`. For a fixture, also the node name it was recorded on.
pub fn gather(source: &Source) -> Result<(NodeFacts, Option<String>), DiscoverError> {
    match source {
        Source::NvidiaSmi {
            topo,
            nvlink_status,
            query,
        } => {
            let topo_text = read(topo)?;
            let nvlink_text = nvlink_status.as_deref().map(read).transpose()?;
            let query_text = query.as_deref().map(read).transpose()?;
            let facts = nvidia_smi::facts_from_texts(
                &topo_text,
                nvlink_text.as_deref(),
                query_text.as_deref(),
            )
            .map_err(|source| {
                // Name the file whose text was wrong; a disagreement between
                // files is reported against the matrix, which it is checked against.
                let path = match (&source, nvlink_status, query) {
                    (NvidiaSmiError::Nvlink(_), Some(p), _) => p.clone(),
                    (NvidiaSmiError::Query(_), _, Some(p)) => p.clone(),
                    _ => topo.clone(),
                };
                DiscoverError::NvidiaSmi {
                    path,
                    source: Box::new(source),
                }
            })?;
            Ok((facts, None))
        }
        Source::RocmSmi { texts } => {
            let mut joined = String::new();
            for path in texts {
                joined.push_str(&read(path)?);
                joined.push('\n');
            }
            let what = texts
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" + ");
            let answers = rocm_smi::parse(&joined).map_err(|source| DiscoverError::AmdText {
                path: PathBuf::from(&what),
                tool: "rocm-smi --showtopo",
                source,
            })?;
            let facts = amd_smi::facts_from_answers(&answers, TopologySource::RocmSmi)
                .map_err(|source| DiscoverError::AmdSmi { what, source })?;
            Ok((facts, None))
        }
        Source::AmdSmi { text } => {
            let answers =
                amd_smi_text::parse(&read(text)?).map_err(|source| DiscoverError::AmdText {
                    path: text.clone(),
                    tool: "amd-smi topology",
                    source,
                })?;
            let facts = amd_smi::facts_from_answers(&answers, TopologySource::RocmSmi).map_err(
                |source| DiscoverError::AmdSmi {
                    what: text.display().to_string(),
                    source,
                },
            )?;
            Ok((facts, None))
        }
        Source::Fixture(path) => {
            let rec = Recording::load(path)?;
            // Library answers are the richer record (UUIDs, link state,
            // NVSwitch, XGMI bandwidth); a recording made without a library
            // replays its command texts.
            let facts = if rec.amd_smi.is_some() {
                replay_amd_smi(&rec)?
            } else if rec.nvml.is_some() {
                replay_nvml(&rec)?
            } else {
                replay_commands(&rec)?
            };
            Ok((facts, Some(rec.node_name)))
        }
    }
}

/// Normalizes facts for `node_name` and judges the NVLinks.
pub fn build(node_name: &str, facts: NodeFacts) -> Result<Discovered, NormalizeError> {
    let spec = normalize(node_name, &facts)?;
    let findings = assess(&spec, &facts);
    Ok(Discovered {
        facts,
        spec,
        findings,
    })
}
