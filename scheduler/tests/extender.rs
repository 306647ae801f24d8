//! The extender mode end to end: the stock kube-scheduler (built from
//! source, see gputopo-testenv) with a KubeSchedulerConfiguration whose
//! extender is `gputopo-scheduler extender`, run as its own process with an
//! admin kubeconfig; GPU nodes simulated by kwok with `GpuTopology` objects
//! made from recorded `nvidia-smi topo -m` outputs.
//!
//! kube-scheduler keeps the queue and its own plugins and asks the extender
//! to filter, to score and to bind, over TLS with a client certificate from
//! a CA of the extender's own. The test's pods name a profile of that
//! kube-scheduler only (`schedulerName`), and a nodeSelector only its nodes.

mod common;

use common::extender::{ExtenderProcess, MAX_REQUEST_BYTES, env, wait_for};
use common::{
    DGX1, PCIE_2SOCKET as PCIE, annotation, events, fixture_node, gpu_pod, gpus_of, node_of,
};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::node_input;
use gputopo_testenv::TestEnv;
use gputopo_testenv::loopback::{TlsClient, request};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn kube_scheduler_places_gpu_pods_through_the_extender() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("ext");
    let dgx1 = env.unique_name("ext-dgx1");
    let pcie = env.unique_name("ext-pcie");
    let (dgx1_node, dgx1_topology) = fixture_node(env, &dgx1, DGX1, &[("e2e-group", &group)]).await;
    fixture_node(env, &pcie, PCIE, &[("e2e-group", &group)]).await;
    let profile = env.unique_name("gputopo-extender");
    let ext = ExtenderProcess::start(env, &profile).await;

    // The HTTP contract as kube-scheduler meets it. A body that is not
    // ExtenderArgs: 400, naming the field.
    let (code, body) = ext
        .post(
            "/filter",
            r#"{"Pod": {"metadata": {"name": "x"}}, "NodeNames": 5}"#,
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.starts_with("invalid ExtenderArgs at NodeNames: invalid type: integer"),
        "{body}"
    );
    // A 4-GPU pod asking for NVLink: the DGX-1 passes; the PCIe box fails,
    // and no eviction could help it.
    let quad = |name: &str, scheduler: &str| {
        gpu_pod(
            name,
            scheduler,
            &group,
            4,
            &[
                ("gputopo.dev/workload", "training"),
                ("gputopo.dev/min-nvlink-level", "1"),
            ],
        )
    };
    let mut probe = quad("probe", "nobody");
    probe.metadata.namespace = Some("default".into());
    let (code, body) = ext
        .post(
            "/filter",
            &json!({"Pod": probe, "Nodes": null, "NodeNames": [dgx1, pcie]}).to_string(),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        answer,
        json!({
            "Nodes": null,
            "NodeNames": [dgx1],
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {pcie.clone(): "no 4-GPU set with NV1"},
            "Error": ""
        })
    );

    // kube-scheduler with a profile of its own and gputopo as its extender,
    // configured as docs/extender.md shows: HTTPS, its client certificate.
    let mut ks = env
        .start_scheduler_with_config(
            &env.unique_name("kube-scheduler-extender"),
            json!({
                "podInitialBackoffSeconds": 1,
                "podMaxBackoffSeconds": 2,
                "profiles": [{"schedulerName": profile}],
                "extenders": [ext.stanza()]
            }),
        )
        .await
        .expect("kube-scheduler starts with the extender configuration");

    // Two NVLink quads at once. kube-scheduler alone could put either on
    // the PCIe box (8 free GPUs); the extender's filter leaves only the
    // DGX-1, and its serialized binds give the two pods disjoint sets.
    let ns = env.create_namespace("ext").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for name in ["quad-a", "quad-b"] {
        pods.create(&PostParams::default(), &quad(name, &profile))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    let mut bound = Vec::new();
    for name in ["quad-a", "quad-b"] {
        let pod = wait_for(&format!("pod {name} bound"), &ext, &ks, || async {
            pods.get(name).await.ok().filter(|p| node_of(p).is_some())
        })
        .await;
        bound.push(pod);
    }
    ks.check_running().expect("kube-scheduler still runs");
    for pod in &bound {
        assert_eq!(node_of(pod).as_deref(), Some(dgx1.as_str()), "{pod:?}");
        assert_eq!(gpus_of(pod).len(), 4, "{:?}", pod.metadata.annotations);
        let bottleneck = annotation(pod, "scheduler.gputopo.dev/bottleneck").unwrap_or_default();
        assert!(
            bottleneck.starts_with("NV"),
            "an NVLink-connected quad: {bottleneck}"
        );
        assert!(
            annotation(pod, "gputopo.dev/assigned-gpu-uuids").is_none(),
            "a bare topo -m names no UUID: {:?}",
            pod.metadata.annotations
        );
    }
    let (a, b) = (gpus_of(&bound[0]), gpus_of(&bound[1]));
    let all: BTreeSet<u32> = a.iter().chain(&b).copied().collect();
    assert_eq!(all.len(), 8, "{a:?} and {b:?} overlap");
    record_edits_are_reported(&ext, &ks, &pods, &group, &a).await;
    // The first bound got the set scheduler-core picks on the empty node.
    let config = SchedulerConfig::default();
    let mut builder = SnapshotBuilder::new(&config);
    builder.node(
        node_input(
            &dgx1_node,
            Some(&dgx1_topology),
            ReadingTrust::at(Timestamp::now()),
        )
        .expect("node input"),
    );
    let mut alone = quad("quad-a", &profile);
    alone.metadata.namespace = Some(ns.clone());
    let expected = match schedule(
        &builder.build().expect("snapshot"),
        &PendingPod::from_k8s(&alone).expect("readable"),
        &config,
    ) {
        Decision::Placed(p) => p.gpus,
        Decision::Unschedulable(u) => panic!("scheduler-core does not place it: {}", u.message),
    };
    assert!(
        a == expected || b == expected,
        "neither {a:?} nor {b:?} is scheduler-core's {expected:?}"
    );
    // kube-scheduler itself says Scheduled: it bound through the extender.
    let scheduled = wait_for("a Scheduled event for quad-a", &ext, &ks, || async {
        events(&client, &ns, "quad-a", "Scheduled")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        scheduled.reporting_controller.as_deref(),
        Some(profile.as_str())
    );
    assert_eq!(
        scheduled.note.as_deref(),
        Some(format!("Successfully assigned {ns}/quad-a to {dgx1}").as_str()),
        "{scheduled:?}"
    );

    // A second DGX-1: a pair now fits it and the PCIe box alike, as far as
    // kube-scheduler's own plugins can tell (both empty, same capacity).
    // The extender's score tells them apart, and the pair goes where it says.
    let dgx1_b = env.unique_name("ext-dgx1");
    fixture_node(env, &dgx1_b, DGX1, &[("e2e-group", &group)]).await;
    let pair = gpu_pod(
        "pair",
        &profile,
        &group,
        2,
        &[("gputopo.dev/workload", "training")],
    );
    let mut probe = pair.clone();
    probe.metadata.namespace = Some(ns.clone());
    let scores = wait_for(
        "the new node in the extender's cache",
        &ext,
        &ks,
        || async {
            let (code, body) = ext
                .post(
                    "/prioritize",
                    &json!({"Pod": probe, "NodeNames": [pcie, dgx1_b]}).to_string(),
                )
                .await;
            assert_eq!(code, 200, "{body}");
            let scores: Value = serde_json::from_str(&body).expect("JSON");
            (scores[1]["Score"].as_i64() > Some(0)).then_some(scores)
        },
    )
    .await;
    let (pcie_score, dgx1_b_score) = (
        scores[0]["Score"].as_i64().unwrap_or(-1),
        scores[1]["Score"].as_i64().unwrap_or(-1),
    );
    assert!(
        (0..=10).contains(&pcie_score) && dgx1_b_score > pcie_score,
        "an NV2 pair outscores a PIX pair: {scores}"
    );
    pods.create(&PostParams::default(), &pair)
        .await
        .expect("creating pair");
    let pair = wait_for("pod pair bound", &ext, &ks, || async {
        pods.get("pair").await.ok().filter(|p| node_of(p).is_some())
    })
    .await;
    assert_eq!(node_of(&pair).as_deref(), Some(dgx1_b.as_str()));
    assert_eq!(
        annotation(&pair, "scheduler.gputopo.dev/bottleneck").as_deref(),
        Some("NV2"),
        "{:?}",
        pair.metadata.annotations
    );

    // No node can hold an NV24 pair: kube-scheduler's FailedScheduling event
    // carries the extender's reason for both nodes it asked about, beside
    // its own for the full DGX-1.
    pods.create(
        &PostParams::default(),
        &gpu_pod(
            "nv24",
            &profile,
            &group,
            2,
            &[("gputopo.dev/min-nvlink-level", "NV24")],
        ),
    )
    .await
    .expect("creating nv24");
    let failed = wait_for("a FailedScheduling event for nv24", &ext, &ks, || async {
        events(&client, &ns, "nv24", "FailedScheduling")
            .await
            .into_iter()
            .find(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("no 2-GPU set with NV24"))
            })
    })
    .await;
    let note = failed.note.clone().unwrap_or_default();
    assert_eq!(
        failed.reporting_controller.as_deref(),
        Some(profile.as_str())
    );
    assert!(note.starts_with("0/"), "{note}");
    assert!(note.contains("2 no 2-GPU set with NV24"), "{note}");
    assert!(note.contains("1 Insufficient nvidia.com/gpu"), "{note}");
    let nv24 = pods.get("nv24").await.expect("nv24");
    assert!(node_of(&nv24).is_none());
    assert!(annotation(&nv24, "gputopo.dev/assigned-gpus").is_none());

    let (code, metrics) = request(ext.port, "GET", "/metrics", "")
        .await
        .expect("/metrics answers");
    assert_eq!(code, 200);
    for line in [
        "gputopo_placement_decisions_total 3",
        "gputopo_extender_requests_total{verb=\"bind\",result=\"ok\"} 3",
        "gputopo_extender_requests_total{verb=\"filter\",result=\"bad_request\"} 1",
        "gputopo_extender_requests_total{verb=\"prioritize\",result=\"ok\"} ",
        "gputopo_extender_filtered_nodes_total{verdict=\"unresolvable\"} ",
        "gputopo_gpu_allocation_ratio",
        "gputopo_extender_tls_handshakes_total{result=\"ok\"} ",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    let log = std::fs::read_to_string(&ext.process.log).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
}

