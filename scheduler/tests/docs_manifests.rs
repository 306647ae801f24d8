//! The manifests in `docs/**/*.md` stay true. Every ```yaml block is split into
//! its documents (a block fenced ```yaml not-a-manifest, such as the
//! scheduler's config file or a fragment, is YAML but not an object, and is
//! left out), and each document
//!
//! * names `apiVersion`, `kind` and `metadata.name`, and is of a kind this
//!   test knows (a new kind is added here on purpose, not passed silently),
//!   with a `metadata` that is an `ObjectMeta` (no field lost, as below);
//! * of a Kubernetes kind, parses as its `k8s-openapi` type and loses no
//!   field on the way back (a misspelt field would be dropped: `k8s-openapi`
//!   ignores unknown fields, so the round trip is what catches it);
//! * of a JobSet or LeaderWorkerSet, parses as the type the scheduler reads;
//! * the scheduler's configuration (ConfigMap `gputopo-scheduler-config`)
//!   is accepted by the scheduler's own parser;
//!
//! and every pod template found anywhere (a Pod, a Deployment's or Job's
//! template, a JobSet's, a TrainingRuntime's, a LeaderWorkerSet's) parses
//! as a `PodTemplateSpec` with no field lost, names the chart's scheduler,
//! and has a GPU request `gputopo_api::GpuRequest::from_pod` accepts. The
//! gangs the user guide promises are the ones the scheduler derives, of the
//! size the guide states. (`docs_metrics.rs` keeps `docs/operator.md`'s
//! metrics true.)

use gputopo_api::{GangRef, GpuRequest};
use gputopo_scheduler::Settings;
use gputopo_scheduler::gangs::{GangObjects, GangSize, JobSet, LeaderWorkerSet};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{Job, JobTemplateSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodTemplateSpec, Service};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Kinds whose schema this repository does not carry: only their identity
/// (and, below, what gputopo reads of them) is checked.
const OTHER_KINDS: [(&str, &str); 5] = [
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
];

/// The gangs the guide describes, by kind and name, with the size it
/// states. Every gang-forming object in the docs must be listed.
const GANGS: [(&str, &str, u32); 4] = [
    ("JobSet", "pretrain", 4),
    ("JobSet", "tp-pretrain", 16),
    ("TrainJob", "finetune", 2),
    ("LeaderWorkerSet", "llama-405b", 2),
];

const CONFIG_MAP: &str = "gputopo-scheduler-config";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("scheduler/ sits in the repository root")
        .to_path_buf()
}

/// One YAML document of a doc, and where it came from.
struct Doc {
    at: String,
    value: Value,
}

impl Doc {
    fn str(&self, pointer: &str) -> &str {
        self.value
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{}: no string at {pointer}", self.at))
    }

    fn kind(&self) -> (&str, &str) {
        (self.str("/apiVersion"), self.str("/kind"))
    }

    fn name(&self) -> &str {
        self.str("/metadata/name")
    }

    fn namespace(&self) -> &str {
        self.value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
    }
}

/// The ```yaml blocks of a Markdown text: (first line number, block text).
fn yaml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if info.trim() == "yaml" => current = Some((i + 2, String::new())),
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "a ```yaml block is not closed");
    blocks
}

/// The Markdown files under `dir`, its subfolders (`docs/contract/`) included.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a readable entry").path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Every YAML document of every ```yaml block in `docs/**/*.md`.
fn documents() -> Vec<Doc> {
    let docs_dir = repo_root().join("docs");
    let mut files = Vec::new();
    markdown_files(&docs_dir, &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable doc");
        let name = file.strip_prefix(&docs_dir).unwrap_or(&file).display();
        for (line, block) in yaml_blocks(&text) {
            for (i, de) in serde_yaml::Deserializer::from_str(&block).enumerate() {
                let at = format!("docs/{name}:{line} (document {})", i + 1);
                let value = <Value as serde::Deserialize>::deserialize(de)
                    .unwrap_or_else(|e| panic!("{at}: not YAML: {e}"));
                out.push(Doc { at, value });
            }
        }
    }
    out
}

