//! The files `gputopo explain` and `gputopo place` read: cluster files
//! (the compact form and `kind: List`), pod files, topology files (a
//! `GpuTopology`, a spec, a recording, `topo -m` text). The loaders take
//! paths, so each case is written to a scratch directory whose `nvidia/`,
//! `amd/` and `recorded/` link to the fixtures (cluster files name
//! topology files relative to themselves). What loads is explained or
//! placed, and the report written, as the commands do.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::{NVIDIA_TEXTS, RECORDINGS, TOPOLOGY_OBJECTS, fixture_texts, fixtures_dir};
use crate::value::Documents;
use gputopo::cluster::{Cluster, Overrides, load, load_pod};
use gputopo::place::{PlaceRequest, parse_free, parse_level, place};
use gputopo::report::ExplainReport;
use gputopo::topology;
use gputopo_api::Collective;
use gputopo_scheduler_core::explain::explain_pod;
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

/// A scratch directory per thread, laid out as `fixtures/` is.
fn scratch() -> PathBuf {
    thread_local! {
        static DIR: tempfile::TempDir = {
            let dir = tempfile::tempdir().expect("a scratch directory");
            for sub in ["nvidia", "amd", "recorded"] {
                std::os::unix::fs::symlink(fixtures_dir().join(sub), dir.path().join(sub))
                    .expect("a link to the fixtures");
            }
            std::fs::create_dir(dir.path().join("clusters")).expect("clusters/");
            dir
        };
    }
    DIR.with(|d| d.path().to_path_buf())
}

fn write(name: &str, text: &str) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, text).expect("the scratch directory is writable");
    path
}

/// `explain` of `pod` on `cluster`, its report in both forms.
fn explain(cluster: &Cluster, pod: &Pod) {
    let explanation = explain_pod(&cluster.snapshot, pod, &cluster.config);
    let report = ExplainReport::new(&explanation, &cluster.reports);
    report.text();
    serde_json::to_string(&report).expect("a report serializes");
}

static PENDING: LazyLock<Vec<Pod>> = LazyLock::new(|| {
    fixture_texts("clusters/pods", &["yaml"])
        .iter()
        .map(|t| serde_yaml::from_str(t).expect("a pod"))
        .collect()
});

static CLUSTERS: LazyLock<Arc<[String]>> = LazyLock::new(|| fixture_texts("clusters", &["yaml"]));
static CLUSTER_DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&CLUSTERS));

const CLUSTER_WORDS: &[&str] = &[
    "count: ",
    "{i}",
    "{i:02}",
    "{i:0999999999}",
    "{i",
    "name: ",
    "gpus: ",
    "gpuCount: ",
    "share: ",
    "file: ",
    "spec: ",
    "- ",
    "tiers: ",
    "aws",
    "topograph",
    "+gpu-clique",
    "Ti",
    "kind: List",
    "items:",
    "NoSchedule",
    "&a",
    "*a",
];

pub mod cluster {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![
            1 => texts(CLUSTERS.clone(), CLUSTER_WORDS),
            2 => CLUSTER_DOCUMENTS.yaml(),
        ]
        .boxed()
    }

    pub fn check(text: &str) -> Verdict {
        let path = write("clusters/cluster.yaml", text);
        let Ok(cluster) = load(&path, &Overrides::default()) else {
            return Verdict::Rejected;
        };
        for pod in PENDING.iter() {
            explain(&cluster, pod);
        }
        Verdict::Accepted
    }
}

static PODS: LazyLock<Arc<[String]>> = LazyLock::new(|| fixture_texts("clusters/pods", &["yaml"]));
static POD_DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&PODS));

pub mod pod_file {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        prop_oneof![
            1 => texts(PODS.clone(), &["limits:", "nvidia.com/gpu", "gputopo.dev/", ": "]),
            2 => POD_DOCUMENTS.yaml(),
            1 => POD_DOCUMENTS.json(),
        ]
        .boxed()
    }

    pub fn check(text: &str) -> Verdict {
        thread_local! {
            static CLUSTER: Cluster = load(
                &fixtures_dir().join("clusters/mixed-12.yaml"),
                &Overrides::default(),
            )
            .expect("fixtures/clusters/mixed-12.yaml loads");
        }
        let path = write("pod.yaml", text);
        let Ok(pod) = load_pod(&path) else {
            return Verdict::Rejected;
        };
        CLUSTER.with(|c| explain(c, &pod));
        Verdict::Accepted
    }
}

/// A topology file and what `place` is asked of it.
#[derive(Clone, Debug)]
pub struct PlaceCase {
    pub topology: String,
    pub gpus: u32,
    pub all_to_all: bool,
    pub level: Option<String>,
    pub free: Option<String>,
}

static TOPOLOGY_SEEDS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    NVIDIA_TEXTS
        .iter()
        .chain(RECORDINGS.iter())
        .chain(TOPOLOGY_OBJECTS.iter())
        .cloned()
        .collect()
});
static TOPOLOGY_DOCUMENTS: LazyLock<Documents> =
    LazyLock::new(|| Documents::new(&TOPOLOGY_OBJECTS));

pub mod topology_file {
    use super::*;

    pub fn strategy() -> BoxedStrategy<PlaceCase> {
        let small = |list: &'static [&'static str]| {
            prop_oneof![
                Just(None),
                texts(list.iter().map(|s| s.to_string()).collect(), &[",", "NV"]).prop_map(Some),
            ]
        };
        (
            prop_oneof![
                2 => texts(TOPOLOGY_SEEDS.clone(), &["GPU0", "NV12", "SYS", "index:", "kind: "]),
                1 => TOPOLOGY_DOCUMENTS.json(),
                1 => TOPOLOGY_DOCUMENTS.yaml(),
            ],
            prop_oneof![0u32..9, Just(32), Just(33), Just(u32::MAX)],
            any::<bool>(),
            small(&["2", "NV12", "NV0", "65"]),
            small(&["0,1,2,3", "", "0,0", "31,32"]),
        )
            .prop_map(|(topology, gpus, all_to_all, level, free)| PlaceCase {
                topology,
                gpus,
                all_to_all,
                level,
                free,
            })
            .boxed()
    }

    pub fn check(c: &PlaceCase) -> Verdict {
        let path = write("topology.yaml", &c.topology);
        let Ok(spec) = topology::load(&path) else {
            return Verdict::Rejected;
        };
        let Ok(free) = parse_free(c.free.as_deref(), &spec) else {
            return Verdict::Rejected;
        };
        let level = match c.level.as_deref().map(parse_level) {
            Some(Err(_)) => return Verdict::Rejected,
            Some(Ok(l)) => Some(l),
            None => None,
        };
        let request = PlaceRequest {
            gpus: c.gpus,
            collective: if c.all_to_all {
                Collective::AllToAll
            } else {
                Collective::Ring
            },
            min_nvlink_level: level,
            free,
        };
        Verdict::from(&place(&spec, &request))
    }
}
