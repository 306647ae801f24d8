//! The `gputopo` binary on real fixtures: `place` against a brute-force
//! optimum computed here from the parsed spec, its exit statuses and error
//! messages, every accepted topology form, and `explain` on the cluster
//! fixtures agreeing with the library's decision.

use gputopo::claims;
use gputopo::cluster::{self, Overrides};
use gputopo::topology;
use gputopo_api::{GpuTopology, GpuTopologySpec, LinkClass};
use gputopo_scheduler_core::dra::DraConfig;
use gputopo_scheduler_core::schedule::schedule_pod;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const DGX1: &str = "fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn gputopo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputopo"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the binary runs")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn spec(path: &str) -> GpuTopologySpec {
    topology::load(&root().join(path)).expect("the fixture parses")
}

fn class(spec: &GpuTopologySpec, a: u32, b: u32) -> LinkClass {
    spec.link(a, b).map_or(LinkClass::Sys, |l| l.class())
}

/// The best ring bottleneck (or weakest pair, `all_to_all`) of any `k` GPUs
/// of `free`, by trying every subset and, for rings, every order; `None` for one GPU.
fn brute_force(
    spec: &GpuTopologySpec,
    free: &[u32],
    k: usize,
    all_to_all: bool,
) -> Option<LinkClass> {
    fn subsets(pool: &[u32], k: usize, start: usize, cur: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..pool.len() {
            cur.push(pool[i]);
            subsets(pool, k, i + 1, cur, out);
            cur.pop();
        }
    }
    fn best_ring(spec: &GpuTopologySpec, set: &[u32]) -> LinkClass {
        fn permute(spec: &GpuTopologySpec, order: &mut Vec<u32>, i: usize, best: &mut LinkClass) {
            if i == order.len() {
                let n = order.len();
                let weakest = (0..n)
                    .map(|j| class(spec, order[j], order[(j + 1) % n]))
                    .min()
                    .unwrap_or(LinkClass::Sys);
                *best = (*best).max(weakest);
                return;
            }
            for j in i..order.len() {
                order.swap(i, j);
                permute(spec, order, i + 1, best);
                order.swap(i, j);
            }
        }
        let mut order = set.to_vec();
        let mut best = LinkClass::Sys;
        permute(spec, &mut order, 1, &mut best);
        best
    }
    if k == 1 {
        return None; // one GPU crosses no link
    }
    let mut all = Vec::new();
    subsets(free, k, 0, &mut Vec::new(), &mut all);
    all.iter()
        .map(|set| {
            if all_to_all || k == 2 {
                let mut weakest = LinkClass::Nv(64);
                for (i, &a) in set.iter().enumerate() {
                    for &b in &set[i + 1..] {
                        weakest = weakest.min(class(spec, a, b));
                    }
                }
                weakest
            } else {
                best_ring(spec, set)
            }
        })
        .max()
}

