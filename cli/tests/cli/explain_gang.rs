//! `explain` for a gang member: the gang's decision over its pending
//! fellows in the cluster file, with the structure it states
//! (docs/contract/gang-structure.md).

use super::{gputopo, json, root, stderr};
use std::path::PathBuf;

/// `fixtures/clusters/kube-list.yaml` (gpu-a on leaf l1 with GPUs 0,1,3
/// free; gpu-b on leaf l2 with 1,3 free) plus the pending member `pair-1`
/// of a two-member gang of 2-GPU pods with `extra` annotations; and the
/// explained member `pair-0`. Written under a fresh temporary folder.
fn files(test: &str, extra: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "gputopo-explain-gang-{test}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let member = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ml\n  annotations: {{gputopo.dev/gang: pair, gputopo.dev/gang-size: \"2\"{extra}}}\nspec:\n  schedulerName: gputopo-scheduler\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: \"2\"}}}}}}]\n"
        )
    };
    let list = std::fs::read_to_string(root().join("fixtures/clusters/kube-list.yaml")).unwrap();
    let fellow: String = member("pair-1")
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("  - {l}\n")
            } else {
                format!("    {l}\n")
            }
        })
        .collect();
    let cluster = dir.join("cluster.yaml");
    std::fs::write(&cluster, format!("{list}{fellow}")).unwrap();
    let pod = dir.join("pair-0.yaml");
    std::fs::write(&pod, member("pair-0")).unwrap();
    (cluster, pod)
}

#[test]
fn explain_shows_the_gangs_decision_over_its_members_in_the_file() {
    let (cluster, pod) = files("plain", "");
    let out = gputopo(&[
        "explain",
        "--cluster",
        cluster.to_str().unwrap(),
        "--pod",
        pod.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let gang = &json(&out)["gang"];
    assert_eq!(gang["placed"], true, "{gang}");
    assert_eq!(gang["members"].as_array().unwrap().len(), 2, "{gang}");
    let nodes: Vec<&str> = gang["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n[0].as_str().unwrap())
        .collect();
    assert_eq!(nodes.len(), 2);
    assert_ne!(nodes[0], nodes[1], "a pair each on gpu-a and gpu-b: {gang}");
}

#[test]
fn explain_says_why_a_gang_required_in_one_leaf_waits() {
    let (cluster, pod) = files(
        "leaf",
        ", kueue.x-k8s.io/podset-required-topology: gputopo.dev/leaf",
    );
    let out = gputopo(&[
        "explain",
        "--cluster",
        cluster.to_str().unwrap(),
        "--pod",
        pod.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gang pair (gputopo.dev/gang, size 2)"),
        "{text}"
    );
    assert!(text.contains("waits"), "{text}");
    assert!(text.contains("all in one leaf"), "{text}");
}
