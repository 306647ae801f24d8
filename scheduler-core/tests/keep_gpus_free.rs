//! The keep-GPUs-free part: a pod asking no GPU (a Ray head, an MPI
//! launcher, a JobSet driver) goes to a node without GPUs when one fits,
//! else to the GPU node with the fewest GPUs free; gang members without
//! GPUs alike. With the weight at 0 the choice is the one made without it.

mod common;

use common::{a100, gpu_node, holder, labels, pod, request, snapshot};
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_scheduler_core::config::{SchedulerConfig, ScoreWeights};
use gputopo_scheduler_core::explain::{Verdict, explain};
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::score::ScoreParts;
use gputopo_scheduler_core::snapshot::{BoundPodInput, NodeInput, Snapshot};

/// A node without GPUs: 64 cpu, 256 GiB, 110 pods.
fn cpu_node(name: &str) -> NodeInput {
    NodeInput {
        name: name.to_string(),
        labels: labels(&[("kubernetes.io/hostname", name)]),
        allocatable: Resources::allocatable(
            [("cpu", "64"), ("memory", "256Gi"), ("pods", "110")],
            "test",
        )
        .expect("valid quantities"),
        ..NodeInput::default()
    }
}

fn resources(cpu: &str, memory: &str) -> Resources {
    Resources::from_list([("cpu", cpu), ("memory", memory)], "test").expect("valid quantities")
}

/// A pod without GPUs asking `cpu` and `memory`.
fn cpu_pod(cpu: &str, memory: &str) -> PendingPod {
    let mut p = pod(0, &[]);
    p.requests = resources(cpu, memory);
    p.requests.pods = 1;
    p
}

/// A bound pod holding `gpus` GPUs of `node` and `cpu`/`memory`.
fn busy(name: &str, node: &str, gpus: &[u32], cpu: &str, memory: &str) -> BoundPodInput {
    let mut p = holder(name, node, gpus, Some("training"));
    p.requests = resources(cpu, memory);
    p.requests.gpus = gpus.len() as i64;
    p
}

fn weight(keep_gpus_free: u32) -> SchedulerConfig {
    SchedulerConfig {
        weights: ScoreWeights {
            keep_gpus_free,
            ..ScoreWeights::default()
        },
        ..SchedulerConfig::default()
    }
}

fn chosen(snap: &Snapshot, pod: &PendingPod, config: &SchedulerConfig) -> String {
    schedule(snap, pod, config)
        .placement()
        .expect("placed")
        .node
        .clone()
}

/// Each feasible node's score parts, by name.
fn parts(snap: &Snapshot, pod: &PendingPod, config: &SchedulerConfig) -> Vec<(String, ScoreParts)> {
    let mut rows: Vec<(String, ScoreParts)> = explain(snap, pod, config)
        .rows
        .into_iter()
        .filter(|r| r.verdict != Verdict::Rejected)
        .map(|r| (r.node, r.parts.expect("feasible")))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

fn part_of(rows: &[(String, ScoreParts)], node: &str) -> Option<f64> {
    rows.iter()
        .find(|(n, _)| n == node)
        .expect("a feasible node")
        .1
        .keep_gpus_free
}

/// No node shows the part: it does not apply.
fn absent(rows: &[(String, ScoreParts)]) -> bool {
    rows.iter().all(|(_, x)| x.keep_gpus_free.is_none())
}

/// `a-gpu` with every GPU held and half its cpu and memory requested (the
/// busiest: packing prefers it), `b-gpu` free, `z-cpu` without GPUs (last
/// by name, so no tie goes its way).
fn mixed() -> Snapshot {
    snapshot(
        vec![
            gpu_node("a-gpu", a100()),
            gpu_node("b-gpu", a100()),
            cpu_node("z-cpu"),
        ],
        vec![busy(
            "train",
            "a-gpu",
            &[0, 1, 2, 3, 4, 5, 6, 7],
            "64",
            "512Gi",
        )],
    )
}

#[test]
fn a_pod_without_gpus_goes_to_the_node_without_gpus() {
    let snap = mixed();
    let p = cpu_pod("4", "16Gi");
    assert_eq!(chosen(&snap, &p, &SchedulerConfig::default()), "z-cpu");
    let rows = parts(&snap, &p, &SchedulerConfig::default());
    assert_eq!(part_of(&rows, "z-cpu"), Some(1.0), "{rows:?}");
    assert_eq!(part_of(&rows, "a-gpu"), Some(0.5), "all its GPUs in use");
    assert_eq!(part_of(&rows, "b-gpu"), Some(0.0), "every GPU free");
    // The explanation names the part.
    let text = rows[2].1.to_string();
    assert!(text.contains("keep GPUs free 100"), "{text}");
}

#[test]
fn with_the_weight_at_zero_the_old_choice_stands() {
    let snap = mixed();
    let p = cpu_pod("4", "16Gi");
    // Packing alone prefers the busiest node, a GPU node whose cpu and
    // memory its GPUs' pods may need.
    assert_eq!(chosen(&snap, &p, &weight(0)), "a-gpu");
    let rows = parts(&snap, &p, &weight(0));
    assert!(absent(&rows), "{rows:?}");
    assert!(!rows[0].1.to_string().contains("keep GPUs free"));
}

#[test]
fn without_room_on_a_cpu_node_the_gpu_node_with_fewest_gpus_free_wins() {
    // The GPU nodes' cpu and memory are alike, so only this part tells
    // them apart: all GPUs used (`c-full`) before half (`b-half`) before
    // none (`a-free`, first by name).
    let snap = snapshot(
        vec![
            gpu_node("a-free", a100()),
            gpu_node("b-half", a100()),
            gpu_node("c-full", a100()),
            cpu_node("z-cpu"),
        ],
        vec![
            holder("h1", "b-half", &[0, 1, 2, 3], None),
            holder("h2", "c-full", &[0, 1, 2, 3, 4, 5, 6, 7], None),
        ],
    );
    // More cpu than the CPU node has.
    let p = cpu_pod("96", "64Gi");
    assert_eq!(chosen(&snap, &p, &SchedulerConfig::default()), "c-full");
    let rows = parts(&snap, &p, &SchedulerConfig::default());
    let (free, half, full) = (
        part_of(&rows, "a-free").unwrap(),
        part_of(&rows, "b-half").unwrap(),
        part_of(&rows, "c-full").unwrap(),
    );
    assert!(free < half && half < full && full < 1.0, "{rows:?}");
    // Without the part the name decides.
    assert_eq!(chosen(&snap, &p, &weight(0)), "a-free");
}

#[test]
fn the_part_leaves_gpu_pods_and_gpu_only_clusters_alone() {
    let snap = mixed();
    let rows = parts(&snap, &pod(1, &[]), &SchedulerConfig::default());
    assert!(absent(&rows), "{rows:?}");
    let shared = pod(1, &[("gputopo.dev/gpu-share", "0.5")]);
    let rows = parts(&snap, &shared, &SchedulerConfig::default());
    assert!(absent(&rows), "{rows:?}");
    // Every node has GPUs: nothing to keep them free on.
    let gpus_only = snapshot(
        vec![gpu_node("a-gpu", a100()), gpu_node("b-gpu", a100())],
        Vec::new(),
    );
    let rows = parts(
        &gpus_only,
        &cpu_pod("4", "16Gi"),
        &SchedulerConfig::default(),
    );
    assert!(absent(&rows), "{rows:?}");
}

/// A pod read as the scheduler reads it, from its manifest.
fn from_manifest(spec: serde_json::Value) -> PendingPod {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "driver", "namespace": "default"},
        "spec": spec,
    }))
    .expect("a pod");
    PendingPod::from_k8s(&pod).expect("readable")
}

