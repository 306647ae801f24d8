//! `explain` on the cluster fixtures agreeing with the library's decision,
//! what nodes report, DRA claims, and its bad inputs.

use super::{gputopo, json, root, stderr};
use gputopo::claims;
use gputopo::cluster::{self, Overrides};
use gputopo_scheduler_core::dra::DraConfig;
use gputopo_scheduler_core::schedule::schedule_pod;
use std::path::{Path, PathBuf};
use std::process::Output;

fn cluster_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("fixtures/clusters"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn pod_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("fixtures/clusters/pods"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root())
        .unwrap_or(p)
        .to_string_lossy()
        .to_string()
}

#[test]
fn explain_on_every_cluster_fixture_matches_the_library() {
    assert!(cluster_files().len() >= 3);
    for cluster_path in cluster_files() {
        let loaded =
            cluster::load(&cluster_path, &Overrides::default()).expect("cluster fixture loads");
        for pod_path in pod_files() {
            let out = gputopo(&[
                "explain",
                "--cluster",
                &rel(&cluster_path),
                "--pod",
                &rel(&pod_path),
                "-o",
                "json",
            ]);
            let pod = cluster::load_pod(&pod_path).unwrap();
            let what = format!("{} {}", rel(&cluster_path), rel(&pod_path));
            if claims::uses_claims(&pod) {
                match claims::explain_pod_claims(&loaded, &pod, &DraConfig::default()) {
                    // A cluster file without the pod's claims.
                    Err(e) => {
                        assert_eq!(out.status.code(), Some(2), "{what}");
                        assert!(stderr(&out).contains(&e.to_string()), "{what}: {e}");
                    }
                    Ok((e, _)) => {
                        assert!(out.status.success(), "{what}: {}", stderr(&out));
                        let v = json(&out);
                        let rows = v["nodes"].as_array().unwrap();
                        assert_eq!(rows.len(), loaded.snapshot.len(), "{what}");
                        assert_eq!(rows.len(), e.rows.len(), "{what}");
                        for (row, r) in rows.iter().zip(&e.rows) {
                            assert_eq!(row["node"], r.node.as_str(), "{what}");
                            assert_eq!(row["verdict"], r.verdict.as_str(), "{what}");
                        }
                    }
                }
                continue;
            }
            let decision = schedule_pod(&loaded.snapshot, &pod, &loaded.config);
            if decision
                .unschedulable()
                .is_some_and(|u| u.invalid_pod.is_some())
            {
                assert_eq!(out.status.code(), Some(2), "{what}");
                assert!(
                    stderr(&out).contains("gputopo.dev/"),
                    "{what}: {}",
                    stderr(&out)
                );
                continue;
            }
            assert!(out.status.success(), "{what}: {}", stderr(&out));
            let v = json(&out);
            assert_eq!(
                v["nodes"].as_array().unwrap().len(),
                loaded.snapshot.len(),
                "{what}"
            );
            match decision.placement() {
                Some(p) => {
                    assert_eq!(v["decision"]["placed"]["node"], p.node.as_str(), "{what}");
                    assert_eq!(v["nodes"][0]["verdict"], "chosen");
                    assert_eq!(v["nodes"][0]["node"], p.node.as_str());
                }
                None => {
                    let message = v["decision"]["unschedulable"]["message"].as_str().unwrap();
                    assert!(
                        message.starts_with(&format!(
                            "0/{} nodes are available: ",
                            loaded.snapshot.len()
                        )),
                        "{message}"
                    );
                }
            }
        }
    }
}

/// `fixtures/clusters/kube-list.yaml`: gpu-b's kubelet gave `ml/trainer`
/// GPUs 0 and 2 where gputopo chose the NVLink pair 0,1.
fn explain_kube_list(now: &str, output: &str) -> Output {
    gputopo(&[
        "explain",
        "--cluster",
        "fixtures/clusters/kube-list.yaml",
        "--pod",
        "fixtures/clusters/pods/chat-share.yaml",
        "--now",
        now,
        "-o",
        output,
    ])
}

#[test]
fn explain_shows_what_nodes_report_and_where_it_differs_from_the_choice() {
    let out = explain_kube_list("2026-03-01T10:05:00Z", "text");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("What nodes report"), "{text}");
    assert!(
        text.contains("gpu-b: read 2026-03-01T10:00:00Z (fresh)"),
        "{text}"
    );
    assert!(text.contains("GPU 2: ml/trainer/c (whole)"), "{text}");
    let mismatch = text
        .lines()
        .find(|l| l.contains("MISMATCH"))
        .unwrap_or_else(|| panic!("no mismatch line:\n{text}"));
    assert!(
        mismatch.contains("ml/trainer")
            && mismatch.contains("GPUs 0,1")
            && mismatch.contains("reports 0,2")
            && mismatch.contains("NV12 ring chosen, got SYS ring"),
        "{mismatch}"
    );
    let doc = json(&explain_kube_list("2026-03-01T10:05:00Z", "json"));
    let reported = doc["reportedByNodes"].as_array().expect("reportedByNodes");
    assert_eq!(reported.len(), 2, "{doc}");
    assert_eq!(reported[1]["node"], "gpu-b");
    assert_eq!(reported[1]["mismatches"].as_array().map(Vec::len), Some(1));
}

#[test]
fn explain_does_not_believe_a_stale_report() {
    let out = explain_kube_list("2026-03-02T10:00:00Z", "text");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gpu-b: read 2026-03-01T10:00:00Z (stale)"),
        "{text}"
    );
    assert!(!text.contains("MISMATCH"), "{text}");
    let bad = gputopo(&[
        "explain",
        "--cluster",
        "fixtures/clusters/kube-list.yaml",
        "--pod",
        "fixtures/clusters/pods/chat-share.yaml",
        "--now",
        "yesterday",
    ]);
    assert_eq!(bad.status.code(), Some(2), "bad --now is bad input");
    assert!(stderr(&bad).contains("--now"), "{}", stderr(&bad));
}

