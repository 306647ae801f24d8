//! Objects the API server accepts and gputopo's types refuse, on the real
//! control plane: a scheduler started while one exists still becomes ready
//! and places pods; the object is skipped, counted, and told why.

mod common;

/// Makes one number of a `GpuTopology` spec overflow.
type Corrupt = fn(&mut serde_json::Value);

use common::*;
use gputopo_api::GpuTopology;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn an_unreadable_gpu_topology_is_skipped_and_a_restarted_scheduler_still_schedules() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("hostile");
    let node_name = env.unique_name("a100-hostile");
    fixture_node(env, &node_name, DGX_A100, &[("e2e-group", &group)]).await;

    // A copy of a real GpuTopology with one number beyond what gputopo's
    // type holds. Which of these the API server lets in depends on the
    // release: up to 1.36 it enforces a CRD's bounds (`maximum`,
    // `maxItems`) but not `format`; 1.37 refuses an int32 overflow too. The
    // first it accepts is the hostile object.
    let bad_name = env.unique_name("overflow");
    let resource = ApiResource::erase::<GpuTopology>(&());
    let dynamic: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let good = serde_json::to_value(
        Api::<GpuTopology>::all(client.clone())
            .get(&node_name)
            .await
            .expect("the good node's GpuTopology")
            .spec,
    )
    .expect("a spec serializes");
    let candidates: [(&str, Corrupt); 3] = [
        ("spec.gpus[0].numaNode", |s| {
            s["gpus"][0]["numaNode"] = 5_000_000_000u64.into()
        }),
        ("spec.gpus[0].fabric.cliqueId", |s| {
            s["gpus"][0]["fabric"] = serde_json::json!({"cliqueId": 5_000_000_000u64})
        }),
        ("spec.gpus[0].memoryMiB", |s| {
            s["gpus"][0]["memoryMiB"] = (-1i64).into()
        }),
    ];
    let mut refused = Vec::new();
    let mut field = None;
    for (path, corrupt) in candidates {
        let mut spec = good.clone();
        spec["nodeName"] = bad_name.clone().into();
        corrupt(&mut spec);
        let mut bad = DynamicObject::new(&bad_name, &resource);
        bad.data = serde_json::json!({ "spec": spec });
        match dynamic.create(&PostParams::default(), &bad).await {
            Ok(_) => {
                field = Some(path);
                break;
            }
            Err(kube::Error::Api(e)) if e.code == 422 => {
                refused.push(format!("{path}: {}", e.message))
            }
            Err(e) => panic!("creating the hostile object: {e}"),
        }
    }
    let field = field.unwrap_or_else(|| {
        panic!("the API server refuses every overflow tried; pick another: {refused:#?}")
    });

    // A scheduler started now lists it: it must still become ready
    // (`start` waits for /readyz) and place pods on the good node.
    let sched = env.unique_name("sched-hostile");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("hostile").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create(&pods, &gpu_pod("quad", &sched, &group, 4, &[])).await;
    let placed = bound(&pods, "quad", &s).await;
    assert_eq!(node_of(&placed).as_deref(), Some(node_name.as_str()));

    let metrics = wait_for(
        "the invalid object counted",
        std::time::Duration::from_secs(30),
        || async {
            let text = s.get("/metrics").await?.1;
            text.contains(&format!(
                "gputopo_invalid_objects{{kind=\"GpuTopology\",reason=\"{field}\"}}"
            ))
            .then_some(text)
        },
        || s.log(),
    )
    .await;
    assert!(metrics.contains("gputopo_invalid_objects"), "{metrics}");
    let event = wait_for(
        "an InvalidObject event on the GpuTopology",
        std::time::Duration::from_secs(30),
        || async {
            Api::<Event>::all(client.clone())
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("InvalidObject")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(bad_name.as_str())
                })
        },
        || s.log(),
    )
    .await;
    assert!(note(&event).contains(field), "{field}: {}", note(&event));

    dynamic
        .delete(&bad_name, &DeleteParams::default())
        .await
        .expect("cleaning up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_node_whose_topology_its_allocatable_contradicts_gets_a_condition_saying_why() {
    use gputopo_topology::backend::nvidia_smi::facts_from_topo;
    use gputopo_topology::normalize::normalize;
    use k8s_openapi::api::core::v1::Node;

    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("implausible");
    // The device plugin lists 12 GPUs; the GpuTopology (a DGX A100's) 8.
    let name = env.unique_name("a100-twelve");
    let labels = [("e2e-group".to_string(), group.clone())].into();
    let node = env.create_fake_gpu_node(&name, 12, &labels).await;
    let facts = facts_from_topo(&fixture(DGX_A100)).expect("the fixture parses");
    let mut topology = GpuTopology::new(&name, normalize(&name, &facts).expect("normalizes"));
    topology.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: name.clone(),
            uid: node.metadata.uid.clone().expect("uid"),
            ..Default::default()
        },
    ]);
    Api::<GpuTopology>::all(client.clone())
        .create(&PostParams::default(), &topology)
        .await
        .expect("the GpuTopology is created");
    let sched = env.unique_name("sched-implausible");
    let s = SchedulerProcess::start(env, &sched).await;
    let nodes = Api::<Node>::all(client.clone());
    let message = wait_for(
        "GpuTopologyTrusted=False on the node",
        std::time::Duration::from_secs(60),
        || async {
            let n = nodes.get(&name).await.ok()?;
            n.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "GpuTopologyTrusted" && c.status == "False")
                .and_then(|c| c.message)
        },
        || s.log(),
    )
    .await;
    assert!(
        message.contains("lists 8 GPUs but the node's allocatable nvidia.com/gpu is 12"),
        "{message}"
    );
    // The kubelet's (kwok's) own conditions are still there.
    let n = nodes.get(&name).await.expect("the node");
    let types: Vec<String> = n
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert!(types.iter().any(|t| t == "Ready"), "{types:?}");
}
