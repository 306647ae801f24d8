//! `gputopo-agent discover` as docs/contract.md's command-line contract states it:
//! `-o json` is one JSON document on stdout; errors go to stderr with a
//! non-zero exit and nothing on stdout.

use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputopo-agent"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env_remove("NODE_NAME")
        .output()
        .expect("the agent binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("UTF-8 stderr")
}

const DGX_A100: &str = "fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt";

#[test]
fn json_is_the_gpu_topology_object() {
    let o = agent(&[
        "discover",
        "--nvidia-smi-topo",
        DGX_A100,
        "--node",
        "dgx-a100-1",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON document");
    assert_eq!(v["apiVersion"], "gputopo.dev/v1alpha1");
    assert_eq!(v["kind"], "GpuTopology");
    assert_eq!(v["metadata"]["name"], "dgx-a100-1");
    assert_eq!(v["spec"]["nodeName"], "dgx-a100-1");
    assert_eq!(v["spec"]["source"], "nvidia-smi");
    assert_eq!(v["spec"]["summary"]["p2pLevel"], "NV12");
    assert_eq!(v["spec"]["links"].as_array().map(Vec::len), Some(28));
    assert_eq!(
        v["spec"]["links"][0],
        serde_json::json!({"a": 0, "b": 1, "type": "NV", "nvlinks": 12})
    );
    // What a bare matrix cannot know is null, not invented.
    assert_eq!(v["spec"]["gpus"][0]["uuid"], serde_json::Value::Null);
    assert_eq!(v["spec"]["gpus"][0]["memoryMiB"], serde_json::Value::Null);
    assert_eq!(v["spec"]["driverVersion"], serde_json::Value::Null);
    assert_eq!(v["status"]["conditions"][0]["type"], "Degraded");
    assert_eq!(v["status"]["conditions"][0]["status"], "False");
    // And it reads back as the typed object.
    let typed: gputopo_api::GpuTopology = serde_json::from_value(v).expect("typed");
    assert_eq!(typed.spec.gpus.len(), 8);
}

#[test]
fn yaml_is_the_same_object() {
    let o = agent(&[
        "discover",
        "--nvidia-smi-topo",
        DGX_A100,
        "--node",
        "n",
        "-o",
        "yaml",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let typed: gputopo_api::GpuTopology = serde_yaml::from_str(&stdout(&o)).expect("typed YAML");
    assert_eq!(typed.spec.summary.p2p_level.as_deref(), Some("NV12"));
}

#[test]
fn labels_are_key_value_lines() {
    let o = agent(&[
        "discover",
        "--nvidia-smi-topo",
        DGX_A100,
        "--node",
        "n",
        "-o",
        "labels",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"nvidia.com/nvlink.p2p.level=NV12"), "{out}");
    assert!(lines.contains(&"nvidia.com/gpu.count=8"), "{out}");
    assert!(
        lines.contains(&"gputopo.dev/interconnect=nvswitch"),
        "{out}"
    );
    assert!(
        lines.contains(&"gputopo.dev/nvlink.largest-island=8"),
        "{out}"
    );
    assert!(lines.iter().all(|l| l.split_once('=').is_some()), "{out}");

    let o = agent(&[
        "discover",
        "--nvidia-smi-topo",
        DGX_A100,
        "--node",
        "n",
        "-o",
        "labels",
        "--gfd-compatible-labels=false",
    ]);
    assert!(
        !stdout(&o).contains("nvidia.com/gpu.count"),
        "GFD labels are off"
    );
    assert!(stdout(&o).contains("nvidia.com/nvlink.p2p.level=NV12"));
}

#[test]
fn a_garbled_matrix_is_an_error_naming_file_line_and_column() {
    let bad = "fixtures/nvidia/h100-h200-class-8gpu-numa-off-12nic-aihub0008-MALFORMED-missing-tabs-topo-m.txt";
    let o = agent(&[
        "discover",
        "--nvidia-smi-topo",
        bad,
        "--node",
        "n",
        "-o",
        "json",
    ]);
    assert!(!o.status.success());
    assert!(o.stdout.is_empty(), "no partial output on stdout");
    let e = stderr(&o);
    assert!(
        e.contains(bad) && e.contains("line 7") && e.contains("column"),
        "{e}"
    );
    assert!(e.contains("PIXNODE"), "{e}");
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let o = agent(&[
        "discover",
        "--nvidia-smi-topo",
        "no/such/file.txt",
        "--node",
        "n",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no/such/file.txt"), "{}", stderr(&o));
}

#[test]
fn nvml_without_a_driver_says_so() {
    let o = agent(&["discover", "--nvml", "--node", "n", "-o", "json"]);
    if o.status.success() {
        eprintln!(
            "skipped: NVML loaded on this machine, so there is no missing-driver error to check"
        );
        return;
    }
    assert!(o.stdout.is_empty());
    assert!(
        stderr(&o).contains("NVML not available: "),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_source_is_required_and_only_one() {
    let o = agent(&["discover", "--node", "n"]);
    assert!(!o.status.success());
    let o = agent(&["discover", "--nvml", "--nvidia-smi-topo", DGX_A100]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn fixture_replay_takes_the_recorded_node_name() {
    let o = agent(&[
        "discover",
        "--fixture",
        "fixtures/recorded/dgx1-v100-nvml.yaml",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v["spec"]["source"], "fixture");
    assert!(
        v["metadata"]["name"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
    );
    assert!(
        v["spec"]["gpus"][0]["uuid"].as_str().is_some(),
        "NVML knows UUIDs"
    );
}

#[test]
fn record_without_nvml_or_nvidia_smi_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("rec.yaml");
    let o = Command::new(env!("CARGO_BIN_EXE_gputopo-agent"))
        .args(["record", "--node", "n", "--output"])
        .arg(&out)
        .env("PATH", dir.path()) // no nvidia-smi on this PATH
        .output()
        .expect("runs");
    if o.status.success() {
        eprintln!("skipped: NVML is present here");
        return;
    }
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to record"));
    assert!(!out.exists(), "no partial file");
}

#[test]
fn amd_smi_without_the_library_says_so_and_fails() {
    let o = agent(&[
        "discover",
        "--amd-smi",
        "--amd-smi-library",
        "/nonexistent/libamd_smi.so",
        "--node",
        "n",
    ]);
    assert!(!o.status.success());
    assert!(stdout(&o).is_empty());
    assert!(
        stderr(&o).contains("AMD SMI not available: "),
        "{}",
        stderr(&o)
    );
    // Without a path: this machine has no ROCm, so the default search fails too.
    let o = agent(&["discover", "--amd-smi", "--node", "n"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("AMD SMI not available: "),
        "{}",
        stderr(&o)
    );
}

#[test]
fn backend_auto_without_either_library_names_both_and_fails() {
    let o = agent(&[
        "discover",
        "--backend",
        "auto",
        "--nvml-library",
        "/nonexistent/libnvidia-ml.so.1",
        "--amd-smi-library",
        "/nonexistent/libamd_smi.so",
        "--node",
        "n",
    ]);
    assert!(!o.status.success());
    assert!(stdout(&o).is_empty());
    let err = stderr(&o);
    assert!(
        err.contains("--backend auto tried NVML, then AMD SMI"),
        "{err}"
    );
    assert!(err.contains("NVML not available: "), "{err}");
    assert!(err.contains("/nonexistent/libamd_smi.so"), "{err}");
    // --backend amd-smi is --amd-smi; and it is one source among the others.
    let o = agent(&["discover", "--backend", "amd-smi", "--node", "n"]);
    assert!(
        stderr(&o).contains("AMD SMI not available: "),
        "{}",
        stderr(&o)
    );
    let o = agent(&[
        "discover",
        "--backend",
        "auto",
        "--nvidia-smi-topo",
        DGX_A100,
    ]);
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    let o = agent(&["discover", "--backend", "nvidia", "--node", "n"]);
    assert!(
        stderr(&o).contains("[possible values: auto, nvml, amd-smi]"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn rocm_smi_and_amd_smi_texts_give_amd_objects_and_labels() {
    let o = agent(&[
        "discover",
        "--rocm-smi-topo",
        "fixtures/amd/amd-8gpu-two-xgmi-hives-of-4-pcie-between-64gb-likely-mi210-rocm-smi-showtopo.txt",
        "--node",
        "mi210-1",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON document");
    assert_eq!(v["spec"]["vendor"], "amd");
    assert_eq!(
        v["spec"]["islands"],
        serde_json::json!([[0, 1, 2, 3], [4, 5, 6, 7]])
    );
    assert_eq!(v["spec"]["links"][0]["type"], "XGMI");

    let o = agent(&[
        "discover",
        "--amd-smi-topo",
        "fixtures/amd/amd-smi-2gpu-xgmi-topology-json-RECONSTRUCTED.json",
        "--node",
        "n",
        "-o",
        "labels",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("gputopo.dev/xgmi.largest-hive=2"), "{out}");
    assert!(
        !out.contains("nvidia.com/"),
        "no NVIDIA labels on AMD nodes: {out}"
    );
}

/// `run` refuses durations and combinations that cannot work before it
/// does anything (no API server is needed to see it), naming the flag.
#[test]
fn run_refuses_settings_that_cannot_work() {
    let base = ["run", "--nvidia-smi-topo", DGX_A100, "--node", "n1"];
    let cases: [(&[&str], &str); 4] = [
        (
            &["--rescan-interval", "5m", "--allocations-heartbeat", "1m"],
            "--allocations-heartbeat (1m) must be at least --rescan-interval (5m)",
        ),
        (
            &["--scan-timeout", "0s"],
            "--scan-timeout must be longer than 0",
        ),
        (
            &["--pod-resources-timeout", "0s"],
            "--pod-resources-timeout must be longer than 0",
        ),
        (
            &[
                "--pod-resources=false",
                "--pod-resources-saved",
                "answer.json",
            ],
            "--pod-resources-saved needs --pod-resources=true",
        ),
    ];
    for (extra, expected) in cases {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let o = agent(&args);
        assert!(!o.status.success(), "{args:?} ran");
        assert!(stderr(&o).contains(expected), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}