#[test]
fn explain_reproduces_the_contract_message() {
    let out = gputopo(&[
        "explain",
        "--cluster",
        "fixtures/clusters/busy-64.yaml",
        "--pod",
        "fixtures/clusters/pods/train-4gpu-nv12.yaml",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json(&out)["decision"]["unschedulable"]["message"],
        "0/64 nodes are available: 40 too few free GPUs, 24 no 4-GPU set with NV12."
    );
    let text = gputopo(&[
        "explain",
        "--cluster",
        "fixtures/clusters/busy-64.yaml",
        "--pod",
        "fixtures/clusters/pods/train-4gpu-nv12.yaml",
    ]);
    let table = String::from_utf8_lossy(&text.stdout);
    assert!(
        table.contains("NODE") && table.contains("dgx1-24"),
        "{table}"
    );
    assert_eq!(table.lines().filter(|l| l.contains("rejected")).count(), 64);
}

#[test]
fn explain_bad_inputs_exit_2() {
    let out = gputopo(&[
        "explain",
        "--cluster",
        "fixtures/clusters/nope.yaml",
        "--pod",
        "fixtures/clusters/pods/train-4gpu.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nope.yaml"));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("c.yaml");
    std::fs::write(&bad, "nodes:\n  - name: n\n    allocatable: {cpu: lots}\n").unwrap();
    let out = gputopo(&[
        "explain",
        "--cluster",
        bad.to_str().unwrap(),
        "--pod",
        "fixtures/clusters/pods/train-4gpu.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("nodes[0].allocatable.cpu"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&bad, "nodes:\n  - name: n\n    topology: missing\n").unwrap();
    let out = gputopo(&[
        "explain",
        "--cluster",
        bad.to_str().unwrap(),
        "--pod",
        "fixtures/clusters/pods/train-4gpu.yaml",
    ]);
    assert!(
        stderr(&out).contains("nodes[0].topology"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&bad, "nodez: []\n").unwrap();
    let out = gputopo(&[
        "explain",
        "--cluster",
        bad.to_str().unwrap(),
        "--pod",
        "fixtures/clusters/pods/train-4gpu.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nodez"), "{}", stderr(&out));
}

/// `fixtures/clusters/dra-list.yaml` with `pods/dra-pair.yaml`.
fn explain_dra(output: &str) -> Output {
    gputopo(&[
        "explain",
        "--cluster",
        "fixtures/clusters/dra-list.yaml",
        "--pod",
        "fixtures/clusters/pods/dra-pair.yaml",
        "-o",
        output,
    ])
}

#[test]
fn explain_names_the_devices_a_claim_would_get() {
    let out = explain_dra("json");
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let placed = &v["decision"]["placed"];
    assert_eq!(placed["node"], "pcie-a", "{v}");
    assert_eq!(placed["gpus"], serde_json::json!([0, 1]), "{v}");
    assert_eq!(placed["bottleneck"], "NV12", "{v}");
    let explanation = placed["explanation"].as_str().unwrap();
    assert!(
        explanation.contains(
            "devices pair: gpu.nvidia.com/pcie-a/gpu-0, pair: gpu.nvidia.com/pcie-a/gpu-1"
        ),
        "{explanation}"
    );
    let rows = v["nodes"].as_array().unwrap();
    let row = |node: &str| {
        rows.iter()
            .find(|r| r["node"] == node)
            .unwrap_or_else(|| panic!("no row for {node}: {v}"))
    };
    assert_eq!(rows[0]["node"], "pcie-a");
    assert_eq!(
        rows[0]["devices"],
        serde_json::json!([
            {"claim": "ml/pair", "request": "gpus", "device": "gpu.nvidia.com/pcie-a/gpu-0", "gpu": 0},
            {"claim": "ml/pair", "request": "gpus", "device": "gpu.nvidia.com/pcie-a/gpu-1", "gpu": 1},
        ])
    );
    // pcie-b: the other scheduler's claims hold 0 and 2; what is left crosses the sockets.
    let b = row("pcie-b");
    assert_eq!(b["verdict"], "feasible");
    assert_eq!(b["gpus"], serde_json::json!([1, 3]));
    assert_eq!(b["bottleneck"], "SYS");
    let c = row("pcie-c");
    assert_eq!(c["verdict"], "rejected");
    assert!(c.get("devices").is_none(), "{c}");
    let reason = c["reason"].as_str().unwrap();
    assert!(
        reason.contains("ml/pair") && reason.contains("gpus"),
        "{reason}"
    );

    let text = explain_dra("text");
    assert!(text.status.success(), "{}", stderr(&text));
    let table = String::from_utf8_lossy(&text.stdout);
    assert!(
        table.contains("pod ml/trainer: placed on pcie-a, GPUs 0,1 (bottleneck NV12)"),
        "{table}"
    );
    assert!(table.contains("gpu.nvidia.com/pcie-b/gpu-1"), "{table}");
}

#[test]
fn explain_refuses_a_claim_pod_whose_claim_is_not_in_the_cluster_file() {
    let out = gputopo(&[
        "explain",
        "--cluster",
        "fixtures/clusters/kube-list.yaml",
        "--pod",
        "fixtures/clusters/pods/dra-pair.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("dra-pair.yaml")
            && err.contains("spec.resourceClaims")
            && err.contains("ml/pair"),
        "{err}"
    );
}
