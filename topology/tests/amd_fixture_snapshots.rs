//! Snapshot of every AMD fixture's normalized output (insta): `rocm-smi`
//! captures through the rocm-smi parser, `amd-smi-*` files through the
//! amd-smi parser. Files that are not topology snapshot their error.

use gputopo_api::TopologySource;
use gputopo_topology::backend::amd_smi::facts_from_answers;
use gputopo_topology::discover::build;
use gputopo_topology::labels::{LabelOptions, node_labels};
use gputopo_topology::parse::{amd_smi, rocm_smi};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct Outcome {
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<gputopo_api::GpuTopologySpec>,
}

#[test]
fn every_amd_fixture() {
    insta::glob!("../../fixtures/amd", "*.{txt,json}", |path| {
        let text = std::fs::read_to_string(path).expect("fixture readable");
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let parsed = if name.starts_with("amd-smi-") {
            amd_smi::parse(&text)
        } else {
            rocm_smi::parse(&text)
        };
        let found = parsed
            .map_err(|e| e.to_string())
            .and_then(|a| {
                facts_from_answers(&a, TopologySource::RocmSmi).map_err(|e| e.to_string())
            })
            .and_then(|f| build("fixture-node", f).map_err(|e| e.to_string()));
        let outcome = match found {
            Err(error) => Outcome {
                error: Some(error),
                labels: None,
                spec: None,
            },
            Ok(found) => Outcome {
                error: None,
                labels: Some(node_labels(&found.spec, LabelOptions::default())),
                spec: Some(found.spec),
            },
        };
        insta::assert_yaml_snapshot!(outcome);
    });
}
