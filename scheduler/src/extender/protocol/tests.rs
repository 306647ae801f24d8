use super::*;
use gputopo_api::GpuTopology;
use gputopo_scheduler_core::node_fit::NodeVerdict;
use gputopo_scheduler_core::reported::ReadingTrust;
use gputopo_scheduler_core::snapshot::SnapshotBuilder;
use gputopo_scheduler_core::snapshot::from_k8s::{bound_pod_input, node_input};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use std::path::PathBuf;

fn dgx1(name: &str) -> GpuTopology {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt");
    let text = std::fs::read_to_string(&file).expect("the DGX-1 fixture");
    let facts = facts_from_topo(&text).expect("the fixture parses");
    GpuTopology::new(name, normalize(name, &facts).expect("it normalizes"))
}

fn node(name: &str, extra_spec: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": extra_spec,
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}
    }))
    .expect("a node")
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).expect("a pod")
}

/// dgx1-a and dgx1-b: empty DGX-1s; dgx1-full: six GPUs held;
/// cordoned: a cordoned DGX-1.
fn cluster() -> Snapshot {
    let config = SchedulerConfig::default();
    let mut b = SnapshotBuilder::new(&config);
    for (name, spec) in [
        ("dgx1-a", json!({})),
        ("dgx1-b", json!({})),
        ("dgx1-full", json!({})),
        ("cordoned", json!({"unschedulable": true})),
    ] {
        b.node(node_input(&node(name, spec), Some(&dgx1(name)), now()).expect("node input"));
    }
    let holder = pod(json!({
        "metadata": {"name": "holder", "namespace": "ml",
            "annotations": {"gputopo.dev/assigned-gpus": "0,1,2,3,4,5"}},
        "spec": {"nodeName": "dgx1-full", "containers": [{"name": "c",
            "resources": {"limits": {"nvidia.com/gpu": "6"}}}]}
    }));
    b.pod(bound_pod_input(&holder).expect("readable").expect("bound"));
    b.build().expect("snapshot")
}

fn gpu_pod(gpus: u32, annotations: Value) -> Value {
    json!({
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
    })
}

fn body(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).expect("JSON")
}

#[test]
fn filter_passes_the_nodes_that_fit_and_says_why_the_others_do_not() {
    let request = decode_args(&body(json!({
        "Pod": gpu_pod(4, json!({})),
        "Nodes": null,
        "NodeNames": ["dgx1-a", "dgx1-full", "cordoned", "ghost", "dgx1-b"]
    })))
    .expect("a valid request");
    let result = filter(
        &cluster(),
        &SchedulerConfig::default(),
        &request,
        &PodClaims::Unjudged,
    );
    assert_eq!(
        serde_json::to_value(&result).expect("JSON"),
        json!({
            "Nodes": null,
            "NodeNames": ["dgx1-a", "dgx1-b"],
            "FailedNodes": {
                "dgx1-full": "too few free GPUs",
                "ghost": "node(s) not yet in gputopo's node cache"
            },
            "FailedAndUnresolvableNodes": {"cordoned": "node(s) were unschedulable"},
            "Error": ""
        })
    );
}

#[test]
fn a_gpu_set_no_node_can_ever_hold_is_unresolvable() {
    // A DGX-1 has NV1 and NV2 links only: no eviction makes an NV24 quad.
    let request = decode_args(&body(json!({
        "Pod": gpu_pod(4, json!({"gputopo.dev/min-nvlink-level": "NV24"})),
        "NodeNames": ["dgx1-a", "dgx1-full"]
    })))
    .expect("a valid request");
    let result = filter(
        &cluster(),
        &SchedulerConfig::default(),
        &request,
        &PodClaims::Unjudged,
    );
    assert_eq!(
        serde_json::to_value(&result).expect("JSON"),
        json!({
            "Nodes": null,
            "NodeNames": [],
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {
                "dgx1-a": "no 4-GPU set with NV24",
                // Short of free GPUs first; freeing them would not help.
                "dgx1-full": "too few free GPUs"
            },
            "Error": ""
        })
    );
}

