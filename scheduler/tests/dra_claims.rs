//! Dynamic Resource Allocation end to end on the real 1.37 control plane:
//! kwok nodes from recorded machines, each with the ResourceSlice NVIDIA's
//! DRA driver would publish for it (`gputopo_topology::dra_slice`), the
//! real resourceclaim controller of kube-controller-manager creating claims
//! from templates and releasing them, and gputopo-scheduler allocating them.
//! No kubelet and no driver runs here (no GPU): nothing prepares the
//! devices; what is checked is what the API server holds.

mod common;

use common::dra::*;
use common::*;
use gputopo_scheduler::BOTTLENECK_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_template_claim_gets_an_nvlink_set_and_is_released_and_reused() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("dra-one");
    let dgx = env.unique_name("dra-dgx1");
    let pcie = env.unique_name("dra-pcie");
    dra_node(env, &dgx, DGX1, "Tesla V100-SXM2-32GB", &group, true).await;
    dra_node(
        env,
        &pcie,
        PCIE_2SOCKET,
        "NVIDIA GeForce RTX 4090",
        &group,
        true,
    )
    .await;
    let sched = env.unique_name("sched-dra-one");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("dra-one").await;
    template(&client, &ns, "four", request(4)).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(&pods, &claim_pod("quad", &sched, &group, "four", true)).await;
    let pod = bound(&pods, "quad", &s).await;
    assert_eq!(
        node_of(&pod).as_deref(),
        Some(dgx.as_str()),
        "NVLink beats PCIe"
    );
    let bottleneck = annotation(&pod, BOTTLENECK_ANNOTATION).unwrap_or_default();
    assert!(bottleneck.starts_with("NV"), "an NVLink ring: {bottleneck}");
    // The claim names exactly the GPUs gputopo chose, pinned to the node,
    // reserved for the pod.
    let c = claim_of(&client, &ns, &pod).await;
    assert_eq!(
        allocated(&c),
        Some((dgx.clone(), device_names(&gpus_of(&pod)))),
        "the claim's devices are the pod's GPUs"
    );
    assert_eq!(reserved_for(&c), ["quad"]);
    let finalizers = c.metadata.finalizers.clone().unwrap_or_default();
    assert!(
        finalizers
            .iter()
            .any(|f| f == "resource.kubernetes.io/delete-protection"),
        "{finalizers:?}"
    );

    // The whole DGX-1 for a second pod: it waits while the first holds four.
    template(&client, &ns, "eight", request(8)).await;
    let mut eight = claim_pod("octo", &sched, &group, "eight", true);
    eight.spec.as_mut().expect("spec").node_selector =
        Some([("kubernetes.io/hostname".to_string(), dgx.clone())].into());
    create(&pods, &eight).await;
    let waiting = event_where(
        &client,
        &ns,
        "octo",
        "FailedScheduling",
        |n| n.starts_with("0/"),
        &s,
    )
    .await;
    assert!(
        note(&waiting).contains("too few free"),
        "{}",
        note(&waiting)
    );
    // The first ends: the resourceclaim controller releases its claim and
    // the eight devices go to the second.
    pods.delete("quad", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting the first pod");
    let pod = bound(&pods, "octo", &s).await;
    assert_eq!(gpus_of(&pod), (0..8).collect::<Vec<u32>>());
    let c = claim_of(&client, &ns, &pod).await;
    assert_eq!(allocated(&c), Some((dgx, device_names(&gpus_of(&pod)))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn devices_another_scheduler_allocated_stay_theirs() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("dra-other");
    let dgx = env.unique_name("dra-other-dgx1");
    dra_node(env, &dgx, DGX1, "Tesla V100-SXM2-32GB", &group, true).await;
    let sched = env.unique_name("sched-dra-other");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("dra-other").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // Another scheduler's pod, bound, holding gpu-0..5 through its claim.
    let theirs = claim(&client, &ns, "theirs", request(6)).await;
    let mut other = claim_pod("other", "default-scheduler", &group, "theirs", false);
    other.spec.as_mut().expect("spec").node_name = Some(dgx.clone());
    let other = pods
        .create(&PostParams::default(), &other)
        .await
        .expect("the other pod");
    let mut status = theirs.clone();
    status.status = Some(
        serde_json::from_value(json!({
            "allocation": {
                "devices": {"results": (0..6).map(|i| json!({
                    "request": "gpus", "driver": CLASS, "pool": dgx, "device": format!("gpu-{i}")
                })).collect::<Vec<_>>()},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [dgx]}]}]}
            },
            "reservedFor": [{"resource": "pods", "name": "other",
                "uid": other.metadata.uid.clone().expect("a uid")}]
        }))
        .expect("a status"),
    );
    Api::<ResourceClaim>::namespaced(client.clone(), &ns)
        .replace_status("theirs", &PostParams::default(), &status)
        .await
        .expect("the other scheduler's allocation");

    // Four through DRA, four through the device plugin: neither fits.
    claim(&client, &ns, "mine", request(4)).await;
    create(&pods, &claim_pod("dra-four", &sched, &group, "mine", false)).await;
    create(&pods, &gpu_pod("plugin-four", &sched, &group, 4, &[])).await;
    for name in ["dra-four", "plugin-four"] {
        event_where(
            &client,
            &ns,
            name,
            "FailedScheduling",
            |n| n.starts_with("0/"),
            &s,
        )
        .await;
    }
    // Two fit, on the two devices left.
    claim(&client, &ns, "pair", request(2)).await;
    create(&pods, &claim_pod("dra-two", &sched, &group, "pair", false)).await;
    let pod = bound(&pods, "dra-two", &s).await;
    assert_eq!(gpus_of(&pod), [6, 7]);
    let c = claim_of(&client, &ns, &pod).await;
    assert_eq!(allocated(&c), Some((dgx, device_names(&[6, 7]))));
    let list = pods.list(&ListParams::default()).await.expect("pods").items;
    for name in ["dra-four", "plugin-four"] {
        let p = list
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .expect("the pod");
        assert!(node_of(p).is_none(), "{name} must stay pending");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_claim_gputopo_cannot_honour_exactly_is_refused_naming_the_field() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("dra-refuse");
    let dgx = env.unique_name("dra-refuse-dgx1");
    dra_node(env, &dgx, DGX1, "Tesla V100-SXM2-32GB", &group, true).await;
    let sched = env.unique_name("sched-dra-refuse");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("dra-refuse").await;
    // Distinct values across a claim's devices: not honoured yet.
    named_claim(
        &client,
        &ns,
        "either",
        json!({
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": CLASS, "count": 2}}],
            "constraints": [{"distinctAttribute": "resource.kubernetes.io/pcieRoot"}],
        }),
    )
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(&pods, &claim_pod("either", &sched, &group, "either", false)).await;
    let e = event_where(
        &client,
        &ns,
        "either",
        "FailedScheduling",
        |n| n.contains("distinctAttribute"),
        &s,
    )
    .await;
    let text = note(&e);
    assert!(
        text.contains("spec.devices.constraints[0].distinctAttribute") && text.contains("accepted"),
        "names the field and what is accepted: {text}"
    );
    let c = Api::<ResourceClaim>::namespaced(client, &ns)
        .get("either")
        .await
        .expect("the claim");
    assert!(allocated(&c).is_none(), "nothing allocated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_crash_between_the_claim_and_the_binding_allocates_no_device_twice() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("dra-crash");
    let dgx = env.unique_name("dra-crash-dgx1");
    dra_node(env, &dgx, DGX1, "Tesla V100-SXM2-32GB", &group, true).await;
    let sched = env.unique_name("sched-dra-crash");
    let ns = env.create_namespace("dra-crash").await;
    template(&client, &ns, "four", request(4)).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // The first process dies after writing the claim, before binding.
    let mut first = SchedulerProcess::start_with(env, &sched, |port| {
        (
            vec![
                "--leader-elect-lease-name".into(),
                format!("{sched}-{port}"),
            ],
            vec![(
                gputopo_scheduler::scheduler::FAILPOINT_EXIT_AFTER_CLAIMS,
                "1".to_string(),
            )],
        )
    })
    .await;
    create(&pods, &claim_pod("first", &sched, &group, "four", true)).await;
    first
        .wait_exit("the first scheduler to abort after the claim write")
        .await;
    let pod = pods.get("first").await.expect("the pod");
    assert!(node_of(&pod).is_none(), "not bound before the crash");
    let c = claim_of(&client, &ns, &pod).await;
    let (node, devices) = allocated(&c).expect("allocated before the crash");
    assert_eq!(reserved_for(&c), ["first"]);

    // The next leader binds the pod where its claim is, on its devices,
    // and a second pod gets the other four.
    let s = SchedulerProcess::start(env, &sched).await;
    let pod = bound(&pods, "first", &s).await;
    assert_eq!(node_of(&pod), Some(node.clone()));
    assert_eq!(device_names(&gpus_of(&pod)), devices);
    create(&pods, &claim_pod("second", &sched, &group, "four", true)).await;
    let second = bound(&pods, "second", &s).await;
    let c2 = claim_of(&client, &ns, &second).await;
    let (node2, devices2) = allocated(&c2).expect("allocated");
    assert_eq!(node2, node);
    assert!(
        devices2.iter().all(|d| !devices.contains(d)),
        "no device twice: {devices:?} and {devices2:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_claim_shared_by_two_pods_is_allocated_once_and_reserved_for_both() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("dra-shared");
    let dgx = env.unique_name("dra-shared-dgx1");
    dra_node(env, &dgx, DGX1, "Tesla V100-SXM2-32GB", &group, true).await;
    let sched = env.unique_name("sched-dra-shared");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("dra-shared").await;
    claim(&client, &ns, "shared", request(2)).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(
        &pods,
        &claim_pod("reader-a", &sched, &group, "shared", false),
    )
    .await;
    create(
        &pods,
        &claim_pod("reader-b", &sched, &group, "shared", false),
    )
    .await;
    let a = bound(&pods, "reader-a", &s).await;
    let b = bound(&pods, "reader-b", &s).await;
    assert_eq!(node_of(&a), node_of(&b));
    assert_eq!(gpus_of(&a), gpus_of(&b), "the claim's devices, for both");
    let c = Api::<ResourceClaim>::namespaced(client, &ns)
        .get("shared")
        .await
        .expect("the claim");
    assert_eq!(allocated(&c), Some((dgx, device_names(&gpus_of(&a)))));
    let mut holders = reserved_for(&c);
    holders.sort();
    assert_eq!(holders, ["reader-a", "reader-b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_gang_of_template_claim_pods_is_placed_as_one() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("dra-gang");
    let mut dgx = Vec::new();
    for i in 0..2 {
        let name = env.unique_name(&format!("dra-gang-dgx1-{i}"));
        dra_node(env, &name, DGX1, "Tesla V100-SXM2-32GB", &group, true).await;
        dgx.push(name);
    }
    let sched = env.unique_name("sched-dra-gang");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("dra-gang").await;
    template(&client, &ns, "eight", request(8)).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for i in 0..2 {
        let mut p = claim_pod(&format!("rank-{i}"), &sched, &group, "eight", true);
        p.metadata.annotations = Some(
            [
                ("gputopo.dev/gang".to_string(), "ddp".to_string()),
                ("gputopo.dev/gang-size".to_string(), "2".to_string()),
            ]
            .into(),
        );
        create(&pods, &p).await;
    }
    let mut nodes = Vec::new();
    for i in 0..2 {
        let pod = bound(&pods, &format!("rank-{i}"), &s).await;
        let node = node_of(&pod).expect("bound");
        let c = claim_of(&client, &ns, &pod).await;
        assert_eq!(
            allocated(&c),
            Some((node.clone(), device_names(&(0..8).collect::<Vec<u32>>()))),
            "each member's claim holds its node's eight GPUs"
        );
        nodes.push(node);
    }
    nodes.sort();
    let mut expected = dgx.clone();
    expected.sort();
    assert_eq!(nodes, expected, "one member per node");
}
