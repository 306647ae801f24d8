//! The main job (`scripts/demo`) runs from a fresh build: the control plane
//! comes up, every simulated node's agent publishes, the table lists them.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/`, where cargo put this workspace's binaries.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

#[test]
fn demo_brings_up_the_cluster_and_lists_every_topology() {
    let agent = target_dir().join("gputopo-agent");
    assert!(
        agent.exists(),
        "{} is missing: build it first (cargo build -p gputopo-agent; cargo test --workspace does)",
        agent.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gputopo-demo"))
        .arg("--agent")
        .arg(&agent)
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
    assert_eq!(rows.len(), 6, "{stdout}");
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
}
