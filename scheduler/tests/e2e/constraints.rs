//! The constraints a pod states beyond nodes and resources, placed by
//! gputopo-scheduler as kube-scheduler places them: the same scenario runs
//! twice on one control plane, once under the stock kube-scheduler (the
//! oracle) and once under gputopo-scheduler, each on its own two nodes (a
//! unique `e2e-group` label every pod selects) and in its own namespace. A
//! test asserts the outcome the table gives for kube-scheduler, and
//! that gputopo's outcome is the same, pod by pod, with kube-scheduler's
//! reason in the `PodScheduled=False` message of a pod left pending.

use super::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// What became of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Bound to the node in this slot (`a` or `b`).
    Bound(String),
    /// Left pending, with the scheduler's message.
    Pending(String),
}

/// One pod of a scenario, created after the previous one's outcome.
struct Step {
    name: &'static str,
    /// The pod's labels.
    labels: Value,
    /// Merged into the pod's spec (affinity, spread, ports, a slot selector).
    spec: Value,
}

/// Where each pod of `steps` ends up under `scheduler`, on two fresh DGX
/// A100 nodes (slots `a` and `b`) and in a fresh namespace.
async fn run(scheduler: &str, steps: &[Step], log: &dyn Fn() -> String) -> Vec<Outcome> {
    let env = env().await;
    let client = env.client().await;
    let (group, slot_of) = slot_nodes(env, "rules").await;
    let ns = env.create_namespace("rules").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut outcomes = Vec::new();
    for step in steps {
        let mut pod = gpu_pod(step.name, scheduler, &group, 1, &[]);
        pod.metadata.labels = serde_json::from_value(step.labels.clone()).expect("labels");
        let mut spec = serde_json::to_value(pod.spec.take()).expect("a spec");
        merge_json(&mut spec, &step.spec);
        pod.spec = Some(serde_json::from_value(spec).expect("a pod spec"));
        create(&pods, &pod).await;
        let outcome = wait_for(
            &format!("{scheduler}: pod {} bound or left pending", step.name),
            Duration::from_secs(90),
            || async {
                pods.get(step.name)
                    .await
                    .ok()
                    .and_then(|p| outcome(&p, &slot_of))
            },
            log,
        )
        .await;
        outcomes.push(outcome);
    }
    outcomes
}

/// `Bound` once the pod has a node, `Pending` once a scheduler said
/// `PodScheduled=False` (reason `Unschedulable`); `None` before either.
fn outcome(pod: &Pod, slot_of: &BTreeMap<String, String>) -> Option<Outcome> {
    if let Some(node) = node_of(pod) {
        return Some(Outcome::Bound(slot_of.get(&node).cloned().unwrap_or(node)));
    }
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    (condition.reason.as_deref() == Some("Unschedulable"))
        .then(|| Outcome::Pending(condition.message.clone().unwrap_or_default()))
}

/// Runs `steps` under kube-scheduler and under gputopo-scheduler; asserts
/// kube-scheduler's outcome is `expected` (the scenario says what it
/// claims), and gputopo's the same, with `reason` in both messages of a
/// pod left pending.
async fn same_as_kube_scheduler(steps: &[Step], expected: &[&str], reason: &str) {
    let env = env().await;
    env.with_scheduler().await;
    let oracle = run("default-scheduler", steps, &String::new).await;
    let sched = env.unique_name("sched-rules");
    let s = SchedulerProcess::start(env, &sched).await;
    let ours = run(&sched, steps, &|| s.log()).await;
    let short = |o: &[Outcome]| -> Vec<String> {
        o.iter()
            .map(|o| match o {
                Outcome::Bound(slot) => slot.clone(),
                Outcome::Pending(_) => "pending".into(),
            })
            .collect()
    };
    assert_eq!(short(&oracle), expected, "kube-scheduler: {oracle:?}");
    assert_eq!(
        short(&ours),
        expected,
        "gputopo-scheduler: {ours:?}\n{}",
        s.log()
    );
    for o in oracle.iter().chain(&ours) {
        if let Outcome::Pending(message) = o {
            assert!(message.contains(reason), "{message}");
        }
    }
}

fn on_slot(slot: &str) -> Value {
    json!({"nodeSelector": {"e2e-slot": slot}})
}

