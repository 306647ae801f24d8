//! The agent, given exactly the identity and authority the chart renders
//! (not cluster-admin), publishes its node, reads (or says why it cannot
//! read) the kubelet's PodResources socket the chart names, and the chart's
//! admission policy still binds it to that node.

use super::*;

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_agent_publishes_with_exactly_the_charts_rbac() {
    let env = TestEnv::shared().await;
    let admin = env.client().await;
    let agent_bin = workspace_binary("gputopo-agent", "gputopo-agent");

    // A release of its own (names and policy apart from the other tests'),
    // in a namespace other than gputopo-system: the policy must follow it.
    let namespace = env.create_namespace("gputopo-e2e").await;
    let docs = render_ok("e2e", &namespace, None);
    let identity = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    for kind in identity {
        assert!(find(&docs, kind).is_some(), "the chart renders no {kind}");
    }
    apply_kinds(&admin, &docs, &identity).await;

    let node = env.unique_name("gpu-node");
    let labels = BTreeMap::from([("nvidia.com/gpu.present".to_owned(), "true".to_owned())]);
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &fake_gpu_node(&node, 8, &labels))
        .await
        .expect("node created");

    // The pod the DaemonSet would make on that node: the chart's pod
    // template, admitted by the real API server (service account, priority
    // class, host paths, security context), and the token the kubelet
    // would mount for it.
    let ds = find(&docs, "DaemonSet").expect("the DaemonSet");
    let mut spec: PodSpec =
        serde_json::from_value(ds["spec"]["template"]["spec"].clone()).expect("a pod spec");
    spec.node_name = Some(node.clone());
    let service_account = spec
        .service_account_name
        .clone()
        .expect("a service account");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": format!("e2e-gputopo-agent-{node}"),
            "labels": ds["spec"]["template"]["metadata"]["labels"],
        },
        "spec": spec,
    }))
    .expect("a pod");
    let pod = Api::<Pod>::namespaced(admin.clone(), &namespace)
        .create(&PostParams::default(), &pod)
        .await
        .expect("the chart's pod template is admitted");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = identity::service_account_kubeconfig(
        env,
        &admin,
        &namespace,
        &service_account,
        Some(&pod),
        dir.path(),
        "agent",
    )
    .await;

    // The agent as the chart's container runs it: its args (with the
    // recorded `nvidia-smi topo -m` of a DGX A100 in place of NVML) and its
    // environment (NODE_NAME from the downward API; the port moved to a
    // free loopback one).
    let agent = &ds["spec"]["template"]["spec"]["containers"][0];
    let fixture = root().join("fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt");
    let chart_args: Vec<&str> = agent["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(chart_args, ["run", "--nvml"]);
    let args = vec![
        "run".to_owned(),
        "--nvidia-smi-topo".to_owned(),
        fixture.display().to_string(),
    ];
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut vars: Vec<(String, String)> = Vec::new();
    for var in agent["env"].as_array().expect("env") {
        let name = var["name"].as_str().expect("a name").to_owned();
        let value = match (name.as_str(), var["value"].as_str()) {
            ("GPUTOPO_LISTEN", _) => listen.clone(),
            (_, Some(v)) => v.to_owned(),
            (_, None) => {
                assert_eq!(
                    var["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName",
                    "{name}"
                );
                node.clone()
            }
        };
        vars.push((name, value));
    }
    assert!(vars.iter().any(|(n, v)| n == "NODE_NAME" && v == &node));
    vars.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let env_refs: Vec<(&str, &OsStr)> = vars
        .iter()
        .map(|(n, v)| (n.as_str(), OsStr::new(v.as_str())))
        .collect();
    let mut process = Process::spawn(
        "gputopo-agent",
        &agent_bin,
        &args,
        &env_refs,
        dir.path().join("agent.log"),
    )
    .expect("the agent starts");

    // Ready means published (the first round went through).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process
            .check_running()
            .unwrap_or_else(|e| panic!("the agent died: {e:#}"));
        match http_get(port, "/readyz") {
            Ok((200, _)) => break,
            other => assert!(
                Instant::now() < deadline,
                "agent not ready after 60 s: {other:?}; log:\n{}",
                gputopo_testenv::process::tail(&dir.path().join("agent.log"), 30)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let published = Api::<Node>::all(admin.clone())
        .get(&node)
        .await
        .expect("node")
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(published["nvidia.com/nvlink.p2p.level"], "NV12");
    assert_eq!(published["gputopo.dev/interconnect"], "nvswitch");
    // GPUTOPO_GFD_COMPATIBLE_LABELS=true from the chart reached the agent.
    assert_eq!(published["nvidia.com/gpu.count"], "8");
    let topology = Api::<gputopo_api::GpuTopology>::all(admin.clone())
        .get(&node)
        .await
        .expect("its GpuTopology");
    assert_eq!(topology.spec.summary.gpu_count, 8);
    // GPUTOPO_POD_RESOURCES_SOCKET from the chart reached the agent: no
    // kubelet runs here, so its reading says why it has none.
    let reading = topology
        .status
        .as_ref()
        .and_then(|s| s.pod_resources.as_ref())
        .expect("status.podResources");
    assert!(
        reading
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("/var/lib/kubelet/pod-resources/kubelet.sock")),
        "{reading:?}"
    );
    let (code, metrics) = http_get(port, "/metrics").expect("metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("gputopo_agent_gpus 8"), "{metrics}");

    // The chart's policy binds this identity (in this release's namespace)
    // to its node: a label the agent does not own is refused. The policy
    // takes effect once the API server has loaded it, so retry briefly.
    let as_agent: Api<Node> = Api::all(
        kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(
                kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .expect("config"),
        )
        .expect("client"),
    );
    let patch = json!({"metadata": {"labels": {"team": "evil"}}});
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match as_agent
            .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 403 => {
                assert!(
                    e.message.contains("may only change its own labels"),
                    "{}",
                    e.message
                );
                break;
            }
            other => {
                assert!(
                    Instant::now() < deadline,
                    "the chart's policy did not refuse a foreign label within 20 s: {}",
                    match other {
                        Ok(_) => "the patch was accepted".to_owned(),
                        Err(e) => e.to_string(),
                    }
                );
                // Undo what got through before the policy was active.
                let undo = json!({"metadata": {"labels": {"team": null}}});
                let _ = Api::<Node>::all(admin.clone())
                    .patch(&node, &PatchParams::default(), &Patch::Merge(&undo))
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    process.kill();
}
