//! The extender, given exactly the chart's identity and the files its
//! Secrets hold, filters and binds over TLS a pod as kube-scheduler asks.

use super::chart_process::{chart_args, free_port, http_get};
use super::cluster::{apply_kinds, create_pair_topology};
use super::extender_security;
use super::helm::render_ok;
use super::identity;
use super::objects::{container, scheduler_object};
use super::values::EXTENDER_VALUES;
use gputopo_testenv::binaries::workspace_binary;
use gputopo_testenv::loopback::TlsClient;
use gputopo_testenv::pki::Pki;
use gputopo_testenv::{TestEnv, process::Process};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::time::{Duration, Instant};

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_extender_binds_a_pod_with_exactly_the_charts_rbac() {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    let admin = env.client().await;
    let scheduler_bin = workspace_binary("gputopo-scheduler", "gputopo-scheduler");

    // A release of its own in extender mode; only its identity is applied.
    let namespace = env.create_namespace("gputopo-ext").await;
    let docs = render_ok("ext", &namespace, Some(EXTENDER_VALUES));
    let identity: Vec<Value> = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
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
        &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"],
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
        "extender",
    )
    .await;

    // A kwok node with 4 GPUs in two NVLink pairs and its GpuTopology.
    let node = env.unique_name("ext-node");
    env.create_fake_gpu_node(&node, 4, &BTreeMap::new()).await;
    create_pair_topology(&admin, &node).await;

    // The Secrets the values name, from a CA of the extender's own: the
    // serving certificate (for 127.0.0.1 here) and the CA that signed
    // kube-scheduler's client certificate.
    let pki = Pki::create(&dir.path().join("pki")).expect("the extender's CA");
    let scheduler_cert = pki
        .client("kube-scheduler", "kube-scheduler", &[])
        .expect("kube-scheduler's client certificate");
    let secrets = BTreeMap::from([
        (
            "gputopo-extender-tls",
            BTreeMap::from([
                ("tls.crt", pki.serving.cert.clone()),
                ("tls.key", pki.serving.key.clone()),
            ]),
        ),
        (
            "kube-scheduler-client-ca",
            BTreeMap::from([("ca.crt", pki.ca_files.cert.clone())]),
        ),
    ]);
    let tls = TlsClient::new(&pki.ca_files.cert, Some(&scheduler_cert)).expect("a TLS client");

    // The extender as the chart's container runs it: its args (the config
    // file is the chart's ConfigMap's), environment and Secret volumes
    // (files where the variables name them), ports moved to free loopback
    // ones.
    let extender = container(deployment);
    let args = chart_args(&docs, extender, dir.path());
    let mounts =
        extender_security::secret_mounts(deployment, extender, &secrets, &dir.path().join("root"));
    let (port, extender_port) = (free_port(), free_port());
    let mut vars: Vec<(String, String)> = Vec::new();
    for var in extender["env"].as_array().expect("env") {
        let var_name = var["name"].as_str().expect("a name").to_owned();
        let value = match var_name.as_str() {
            "GPUTOPO_SCHEDULER_LISTEN" => format!("127.0.0.1:{port}"),
            "GPUTOPO_SCHEDULER_EXTENDER_LISTEN" => format!("127.0.0.1:{extender_port}"),
            _ => extender_security::remount(
                var["value"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{var_name} has no plain value: {var}")),
                &mounts,
            ),
        };
        vars.push((var_name, value));
    }
    vars.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let env_refs: Vec<(&str, &OsStr)> = vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let log = dir.path().join("extender.log");
    let mut process = Process::spawn(
        "gputopo-extender",
        &scheduler_bin,
        &args,
        &env_refs,
        log.clone(),
    )
    .expect("the extender starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the extender died: {e:#}"));
        match http_get(port, "/readyz") {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "extender not ready after 60 s: {other:?}; log:\n{}",
                gputopo_testenv::process::tail(&log, 30)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // What kube-scheduler would send for a 2-GPU pod of a profile the
    // values name (no scheduler serves it here).
    let pods = Api::<Pod>::namespaced(admin.clone(), &namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {
            "schedulerName": "gpu-profile",
            "containers": [{
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "2"}}
            }]
        }
    }))
    .expect("a pod");
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod created");
    let filter = json!({"Pod": pod, "NodeNames": [node]}).to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = tls
            .request(extender_port, "POST", "/filter", &filter)
            .await
            .expect("/filter answers");
        assert_eq!(code, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).expect("JSON");
        // The node and its GpuTopology reach the cache a moment apart.
        if answer["NodeNames"] == json!([node]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node never passed: {answer}; log:\n{}",
            gputopo_testenv::process::tail(&log, 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let bind = json!({
        "PodName": "train",
        "PodNamespace": namespace,
        "PodUID": pod.metadata.uid,
        "Node": node,
    })
    .to_string();
    let (code, body) = tls
        .request(extender_port, "POST", "/bind", &bind)
        .await
        .expect("/bind answers");
    assert_eq!(
        (code, body.as_str()),
        (200, r#"{"Error":""}"#),
        "log:\n{}",
        gputopo_testenv::process::tail(&log, 30)
    );
    let train = pods.get("train").await.expect("pod");
    assert_eq!(
        train.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node.as_str())
    );
    let annotations = train.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations["scheduler.gputopo.dev/bottleneck"], "NV12",
        "one of the node's NVLink pairs: {annotations:?}"
    );
    assert_eq!(
        annotations["gputopo.dev/assigned-gpus"].split(',').count(),
        2,
        "{annotations:?}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("forbidden"),
        "the chart's RBAC refused something:\n{log_text}"
    );
    process.kill();
}
