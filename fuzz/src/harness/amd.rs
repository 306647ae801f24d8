//! AMD's tools as saved text: `rocm-smi --showtopo` / `--showtoponuma` and
//! `amd-smi topology` (tables and `--json`), then the AMD backend's facts
//! and the agent's pipeline.

use super::nvidia_smi::publish;
use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::AMD_TEXTS;
use crate::value::Documents;
use gputopo_api::TopologySource;
use gputopo_topology::backend::amd_smi::{AmdSmiAnswers, facts_from_answers};
use gputopo_topology::parse::{AmdTextError, amd_smi as amd_smi_text, rocm_smi as rocm_smi_text};
use proptest::prelude::*;
use std::sync::{Arc, LazyLock};

const WORDS: &[&str] = &[
    "GPU[0]",
    "GPU[7]",
    "GPU[4294967296]",
    "GPU 0",
    "GPU0",
    "GPU1",
    "XGMI",
    "PCIE",
    "N/A",
    "(Topology) Numa Node: ",
    "(Topology) Numa Affinity: ",
    "=== Weight between two GPUs ===",
    "=== Hops between two GPUs ===",
    "=== Link Type between two GPUs ===",
    "=== Numa Nodes ===",
    "WARNING:",
    "WEIGHT TABLE:",
    "HOPS TABLE:",
    "LINK TYPE TABLE:",
    "NUMA BW TABLE:",
    "ACCESS TABLE:",
    "0000:0c:00.0",
    "50000-100000",
    "ENABLED",
    "DISABLED",
    "\"gpu\":",
    "\"links\":",
];

fn facts(parsed: Result<AmdSmiAnswers, AmdTextError>) -> Verdict {
    let Ok(answers) = parsed else {
        return Verdict::Rejected;
    };
    match facts_from_answers(&answers, TopologySource::RocmSmi) {
        Ok(facts) => publish(&facts),
        Err(_) => Verdict::Rejected,
    }
}

/// The amd-smi JSON fixtures, for edits that keep them JSON.
static JSON: LazyLock<Documents> = LazyLock::new(|| {
    let json: Vec<String> = AMD_TEXTS
        .iter()
        .filter(|t| t.trim_start().starts_with('['))
        .cloned()
        .collect();
    Documents::new(&json)
});

fn all_texts() -> Arc<[String]> {
    AMD_TEXTS.clone()
}

pub mod rocm_smi {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        texts(all_texts(), WORDS)
    }

    pub fn check(text: &str) -> Verdict {
        facts(rocm_smi_text::parse(text))
    }
}

pub mod amd_smi {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![2 => texts(all_texts(), WORDS), 1 => JSON.json()].boxed()
    }

    pub fn check(text: &str) -> Verdict {
        facts(amd_smi_text::parse(text))
    }
}
