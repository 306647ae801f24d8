//! Smoke tests of the real control plane: etcd + kube-apiserver (+
//! kube-controller-manager for garbage collection), built by
//! `scripts/control-plane-binaries`. Without the binaries these tests fail
//! and say how to build them.

use gputopo_api::k8s_openapi::api::core::v1::Node;
use gputopo_api::k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject,
};
use gputopo_api::{
    GpuInfo, GpuLink, GpuTopology, GpuTopologySpec, Interconnect, LinkType, TopologySource,
    TopologySummary,
};
use gputopo_testenv::{ADMIN_USER, TestEnv, kubernetes_version};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use kube::{Resource as _, ResourceExt as _};
use std::time::Duration;

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Two NVLinked GPUs (NV4): a small but complete spec.
fn topology_for(node: &Node) -> GpuTopology {
    let name = node.name_any();
    let gpu = |index: u32| GpuInfo {
        index,
        uuid: Some(format!("GPU-00000000-0000-0000-0000-00000000000{index}")),
        product: Some("NVIDIA A100-SXM4-80GB".into()),
        memory_mib: Some(81920),
        pci_bus_id: Some(format!("00000000:0{index}:00.0")),
        numa_node: Some(0),
        cpu_affinity: Some("0-31".into()),
        mig_enabled: Some(false),
        fabric: None,
    };
    let mut topo = GpuTopology::new(
        &name,
        GpuTopologySpec {
            node_name: name.clone(),
            source: TopologySource::Fixture,
            vendor: None,
            driver_version: Some("550.54.15".into()),
            cuda_version: None,
            gpus: vec![gpu(0), gpu(1)],
            links: vec![GpuLink {
                a: 0,
                b: 1,
                link_type: LinkType::Nv,
                nvlinks: 4,
                hops: None,
                weight: None,
                bandwidth: None,
            }],
            nics: vec![],
            islands: vec![vec![0, 1]],
            summary: TopologySummary {
                gpu_count: 2,
                product: Some("NVIDIA A100-SXM4-80GB".into()),
                p2p_level: Some("NV4".into()),
                p2p_bottleneck: Some("NV4".into()),
                all_to_all_nvlink: true,
                largest_island: 2,
                numa_nodes: Some(1),
                interconnect: Interconnect::NvlinkMesh,
            },
        },
    );
    topo.metadata.owner_references = Some(vec![
        node.controller_owner_ref(&())
            .expect("a created node has a uid"),
    ]);
    topo
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn version_is_the_release_built_from_go_mod() {
    let env = TestEnv::shared().await;
    let info = env.client().await.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, kubernetes_version());
    assert!(info.git_version.starts_with("v1.37."), "{info:?}");
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "37"));
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn gpu_topology_round_trips_through_the_apiserver() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    let nodes = Api::<Node>::all(client.clone());
    let topologies = Api::<GpuTopology>::all(client);

    let name = env.unique_name("gpu-node");
    let node = nodes
        .create(&PostParams::default(), &node(&name))
        .await
        .unwrap();
    let sent = topology_for(&node);
    topologies
        .create(&PostParams::default(), &sent)
        .await
        .unwrap();

    let got = topologies.get(&name).await.unwrap();
    assert_eq!(got.spec, sent.spec);
    assert_eq!(
        got.metadata.owner_references,
        sent.metadata.owner_references
    );
    // The CRD's schema is enforced: a link type outside the enum is refused
    // (sent untyped: our own types could not even hold it).
    let mut bad = serde_json::to_value(topology_for(&node)).unwrap();
    bad["metadata"]["name"] = format!("{name}-bad").into();
    bad["spec"]["links"][0]["type"] = "NVLINK".into();
    let raw =
        Api::<DynamicObject>::all_with(env.client().await, &ApiResource::erase::<GpuTopology>(&()));
    match raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 422, "{e:?}"),
        other => panic!("an invalid link type was not refused: {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn rbac_refuses_an_unprivileged_user_until_granted() {
    let env = TestEnv::shared().await;
    let admin = env.client().await;
    let user = env.unique_name("alice");
    let alice = env.client_for_user(&user, &[]).await;

    let forbidden =
        |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(e)) if e.code == 403);
    assert!(forbidden(
        Api::<Node>::all(alice.clone())
            .list(&Default::default())
            .await
            .map(drop)
    ));
    assert!(forbidden(
        Api::<GpuTopology>::all(alice.clone())
            .list(&Default::default())
            .await
            .map(drop)
    ));

    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(user.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![gputopo_api::keys::GROUP.into()]),
            resources: Some(vec!["gputopologies".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(user.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: user.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(admin)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    // The RBAC authorizer reads bindings from an informer: allow it a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match Api::<GpuTopology>::all(alice.clone())
            .list(&Default::default())
            .await
        {
            Ok(_) => break,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{user} still cannot list gputopologies after the grant: {e}"),
        }
    }
    // The grant is exactly that: nodes stay forbidden.
    assert!(forbidden(
        Api::<Node>::all(alice)
            .list(&Default::default())
            .await
            .map(drop)
    ));
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn audit_log_records_who_wrote_what() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    let name = env.unique_name("audited");
    Api::<Node>::all(client)
        .create(&PostParams::default(), &node(&name))
        .await
        .unwrap();

    // The event is written just after the response: wait for it, then count.
    let is_create = |e: &gputopo_testenv::AuditEvent| e.is_write() && e.is_about("nodes", &name);
    let events = env
        .wait_for_audit("create of the node", |events| events.iter().any(is_create))
        .await;
    let creates: Vec<_> = events.iter().filter(|e| is_create(e)).collect();
    assert_eq!(creates.len(), 1, "{creates:#?}");
    assert_eq!(creates[0].verb, "create");
    assert_eq!(creates[0].user.username, ADMIN_USER);
    assert_eq!(
        creates[0].response_status.as_ref().and_then(|s| s.code),
        Some(201)
    );
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn garbage_collector_deletes_the_topology_with_its_node() {
    let env = TestEnv::shared().await.with_controller_manager().await;
    let client = env.client().await;
    let nodes = Api::<Node>::all(client.clone());
    let topologies = Api::<GpuTopology>::all(client);

    let name = env.unique_name("doomed-node");
    let node = nodes
        .create(&PostParams::default(), &node(&name))
        .await
        .unwrap();
    topologies
        .create(&PostParams::default(), &topology_for(&node))
        .await
        .unwrap();
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while topologies.get_opt(&name).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "GpuTopology {name} outlived its Node by 90 s: is the garbage collector running? \
             kube-controller-manager log: {}",
            env.dir().join("kube-controller-manager.log").display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The CRD's bounds are the API server's: a link claiming more NVLinks than
/// any GPU has, or joining a pair the wrong way round, never gets stored.
#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_api_server_refuses_a_gputopology_beyond_the_crds_bounds() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    let api: Api<GpuTopology> = Api::all(client.clone());
    let node = Api::<Node>::all(client)
        .create(&PostParams::default(), &node(&env.unique_name("bounds")))
        .await
        .expect("a node");
    for (what, mutate, field) in [
        (
            "NV4294967295",
            (|t: &mut GpuTopology| t.spec.links[0].nvlinks = u32::MAX) as fn(&mut GpuTopology),
            "nvlinks",
        ),
        (
            "a > b",
            |t: &mut GpuTopology| {
                let l = &mut t.spec.links[0];
                (l.a, l.b) = (l.b, l.a);
            },
            "a link joins GPUs a < b",
        ),
        (
            "GPU index 64",
            |t: &mut GpuTopology| t.spec.gpus[0].index = 64,
            "index",
        ),
    ] {
        let mut t = topology_for(&node);
        mutate(&mut t);
        let e = api
            .create(&PostParams::default(), &t)
            .await
            .expect_err(what);
        assert!(
            matches!(&e, kube::Error::Api(s) if s.code == 422 && s.message.contains(field)),
            "{what}: {e}"
        );
    }
}
