//! Recordings: one YAML file holding everything the discovery backends saw on a
//! node (NVML answers, verbatim `nvidia-smi` stdout, sysfs), so a GPU machine can
//! be replayed anywhere, in tests and CI without a GPU.
//!
//! ```yaml
//! apiVersion: gputopo.dev/recording-v1
//! kind: Recording
//! nodeName: gpu-node-1
//! recordedAt: "2026-01-02T03:04:05Z"
//! host: { hostname: gpu-node-1, kernelVersion: 6.8.0, osVersion: null, cpuCount: 224, memoryMiB: 2063731 }
//! nvml: { driverVersion: 580.126.20, cudaDriverVersion: 13000, devices: [...], pairs: [...] }
//! commands:
//!   nvidia-smi topo -m: "\tGPU0\tGPU1 ..."
//! sysfs:
//!   00000000:18:00.0: { numaNode: 0, localCpulist: 0-55,112-167 }
//! ```
//!
//! Recording is the impure part ([`record`] asks the sources it is given);
//! loading and replaying are pure. The recording time is passed in by the
//! caller: nothing here reads a clock.

use crate::backend::amd_smi::{self, AmdSmiAnswers, AmdSmiError, AmdSmiSource};
use crate::backend::nvml::{NvmlAnswers, NvmlError, NvmlSource, facts_from_answers};
use crate::backend::sysfs::{
    HostFacts, RealSysfs, RecordedSysfs, SysfsDevice, SysfsNic, SysfsSource,
};
use crate::facts::NodeFacts;
use gputopo_api::TopologySource;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The format this agent writes.
pub const RECORDING_API_VERSION: &str = "gputopo.dev/recording-v1";
/// The formats this agent reads.
pub const ACCEPTED_API_VERSIONS: &[&str] = &[RECORDING_API_VERSION];
pub const RECORDING_KIND: &str = "Recording";

/// `commands` keys: the command line, words joined by one space.
pub const TOPO_COMMAND: &str = "nvidia-smi topo -m";
pub const NVLINK_COMMAND: &str = "nvidia-smi nvlink -s";
pub const QUERY_COMMAND: &str = "nvidia-smi -q";
pub const ROCM_SMI_TOPO_COMMAND: &str = "rocm-smi --showtopo";
pub const AMD_SMI_TOPO_COMMAND: &str = "amd-smi topology --json";

/// The commands [`record`] runs, in order (a node has one vendor's tools;
/// the others fail and are left out).
pub const RECORDED_COMMANDS: &[&[&str]] = &[
    &["nvidia-smi", "topo", "-m"],
    &["nvidia-smi", "nvlink", "-s"],
    &["nvidia-smi", "-q"],
    &["rocm-smi", "--showtopo"],
    &["amd-smi", "topology", "--json"],
];

/// Everything the backends saw on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recording {
    pub api_version: String,
    pub kind: String,
    pub node_name: String,
    /// RFC 3339, as the caller gave it.
    pub recorded_at: String,
    #[serde(default)]
    pub host: Option<HostFacts>,
    /// NVML's answers; null where NVML could not be loaded.
    #[serde(default)]
    pub nvml: Option<NvmlAnswers>,
    /// Why `nvml` is null, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_error: Option<String>,
    /// AMD SMI's answers, on AMD nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd_smi: Option<AmdSmiAnswers>,
    /// Why `amdSmi` is absent, when AMD SMI was asked and could not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd_smi_error: Option<String>,
    /// Command line → verbatim stdout. A command that failed is absent.
    #[serde(default)]
    pub commands: BTreeMap<String, String>,
    /// Canonical PCI bus id → what sysfs said (GPUs and RDMA NICs).
    #[serde(default)]
    pub sysfs: BTreeMap<String, SysfsDevice>,
    /// The RDMA devices sysfs lists (`/sys/class/infiniband`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdma_nics: Vec<SysfsNic>,
}

/// A recording could not be read, written or replayed. Each names the file (or
/// the node) and, for parse errors, the field path.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: cannot write: {source}")]
    Write {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// `path` is where deserialization failed, e.g. `nvml.devices[2].memoryMiB`.
    #[error("{file}: {path}: {message}")]
    Parse {
        file: String,
        path: String,
        message: String,
    },
    #[error(
        "{file}: apiVersion {found} is not a recording format this agent reads; accepted: {accepted}"
    )]
    Version {
        file: String,
        found: String,
        accepted: String,
    },
    #[error("{file}: kind {found} is not {RECORDING_KIND:?}")]
    Kind { file: String, found: String },
    #[error("recording of node {node}: cannot serialize to YAML: {message}")]
    Serialize { node: String, message: String },
    #[error(
        "recording of node {node}: holds no NVML answers ({why}); replay its nvidia-smi texts instead"
    )]
    NoNvml { node: String, why: String },
    #[error("recording of node {node}: {source}")]
    Nvml {
        node: String,
        #[source]
        source: NvmlError,
    },
    #[error("recording of node {node}: {source}")]
    AmdSmi {
        node: String,
        #[source]
        source: AmdSmiError,
    },
    #[error(
        "recording of node {node}: no {TOPO_COMMAND:?}, {ROCM_SMI_TOPO_COMMAND:?} or {AMD_SMI_TOPO_COMMAND:?} output was recorded"
    )]
    NoTopoText { node: String },
    #[error("recording of node {node}: replaying the nvidia-smi texts: {message}")]
    Commands { node: String, message: String },
}

