//! The custom objects the scheduler watches, decoded one at a time through
//! `Checked<K>` as its watches do (the API server does not enforce their
//! schemas), then read as the cycle reads them: a topology into a node's
//! snapshot input, a gang object into its gang's size.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::{TOPOLOGY_OBJECTS, list_items};
use crate::value::Documents;
use gputopo_api::{GangRef, GpuTopology};
use gputopo_scheduler::checked::{Checked, InvalidObject};
use gputopo_scheduler::gangs::{GangObjects, JobSet, LeaderWorkerSet, PodGroup, UpstreamPodGroup};
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::sync::{Arc, LazyLock};

const WORDS: &[&str] = &[
    "\"metadata\":",
    "\"spec\":",
    "\"name\":",
    "\"namespace\":",
    "null",
    "[]",
    "{}",
    "\"\"",
    "\\u0000",
    "\\ud800",
];

/// A watched object's seeds: their documents (edited) and texts (damaged).
pub struct Kind {
    texts: Arc<[String]>,
    documents: Documents,
}

impl Kind {
    fn new(seeds: Vec<String>) -> Kind {
        let texts: Arc<[String]> = seeds.into();
        Kind {
            documents: Documents::new(&texts),
            texts,
        }
    }

    fn strategy(&self) -> BoxedStrategy<String> {
        prop_oneof![
            3 => self.documents.json(),
            1 => texts(self.texts.clone(), WORDS),
        ]
        .boxed()
    }
}

/// Decodes as the watch does: `Err` where even the metadata cannot be read.
fn decode<K>(text: &str) -> Option<(Option<Arc<K>>, Vec<InvalidObject>)>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let checked: Checked<K> = serde_json::from_str(text).ok()?;
    let (ok, bad) = Checked::split(&[Arc::new(checked)]);
    for b in &bad {
        let _ = (b.metric_reason(), b.to_string());
    }
    Some((ok.into_iter().next(), bad))
}

/// The object's gang size, asked as a pod of its namespace naming it would ask.
fn size_of(objects: &GangObjects, meta: &kube::api::ObjectMeta, gang: fn(String) -> GangRef) {
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let names = ["gputopo-scheduler".to_string()];
    let _ = objects.size(&namespace, &gang(name), &names);
}

fn verdict<K>(decoded: &Option<(Option<Arc<K>>, Vec<InvalidObject>)>) -> Verdict {
    match decoded {
        Some((Some(_), _)) => Verdict::Accepted,
        _ => Verdict::Rejected,
    }
}

static TOPOLOGY: LazyLock<Kind> = LazyLock::new(|| Kind::new(TOPOLOGY_OBJECTS.to_vec()));

pub mod gpu_topology {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        TOPOLOGY.strategy()
    }

    pub fn check(text: &str) -> Verdict {
        let decoded = decode::<GpuTopology>(text);
        if let Some((Some(t), _)) = &decoded {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": t.metadata.name},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}
            }))
            .expect("a node");
            let now = "2026-03-01T10:05:00Z".parse().expect("a timestamp");
            let _ = node_input(&node, Some(t), ReadingTrust::at(now));
        }
        verdict(&decoded)
    }
}

static POD_GROUP: LazyLock<Kind> = LazyLock::new(|| {
    let mut seeds = list_items("PodGroup");
    seeds.push(
        json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "llm", "namespace": "ml", "resourceVersion": "7", "uid": "u-1"},
            "spec": {"minMember": 8, "scheduleTimeoutSeconds": 300},
            "status": {"phase": "Running", "scheduled": 8, "running": 8}
        })
        .to_string(),
    );
    Kind::new(seeds)
});

pub mod pod_group {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        POD_GROUP.strategy()
    }

    pub fn check(text: &str) -> Verdict {
        let decoded = decode::<PodGroup>(text);
        if let Some((Some(g), _)) = &decoded {
            let _ = g.to_core();
            let objects = GangObjects {
                pod_groups: vec![g.clone()],
                ..GangObjects::default()
            };
            size_of(&objects, &g.metadata, |name| GangRef::PodGroup { name });
        }
        verdict(&decoded)
    }
}

static UPSTREAM_POD_GROUP: LazyLock<Kind> = LazyLock::new(|| {
    let group = |name: &str, policy: serde_json::Value| {
        json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"schedulingPolicy": policy, "priority": 10}
        })
        .to_string()
    };
    Kind::new(vec![
        group("g", json!({"gang": {"minCount": 4}})),
        group("b", json!({"basic": {}})),
    ])
});

pub mod upstream_pod_group {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        UPSTREAM_POD_GROUP.strategy()
    }

    pub fn check(text: &str) -> Verdict {
        let decoded = decode::<UpstreamPodGroup>(text);
        if let Some((Some(g), _)) = &decoded {
            let objects = GangObjects {
                upstream_groups: vec![g.clone()],
                ..GangObjects::default()
            };
            size_of(&objects, &g.metadata, |name| GangRef::SchedulingGroup {
                name,
            });
        }
        verdict(&decoded)
    }
}

static JOBSET: LazyLock<Kind> = LazyLock::new(|| {
    let replicated = |name: &str, replicas: i64, parallelism: i64, scheduler: &str| {
        json!({
            "name": name,
            "replicas": replicas,
            "template": {"spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "template": {"spec": {"schedulerName": scheduler, "containers": [{"name": "c"}]}}
            }}
        })
    };
    let set = |spec: serde_json::Value| {
        json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llama", "namespace": "ml"},
            "spec": spec
        })
        .to_string()
    };
    let mut driver = replicated("driver", 1, 1, "gputopo-scheduler");
    driver["dependsOn"] = json!([{"name": "init", "status": "Complete"}]);
    Kind::new(vec![
        set(json!({"replicatedJobs": [
            replicated("workers", 2, 4, "gputopo-scheduler"),
            driver,
            replicated("cpu-side", 3, 1, "default-scheduler"),
        ]})),
        set(json!({
            "replicatedJobs": [replicated("workers", 2, 4, "gputopo-scheduler")],
            "startupPolicy": {"startupPolicyOrder": "InOrder"}
        })),
    ])
});

pub mod jobset {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        JOBSET.strategy()
    }

    pub fn check(text: &str) -> Verdict {
        let decoded = decode::<JobSet>(text);
        if let Some((Some(s), _)) = &decoded {
            let objects = GangObjects {
                jobsets: vec![s.clone()],
                ..GangObjects::default()
            };
            size_of(&objects, &s.metadata, |name| GangRef::JobSet {
                name,
                replicated_job: "workers".into(),
            });
        }
        verdict(&decoded)
    }
}

static LEADER_WORKER_SET: LazyLock<Kind> = LazyLock::new(|| {
    let set = |policy: &str| {
        json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm", "namespace": "serve"},
            "spec": {"replicas": 2, "startupPolicy": policy,
                "leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": {"containers": [{"name": "w"}]}}}}
        })
        .to_string()
    };
    Kind::new(vec![set("LeaderCreated"), set("LeaderReady")])
});

pub mod leader_worker_set {
    use super::*;

    pub fn strategy() -> BoxedStrategy<String> {
        LEADER_WORKER_SET.strategy()
    }

    pub fn check(text: &str) -> Verdict {
        let decoded = decode::<LeaderWorkerSet>(text);
        if let Some((Some(s), _)) = &decoded {
            let objects = GangObjects {
                leader_worker_sets: vec![s.clone()],
                ..GangObjects::default()
            };
            size_of(&objects, &s.metadata, |name| GangRef::LeaderWorkerSet {
                name,
                group: "0".into(),
                size: 4,
            });
        }
        verdict(&decoded)
    }
}
