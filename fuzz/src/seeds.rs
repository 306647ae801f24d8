//! The inputs the harnesses start from: the recorded fixtures in
//! `fixtures/` (read once per process), and objects derived from them (a
//! `GpuTopology` per fixture, the items of the `kind: List` cluster).

use gputopo_api::{GpuTopology, GpuTopologySpec};
use gputopo_topology::discover::{Source, build, gather};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

/// The repository's `fixtures/` directory.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The files of `fixtures/<dir>` ending in one of `extensions`, sorted by name.
pub fn fixture_paths(dir: &str, extensions: &[&str]) -> Vec<PathBuf> {
    let dir = fixtures_dir().join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| extensions.contains(&x))
        })
        .collect();
    paths.sort();
    paths
}

/// The texts of `fixtures/<dir>` ending in one of `extensions`.
pub fn fixture_texts(dir: &str, extensions: &[&str]) -> Arc<[String]> {
    fixture_paths(dir, extensions)
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

/// Every `nvidia-smi` fixture (each parser meets the others' outputs too).
pub static NVIDIA_TEXTS: LazyLock<Arc<[String]>> =
    LazyLock::new(|| fixture_texts("nvidia", &["txt"]));

/// Every AMD fixture: rocm-smi and amd-smi texts and JSON.
pub static AMD_TEXTS: LazyLock<Arc<[String]>> =
    LazyLock::new(|| fixture_texts("amd", &["txt", "json"]));

/// The agent recordings.
pub static RECORDINGS: LazyLock<Arc<[String]>> =
    LazyLock::new(|| fixture_texts("recorded", &["yaml"]));

/// The topology of every fixture the agent reads, normalized, named after
/// its file: the specs a real cluster's `GpuTopology` objects hold.
pub static SPECS: LazyLock<Vec<GpuTopologySpec>> = LazyLock::new(|| {
    let mut sources: Vec<(String, Source)> = Vec::new();
    for p in fixture_paths("nvidia", &["txt"]) {
        sources.push((
            node_name(&p),
            Source::NvidiaSmi {
                topo: p,
                nvlink_status: None,
                query: None,
            },
        ));
    }
    for p in fixture_paths("amd", &["txt"]) {
        sources.push((node_name(&p), Source::RocmSmi { texts: vec![p] }));
    }
    for p in fixture_paths("amd", &["json"]) {
        sources.push((node_name(&p), Source::AmdSmi { text: p }));
    }
    for p in fixture_paths("recorded", &["yaml"]) {
        sources.push((node_name(&p), Source::Fixture(p)));
    }
    let specs: Vec<GpuTopologySpec> = sources
        .into_iter()
        .filter_map(|(name, source)| {
            let (facts, _) = gather(&source).ok()?;
            build(&name, facts).ok().map(|d| d.spec)
        })
        .filter(|s| !s.gpus.is_empty())
        .collect();
    assert!(specs.len() >= 10, "only {} fixtures normalize", specs.len());
    specs
});

fn node_name(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("node");
    stem.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(60)
        .collect::<String>()
        .to_ascii_lowercase()
        .trim_matches('-')
        .to_string()
}

/// [`SPECS`] as `GpuTopology` objects (JSON text), as the API server serves them.
pub static TOPOLOGY_OBJECTS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    SPECS
        .iter()
        .map(|spec| {
            let object = GpuTopology::new(&spec.node_name, spec.clone());
            serde_json::to_string(&object).expect("a GpuTopology serializes")
        })
        .chain(list_items("GpuTopology"))
        .collect()
});

/// The items of `fixtures/clusters/kube-list.yaml` of one kind, as JSON text.
pub fn list_items(kind: &str) -> Vec<String> {
    let text = std::fs::read_to_string(fixtures_dir().join("clusters/kube-list.yaml"))
        .expect("fixtures/clusters/kube-list.yaml");
    let list: Value = serde_yaml::from_str(&text).expect("kube-list.yaml is YAML");
    list["items"]
        .as_array()
        .expect("a List has items")
        .iter()
        .filter(|i| i["kind"] == kind)
        .map(|i| serde_json::to_string(i).expect("JSON"))
        .collect()
}
