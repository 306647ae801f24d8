//! Agent recordings (`fixtures/recorded/*.yaml`): the YAML, then the
//! replay the CLI and the tests do (AMD SMI answers, else NVML answers with
//! the recorded sysfs, else the command texts), then the agent's pipeline.

use super::nvidia_smi::publish;
use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::{NVIDIA_TEXTS, RECORDINGS};
use crate::value::Documents;
use gputopo_topology::backend::recording::{
    NVLINK_COMMAND, QUERY_COMMAND, Recording, TOPO_COMMAND, replay_amd_smi, replay_commands,
    replay_nvml,
};
use proptest::prelude::*;
use std::sync::{Arc, LazyLock};

const WORDS: &[&str] = &[
    "apiVersion: gputopo.dev/recording-v1",
    "kind: Recording",
    "nvml:",
    "amdSmi:",
    "commands:",
    "sysfs:",
    "devices:",
    "pairs:",
    "nvlinks:",
    "index: ",
    "- ",
    "  ",
    "null",
    "~",
    "!!binary",
    "&a",
    "*a",
    "<<: *a",
    "? ",
    "|",
    ">-",
];

/// The recordings, and one holding only command texts (replayed through
/// the nvidia-smi parsers).
static SEEDS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    let topo = NVIDIA_TEXTS
        .iter()
        .find(|t| t.contains("NV12"))
        .cloned()
        .unwrap_or_default();
    let commands = serde_json::json!({
        "apiVersion": "gputopo.dev/recording-v1",
        "kind": "Recording",
        "nodeName": "commands-only",
        "recordedAt": "2026-01-01T00:00:00Z",
        "nvml": null,
        "nvmlError": "NVML not found",
        "commands": {TOPO_COMMAND: topo, NVLINK_COMMAND: "", QUERY_COMMAND: ""},
    });
    RECORDINGS
        .iter()
        .cloned()
        .chain(std::iter::once(
            serde_yaml::to_string(&commands).expect("YAML"),
        ))
        .collect()
});

static DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&SEEDS));

pub mod nvml_recording {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![
            texts(SEEDS.clone(), WORDS),
            DOCUMENTS.yaml(),
            DOCUMENTS.json()
        ]
        .boxed()
    }

    pub fn check(text: &str) -> Verdict {
        let Ok(rec) = Recording::from_yaml_str(text, "fuzz.yaml") else {
            return Verdict::Rejected;
        };
        let _ = rec.to_yaml();
        // Each replay, as far as it goes, then the one `discover` picks.
        let amd = replay_amd_smi(&rec);
        let nvml = replay_nvml(&rec);
        let commands = replay_commands(&rec);
        let chosen = if rec.amd_smi.is_some() {
            amd
        } else if rec.nvml.is_some() {
            nvml
        } else {
            commands
        };
        match chosen {
            Ok(facts) => publish(&facts),
            Err(_) => Verdict::Rejected,
        }
    }
}