#[test]
fn the_pods_own_preferences_and_claims_come_first() {
    let snap = mixed();
    let container = serde_json::json!({
        "name": "c", "image": "driver",
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}}
    });
    // Preferred node affinity to a GPU node: the pod's wish wins.
    let prefers = from_manifest(serde_json::json!({
        "containers": [container],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "preference": {"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In", "values": ["b-gpu"]
            }]}
        }]}}
    }));
    assert_eq!(
        chosen(&snap, &prefers, &SchedulerConfig::default()),
        "b-gpu"
    );
    // A preferred domain: the pod has said where it wants to be.
    let mut domain = cpu_pod("4", "16Gi");
    domain.request = request(0, &[("gputopo.dev/preferred-domain", "leaf-1")]);
    let rows = parts(&snap, &domain, &SchedulerConfig::default());
    assert!(absent(&rows), "{rows:?}");
    // ResourceClaims may hold GPUs the request does not show.
    let claims = from_manifest(serde_json::json!({
        "containers": [container],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "one-gpu"}]
    }));
    assert!(claims.resource_claims);
    let rows = parts(&snap, &claims, &SchedulerConfig::default());
    assert!(absent(&rows), "{rows:?}");
    let plain = from_manifest(serde_json::json!({"containers": [container]}));
    assert!(!plain.resource_claims);
    assert_eq!(chosen(&snap, &plain, &SchedulerConfig::default()), "z-cpu");
}

/// A Ray-like gang member: `gpus` GPUs (0 for the head) and `cpu`/`memory`.
fn ray(name: &str, gpus: u32, cpu: &str, memory: &str) -> PendingPod {
    let mut p = PendingPod::new(
        "default",
        name,
        request(
            gpus,
            &[("gputopo.dev/gang", "ray"), ("gputopo.dev/gang-size", "3")],
        ),
    );
    p.requests = resources(cpu, memory);
    p.requests.gpus = i64::from(gpus);
    p.requests.pods = 1;
    p
}

#[test]
fn a_ray_head_goes_to_the_cpu_node_and_its_workers_to_gpu_nodes() {
    let snap = snapshot(
        vec![
            gpu_node("a-gpu", a100()),
            gpu_node("b-gpu", a100()),
            cpu_node("z-cpu"),
        ],
        Vec::new(),
    );
    let gang = vec![
        ray("head", 0, "8", "32Gi"),
        ray("worker-0", 4, "48", "384Gi"),
        ray("worker-1", 4, "48", "384Gi"),
    ];
    let nodes = |config: &SchedulerConfig| match schedule_gang(&snap, &gang, config) {
        GangDecision::Placed(p) => p.into_iter().map(|p| p.node).collect::<Vec<_>>(),
        GangDecision::Waiting { message } => panic!("gang waits: {message}"),
    };
    let placed = nodes(&SchedulerConfig::default());
    assert_eq!(placed[0], "z-cpu", "{placed:?}");
    assert!(
        placed[1..].iter().all(|n| n.ends_with("-gpu")),
        "{placed:?}"
    );
    // Without the part the head joins its workers' node and takes the cpu
    // and memory a GPU pod there would need.
    let old = nodes(&weight(0));
    assert_ne!(old[0], "z-cpu", "{old:?}");
    assert_eq!(old[0], old[1], "{old:?}");
}
