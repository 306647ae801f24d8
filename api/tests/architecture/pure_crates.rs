//! The pure crates stay pure: `gputopo-scheduler-core` decides and
//! `gputopo-topology` parses with no Kubernetes client and no async
//! runtime anywhere beneath them, so that everything that decides or parses
//! is tested on literal inputs, synchronously. Read from `cargo metadata`
//! (the lockfile's resolution for this host, offline): the normal dependencies of each,
//! followed transitively; build and dev dependencies do not ship.

use crate::source::{RULES_DOC, repo_root};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::process::Command;

/// The crates that must stay pure.
const PURE: &[&str] = &["gputopo-scheduler-core", "gputopo-topology"];

/// What a pure crate may not have beneath it: the API client and its
/// runtime pieces, an async runtime, an HTTP stack.
const FORBIDDEN: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "tokio",
    "hyper",
    "axum",
    "tonic",
    "reqwest",
];

#[test]
fn the_pure_crates_have_no_client_and_no_runtime_beneath_them() {
    let metadata = metadata();
    let names: HashMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap_or(""),
                p["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let nodes: HashMap<&str, Vec<&str>> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("cargo metadata resolves the workspace")
        .iter()
        .map(|n| (n["id"].as_str().unwrap_or(""), normal_deps(n)))
        .collect();
    let mut problems = Vec::new();
    for pure in PURE {
        let (id, _) = names
            .iter()
            .find(|(_, name)| *name == pure)
            .unwrap_or_else(|| panic!("{pure} is not a workspace member any more"));
        let beneath = closure(id, &nodes);
        // The walk must have found the crate's dependencies, not nothing.
        assert!(
            beneath.len() > 5,
            "{pure}: only {} dependencies found",
            beneath.len()
        );
        for dep in &beneath {
            let name = names.get(dep).copied().unwrap_or(dep);
            if FORBIDDEN.contains(&name) {
                problems.push(format!("  {pure} depends on {name}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the pure crates must not depend on a Kubernetes client, an async runtime or an HTTP \
         stack ({RULES_DOC}): move the I/O into the daemon that uses them\n{}",
        problems.join("\n")
    );
}

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Filtered to the host: other platforms' crates were never downloaded,
    // and offline they could not be.
    let host = host_triple();
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", &host])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

/// The ids a resolve node depends on for normal (shipped) code.
fn normal_deps(node: &Value) -> Vec<&str> {
    node["deps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| {
            d["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null())
        })
        .filter_map(|d| d["pkg"].as_str())
        .collect()
}

fn closure<'a>(root: &'a str, nodes: &HashMap<&'a str, Vec<&'a str>>) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        for &dep in nodes.get(id).map(Vec::as_slice).unwrap_or_default() {
            if seen.insert(dep) {
                todo.push(dep);
            }
        }
    }
    seen
}