fn term(app: &str) -> Value {
    json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn required_anti_affinity_leaves_the_pod_pending_beside_the_pod_it_avoids() {
    let mut web = on_slot("a");
    web["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("db")]}});
    let steps = [
        Step {
            name: "db",
            labels: json!({"app": "db"}),
            spec: on_slot("a"),
        },
        Step {
            name: "web",
            labels: json!({"app": "web"}),
            spec: web,
        },
    ];
    same_as_kube_scheduler(
        &steps,
        &["a", "pending"],
        "didn't match pod anti-affinity rules",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn required_affinity_binds_the_pod_beside_the_pod_it_follows() {
    // Slot a is the busier node, which packing alone would choose; the
    // pod's affinity to the cache on b must win.
    let follow = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("cache")]}}});
    let steps = [
        Step {
            name: "filler-0",
            labels: json!({"app": "filler"}),
            spec: on_slot("a"),
        },
        Step {
            name: "filler-1",
            labels: json!({"app": "filler"}),
            spec: on_slot("a"),
        },
        Step {
            name: "cache",
            labels: json!({"app": "cache"}),
            spec: on_slot("b"),
        },
        Step {
            name: "api",
            labels: json!({"app": "api"}),
            spec: follow,
        },
    ];
    same_as_kube_scheduler(&steps, &["a", "a", "b", "b"], "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn spread_with_max_skew_one_puts_two_pods_on_each_node() {
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "infer"}}}]});
    let steps: Vec<Step> = ["infer-0", "infer-1", "infer-2", "infer-3"]
        .into_iter()
        .map(|name| Step {
            name,
            labels: json!({"app": "infer"}),
            spec: spread.clone(),
        })
        .collect();
    let env = env().await;
    env.with_scheduler().await;
    let oracle = run("default-scheduler", &steps, &String::new).await;
    let sched = env.unique_name("sched-spread");
    let s = SchedulerProcess::start(env, &sched).await;
    let ours = run(&sched, &steps, &|| s.log()).await;
    let per_slot = |o: &[Outcome]| {
        let mut count = BTreeMap::new();
        for o in o {
            let Outcome::Bound(slot) = o else {
                panic!("every pod binds: {o:?}");
            };
            *count.entry(slot.clone()).or_insert(0) += 1;
        }
        count
    };
    let two_each = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 2)]);
    assert_eq!(per_slot(&oracle), two_each, "kube-scheduler");
    assert_eq!(per_slot(&ours), two_each, "gputopo-scheduler\n{}", s.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_host_port_taken_on_the_only_allowed_node_leaves_the_second_pod_pending() {
    let mut ported = on_slot("a");
    ported["containers"] = json!([{
        "name": "main", "image": "registry.invalid/serve:1",
        "ports": [{"containerPort": 8080, "hostPort": 18080}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]);
    let steps = [
        Step {
            name: "serve-0",
            labels: json!({}),
            spec: ported.clone(),
        },
        Step {
            name: "serve-1",
            labels: json!({}),
            spec: ported,
        },
    ];
    same_as_kube_scheduler(
        &steps,
        &["a", "pending"],
        "didn't have free ports for the requested pod ports",
    )
    .await;
}

/// NodeDeclaredFeatures: a pod restarting all its containers when one
/// exits needs `RestartAllContainersOnContainerExits` from its node's
/// kubelet; kwok's nodes declare no feature, so both schedulers leave it
/// pending with upstream's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_needing_an_undeclared_node_feature_stays_pending() {
    let mut spec = on_slot("a");
    spec["containers"] = json!([{
        "name": "main", "image": "registry.invalid/train:1",
        "restartPolicy": "Never",
        "restartPolicyRules": [{"action": "RestartAllContainers",
            "exitCodes": {"operator": "In", "values": [42]}}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]);
    let steps = [
        Step {
            name: "restarts-0",
            labels: json!({}),
            spec,
        },
        Step {
            name: "plain-0",
            labels: json!({}),
            spec: on_slot("a"),
        },
    ];
    same_as_kube_scheduler(
        &steps,
        &["pending", "a"],
        "didn't match Pod's required features",
    )
    .await;
}
