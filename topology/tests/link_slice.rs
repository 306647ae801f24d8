//! gputopo's link devices for recorded machines: which GPUs share an
//! island, a PCIe switch and a rail, read off the machines' `topo -m`
//! outputs and NVML recordings (fixtures/INDEX.md gives each source).

use gputopo_api::GpuTopologySpec;
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::backend::recording::{Recording, replay_nvml};
use gputopo_topology::discover::build;
use gputopo_topology::dra_slice::{LINK_DRIVER, link_resource_slice};
use serde_json::Value;
use std::collections::BTreeMap;

fn read(rel: &str) -> String {
    let path = format!("{}/../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn from_topo(fixture: &str) -> GpuTopologySpec {
    let facts = facts_from_topo(&read(&format!("nvidia/{fixture}"))).expect("parses");
    build("node-a", facts).expect("builds").spec
}

/// Device name → its attributes, from the slice the agent would publish.
fn devices(spec: &GpuTopologySpec) -> BTreeMap<String, Value> {
    let slice = link_resource_slice("node-a", spec);
    assert_eq!(slice["spec"]["driver"], LINK_DRIVER);
    assert_eq!(slice["spec"]["nodeName"], "node-a");
    slice["spec"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| {
            assert_eq!(d["allowMultipleAllocations"], true, "{d}");
            (
                d["name"].as_str().expect("a name").to_string(),
                d["attributes"].clone(),
            )
        })
        .collect()
}

/// The GPUs (by index) grouped by the string or int attribute `attr`.
fn groups(devices: &BTreeMap<String, Value>, attr: &str) -> Vec<Vec<u32>> {
    let mut by: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for a in devices.values().filter(|a| a["type"]["string"] == "gpu") {
        let v = &a[attr];
        let key = v["string"]
            .as_str()
            .map(str::to_string)
            .or(v["int"].as_i64().map(|i| i.to_string()));
        let Some(key) = key else { continue };
        by.entry(key)
            .or_default()
            .push(a["index"]["int"].as_u64().expect("index") as u32);
    }
    let mut out: Vec<Vec<u32>> = by.into_values().collect();
    out.sort();
    out
}

#[test]
fn bridged_pairs_are_islands_of_two() {
    let spec = from_topo(
        "a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt",
    );
    let d = devices(&spec);
    assert_eq!(groups(&d, "island"), vec![vec![0, 1], vec![2, 3]]);
    assert_eq!(groups(&d, "numaNode"), vec![vec![0, 1], vec![2, 3]]);
    // SYS between the pairs and NV inside them: no PCIe switch is known shared.
    assert_eq!(
        groups(&d, "pcieSwitch"),
        vec![vec![0], vec![1], vec![2], vec![3]]
    );
    assert!(groups(&d, "rail").is_empty(), "no NIC, no rail");
}

#[test]
fn the_hybrid_cube_mesh_is_cut_into_fully_joined_quads() {
    // One connected fabric, but GPU 0 has no NVLink to 5, 6 or 7.
    let spec = from_topo("dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt");
    assert_eq!(spec.islands, vec![(0..8).collect::<Vec<u32>>()]);
    let d = devices(&spec);
    assert_eq!(
        groups(&d, "island"),
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
    );
    assert!(
        groups(&d, "numaNode").is_empty(),
        "no NUMA column: none published"
    );
}

#[test]
fn dgx_a100_gpus_get_the_nics_of_their_switch_one_each() {
    let spec = from_topo("dgx-a100-mlx5-names-12nic-topo-m.txt");
    let d = devices(&spec);
    assert_eq!(groups(&d, "island"), vec![(0..8).collect::<Vec<u32>>()]);
    assert_eq!(
        groups(&d, "pcieSwitch"),
        vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
    );
    let rail = |g: u32| d[&format!("gpu-{g}")]["rail"]["string"].clone();
    let rails: Vec<Value> = (0..8).map(rail).collect();
    let expected = [
        "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
    ];
    assert_eq!(rails, expected.map(Value::from).to_vec());
    // A NIC pairs with dranet's device by its RDMA name and shares its GPUs' switch.
    let nic = d
        .values()
        .find(|a| a["name"]["string"] == "mlx5_6")
        .expect("mlx5_6");
    assert_eq!(nic["dra.net/rdmaDevice"]["string"], "mlx5_6");
    assert_eq!(nic["rail"]["string"], "mlx5_6");
    assert_eq!(nic["pcieSwitch"], d["gpu-4"]["pcieSwitch"]);
    // Storage NICs reach no GPU through switches: a switch of their own.
    let storage = d
        .values()
        .find(|a| a["name"]["string"] == "mlx5_4")
        .expect("mlx5_4");
    assert!(
        d.values()
            .filter(|a| a["type"]["string"] == "gpu")
            .all(|g| g["pcieSwitch"] != storage["pcieSwitch"])
    );
}

#[test]
fn nvml_recordings_pair_by_uuid_and_bus_id() {
    let rec = Recording::from_yaml_str(&read("recorded/hgx-h100-8gpu-nvswitch-nvml.yaml"), "hgx")
        .expect("reads");
    let spec = build("node-a", replay_nvml(&rec).expect("replays"))
        .expect("builds")
        .spec;
    let d = devices(&spec);
    assert_eq!(groups(&d, "island"), vec![(0..8).collect::<Vec<u32>>()]);
    for g in &spec.gpus {
        let a = &d[&format!("gpu-{}", g.index)];
        assert_eq!(
            a["gpu.nvidia.com/uuid"]["string"].as_str(),
            g.uuid.as_deref()
        );
        let bus = a["resource.kubernetes.io/pciBusID"]["string"]
            .as_str()
            .expect("a bus id");
        assert_eq!(bus.len(), "0000:18:00.0".len(), "{bus}");
    }
}

#[test]
fn a_gpu_with_nvlinks_down_but_some_left_keeps_its_island() {
    let rec = Recording::from_yaml_str(
        &read("recorded/hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml"),
        "degraded",
    )
    .expect("reads");
    let spec = build("node-a", replay_nvml(&rec).expect("replays"))
        .expect("builds")
        .spec;
    let d = devices(&spec);
    let islands = groups(&d, "island");
    // Two links down leave GPU 3 on NVLink still: one island either way,
    // and every GPU in exactly one island.
    assert_eq!(
        islands.iter().map(Vec::len).sum::<usize>(),
        8,
        "{islands:?}"
    );
    assert_eq!(islands, spec.islands, "fully joined components stay whole");
}
