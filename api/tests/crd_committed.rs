//! The CRD copies committed for operators must be exactly what the Rust types
//! generate (kube-rs controller-rs style): a changed field fails CI here until
//! the YAML is regenerated. The chart's copy is a file its CRD template
//! reads (`helm/gputopo/templates/crd-gputopologies.yaml` adds only labels
//! and the keep annotation), so `helm upgrade` ships exactly this.

use std::path::Path;

const COPIES: [&str; 2] = [
    "daemonset/crd-gputopologies.yaml",
    "helm/gputopo/files/gputopologies.gputopo.dev.yaml",
];

#[test]
fn committed_crd_copies_match_the_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let generated = gputopo_api::crd_yaml();
    for copy in COPIES {
        let committed = std::fs::read_to_string(root.join(copy))
            .unwrap_or_else(|e| panic!("{copy}: cannot read the committed CRD: {e}"));
        assert!(
            committed == generated,
            "{copy} has drifted from the GpuTopology Rust types; regenerate it with\n  cargo run -p gputopo -- crd > {copy}"
        );
    }
}

#[test]
fn crd_has_the_contract_shape() {
    let crd: serde_json::Value = serde_yaml::from_str(
        gputopo_api::crd_yaml()
            .split_once("---\n")
            .map(|(_, body)| body)
            .expect("a document separator"),
    )
    .expect("the CRD is YAML");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["group"], "gputopo.dev");
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert!(version["subresources"]["status"].is_object());
    let columns: Vec<(&str, &str)> = version["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().expect("a column name"),
                c["jsonPath"].as_str().expect("a column path"),
            )
        })
        .collect();
    // P2P is the weakest pair's class, set on partial meshes too (p2pLevel
    // is not); Degraded is the condition's status.
    assert_eq!(
        columns,
        [
            ("GPUs", ".spec.summary.gpuCount"),
            ("Vendor", ".spec.vendor"),
            ("Product", ".spec.summary.product"),
            ("Interconnect", ".spec.summary.interconnect"),
            ("P2P", ".spec.summary.p2pBottleneck"),
            ("Island", ".spec.summary.largestIsland"),
            (
                "Degraded",
                ".status.conditions[?(@.type==\"Degraded\")].status"
            ),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for field in [
        "nodeName",
        "source",
        "driverVersion",
        "gpus",
        "links",
        "nics",
        "islands",
        "summary",
    ] {
        assert!(
            spec[field].is_object(),
            "spec.{field} missing from the schema"
        );
    }
    let gpu = &spec["gpus"]["items"]["properties"];
    for field in [
        "index",
        "uuid",
        "product",
        "memoryMiB",
        "pciBusId",
        "numaNode",
        "cpuAffinity",
        "migEnabled",
    ] {
        assert!(
            gpu[field].is_object(),
            "gpus[].{field} missing from the schema"
        );
    }
    // Bounds the API server enforces: no object can make a reader walk a
    // huge list or claim more NVLinks than any GPU has.
    assert_eq!(
        spec["gpus"]["maxItems"],
        gputopo_api::MAX_GPUS_PER_NODE as u64
    );
    let per_pair = gputopo_api::MAX_GPUS_PER_NODE * (gputopo_api::MAX_GPUS_PER_NODE - 1) / 2;
    assert_eq!(spec["links"]["maxItems"], per_pair as u64);
    let link_props = &spec["links"]["items"]["properties"];
    assert_eq!(
        link_props["nvlinks"]["maximum"].as_f64(),
        Some(f64::from(gputopo_api::MAX_BONDED_NVLINKS))
    );
    let top_index = (gputopo_api::MAX_GPUS_PER_NODE - 1) as f64;
    for index in [&gpu["index"], &link_props["a"], &link_props["b"]] {
        assert_eq!(index["maximum"].as_f64(), Some(top_index));
    }
    assert_eq!(
        spec["links"]["items"]["x-kubernetes-validations"][0]["rule"],
        "self.a < self.b"
    );
    // Fields a source cannot know are null, so the schema must allow null.
    assert_eq!(gpu["uuid"]["nullable"], true);
    assert_eq!(spec["summary"]["properties"]["p2pLevel"]["nullable"], true);
    assert_eq!(
        spec["links"]["items"]["properties"]["type"]["enum"],
        serde_json::json!(["SYS", "NODE", "PHB", "PXB", "PIX", "XGMI", "NV"])
    );
    // AMD's additions are optional, so NVIDIA objects written before them stay valid.
    let required = |v: &serde_json::Value| v["required"].as_array().cloned().unwrap_or_default();
    assert!(!required(spec_object(&crd)).contains(&serde_json::json!("vendor")));
    let link = &spec["links"]["items"];
    for field in ["hops", "weight", "bandwidth"] {
        assert!(link["properties"][field].is_object(), "links[].{field}");
        assert!(
            !required(link).contains(&serde_json::json!(field)),
            "{field} optional"
        );
    }
}

fn spec_object(crd: &serde_json::Value) -> &serde_json::Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
}