/// What a caller without kube-scheduler's certificate, or with it but
/// asking for what kube-scheduler would not, gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_extender_refuses_strangers_other_profiles_other_uids_and_big_bodies() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    let profile = env.unique_name("gputopo-extender");
    let ext = ExtenderProcess::start(env, &profile).await;
    let bind = |name: &str, uid: &str| json!({"PodName": name, "PodNamespace": "", "PodUID": uid, "Node": "nowhere"});

    // No client certificate, or one the cluster's CA signed (good for the
    // API server, not here): refused in the TLS handshake.
    let ca = &ext.pki.ca_files.cert;
    let body = bind("x", "u").to_string();
    let anonymous = TlsClient::new(ca, None).expect("a client");
    let e = anonymous
        .request(ext.extender_port, "POST", "/bind", &body)
        .await
        .expect_err("no certificate");
    assert_eq!(
        e.alert_received(),
        Some(rustls::AlertDescription::CertificateRequired),
        "{e}"
    );
    let admin = env
        .pki()
        .client("stranger", "stranger", &["system:masters"])
        .expect("a cluster client certificate");
    let e = TlsClient::new(ca, Some(&admin))
        .expect("a client")
        .request(ext.extender_port, "POST", "/bind", &body)
        .await
        .expect_err("the cluster's CA");
    assert!(e.alert_received().is_some(), "{e}");
    // Nor does plain HTTP get an answer.
    assert_eq!(
        request(ext.extender_port, "POST", "/bind", &body).await,
        None
    );

    // With the certificate: a pending pod of another profile is not the
    // extender's to bind, and a pod of its profile only by its own uid.
    let ns = env.create_namespace("ext-refuse").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let group = env.unique_name("nobody");
    let theirs = pods
        .create(
            &PostParams::default(),
            &gpu_pod("theirs", "default-scheduler", &group, 1, &[]),
        )
        .await
        .expect("creating theirs");
    let ours = pods
        .create(
            &PostParams::default(),
            &gpu_pod("ours", &profile, &group, 1, &[]),
        )
        .await
        .expect("creating ours");
    let uid = |p: &Pod| p.metadata.uid.clone().expect("a uid");
    let refusal = |body: String| {
        let answer: Value = serde_json::from_str(&body).expect("JSON");
        answer["Error"]
            .as_str()
            .map(str::to_string)
            .expect("an Error")
    };
    let mut args = bind("theirs", &uid(&theirs));
    args["PodNamespace"] = ns.clone().into();
    let (code, body) = ext.post("/bind", &args.to_string()).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        refusal(body),
        format!(
            "pod {ns}/theirs has schedulerName default-scheduler; this extender binds only \
             pods of {profile} (--scheduler-name)"
        )
    );
    let mut args = bind("ours", "d0d0d0d0-0000-4000-8000-000000000000");
    args["PodNamespace"] = ns.clone().into();
    let (code, body) = ext.post("/bind", &args.to_string()).await;
    assert_eq!(code, 200, "{body}");
    let e = refusal(body);
    assert!(
        e.starts_with(&format!(
            "pod {ns}/ours has uid {}, the binding names uid d0d0d0d0-0000-4000-8000-000000000000: not the same pod",
            uid(&ours)
        )),
        "{e}"
    );
    for name in ["theirs", "ours"] {
        let pod = pods.get(name).await.expect("the pod");
        assert!(node_of(&pod).is_none(), "{name} was bound: {pod:?}");
    }

    // A body over --max-request-bytes: 413, before any JSON is read.
    let names: Vec<String> = (0..MAX_REQUEST_BYTES / 8)
        .map(|i| format!("n-{i:05}"))
        .collect();
    let big = json!({"Pod": ours, "NodeNames": names}).to_string();
    assert!(big.len() > MAX_REQUEST_BYTES);
    assert_eq!(ext.post("/filter", &big).await.0, 413);

    // The refusals are counted (the handshakes' as their tasks end).
    let lines = [
        "gputopo_extender_tls_handshakes_total{result=\"refused\"} 3",
        "gputopo_extender_refused_requests_total{reason=\"too_large\"} 1",
        "gputopo_extender_requests_total{verb=\"bind\",result=\"error\"} 2",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = request(ext.port, "GET", "/metrics", "")
            .await
            .map(|(_, m)| m)
            .unwrap_or_default();
        let missing: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| !metrics.contains(l))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{missing:?} missing:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The extender's bind writes the pod's status record too; an edit of the
