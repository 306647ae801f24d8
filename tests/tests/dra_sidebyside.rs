//! The DRA side by side (`gputopo-dra-sidebyside`, BENCHMARKS.md "Dynamic
//! Resource Allocation side by side") on one node of each model: the same
//! claims allocated by kube-scheduler's DRA plugin and by gputopo-scheduler,
//! each on a fresh control plane. The test reads the benchmark's JSON and
//! checks what must hold whatever the timing: every claim allocated on both
//! sides, no device given twice, each claim's devices as many as it asked,
//! gputopo on an optimal set at least as often as kube-scheduler, and the
//! figures counted from the allocations they summarise.

use gputopo_testenv::binaries::workspace_binary;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn dra_side_by_side_on_one_node_per_model_keeps_the_invariants() {
    let scheduler = workspace_binary("gputopo-scheduler", "gputopo-scheduler");
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = dir.path().join("dra.json");
    let out = Command::new(env!("CARGO_BIN_EXE_gputopo-dra-sidebyside"))
        .args(["--nodes-per-model", "1", "--fill", "0.6", "--seed", "7"])
        .args(["--timeout", "120"])
        .arg("--scheduler")
        .arg(&scheduler)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the benchmark runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| kube-scheduler |"), "{stdout}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON")).expect("JSON");
    let claims = doc["claims"].as_array().expect("claims");
    assert!(claims.len() >= 5, "{claims:?}");
    let results = doc["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    let mut optimal_by = Vec::new();
    for trial in results {
        let who = trial["scheduler"].as_str().expect("a scheduler");
        let allocations = trial["allocations"].as_array().expect("allocations");
        assert_eq!(allocations.len(), claims.len(), "{who}");
        let mut taken = BTreeSet::new();
        let mut multi = 0;
        let mut optimal = 0;
        for (a, plan) in allocations.iter().zip(claims) {
            assert_eq!(a["claim"], plan["name"], "{who}: same claims, same order");
            let node = a["node"]
                .as_str()
                .unwrap_or_else(|| panic!("{who}: {a} not allocated"));
            let devices = a["devices"].as_array().expect("devices");
            assert_eq!(
                Some(devices.len() as u64),
                plan["gpus"].as_u64(),
                "{who}: {a}"
            );
            for d in devices {
                let device = (node.to_string(), d.as_str().expect("a name").to_string());
                assert!(taken.insert(device.clone()), "{who}: {device:?} twice");
            }
            if let Some(o) = a["optimal"].as_bool() {
                multi += 1;
                optimal += usize::from(o);
            }
        }
        let figures = &trial["figures"];
        assert_eq!(figures["multi_gpu_allocated"], multi, "{who}");
        assert_eq!(figures["multi_gpu_optimal"], optimal, "{who}");
        assert_eq!(figures["allocated"], claims.len(), "{who}");
        optimal_by.push((who.to_string(), optimal));
    }
    assert_eq!(optimal_by[0].0, "kube-scheduler");
    assert_eq!(optimal_by[1].0, "gputopo-scheduler");
    assert!(optimal_by[1].1 >= optimal_by[0].1, "{optimal_by:?}");
}