#[test]
fn filter_answers_in_the_form_it_was_asked() {
    // Not nodeCacheCapable: the node objects come in and the passing
    // ones go back unchanged.
    let a = json!({"metadata": {"name": "dgx1-a", "labels": {"x": "1"}}, "status": {}});
    let full = json!({"metadata": {"name": "dgx1-full"}});
    let request = decode_args(&body(json!({
        "Pod": gpu_pod(4, json!({})),
        "Nodes": {"metadata": {}, "items": [a.clone(), full]},
        "NodeNames": null
    })))
    .expect("a valid request");
    let result = filter(
        &cluster(),
        &SchedulerConfig::default(),
        &request,
        &PodClaims::Unjudged,
    );
    let value = serde_json::to_value(&result).expect("JSON");
    assert_eq!(value["Nodes"], json!({"items": [a]}));
    assert_eq!(value["NodeNames"], Value::Null);
    assert_eq!(
        value["FailedNodes"],
        json!({"dgx1-full": "too few free GPUs"})
    );
}

#[test]
fn a_pod_with_a_bad_annotation_fails_every_node_naming_the_key() {
    let request = decode_args(&body(json!({
        "Pod": gpu_pod(4, json!({"gputopo.dev/collective": "mesh"})),
        "NodeNames": ["dgx1-a", "dgx1-b"]
    })))
    .expect("the body itself is valid");
    let result = filter(
        &cluster(),
        &SchedulerConfig::default(),
        &request,
        &PodClaims::Unjudged,
    );
    assert_eq!(result.node_names, Some(vec![]));
    assert!(result.failed_nodes.is_empty());
    let messages: Vec<&String> = result.failed_and_unresolvable_nodes.values().collect();
    assert_eq!(messages.len(), 2);
    for m in messages {
        assert!(
            m.starts_with("invalid gputopo.dev/collective: ") && m.contains("all-to-all"),
            "{m}"
        );
    }
}

#[test]
fn prioritize_maps_the_core_score_to_zero_to_ten() {
    let snapshot = cluster();
    let config = SchedulerConfig::default();
    let request = decode_args(&body(json!({
        "Pod": gpu_pod(2, json!({})),
        "NodeNames": ["dgx1-a", "dgx1-full", "ghost"]
    })))
    .expect("a valid request");
    let pending = PendingPod::from_k8s(&request.pod).expect("readable");
    let judge = NodeJudge::new(&snapshot, &pending, &config);
    let core = |n| match judge.judge(n) {
        NodeVerdict::Fits { score, .. } => score,
        other => panic!("{n}: {other:?}"),
    };
    let (a, full) = (core("dgx1-a"), core("dgx1-full"));
    // The busier node packs better; both fit two GPUs.
    assert_ne!(extender_score(a), extender_score(full), "{a} vs {full}");
    assert_eq!(
        serde_json::to_value(prioritize(
            &snapshot,
            &config,
            &request,
            &PodClaims::Unjudged
        ))
        .expect("JSON"),
        json!([
            {"Host": "dgx1-a", "Score": extender_score(a)},
            {"Host": "dgx1-full", "Score": extender_score(full)},
            {"Host": "ghost", "Score": 0}
        ])
    );
}

#[test]
fn scores_round_to_the_nearest_tenth() {
    for (core, extender) in [
        (0, 0),
        (4, 0),
        (5, 1),
        (50, 5),
        (94, 9),
        (95, 10),
        (100, 10),
    ] {
        assert_eq!(extender_score(core), extender, "{core}");
    }
    assert_eq!(extender_score(u8::MAX), MAX_EXTENDER_PRIORITY);
}