impl Recording {
    /// Reads and checks a recording file.
    pub fn load(path: &Path) -> Result<Recording, RecordingError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RecordingError::Read {
            file: file.clone(),
            source,
        })?;
        Recording::from_yaml_str(&text, &file)
    }

    /// Parses a recording; `file` names it in errors. The format version is
    /// checked before the body, so a newer format gets a version error rather
    /// than a confusing field error.
    pub fn from_yaml_str(text: &str, file: &str) -> Result<Recording, RecordingError> {
        let parse_error = |path: &str, message: String| RecordingError::Parse {
            file: file.to_string(),
            path: path.to_string(),
            message,
        };
        let header: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| parse_error(".", e.to_string()))?;
        if !header.is_mapping() {
            return Err(parse_error(
                ".",
                "a recording is a YAML mapping with apiVersion, kind, nodeName, ...".into(),
            ));
        }
        match header.get("apiVersion") {
            None => return Err(parse_error("apiVersion", "missing field".into())),
            Some(serde_yaml::Value::String(v)) if ACCEPTED_API_VERSIONS.contains(&v.as_str()) => {}
            Some(other) => {
                return Err(RecordingError::Version {
                    file: file.to_string(),
                    found: yaml_inline(other),
                    accepted: ACCEPTED_API_VERSIONS.join(", "),
                });
            }
        }
        match header.get("kind") {
            None => return Err(parse_error("kind", "missing field".into())),
            Some(serde_yaml::Value::String(k)) if k == RECORDING_KIND => {}
            Some(other) => {
                return Err(RecordingError::Kind {
                    file: file.to_string(),
                    found: yaml_inline(other),
                });
            }
        }
        let de = serde_yaml::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            // serde_yaml prefixes some messages with the path (or its parent's);
            // the full path is said once, in front.
            let message = match message.split_once(": ") {
                Some((head, rest)) if !head.contains(' ') && path.starts_with(head) => {
                    rest.to_string()
                }
                _ => message,
            };
            parse_error(&path, message)
        })
    }

    /// The recording as YAML.
    pub fn to_yaml(&self) -> Result<String, RecordingError> {
        serde_yaml::to_string(self).map_err(|e| RecordingError::Serialize {
            node: self.node_name.clone(),
            message: e.to_string(),
        })
    }

    /// Writes the recording as YAML to `path`.
    pub fn save(&self, path: &Path) -> Result<(), RecordingError> {
        let text = self.to_yaml()?;
        let err = |source| RecordingError::Write {
            file: path.display().to_string(),
            source,
        };
        // Write beside the target, then rename: a failed write leaves no half file.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(err)?;
        tmp.persist(path).map_err(|e| err(e.error))?;
        Ok(())
    }

    /// A recorded command's stdout, by command line (`nvidia-smi topo -m`).
    pub fn command(&self, command_line: &str) -> Option<&str> {
        self.commands.get(command_line).map(String::as_str)
    }
}

/// A YAML scalar as one short line, for error messages.
fn yaml_inline(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => format!("{s:?}"),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "(unprintable)".to_string()),
    }
}

/// What the caller knows and the recording cannot find out itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordMeta {
    pub node_name: String,
    /// RFC 3339; the caller reads the clock.
    pub recorded_at: String,
    pub host: Option<HostFacts>,
    /// Why no NVML source is passed (the `RealNvml::init` error), for `nvmlError`.
    pub nvml_unavailable: Option<String>,
    /// Why no AMD SMI source is passed, for `amdSmiError` (None: not asked).
    pub amd_smi_unavailable: Option<String>,
}

