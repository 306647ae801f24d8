//! The device plugin end to end: a real kube-apiserver (gputopo-testenv)
//! holds the pods, the plugin watches them, and a **kubelet stand-in**
//! (`gputopo_kubelet_api::stand_in`, generated from the kubelet's own
//! .proto) registers the plugin, admits containers and serves PodResources.
//! No kubelet runs here, hence the stand-in; its module docs say which of the
//! kubelet's device-manager behaviours it mirrors.
//!
//! The node is the recorded HGX H100 (`fixtures/recorded/`); the pods are
//! bound to it by `spec.nodeName` and never run.

use futures::future::BoxFuture;
use gputopo_api::keys::pod::ASSIGNED_GPUS;
use gputopo_device_plugin::allocate::{DeviceListStrategy, VISIBLE_DEVICES_ENV};
use gputopo_device_plugin::choose::{AssignedPod, Inventory};
use gputopo_device_plugin::health::ManualHealth;
use gputopo_device_plugin::metrics::Metrics;
use gputopo_device_plugin::plugin::{PluginConfig, run};
use gputopo_device_plugin::pods::{AssignedPods, PodWatch};
use gputopo_kubelet_api::connect_unix;
use gputopo_kubelet_api::deviceplugin::UNHEALTHY;
use gputopo_kubelet_api::podresources::ListPodResourcesRequest;
use gputopo_kubelet_api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use gputopo_kubelet_api::stand_in::{AdmitError, PodKey, StandIn};
use gputopo_ops::Readiness;
use gputopo_testenv::TestEnv;
use gputopo_topology::discover::{Source, build, gather};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GPU: &str = "nvidia.com/gpu";
const WAIT: Duration = Duration::from_secs(60);

fn inventory(recording: &str) -> Inventory {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/recorded")
        .join(recording);
    let (facts, node) = gather(&Source::Fixture(path)).unwrap();
    let spec = build(&node.unwrap(), facts).unwrap().spec;
    Inventory::from_spec(&spec).unwrap()
}

struct Harness {
    kubelet: StandIn,
    dir: tempfile::TempDir,
    watch: Arc<PodWatch>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    health: ManualHealth,
    inventory: Arc<Inventory>,
    pods: Api<Pod>,
    node: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A pod view that never catches up (as the plugin's watch may trail the
/// kubelet's): only a fresh list from the API server shows the pods.
struct LaggingView(Arc<PodWatch>);

impl AssignedPods for LaggingView {
    fn assigned(&self) -> Vec<AssignedPod> {
        Vec::new()
    }
    fn synced(&self) -> bool {
        self.0.synced()
    }
    fn fresh(&self) -> BoxFuture<'_, Result<Vec<AssignedPod>, kube::Error>> {
        self.0.fresh()
    }
}

impl Harness {
    async fn start(recording: &str) -> Harness {
        Harness::start_with(recording, false).await
    }

