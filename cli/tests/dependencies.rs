//! The operator's tool reads topology files and decides offline: it must not
//! compile NVML bindings, the Kubernetes client or an async runtime. What
//! `cargo tree` resolves for it is the proof.

use std::collections::BTreeSet;
use std::process::Command;

#[test]
fn the_cli_builds_neither_nvml_nor_the_kube_client_nor_tokio() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "gputopo",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crates: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(crates.contains("gputopo-topology"), "{crates:?}");
    for banned in [
        "nvml-wrapper",
        "nvml-wrapper-sys",
        "kube",
        "kube-client",
        "kube-runtime",
        "tokio",
        "hyper",
        "gputopo-agent",
    ] {
        assert!(!crates.contains(banned), "the CLI depends on {banned}");
    }
}