/// The fields of `original` that `round_trip` lacks, as paths.
fn lost_fields(original: &Value, round_trip: &Value, path: &str, lost: &mut Vec<String>) {
    match (original, round_trip) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(w) => lost_fields(v, w, &p, lost),
                    None => lost.push(p),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, v) in a.iter().enumerate() {
                match b.get(i) {
                    Some(w) => lost_fields(v, w, &format!("{path}[{i}]"), lost),
                    None => lost.push(format!("{path}[{i}]")),
                }
            }
        }
        _ => {}
    }
}

/// `value` as `T`, failing on a field `T` does not have.
fn strict<T: DeserializeOwned + Serialize>(value: &Value, at: &str, what: &str) -> T {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{at}: not a valid {what}: {e}"));
    let back = serde_json::to_value(&typed).expect("a k8s-openapi value serializes");
    let mut lost = Vec::new();
    lost_fields(value, &back, "", &mut lost);
    assert!(
        lost.is_empty(),
        "{at}: {what} has no field {} (misspelt, or in the wrong place)",
        lost.join(", ")
    );
    typed
}

/// Every JSON object under `value` (itself included) with a `spec.containers`
/// list: pod templates, and pods.
fn pod_templates<'a>(value: &'a Value, path: &str, out: &mut Vec<(String, &'a Value)>) {
    match value {
        Value::Object(map) => {
            if value.pointer("/spec/containers").is_some() {
                out.push((path.to_string(), value));
            }
            for (k, v) in map {
                pod_templates(v, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pod_templates(v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// `spec.schedulerName` the chart serves by default (`scheduler.schedulerName`).
fn chart_scheduler_name() -> String {
    let text = std::fs::read_to_string(repo_root().join("helm/gputopo/values.yaml"))
        .expect("the chart's values");
    let values: Value = serde_yaml::from_str(&text).expect("values.yaml is YAML");
    values
        .pointer("/scheduler/schedulerName")
        .and_then(Value::as_str)
        .expect("scheduler.schedulerName in values.yaml")
        .to_string()
}

/// A pod as a controller makes it from `template`, with `labels` and
/// `annotations` added as that controller adds them.
fn pod_from(
    template: &PodTemplateSpec,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Pod {
    let mut metadata = template.metadata.clone().unwrap_or_default();
    let add = |map: &mut Option<BTreeMap<String, String>>, pairs: &[(&str, &str)]| {
        let map = map.get_or_insert_default();
        for (k, v) in pairs {
            map.insert(k.to_string(), v.to_string());
        }
    };
    add(&mut metadata.labels, labels);
    add(&mut metadata.annotations, annotations);
    Pod {
        metadata,
        spec: template.spec.clone(),
        status: None,
    }
}

/// Checks one document; returns the gangs it forms: (kind, name, size).
fn check(doc: &Doc, all: &[Doc], scheduler: &str) -> Vec<(String, String, u32)> {
    let at = doc.at.as_str();
    let (api_version, kind) = doc.kind();
    assert!(!doc.name().is_empty(), "{at}: metadata.name is empty");
    // Every kind's metadata is an ObjectMeta, CRDs' included.
    strict::<ObjectMeta>(&doc.value["metadata"], at, "metadata");
    let v = &doc.value;
    let mut gangs = Vec::new();
    let names = [scheduler.to_string()];
    match (api_version, kind) {
        ("v1", "Pod") => {
            strict::<Pod>(v, at, kind);
        }
        ("v1", "Service") => {
            strict::<Service>(v, at, kind);
        }
        ("apps/v1", "Deployment") => {
            strict::<Deployment>(v, at, kind);
        }
        ("batch/v1", "Job") => {
            strict::<Job>(v, at, kind);
        }
        ("resource.k8s.io/v1", "ResourceClaimTemplate") => {
            let t = strict::<ResourceClaimTemplate>(v, at, kind);
            // The claim it makes is one the scheduler allocates exactly.
            let claim = ResourceClaim {
                metadata: ObjectMeta {
                    name: Some(doc.name().to_string()),
                    ..ObjectMeta::default()
                },
                spec: t.spec.as_ref().and_then(|s| s.spec.clone()),
                status: None,
            };
            // The classes: NVIDIA's, every class the docs define, and
            // dranet's RDMA class as dranet defines it.
            let mut classes = vec![nvidia_class(), rdma_class()];
            classes.extend(
                all.iter()
                    .filter(|d| d.kind() == ("resource.k8s.io/v1", "DeviceClass"))
                    .map(|d| strict::<DeviceClass>(&d.value, &d.at, "DeviceClass")),
            );
            gputopo_scheduler_core::dra::DraPod::new(at, &[&claim], classes.iter())
                .unwrap_or_else(|e| panic!("{at}: the scheduler refuses the claim: {e}"));
        }
        ("resource.k8s.io/v1", "DeviceClass") => {
            strict::<DeviceClass>(v, at, kind);
        }
        ("v1", "ConfigMap") => {
            let cm = strict::<ConfigMap>(v, at, kind);
            if doc.name() == CONFIG_MAP {
                let text = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("config.yaml"))
                    .unwrap_or_else(|| panic!("{at}: {CONFIG_MAP} without config.yaml"));
                Settings::from_yaml(text, Path::new(at))
                    .unwrap_or_else(|e| panic!("{at}: the scheduler refuses its config: {e}"));
            }
        }
        ("jobset.x-k8s.io/v1alpha2", "JobSet") => {
            let set: JobSet = serde_json::from_value(v.clone())
                .unwrap_or_else(|e| panic!("{at}: not a JobSet the scheduler reads: {e}"));
            for (i, rj) in set.spec.replicated_jobs.iter().enumerate() {
                let t = &v["spec"]["replicatedJobs"][i]["template"];
                strict::<JobTemplateSpec>(t, at, "JobTemplateSpec");
                let pod = rj.template.spec.as_ref().map(|s| &s.template);
                let pod = pod_from(
                    pod.expect("a pod template"),
                    &[("jobset.sigs.k8s.io/jobset-name", doc.name())],
                    &[],
                );
                let gang = GpuRequest::from_pod(&pod)
                    .unwrap_or_else(|e| panic!("{at}: the scheduler refuses the JobSet's pod: {e}"))
                    .gang;
                assert!(
                    matches!(gang, Some(GangRef::JobSet { .. })),
                    "{at}: the JobSet's pods are not its gang: {gang:?}"
                );
            }
            let size = gang_size(doc, Arc::new(set), &names);
            gangs.push((kind.to_string(), doc.name().to_string(), size));
        }
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") => {
            let set: LeaderWorkerSet = serde_json::from_value(v.clone())
                .unwrap_or_else(|e| panic!("{at}: not a LeaderWorkerSet the scheduler reads: {e}"));
            let size = v
                .pointer("/spec/leaderWorkerTemplate/size")
                .and_then(Value::as_u64)
                .unwrap_or_else(|| panic!("{at}: no leaderWorkerTemplate.size"))
                .to_string();
            let mut gang = None;
            for t in ["leaderTemplate", "workerTemplate"] {
                let template: PodTemplateSpec =
                    strict(&v["spec"]["leaderWorkerTemplate"][t], at, "PodTemplateSpec");
                // What the LeaderWorkerSet controller writes on each pod.
                let pod = pod_from(
                    &template,
                    &[
                        ("leaderworkerset.sigs.k8s.io/name", doc.name()),
                        ("leaderworkerset.sigs.k8s.io/group-index", "0"),
                    ],
                    &[("leaderworkerset.sigs.k8s.io/size", &size)],
                );
                gang = GpuRequest::from_pod(&pod)
                    .unwrap_or_else(|e| panic!("{at}: the scheduler refuses {t}'s pod: {e}"))
                    .gang;
                assert!(
                    matches!(gang, Some(GangRef::LeaderWorkerSet { .. })),
                    "{at}: {t}'s pods are not their group's gang: {gang:?}"
                );
            }
            let objects = GangObjects {
                leader_worker_sets: vec![Arc::new(set)],
                ..GangObjects::default()
            };
            let gang = gang.expect("a LeaderWorkerSet gang");
            match objects.size(doc.namespace(), &gang, &names) {
                Ok(GangSize::Gang { size, .. }) => {
                    gangs.push((kind.to_string(), doc.name().to_string(), size));
                }
                other => panic!("{at}: each group should be a gang: {other:?}"),
            }
        }
        ("trainer.kubeflow.org/v1alpha1", "TrainJob") => {
            let size = trainjob_gang(doc, all, &names);
            gangs.push((kind.to_string(), doc.name().to_string(), size));
        }
        other if OTHER_KINDS.contains(&other) => {}
        (a, k) => panic!("{at}: {a} {k} is not a kind this test knows; add it to check()"),
    }
    let mut templates = Vec::new();
    pod_templates(v, "", &mut templates);
    for (path, t) in templates {
        let at = format!("{at} at {path}");
        let template = if kind == "Pod" {
            strict::<PodTemplateSpec>(
                &json!({"metadata": t["metadata"], "spec": t["spec"]}),
                &at,
                "Pod",
            )
        } else {
            strict::<PodTemplateSpec>(t, &at, "PodTemplateSpec")
        };
        let pod = pod_from(&template, &[], &[]);
        let name = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
        assert_eq!(
            name,
            Some(scheduler),
            "{at}: the pod template must name the chart's scheduler"
        );
        GpuRequest::from_pod(&pod)
            .unwrap_or_else(|e| panic!("{at}: the scheduler refuses the pod: {e}"));
    }
    gangs
}

/// The size of the gang `set`'s pods form, as the scheduler reads it.
fn gang_size(doc: &Doc, set: Arc<JobSet>, names: &[String]) -> u32 {
    let objects = GangObjects {
        jobsets: vec![set],
        ..GangObjects::default()
    };
    let gang = GangRef::JobSet {
        name: doc.name().to_string(),
        replicated_job: String::new(),
    };
    match objects.size(doc.namespace(), &gang, names) {
        Ok(GangSize::Gang { size, .. }) => size,
        other => panic!("{}: the JobSet should be one gang: {other:?}", doc.at),
    }
}

/// A TrainJob's gang: the JobSet Kubeflow Trainer builds from its runtime
/// (the runtime's JobSet template, its `node` job's parallelism set to the
/// TrainJob's `numNodes`, named after the TrainJob).
fn trainjob_gang(doc: &Doc, all: &[Doc], names: &[String]) -> u32 {
    let at = &doc.at;
    let runtime_name = doc.str("/spec/runtimeRef/name");
    let runtime = all
        .iter()
        .find(|d| d.kind().1 == "TrainingRuntime" && d.name() == runtime_name)
        .unwrap_or_else(|| panic!("{at}: runtime {runtime_name} is not in the docs"));
    let nodes = doc
        .value
        .pointer("/spec/trainer/numNodes")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("{at}: no trainer.numNodes"));
    let mut spec = runtime.value["spec"]["template"]["spec"].clone();
    let jobs = spec["replicatedJobs"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("{}: no replicatedJobs", runtime.at));
    let node = jobs
        .iter_mut()
        .find(|j| j["name"] == "node")
        .unwrap_or_else(|| panic!("{}: no `node` replicated job", runtime.at));
    node["template"]["spec"]["parallelism"] = json!(nodes);
    node["template"]["spec"]["completions"] = json!(nodes);
    let set: JobSet = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": doc.name(), "namespace": doc.namespace()},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("{}: the runtime's JobSet template: {e}", runtime.at));
    gang_size(doc, Arc::new(set), names)
}

#[test]
fn the_docs_manifests_are_what_the_api_and_the_scheduler_accept() {
    let scheduler = chart_scheduler_name();
    let docs = documents();
    assert!(
        docs.len() >= 10,
        "found only {} YAML documents in docs/",
        docs.len()
    );
    let mut gangs = BTreeSet::new();
    for doc in &docs {
        gangs.extend(check(doc, &docs, &scheduler));
    }
    let stated: BTreeSet<(String, String, u32)> = GANGS
        .iter()
        .map(|(k, n, s)| (k.to_string(), n.to_string(), *s))
        .collect();
    assert_eq!(
        gangs, stated,
        "the gangs the docs' objects form (kind, name, size) differ from the sizes the guide states"
    );
    assert!(
        docs.iter()
            .any(|d| d.kind().1 == "ConfigMap" && d.name() == CONFIG_MAP),
        "docs/operator.md shows the scheduler's configuration as ConfigMap {CONFIG_MAP}"
    );
}

/// dranet's RDMA class, as its NVIDIA guide writes it.
fn rdma_class() -> DeviceClass {
    serde_json::from_value(json!({
        "metadata": {"name": "dranet-rdma"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net' && device.attributes['dra.net'].rdma == true"}}]}
    }))
    .expect("a class")
}

/// NVIDIA's DRA driver's DeviceClass, which the docs' claims name.
fn nvidia_class() -> DeviceClass {
    serde_json::from_value(json!({
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}
    }))
    .expect("a class")
}
