//! Snapshot of every recorded hardware fixture's normalized output (insta).
//! A change to the parser or normalizer that moves any field shows up here as
//! a reviewable diff. Files that are not (complete) matrices snapshot their error.

use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::backend::recording::{Recording, replay_nvml};
use gputopo_topology::discover::build;
use gputopo_topology::labels::{LabelOptions, node_labels};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct Outcome {
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    degraded: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<gputopo_api::GpuTopologySpec>,
}

fn outcome(facts: Result<gputopo_topology::facts::NodeFacts, String>) -> Outcome {
    let found = facts.and_then(|f| build("fixture-node", f).map_err(|e| e.to_string()));
    match found {
        Err(error) => Outcome {
            error: Some(error),
            labels: None,
            degraded: None,
            spec: None,
        },
        Ok(found) => Outcome {
            error: None,
            labels: Some(node_labels(&found.spec, LabelOptions::default())),
            degraded: Some(
                found
                    .findings
                    .iter()
                    .map(|f| format!("GPU{}: {}", f.gpu, f.detail))
                    .collect(),
            ),
            spec: Some(found.spec),
        },
    }
}

#[test]
fn every_nvidia_smi_fixture() {
    insta::glob!("../../fixtures/nvidia", "*.txt", |path| {
        let text = std::fs::read(path).expect("fixture readable");
        // Some captures hold non-UTF-8 bytes; the parser gets the lossy text.
        let text = String::from_utf8_lossy(&text);
        let result = outcome(facts_from_topo(&text).map_err(|e| e.to_string()));
        insta::assert_yaml_snapshot!(result);
    });
}

#[test]
fn every_recording() {
    insta::glob!("../../fixtures/recorded", "*.yaml", |path| {
        let result = outcome(
            Recording::load(path)
                .map_err(|e| e.to_string())
                .and_then(|rec| replay_nvml(&rec).map_err(|e| e.to_string())),
        );
        insta::assert_yaml_snapshot!(result);
    });
}
