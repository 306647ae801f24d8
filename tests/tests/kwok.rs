//! Fake GPU nodes run by kwok, and the stock kube-scheduler placing pods on
//! them: pods go Running with no kubelet and no GPU.

use gputopo_api::k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use gputopo_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use gputopo_api::keys::RESOURCE_GPU;
use gputopo_testenv::TestEnv;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

fn gpu_pod(name: &str, gpus: u32, node_name: Option<&str>) -> Pod {
    let limits = BTreeMap::from([(RESOURCE_GPU.to_owned(), Quantity(gpus.to_string()))]);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node_name.map(str::to_owned),
            containers: vec![Container {
                name: "train".into(),
                image: Some("registry.invalid/train:v1".into()),
                resources: Some(ResourceRequirements {
                    limits: Some(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            // kwok adds no taints, but a real GPU pool usually has this one.
            tolerations: Some(vec![gputopo_api::k8s_openapi::api::core::v1::Toleration {
                key: Some(RESOURCE_GPU.into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// Waits (bounded) until `check` holds for the pod, returning it.
async fn wait_for_pod(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    check: impl Fn(&Pod) -> bool,
) -> Pod {
    let cond = kube::runtime::wait::await_condition(pods.clone(), name, move |p: Option<&Pod>| {
        p.is_some_and(&check)
    });
    match tokio::time::timeout(Duration::from_secs(90), cond).await {
        Ok(Ok(Some(pod))) => pod,
        Ok(Ok(None)) => panic!("pod {name} disappeared while waiting until {what}"),
        Ok(Err(e)) => panic!("watching pod {name}: {e}"),
        Err(_) => {
            let pod = pods.get_opt(name).await.ok().flatten();
            panic!(
                "pod {name} not {what} after 90 s; it is: {:#?}",
                pod.and_then(|p| p.status)
            )
        }
    }
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_bound_to_a_fake_gpu_node_runs() {
    let env = TestEnv::shared().await.with_kwok().await;
    let node = env.unique_name("dgx");
    let labels = BTreeMap::from([(
        gputopo_api::keys::node::GPU_PRODUCT.to_owned(),
        "NVIDIA-H100-80GB-HBM3".to_owned(),
    )]);
    let created = env.create_fake_gpu_node(&node, 8, &labels).await;
    let alloc = created.status.unwrap().allocatable.unwrap();
    assert_eq!(alloc[RESOURCE_GPU], Quantity("8".into()));
    assert_eq!(
        created.metadata.labels.unwrap()[gputopo_api::keys::node::GPU_PRODUCT],
        "NVIDIA-H100-80GB-HBM3"
    );

    let ns = env.create_namespace("kwok").await;
    let pods = Api::<Pod>::namespaced(env.client().await, &ns);
    pods.create(&PostParams::default(), &gpu_pod("bound", 8, Some(&node)))
        .await
        .unwrap();
    let pod = wait_for_pod(&pods, "bound", "Running", |p| phase(p) == Some("Running")).await;
    assert!(
        pod.status
            .unwrap()
            .pod_ip
            .is_some_and(|ip| ip.starts_with("10.0."))
    );
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_stock_scheduler_places_gpu_pods_by_allocatable() {
    let env = TestEnv::shared()
        .await
        .with_kwok()
        .await
        // Nodes are created tainted not-ready (TaintNodesByCondition); the
        // node lifecycle controller lifts the taint once kwok reports Ready.
        .with_controller_manager()
        .await
        .with_scheduler()
        .await;
    let node = env.unique_name("hgx");
    env.create_fake_gpu_node(&node, 8, &BTreeMap::new()).await;
    let ns = env.create_namespace("sched").await;
    let pods = Api::<Pod>::namespaced(env.client().await, &ns);

    // Other tests' nodes may exist: pin to ours with a node selector.
    let pinned = |name: &str, gpus: u32| {
        let mut pod = gpu_pod(name, gpus, None);
        pod.spec.as_mut().unwrap().node_selector = Some(BTreeMap::from([(
            "kubernetes.io/hostname".to_owned(),
            node.clone(),
        )]));
        pod
    };
    pods.create(&PostParams::default(), &pinned("fits", 6))
        .await
        .unwrap();
    let pod = wait_for_pod(&pods, "fits", "Running", |p| phase(p) == Some("Running")).await;
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some(node.as_str()));

    // 6 of 8 GPUs are taken: 4 more do not fit, and the scheduler says so.
    pods.create(&PostParams::default(), &pinned("too-big", 4))
        .await
        .unwrap();
    let pod = wait_for_pod(&pods, "too-big", "Unschedulable", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable")
                })
            })
    })
    .await;
    let message = pod
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap()
        .message
        .unwrap_or_default();
    assert!(message.contains("Insufficient nvidia.com/gpu"), "{message}");
}
