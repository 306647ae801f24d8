//! `kubectl get gtopo` as the real API server prints it: the GpuTopology
//! CRD's printer columns, evaluated by kube-apiserver (its Table output) on
//! objects the agent's pipeline builds from recorded machines. A partial
//! NVLink mesh shows its weakest pair under P2P, not `<none>`, and the
//! `Degraded` column is the condition's status.

use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use gputopo_testenv::TestEnv;
use gputopo_topology::discover::{Source, build, gather};
use gputopo_topology::object::gpu_topology;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// The GpuTopology the agent would publish for a recording, under `name`.
fn recorded(recording: &str, name: &str) -> GpuTopology {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/recorded")
        .join(recording);
    let (facts, _) = gather(&Source::Fixture(path)).unwrap_or_else(|e| panic!("{recording}: {e}"));
    let found = build(name, facts).unwrap_or_else(|e| panic!("{recording}: {e}"));
    gpu_topology(found.spec, &found.findings, Time(Timestamp::now()))
}

/// One object's row as `kubectl get` shows it: column name to cell.
async fn row(client: &kube::Client, name: &str) -> BTreeMap<String, Value> {
    let request = http::Request::get(format!("/apis/gputopo.dev/v1alpha1/gputopologies/{name}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .expect("a request");
    let text = client.request_text(request).await.expect("the Table");
    let table: Value = serde_json::from_str(&text).expect("JSON");
    let columns = table["columnDefinitions"].as_array().expect("columns");
    let cells = table["rows"][0]["cells"].as_array().expect("one row");
    columns
        .iter()
        .map(|c| c["name"].as_str().expect("a column name").to_owned())
        .zip(cells.iter().cloned())
        .collect()
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn kubectl_get_shows_vendor_interconnect_bottleneck_island_and_degraded() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    let topologies = Api::<GpuTopology>::all(client.clone());
    let cases = [
        // A cube-mesh: some pairs have no NVLink, so p2pLevel is null.
        (
            "dgx1-v100-nvml.yaml",
            json!([8, "nvidia", "nvlink-mesh", "SYS", 8, "False"]),
        ),
        // Two of GPU 3's links down: NV16 everywhere, and Degraded.
        (
            "hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml",
            json!([8, "nvidia", "nvswitch", "NV16", 8, "True"]),
        ),
    ];
    for (recording, expected) in cases {
        let name = env.unique_name("printer-columns");
        let object = recorded(recording, &name);
        let status = json!({ "status": object.status.clone() });
        topologies
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{recording}: {e}"));
        topologies
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("{recording}: {e}"));
        let row = row(&client, &name).await;
        let names: Vec<&str> = row.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "Age",
                "Degraded",
                "GPUs",
                "Interconnect",
                "Island",
                "Name",
                "P2P",
                "Product",
                "Vendor"
            ],
            "{recording}"
        );
        let shown: Vec<&Value> = [
            "GPUs",
            "Vendor",
            "Interconnect",
            "P2P",
            "Island",
            "Degraded",
        ]
        .iter()
        .map(|c| &row[*c])
        .collect();
        assert_eq!(json!(shown), expected, "{recording}: {row:?}");
    }
}