    /// `lagging`: the plugin's view of the pods never shows one.
    async fn start_with(recording: &str, lagging: bool) -> Harness {
        let env = TestEnv::shared().await;
        let client = env.client().await;
        let ns = env.create_namespace("devplugin").await;
        let node = env.unique_name("gpu-node");
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("device-plugins");
        let kubelet = StandIn::start(&plugins, &dir.path().join("pod-resources.sock"))
            .await
            .unwrap();
        let inventory = Arc::new(inventory(recording));
        let watch = Arc::new(PodWatch::start(client.clone(), &node));
        let metrics = Arc::new(Metrics::new());
        let readiness = Arc::new(Readiness::new("starting"));
        let health = ManualHealth::default();
        let config = PluginConfig {
            dir: plugins,
            socket_name: "gputopo.sock".into(),
            resource: GPU.into(),
            strategies: BTreeSet::from([DeviceListStrategy::Envvar, DeviceListStrategy::CdiCri]),
            health_interval: Duration::from_millis(100),
            kubelet_poll: Duration::from_millis(100),
            kubelet_timeout: Duration::from_secs(10),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let view: Arc<dyn AssignedPods> = if lagging {
            Arc::new(LaggingView(watch.clone()))
        } else {
            watch.clone()
        };
        tokio::spawn(run(
            config,
            inventory.clone(),
            view,
            Arc::new(health.clone()),
            metrics.clone(),
            readiness.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        let n = inventory.gpus().count();
        kubelet
            .wait_for_devices(GPU, WAIT, |d| d.len() == n)
            .await
            .unwrap();
        Harness {
            kubelet,
            dir,
            watch,
            metrics,
            readiness,
            health,
            inventory,
            pods: Api::namespaced(client, &ns),
            node,
            _stop: stop,
        }
    }

    /// Creates a pod bound to the node asking for `gpus`, with `assigned`
    /// as gputopo's record; waits until the plugin's pod view has it.
    async fn pod(&self, name: &str, gpus: u32, assigned: Option<&str>) -> (PodKey, Pod) {
        let annotations = match assigned {
            Some(a) => json!({ ASSIGNED_GPUS: a }),
            None => json!({}),
        };
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "nodeName": self.node,
                "containers": [{"name": "main", "image": "example.invalid/cuda",
                    "resources": {"limits": {GPU: gpus.to_string()}}}]
            }
        }))
        .unwrap();
        let pod = self
            .pods
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        let uid = pod.metadata.uid.clone().unwrap();
        if assigned.is_some() {
            let start = Instant::now();
            while !self.watch.assigned().iter().any(|c| c.pod.uid == uid) {
                assert!(start.elapsed() < WAIT, "the plugin never saw pod {name}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let key = PodKey {
            namespace: pod.metadata.namespace.clone().unwrap(),
            name: name.into(),
            uid,
        };
        (key, pod)
    }

    fn uuids(&self, indices: &[u32]) -> Vec<String> {
        indices
            .iter()
            .map(|&i| self.inventory.uuid_of(i).unwrap().to_string())
            .collect()
    }

    fn indices(&self, devices: &[String]) -> Vec<u32> {
        devices
            .iter()
            .map(|d| self.inventory.index_of(d).unwrap())
            .collect()
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_gets_exactly_the_gpus_gputopo_chose_in_allocate_and_pod_resources() {
    let h = Harness::start("hgx-h100-8gpu-nvswitch-nvml.yaml").await;
    assert!(h.readiness.is_ready(), "{}", h.readiness.reason());
    let (key, _) = h.pod("trainer", 2, Some("1,4")).await;
    let a = h.kubelet.admit(&key, "main", GPU, 2).await.unwrap();
    let want = h.uuids(&[1, 4]);
    assert_eq!(sorted(a.devices.clone()), want);
    assert_eq!(a.response.envs[VISIBLE_DEVICES_ENV], a.devices.join(","));
    let cdi: Vec<_> = a
        .response
        .cdi_devices
        .iter()
        .map(|d| d.name.clone())
        .collect();
    assert_eq!(
        cdi,
        a.devices
            .iter()
            .map(|u| format!("nvidia.com/gpu={u}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(h.metrics.preferred_count("matched"), 1);

    let channel = connect_unix(&h.dir.path().join("pod-resources.sock"), WAIT)
        .await
        .unwrap();
    let list = PodResourcesListerClient::new(channel)
        .list(ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let pod = list
        .pod_resources
        .iter()
        .find(|p| p.name == "trainer")
        .unwrap();
    let held: Vec<String> = pod.containers[0]
        .devices
        .iter()
        .flat_map(|d| d.device_ids.clone())
        .collect();
    assert_eq!(sorted(held), want);
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_the_plugins_view_has_not_seen_yet_still_gets_its_gpus_from_a_fresh_list() {
    let h = Harness::start_with("hgx-h100-8gpu-nvswitch-nvml.yaml", true).await;
    let (key, _) = h.pod("early", 2, Some("2,6")).await;
    let a = h.kubelet.admit(&key, "main", GPU, 2).await.unwrap();
    assert_eq!(sorted(a.devices), h.uuids(&[2, 6]));
    assert_eq!(h.metrics.preferred_count("matched"), 1);
    assert_eq!(h.metrics.preferred_count("topology-rule"), 0);
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_pod_without_gputopos_choice_gets_the_topology_rules_gpu() {
    // GPU 3 has two NVLinks down: a 1-GPU pod takes it, keeping the NV18 seven whole.
    let h = Harness::start("hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml").await;
    let (key, _) = h.pod("notebook", 1, None).await;
    let a = h.kubelet.admit(&key, "main", GPU, 1).await.unwrap();
    assert_eq!(h.indices(&a.devices), [3]);
    assert_eq!(h.metrics.preferred_count("topology-rule"), 1);
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn two_fitting_pods_are_told_apart_by_creation_then_name() {
    let h = Harness::start("hgx-h100-8gpu-nvswitch-nvml.yaml").await;
    let (b, b_pod) = h.pod("pod-b", 2, Some("0,1")).await;
    let (a, a_pod) = h.pod("pod-a", 2, Some("2,3")).await;
    // The documented rule, on the creation times the API server wrote.
    let created = |p: &Pod| p.metadata.creation_timestamp.clone().unwrap().0;
    let (first, first_set, second, second_set) =
        if (created(&b_pod), "pod-b") < (created(&a_pod), "pod-a") {
            (&b, [0, 1], &a, [2, 3])
        } else {
            (&a, [2, 3], &b, [0, 1])
        };
    // Whichever pod the kubelet admits first gets the first pod's set.
    let got = h.kubelet.admit(second, "main", GPU, 2).await.unwrap();
    assert_eq!(sorted(got.devices), h.uuids(&first_set));
    assert_eq!(h.metrics.preferred_count("ambiguous"), 1);
    let got = h.kubelet.admit(first, "main", GPU, 2).await.unwrap();
    assert_eq!(sorted(got.devices), h.uuids(&second_set));
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_kubelet_restart_is_followed_by_a_new_registration() {
    let mut h = Harness::start("hgx-h100-8gpu-nvswitch-nvml.yaml").await;
    assert_eq!(h.kubelet.registrations(), 1);
    h.kubelet.restart().await.unwrap();
    h.kubelet
        .wait_for_devices(GPU, WAIT, |d| d.len() == 8)
        .await
        .unwrap();
    assert_eq!(h.kubelet.registrations(), 2);
    let (key, _) = h.pod("after-restart", 4, Some("4,5,6,7")).await;
    let a = h.kubelet.admit(&key, "main", GPU, 4).await.unwrap();
    assert_eq!(sorted(a.devices), h.uuids(&[4, 5, 6, 7]));
    let start = Instant::now();
    while !h.readiness.is_ready() {
        assert!(start.elapsed() < WAIT, "{}", h.readiness.reason());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_kubelet_that_removes_the_plugins_new_socket_as_it_starts_is_registered_with_again() {
    let mut h = Harness::start("hgx-h100-8gpu-nvswitch-nvml.yaml").await;
    assert_eq!(h.metrics.registration_count("error"), 0);
    // A kubelet stopping removes kubelet.sock: the plugin serves a new socket
    // and tries to register (in vain: no kubelet.sock yet)...
    h.kubelet.stop_registration().await;
    let start = Instant::now();
    while h.metrics.registration_count("error") == 0 {
        assert!(start.elapsed() < WAIT, "the plugin never tried again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...which the kubelet, starting, removes with the rest of the directory
    // (the real kubelet v1.34 did this in tests/tests/real_kubelet_gpus.rs).
    h.kubelet.start_registration().unwrap();
    h.kubelet
        .wait_for_devices(GPU, WAIT, |d| d.len() == 8)
        .await
        .unwrap();
    let (key, _) = h.pod("after", 2, Some("0,7")).await;
    let a = h.kubelet.admit(&key, "main", GPU, 2).await.unwrap();
    assert_eq!(sorted(a.devices), h.uuids(&[0, 7]));
    assert!(h.readiness.is_ready(), "{}", h.readiness.reason());
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_lost_gpu_leaves_the_available_set() {
    let h = Harness::start("hgx-h100-8gpu-nvswitch-nvml.yaml").await;
    let lost = h.uuids(&[0])[0].clone();
    h.health.set_lost(&lost, true);
    h.kubelet
        .wait_for_devices(GPU, WAIT, |d| {
            d.iter().any(|x| x.id == lost && x.health == UNHEALTHY)
        })
        .await
        .unwrap();
    // gputopo chose GPU 0 before it was lost: the pod cannot have it.
    let (key, _) = h.pod("late", 1, Some("0")).await;
    let a = h.kubelet.admit(&key, "main", GPU, 1).await.unwrap();
    assert!(!a.devices.contains(&lost), "{:?}", a.devices);
    assert_eq!(h.metrics.preferred_count("topology-rule"), 1);
    let (all, _) = h.pod("all", 8, None).await;
    let err = h.kubelet.admit(&all, "main", GPU, 8).await.unwrap_err();
    assert!(
        matches!(err, AdmitError::TooFew { available: 6, .. }),
        "{err}"
    );
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn unusable_annotations_are_counted_and_the_topology_rule_decides() {
    let h = Harness::start("hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml").await;
    let (beyond, _) = h.pod("beyond", 2, Some("0,9")).await;
    let (text, _) = h.pod("text", 1, Some("first")).await;
    let a = h.kubelet.admit(&text, "main", GPU, 1).await.unwrap();
    assert_eq!(h.indices(&a.devices), [3], "the topology rule's pick");
    let b = h.kubelet.admit(&beyond, "main", GPU, 2).await.unwrap();
    assert_eq!(b.devices.len(), 2);
    assert!(!b.devices.contains(&a.devices[0]));
    assert_eq!(h.metrics.bad_annotation_count("unknown-gpu"), 1);
    assert_eq!(h.metrics.bad_annotation_count("unparsable"), 1);
    assert_eq!(h.metrics.preferred_count("topology-rule"), 2);
}