/// annotations after binding is not believed, and the pod is told (event
/// `GPURecordEdited`) once the extender next reads the cluster.
async fn record_edits_are_reported(
    ext: &ExtenderProcess,
    ks: &gputopo_testenv::SchedulerProcess,
    pods: &Api<Pod>,
    group: &str,
    held: &[u32],
) {
    let list = held
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let quad_a = wait_for("quad-a's status record", ext, ks, || async {
        let p = pods.get("quad-a").await.ok()?;
        let record = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "gputopo.dev/gpu-assignment")?
            .message
            .clone()?;
        record
            .starts_with(&format!("gputopo.dev/assigned-gpus={list}"))
            .then_some(p)
    })
    .await;
    assert!(node_of(&quad_a).is_some());
    pods.patch(
        "quad-a",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"annotations": {"gputopo.dev/assigned-gpus": "x"}}}),
        ),
    )
    .await
    .expect("an admin may edit annotations (no policy here)");
    // A filter request makes the extender read the cluster again (asked
    // directly: a pod for kube-scheduler would change the counts below).
    let mut probe = gpu_pod("probe-edit", "nobody", group, 1, &[]);
    probe.metadata.namespace = Some("default".into());
    let body = json!({"Pod": probe, "Nodes": null, "NodeNames": [node_of(&quad_a)]}).to_string();
    let client = pods.clone().into_client();
    let ns = pods.namespace().unwrap_or_default().to_string();
    let edited = wait_for("a GPURecordEdited event on quad-a", ext, ks, || async {
        let (code, answer) = ext.post("/filter", &body).await;
        assert_eq!(code, 200, "{answer}");
        events(&client, &ns, "quad-a", "GPURecordEdited")
            .await
            .into_iter()
            .next()
    })
    .await;
    let note = edited.note.unwrap_or_default();
    assert!(note.contains(&list) && note.contains("=x"), "{note}");
}