#[test]
fn place_dgx1_four_gpus_reaches_the_best_ring() {
    let s = spec(DGX1);
    let out = gputopo(&["place", "--topology", DGX1, "--gpus", "4", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json(&out);
    let gpus: Vec<u32> = serde_json::from_value(v["gpus"].clone()).unwrap();
    assert_eq!(gpus.len(), 4);
    let all: Vec<u32> = (0..8).collect();
    let best = brute_force(&s, &all, 4, false).unwrap();
    assert_eq!(v["bottleneck"], best.to_string());
    // The set itself has a ring that good.
    assert_eq!(brute_force(&s, &gpus, 4, false), Some(best));
    let score = v["score"].as_u64().unwrap();
    assert!(score <= 100);
    assert!(
        v["explanation"]
            .as_str()
            .unwrap()
            .contains("ring bottleneck")
    );
}

#[test]
fn place_honours_free_masks() {
    let s = spec(DGX1);
    for (free, k) in [
        ("0,1,5,6,7", 2),
        ("1,2,3,5,6", 3),
        ("0,4,5,6,7", 4),
        ("3", 1),
    ] {
        let out = gputopo(&[
            "place",
            "--topology",
            DGX1,
            "--gpus",
            &k.to_string(),
            "--free",
            free,
            "-o",
            "json",
        ]);
        assert!(out.status.success(), "{free}: {}", stderr(&out));
        let v = json(&out);
        let gpus: Vec<u32> = serde_json::from_value(v["gpus"].clone()).unwrap();
        let free: Vec<u32> = free.split(',').map(|t| t.parse().unwrap()).collect();
        assert!(
            gpus.iter().all(|g| free.contains(g)),
            "{gpus:?} not within {free:?}"
        );
        assert_eq!(gpus.len(), k);
        let best = brute_force(&s, &free, k, false);
        assert_eq!(
            v["bottleneck"],
            serde_json::to_value(best.map(|b| b.to_string())).unwrap()
        );
    }
}

#[test]
fn place_with_no_fitting_set_exits_1_with_an_error_document() {
    let out = gputopo(&[
        "place",
        "--topology",
        DGX1,
        "--gpus",
        "4",
        "--min-nvlink-level",
        "2",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    let error = v["error"].as_str().expect("an error field");
    assert!(error.contains("4-GPU") && error.contains("NV2"), "{error}");
    assert!(stderr(&out).contains("no free set"), "{}", stderr(&out));
    // Not enough free GPUs either.
    let out = gputopo(&[
        "place",
        "--topology",
        DGX1,
        "--gpus",
        "3",
        "--free",
        "0,1",
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        json(&out)["error"]
            .as_str()
            .unwrap()
            .contains("too few free GPUs")
    );
    // A pair with NV2 exists: the same level for 2 GPUs fits.
    let out = gputopo(&[
        "place",
        "--topology",
        DGX1,
        "--gpus",
        "2",
        "--min-nvlink-level",
        "NV2",
        "-o",
        "json",
    ]);
    assert!(out.status.success());
    assert_eq!(json(&out)["bottleneck"], "NV2");
}

#[test]
fn ring_and_all_to_all_differ_where_the_oracle_says() {
    let s = spec(DGX1);
    let all: Vec<u32> = (0..8).collect();
    let mut differed = false;
    for k in 3..=6 {
        let ring = brute_force(&s, &all, k, false);
        let a2a = brute_force(&s, &all, k, true);
        for (collective, best) in [("ring", ring), ("all-to-all", a2a)] {
            let out = gputopo(&[
                "place",
                "--topology",
                DGX1,
                "--gpus",
                &k.to_string(),
                "--collective",
                collective,
                "-o",
                "json",
            ]);
            assert!(out.status.success());
            assert_eq!(
                json(&out)["bottleneck"],
                best.map(|b| b.to_string()).unwrap(),
                "k={k} {collective}"
            );
        }
        differed |= ring != a2a;
    }
    assert!(
        differed,
        "the DGX-1 mesh has sizes where a ring beats the weakest pair"
    );
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--gpus", "0"], &["--gpus", "at least 1"]),
        (&["--gpus", "2", "--free", "0,x"], &["\"x\"", "0-7"]),
        (&["--gpus", "2", "--free", "0,9"], &["GPU 9", "0-7"]),
        (&["--gpus", "2", "--free", "1,1"], &["GPU 1", "twice"]),
        (
            &["--gpus", "2", "--min-nvlink-level", "NVx"],
            &["NVx", "NV2"],
        ),
        (&["--gpus", "2", "--collective", "star"], &["star"]),
    ];
    for (args, expect) in cases {
        let mut all = vec!["place", "--topology", DGX1];
        all.extend_from_slice(args);
        let out = gputopo(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        for e in *expect {
            assert!(err.contains(e), "{args:?}: {err:?} lacks {e:?}");
        }
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = gputopo(&["place", "--topology", "no/such/file.txt", "--gpus", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no/such/file.txt"));
    let out = gputopo(&["place", "--topology", "fixtures/INDEX.md", "--gpus", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("nvidia-smi topo -m"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn every_topology_form_gives_the_same_answer() {
    let s = spec(DGX1);
    let dir = tempfile::tempdir().unwrap();
    let object = GpuTopology::new("dgx1", s.clone());
    let forms: Vec<(PathBuf, String)> = vec![
        (
            dir.path().join("object.yaml"),
            serde_yaml::to_string(&object).unwrap(),
        ),
        (
            dir.path().join("object.json"),
            serde_json::to_string_pretty(&object).unwrap(),
        ),
        (
            dir.path().join("spec.json"),
            serde_json::to_string(&s).unwrap(),
        ),
        (
            dir.path().join("spec.yaml"),
            serde_yaml::to_string(&s).unwrap(),
        ),
    ];
    let reference = json(&gputopo(&[
        "place",
        "--topology",
        DGX1,
        "--gpus",
        "3",
        "--free",
        "0,2,3,5,6,7",
        "-o",
        "json",
    ]));
    for (path, text) in &forms {
        std::fs::write(path, text).unwrap();
        let p = path.to_str().unwrap();
        let out = gputopo(&[
            "place",
            "--topology",
            p,
            "--gpus",
            "3",
            "--free",
            "0,2,3,5,6,7",
            "-o",
            "json",
        ]);
        assert!(out.status.success(), "{p}: {}", stderr(&out));
        assert_eq!(json(&out), reference, "{p}");
    }
    // A recording replays through the agent.
    let out = gputopo(&[
        "place",
        "--topology",
        "fixtures/recorded/dgx1-v100-nvml.yaml",
        "--gpus",
        "4",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let all: Vec<u32> = (0..8).collect();
    assert_eq!(
        json(&out)["bottleneck"],
        brute_force(
            &spec("fixtures/recorded/dgx1-v100-nvml.yaml"),
            &all,
            4,
            false
        )
        .unwrap()
        .to_string()
    );
    // A broken object names the field.
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "nodeName: x\nsource: fixture\ngpus: [{index: zero}]\n",
    )
    .unwrap();
    let out = gputopo(&[
        "place",
        "--topology",
        broken.to_str().unwrap(),
        "--gpus",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("gpus[0].index"), "{}", stderr(&out));
}

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
