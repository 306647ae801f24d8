//! The scheduler, given exactly the chart's identity and configuration,
//! binds and annotates a pod that names the chart's scheduler, and takes
//! the chart's Lease with leader election on.

use super::chart_process::{chart_args, free_port, http_get};
use super::cluster::{apply_kinds, create_pair_topology};
use super::helm::render_ok;
use super::identity;
use super::objects::{container, env_value, scheduler_object};
use gputopo_testenv::binaries::workspace_binary;
use gputopo_testenv::{TestEnv, process::Process};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::time::{Duration, Instant};

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_scheduler_binds_a_pod_with_exactly_the_charts_rbac() {
    let env = TestEnv::shared().await;
    // The node lifecycle controller lifts the not-ready taint the API
    // server puts on a new node; kwok keeps the node Ready.
    env.with_controller_manager().await;
    env.with_kwok().await;
    let admin = env.client().await;
    let scheduler_bin = workspace_binary("gputopo-scheduler", "gputopo-scheduler");

    // A release of its own, with a scheduler name no other test's pods use.
    let namespace = env.create_namespace("gputopo-sched").await;
    let name = env.unique_name("gputopo-scheduler");
    let docs = render_ok(
        "sched",
        &namespace,
        Some(&format!("scheduler:\n  schedulerName: {name}\n")),
    );
    let identity: Vec<Value> = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ]
    .iter()
    .map(|kind| {
        scheduler_object(&docs, kind)
            .unwrap_or_else(|| panic!("the chart renders no scheduler {kind}"))
            .clone()
    })
    .collect();
    apply_kinds(
        &admin,
        &identity,
        &[
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ],
    )
    .await;
    let deployment = scheduler_object(&docs, "Deployment").expect("the Deployment");
    let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("a service account");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = identity::service_account_kubeconfig(
        env,
        &admin,
        &namespace,
        service_account,
        None,
        dir.path(),
        "scheduler",
    )
    .await;

    // A kwok GPU node (4 GPUs, two NVLink pairs) with its GpuTopology, as
    // the agent would publish it.
    let node = env.unique_name("sched-node");
    let group = env.unique_name("sched-group");
    env.create_fake_gpu_node(
        &node,
        4,
        &BTreeMap::from([("e2e-group".to_owned(), group.clone())]),
    )
    .await;
    let nodes = Api::<Node>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    while nodes
        .get(&node)
        .await
        .expect("node")
        .spec
        .and_then(|s| s.taints)
        .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"))
    {
        assert!(
            Instant::now() < deadline,
            "node {node} still tainted not-ready after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    create_pair_topology(&admin, &node).await;

    // The scheduler as the chart's container runs it: its args (the config
    // file is the chart's ConfigMap's, at a temporary path) and its
    // environment (POD_NAMESPACE from the downward API; the port moved to a
    // free loopback one). Leader election off: the test runs one replica.
    let scheduler = container(deployment);
    let args = chart_args(&docs, scheduler, dir.path());
    assert_eq!(args.len(), 3, "{args:?}");
    let mut args = args;
    args.push("--leader-elect=false".to_owned());
    let port = free_port();
    let mut vars: Vec<(String, String)> = Vec::new();
    for var in scheduler["env"].as_array().expect("env") {
        let var_name = var["name"].as_str().expect("a name").to_owned();
        let value = match (var_name.as_str(), var["value"].as_str()) {
            ("GPUTOPO_SCHEDULER_LISTEN", _) => format!("127.0.0.1:{port}"),
            (_, Some(v)) => v.to_owned(),
            (_, None) => match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.namespace") => namespace.clone(),
                Some("metadata.name") => "sched-e2e-replica".to_owned(),
                other => panic!("{var_name} from {other:?}"),
            },
        };
        vars.push((var_name, value));
    }
    vars.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let env_refs: Vec<(&str, &OsStr)> = vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let log = dir.path().join("scheduler.log");
    let mut process = Process::spawn(
        "gputopo-scheduler",
        &scheduler_bin,
        &args,
        &env_refs,
        log.clone(),
    )
    .expect("the scheduler starts");

    // Ready: every watch listed, under the chart's ClusterRole.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the scheduler died: {e:#}"));
        match http_get(port, "/readyz") {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "scheduler not ready after 60 s: {other:?}; log:\n{}",
                gputopo_testenv::process::tail(&log, 30)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let pod_for = |pod_name: &str, gpus: u32| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": pod_name},
            "spec": {
                "schedulerName": name,
                "nodeSelector": {"e2e-group": group},
                "containers": [{
                    "name": "main",
                    "image": "registry.invalid/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}
                }]
            }
        }))
        .expect("a pod")
    };
    let pods = Api::<Pod>::namespaced(admin.clone(), &namespace);
    pods.create(&PostParams::default(), &pod_for("train", 2))
        .await
        .expect("pod created");
    pods.create(&PostParams::default(), &pod_for("too-big", 8))
        .await
        .expect("pod created");

    // Bound with its GPU annotations (pods/binding), Scheduled event
    // (events.k8s.io create); the one that fits nowhere gets
    // PodScheduled=False (pods/status patch).
    let deadline = Instant::now() + Duration::from_secs(60);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), &namespace);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the scheduler died: {e:#}"));
        let train = pods.get("train").await.expect("pod");
        let too_big = pods.get("too-big").await.expect("pod");
        let annotations = train.metadata.annotations.clone().unwrap_or_default();
        let bound = train.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str());
        let unschedulable = too_big
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            });
        let reasons: Vec<String> = events
            .list(&kube::api::ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter_map(|e| Some(format!("{}: {}", e.reason?, e.note.unwrap_or_default())))
            .collect();
        if bound
            && annotations.contains_key("gputopo.dev/assigned-gpus")
            && annotations.contains_key("scheduler.gputopo.dev/bottleneck")
            && unschedulable
            && reasons.iter().any(|r| r.starts_with("Scheduled:"))
            && reasons.iter().any(|r| r.starts_with("FailedScheduling:"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 60 s: bound {bound}, annotations {annotations:?}, too-big unschedulable \
             {unschedulable}, events {reasons:?}; log:\n{}",
            gputopo_testenv::process::tail(&log, 40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The GpuTopology was read (under the chart's ClusterRole): the pair is
    // one of the node's NVLink pairs.
    let train = pods.get("train").await.expect("pod");
    let annotations = train.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations["scheduler.gputopo.dev/bottleneck"], "NV12",
        "{annotations:?}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("forbidden"),
        "the chart's RBAC refused something:\n{log_text}"
    );
    process.kill();

    // With leader election on, as the chart runs it: the chart's Role lets
    // a replica take the Lease in the release namespace.
    let lease_name = env_value(scheduler, "GPUTOPO_SCHEDULER_LEASE_NAME").expect("a lease name");
    let port = free_port();
    let mut elect_vars = vars.clone();
    for (var_name, value) in &mut elect_vars {
        if var_name == "GPUTOPO_SCHEDULER_LISTEN" {
            *value = format!("127.0.0.1:{port}");
        }
    }
    let elect_refs: Vec<(&str, &OsStr)> = elect_vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let elect_log = dir.path().join("scheduler-elect.log");
    let mut elected = Process::spawn(
        "gputopo-scheduler-elect",
        &scheduler_bin,
        &args[..3],
        &elect_refs,
        elect_log.clone(),
    )
    .expect("the scheduler starts");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), &namespace);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        elected
            .check_running()
            .unwrap_or_else(|e| panic!("the scheduler died: {e:#}"));
        let holder = leases
            .get_opt(lease_name)
            .await
            .expect("get lease")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity);
        if holder
            .as_deref()
            .is_some_and(|h| h.starts_with("sched-e2e-replica"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no Lease {namespace}/{lease_name} held after 30 s (holder {holder:?}); log:\n{}",
            gputopo_testenv::process::tail(&elect_log, 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    elected.kill();
}