/// Records what `nvml`, the commands and sysfs answer on this node.
///
/// Never fails: a source that cannot answer leaves its part empty (`nvml: null`
/// with `nvmlError`, a command absent from `commands`). sysfs is read for every
/// GPU NVML listed and every NVIDIA GPU sysfs itself lists.
pub fn record(
    nvml: Option<&dyn NvmlSource>,
    amd: Option<&dyn AmdSmiSource>,
    run_command: &dyn Fn(&[&str]) -> Option<String>,
    sysfs: &RealSysfs,
    meta: RecordMeta,
) -> Recording {
    let (answers, nvml_error) = match nvml {
        Some(src) => match src.snapshot() {
            Ok(answers) => (Some(answers), None),
            Err(e) => (None, Some(e.to_string())),
        },
        None => (
            None,
            Some(
                meta.nvml_unavailable
                    .clone()
                    .unwrap_or_else(|| "NVML was not consulted".to_string()),
            ),
        ),
    };

    let (amd_answers, amd_smi_error) = match amd {
        Some(src) => match src.snapshot() {
            Ok(answers) => (Some(answers), None),
            Err(e) => (None, Some(e.to_string())),
        },
        None => (None, meta.amd_smi_unavailable.clone()),
    };

    let commands = RECORDED_COMMANDS
        .iter()
        .filter_map(|argv| run_command(argv).map(|out| (argv.join(" "), out)))
        .collect();

    let mut bus_ids: BTreeSet<String> = sysfs.nvidia_gpus().into_iter().collect();
    if let Some(a) = &answers {
        bus_ids.extend(a.devices.iter().filter_map(|d| d.pci_bus_id.clone()));
    }
    let rdma_nics = sysfs.rdma_nics();
    bus_ids.extend(rdma_nics.iter().map(|n| n.pci_bus_id.clone()));
    let sysfs_map = bus_ids
        .into_iter()
        .map(|bus| {
            let dev = SysfsDevice {
                numa_node: sysfs.numa_node(&bus),
                local_cpulist: sysfs.local_cpulist(&bus),
                pci_path: sysfs.pci_path(&bus),
            };
            (bus, dev)
        })
        .collect();

    Recording {
        api_version: RECORDING_API_VERSION.to_string(),
        kind: RECORDING_KIND.to_string(),
        node_name: meta.node_name,
        recorded_at: meta.recorded_at,
        host: meta.host,
        nvml: answers,
        nvml_error,
        amd_smi: amd_answers,
        amd_smi_error,
        commands,
        sysfs: sysfs_map,
        rdma_nics,
    }
}

/// Runs a command and returns its stdout when it exits 0: the `run_command`
/// [`record`] wants on a real node. Not UTF-8 or not found → `None`.
pub fn run_command_stdout(argv: &[&str]) -> Option<String> {
    let (program, args) = argv.split_first()?;
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}

/// Replays a recording's NVML answers (with its recorded sysfs) into facts
/// whose source is `fixture`.
pub fn replay_nvml(rec: &Recording) -> Result<NodeFacts, RecordingError> {
    let answers = rec.nvml.as_ref().ok_or_else(|| RecordingError::NoNvml {
        node: rec.node_name.clone(),
        why: rec
            .nvml_error
            .clone()
            .unwrap_or_else(|| "nvml is null".to_string()),
    })?;
    let sysfs = RecordedSysfs::new(&rec.sysfs).with_nics(&rec.rdma_nics);
    facts_from_answers(answers, &sysfs, TopologySource::Fixture).map_err(|source| {
        RecordingError::Nvml {
            node: rec.node_name.clone(),
            source,
        }
    })
}

/// Replays a recording's AMD SMI answers into facts whose source is `fixture`.
pub fn replay_amd_smi(rec: &Recording) -> Result<NodeFacts, RecordingError> {
    let src = amd_smi::RecordedAmdSmi {
        answers: rec.amd_smi.clone().unwrap_or_default(),
    };
    amd_smi::facts_from_amd_smi(&src).map_err(|source| RecordingError::AmdSmi {
        node: rec.node_name.clone(),
        source,
    })
}

/// Replays a recording's `nvidia-smi` texts (`topo -m`, and `nvlink -s` and
/// `-q` where recorded) through the nvidia-smi backend; source `fixture`.
pub fn replay_commands(rec: &Recording) -> Result<NodeFacts, RecordingError> {
    let node = rec.node_name.clone();
    let amd_text = rec
        .command(AMD_SMI_TOPO_COMMAND)
        .map(|t| (t, "amd-smi", true))
        .or_else(|| {
            rec.command(ROCM_SMI_TOPO_COMMAND)
                .map(|t| (t, "rocm-smi", false))
        });
    if let (None, Some((text, tool, amd_smi_json))) = (rec.command(TOPO_COMMAND), amd_text) {
        let parsed = if amd_smi_json {
            crate::parse::amd_smi::parse(text)
        } else {
            crate::parse::rocm_smi::parse(text)
        };
        let commands_error = |message: String| RecordingError::Commands {
            node: node.clone(),
            message,
        };
        let answers = parsed.map_err(|e| commands_error(format!("{tool}: {e}")))?;
        return amd_smi::facts_from_answers(&answers, TopologySource::Fixture)
            .map_err(|e| commands_error(e.to_string()));
    }
    let topo = rec
        .command(TOPO_COMMAND)
        .ok_or_else(|| RecordingError::NoTopoText { node: node.clone() })?;
    let mut facts = crate::backend::nvidia_smi::facts_from_texts(
        topo,
        rec.command(NVLINK_COMMAND),
        rec.command(QUERY_COMMAND),
    )
    .map_err(|e| RecordingError::Commands {
        node,
        message: e.to_string(),
    })?;
    facts.source = TopologySource::Fixture;
    Ok(facts)
}