#[test]
fn bad_bodies_are_refused_naming_what_is_wrong() {
    let err = |b: &[u8]| decode_args(b).expect_err("refused").to_string();
    let e = err(b"<html>");
    assert!(
        e.starts_with("invalid ExtenderArgs at .: expected value at line 1 column 1"),
        "{e}"
    );
    assert!(e.contains(r#""NodeNames": ["node-1", ...]"#), "{e}");
    let e = err(br#"{"NodeNames": ["a"]}"#);
    assert!(e.starts_with("ExtenderArgs has no Pod;"), "{e}");
    let e = err(br#"{"Pod": {"metadata": {"name": "p"}}}"#);
    assert!(
        e.starts_with("ExtenderArgs has no NodeNames (nor Nodes);"),
        "{e}"
    );
    let e =
        err(br#"{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": 3}}, "NodeNames": []}"#);
    assert!(
        e.starts_with("invalid ExtenderArgs at Pod.spec.containers: invalid type"),
        "{e}"
    );
    let e = err(br#"{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "a"}"#);
    assert!(
        e.starts_with("invalid ExtenderArgs at NodeNames: invalid type: string"),
        "{e}"
    );
    let e = err(br#"{"Pod": {"metadata": {}}, "NodeNames": []}"#);
    assert!(
        e.starts_with("invalid ExtenderArgs at Pod.metadata.name: missing"),
        "{e}"
    );
    let e = err(br#"{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {}}]}}"#);
    assert!(
        e.starts_with("invalid ExtenderArgs at Nodes.items[0].metadata.name: missing"),
        "{e}"
    );
    let e = err(br#"{"Pod": {"metadata": {"name": "p"}}, "NodeNames": []} trailing"#);
    assert!(
        e.starts_with("invalid ExtenderArgs at .: trailing characters"),
        "{e}"
    );
    // Go's decoder ignores the case of field names; the lowerCamel forms work.
    let ok = decode_args(br#"{"pod": {"metadata": {"name": "p"}}, "nodeNames": ["a"]}"#)
        .expect("lowerCamel accepted");
    assert_eq!(ok.candidates, Candidates::Names(vec!["a".into()]));

    let berr = |b: &[u8]| decode_binding(b).expect_err("refused").to_string();
    let e = berr(br#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "u"}"#);
    assert!(e.starts_with("ExtenderBindingArgs has no Node;"), "{e}");
    assert!(e.contains(r#""Node": "...""#), "{e}");
    let e = berr(br#"{"PodName": "p", "Node": "n"}"#);
    assert!(
        e.starts_with("ExtenderBindingArgs has no PodNamespace;"),
        "{e}"
    );
    let e = berr(br#"{"PodName": 7}"#);
    assert!(
        e.starts_with("invalid ExtenderBindingArgs at PodName: invalid type: integer"),
        "{e}"
    );
    // The uid is required: a bind names the very pod.
    let e = berr(br#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "", "Node": "n"}"#);
    assert!(e.starts_with("ExtenderBindingArgs has no PodUID;"), "{e}");
    assert_eq!(
        decode_binding(br#"{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n"}"#),
        Ok(BindingRequest {
            namespace: "ml".into(),
            name: "p".into(),
            uid: "u".into(),
            node: "n".into()
        })
    );
}

fn served() -> Vec<String> {
    vec![DEFAULT_SCHEDULER_NAME.to_string()]
}

fn bind_request(node: &str, uid: &str) -> BindingRequest {
    decode_binding(&body(json!({
        "PodName": "train", "PodNamespace": "ml", "PodUID": uid, "Node": node
    })))
    .expect("valid")
}

#[test]
fn binding_plans_the_nvlink_quad_on_the_chosen_node() {
    let snapshot = cluster();
    let config = SchedulerConfig::default();
    let pod = pod(gpu_pod(4, json!({"gputopo.dev/workload": "training"})));
    let p = plan_binding(
        &snapshot,
        &config,
        &served(),
        &pod,
        &bind_request("dgx1-b", "uid-1"),
        &PodClaims::Unjudged,
    )
    .expect("dgx1-b holds four GPUs");
    assert_eq!(p.node, "dgx1-b");
    assert_eq!(p.gpus.len(), 4);
    // Every hop of the quad's ring is NVLink on a DGX-1.
    let bottleneck = bottleneck_text(&p);
    assert!(bottleneck.starts_with("NV"), "{bottleneck}");
    // The same set schedule() picks for the node on its own.
    let mut only = SnapshotBuilder::new(&config);
    only.node(node_input(&node("dgx1-b", json!({})), Some(&dgx1("dgx1-b")), now()).expect("node"));
    let alone = gputopo_scheduler_core::schedule::schedule(
        &only.build().expect("snapshot"),
        &PendingPod::from_k8s(&pod).expect("readable"),
        &config,
    );
    assert_eq!(alone.placement().map(|a| &a.gpus), Some(&p.gpus));

    let b = binding(&bind_request("dgx1-b", "uid-1"), &p);
    assert_eq!(
        serde_json::to_value(&b).expect("JSON"),
        json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1",
                "annotations": {
                    "gputopo.dev/assigned-gpus": p.assigned_gpus(),
                    "scheduler.gputopo.dev/bottleneck": bottleneck,
                }},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "dgx1-b"}
        })
    );
}

#[test]
fn binding_refuses_what_no_longer_holds() {
    let snapshot = cluster();
    let config = SchedulerConfig::default();
    let p = pod(gpu_pod(4, json!({})));
    let e = plan_binding(
        &snapshot,
        &config,
        &served(),
        &p,
        &bind_request("dgx1-full", "uid-1"),
        &PodClaims::Unjudged,
    )
    .expect_err("two free GPUs")
    .to_string();
    let judged = PendingPod::from_k8s(&p).expect("readable");
    let reason = match NodeJudge::new(&snapshot, &judged, &config).judge("dgx1-full") {
        NodeVerdict::Rejected(r) => r.reason.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        e,
        format!("node dgx1-full cannot take pod ml/train: {reason}")
    );
    assert!(reason.contains('4') && reason.contains('2'), "{reason}");
    let e = plan_binding(
        &snapshot,
        &config,
        &served(),
        &p,
        &bind_request("ghost", "uid-1"),
        &PodClaims::Unjudged,
    )
    .expect_err("unknown node")
    .to_string();
    assert_eq!(e, "node ghost is not in the cluster snapshot");
    let e = plan_binding(
        &snapshot,
        &config,
        &served(),
        &p,
        &bind_request("dgx1-a", "uid-2"),
        &PodClaims::Unjudged,
    )
    .expect_err("another pod")
    .to_string();
    assert!(
        e.contains("has uid uid-1, the binding names uid uid-2"),
        "{e}"
    );
    let mut bound = p.clone();
    bound.spec.as_mut().expect("spec").node_name = Some("dgx1-a".into());
    assert_eq!(
        plan_binding(
            &snapshot,
            &config,
            &served(),
            &bound,
            &bind_request("dgx1-b", "uid-1"),
            &PodClaims::Unjudged,
        ),
        Err(PlanError::AlreadyBound {
            pod: "ml/train".into(),
            node: "dgx1-a".into()
        })
    );
    // A pod of another scheduler's profile is not this extender's to bind,
    // nor is a pod without a uid.
    let mut theirs = p.clone();
    theirs.spec.as_mut().expect("spec").scheduler_name = Some("gputopo-scheduler".into());
    assert_eq!(
        plan_binding(
            &snapshot,
            &config,
            &served(),
            &theirs,
            &bind_request("dgx1-b", "uid-1"),
            &PodClaims::Unjudged,
        )
        .expect_err("another profile's pod")
        .to_string(),
        "pod ml/train has schedulerName gputopo-scheduler; this extender binds only pods of \
         default-scheduler (--scheduler-name)"
    );
    let names = ["a".to_string(), "gputopo-scheduler".to_string()];
    assert!(
        plan_binding(
            &snapshot,
            &config,
            &names,
            &theirs,
            &bind_request("dgx1-b", "uid-1"),
            &PodClaims::Unjudged,
        )
        .is_ok()
    );
    let mut no_uid = p.clone();
    no_uid.metadata.uid = None;
    assert!(matches!(
        plan_binding(
            &snapshot,
            &config,
            &served(),
            &no_uid,
            &bind_request("dgx1-b", "uid-1"),
            &PodClaims::Unjudged,
        ),
        Err(PlanError::UidMismatch { .. })
    ));
    let bad = pod(gpu_pod(4, json!({"gputopo.dev/gpu-memory": "lots"})));
    let e = plan_binding(
        &snapshot,
        &config,
        &served(),
        &bad,
        &bind_request("dgx1-a", "uid-1"),
        &PodClaims::Unjudged,
    )
    .expect_err("bad annotation")
    .to_string();
    assert!(e.starts_with("invalid gputopo.dev/gpu-memory: "), "{e}");
}

/// Readings of the kubelet judged now (these nodes report none).
fn now() -> ReadingTrust {
    ReadingTrust::at(k8s_openapi::jiff::Timestamp::now())
}
