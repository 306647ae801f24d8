//! `place` on the DGX-1 fixture against a brute-force optimum computed here
//! from the parsed spec, its exit statuses and error messages, and every
//! accepted topology form.

use super::{gputopo, json, root, stderr};
use gputopo::topology;
use gputopo_api::{GpuTopology, GpuTopologySpec, LinkClass};
use std::path::PathBuf;

const DGX1: &str = "fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt";

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
