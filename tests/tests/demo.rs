//! The main job (`scripts/demo`) runs from a fresh build: the control plane
//! comes up, every simulated node's agent publishes, the table lists them;
//! gputopo-scheduler places the mixed workload and the second table says
//! where each pod went and why; the third lists the DRA claims' devices
//! beside the GPUs gputopo chose.

use gputopo_testenv::binaries::workspace_binary;
use std::process::Command;

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn demo_brings_up_the_cluster_and_lists_every_topology() {
    let agent = workspace_binary("gputopo-agent", "gputopo-agent");
    let scheduler = workspace_binary("gputopo-scheduler", "gputopo-scheduler");
    let out = Command::new(env!("CARGO_BIN_EXE_gputopo-demo"))
        .arg("--agent")
        .arg(&agent)
        .arg("--scheduler")
        .arg(&scheduler)
        .args([
            "--fixtures",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures"),
            "--once",
        ])
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 7, "{stdout}");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r.starts_with(name))
            .copied()
            .unwrap_or_else(|| panic!("{name} missing:\n{stdout}"))
    };
    assert!(
        row("hgx-h100-1").contains("NV18") && row("hgx-h100-1").contains("nvswitch"),
        "{stdout}"
    );
    assert!(row("a100-bridged-1").contains("nvlink-bridge"), "{stdout}");
    assert!(row("rtx4090-pcie-1").contains(" pcie "), "{stdout}");
    assert!(stdout.contains("export KUBECONFIG="), "{stdout}");

    // The placements: POD NODE GPUS BOTTLENECK REASON.
    let placed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("POD "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(placed.len(), 14, "{stdout}");
    let cols = |name: &str| -> Vec<&str> {
        placed
            .iter()
            .find(|r| r.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{stdout}"))
            .split_whitespace()
            .collect()
    };
    let ddp = cols("ddp-4gpu");
    assert_eq!(ddp[2].split(',').count(), 4, "{stdout}");
    assert!(
        ddp[3].starts_with("NV"),
        "an NVLink-connected set: {stdout}"
    );
    assert_eq!(ddp[4], "Successfully", "{stdout}");
    let (g0, g1) = (cols("gang-0"), cols("gang-1"));
    assert_ne!(g0[1], g1[1], "one 8-GPU member per node: {stdout}");
    for g in [&g0, &g1] {
        assert_eq!(g[2], "0,1,2,3,4,5,6,7", "{stdout}");
        assert_eq!(g[4], "Successfully", "{stdout}");
    }
    for name in ["infer-1", "infer-2", "infer-3"] {
        let row = cols(name);
        assert_ne!(row[1], "<pending>", "{stdout}");
        assert_eq!(
            row[2].split(',').count(),
            1,
            "a shared pod shares one GPU: {stdout}"
        );
    }
    let too_big = cols("too-big");
    assert_eq!(too_big[1], "<pending>", "{stdout}");
    assert!(
        placed.iter().any(|r| r.starts_with("too-big ")
            && r.contains("0/7 nodes are available: 7 too few free GPUs.")),
        "{stdout}"
    );

    // The JobSet's two workers, made by the real JobSet controller: one
    // gang in one leaf, each on a quad. (Which node depends on where the
    // inference pods went, which depends on how the pods fell into cycles.)
    let workers: Vec<Vec<&str>> = placed
        .iter()
        .filter(|r| r.starts_with("jobset-train-workers-"))
        .map(|r| r.split_whitespace().collect())
        .collect();
    assert_eq!(workers.len(), 2, "{stdout}");
    let leaf = |node: &str| {
        rows.iter()
            .find(|r| r.starts_with(&format!("{node} ")))
            .and_then(|r| r.split_whitespace().last())
            .unwrap_or_else(|| panic!("no row for node {node}:\n{stdout}"))
    };
    assert_eq!(
        leaf(workers[0][1]),
        leaf(workers[1][1]),
        "one leaf: {stdout}"
    );
    for w in &workers {
        assert_eq!(w[2].split(',').count(), 4, "{stdout}");
        assert_ne!(w[3], "-", "a GPU set with a bottleneck: {stdout}");
        assert_eq!(w[4], "Successfully", "{stdout}");
    }

    // The inference Deployment's two replicas, made by the real Deployment
    // controller: their topology spread constraint (maxSkew 1 over
    // hostnames) puts them on two nodes, as kube-scheduler would.
    let replicas: Vec<Vec<&str>> = placed
        .iter()
        .filter(|r| r.starts_with("infer-spread-"))
        .map(|r| r.split_whitespace().collect())
        .collect();
    assert_eq!(replicas.len(), 2, "{stdout}");
    assert_ne!(replicas[0][1], "<pending>", "{stdout}");
    assert_ne!(
        replicas[0][1], replicas[1][1],
        "one replica per node: {stdout}"
    );

    // The training pod's dataset claim has one volume, local to one node:
    // the pod goes there, as kube-scheduler would take it.
    assert_eq!(cols("train-ckpt")[1], "a100-bridged-1", "{stdout}");

    // Through DRA: a claim template's pod and a plain nvidia.com/gpu pod on
    // the node NVIDIA's DRA driver publishes, each on an NVLink set.
    for (name, gpus) in [("dra-claim", 4), ("dra-plain", 2)] {
        let row = cols(name);
        assert_eq!(row[1], "dgx1-v100-dra", "{stdout}");
        assert_eq!(row[2].split(',').count(), gpus, "{stdout}");
        assert!(row[3].starts_with("NV"), "{stdout}");
    }
    // The claims' devices are the GPUs gputopo chose: CLAIM POD NODE DEVICES GPUS.
    let claims: Vec<Vec<&str>> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("CLAIM "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    // The two DRA pods have a claim each, and nobody else (the inference
    // replicas keep off the DRA node by node affinity).
    assert_eq!(claims.len(), 2, "{stdout}");
    assert!(
        claims.iter().any(|c| c[1] == "dra-claim"),
        "the template's claim: {stdout}"
    );
    for c in &claims {
        assert_eq!(c[2], "dgx1-v100-dra", "only the DRA node: {stdout}");
        assert_eq!(
            cols(c[1])[1],
            c[2],
            "the claim's pod is on its node: {stdout}"
        );
        let devices: Vec<String> = c[4].split(',').map(|g| format!("gpu-{g}")).collect();
        assert_eq!(c[3], devices.join(","), "{stdout}");
    }
    assert!(
        claims
            .iter()
            .any(|c| c[1] == "dra-plain" && c[0].starts_with("dra-plain-extended-resources-")),
        "the plain pod's special claim: {stdout}"
    );
}
