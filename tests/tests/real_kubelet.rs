//! A real kubelet node (`gputopo_testenv::kubelet_node`): the upstream
//! kubelet v1.37 on containerd and runc, registered with the test env's real
//! kube-apiserver. Nothing here is a stand-in: the node goes Ready, pods
//! bound to it run as runc containers (from images built locally from a
//! static busybox; no registry is reachable), the kubelet's own PodResources
//! socket lists them, and a device plugin registers with the kubelet's own
//! `Registration` service, its devices reaching the node's allocatable and
//! a pod. The only test code playing a part is that device plugin
//! (`example.com/dev`), served from the kubelet's `.proto` types.
//!
//! Needs root and Debian 12's containerd, runc, containernetworking-plugins
//! and busybox-static (`scripts/test` installs them). What this machine kind
//! required (each handled in `tests/src/kubelet_node/`): no CAP_SYS_RESOURCE,
//! so containerd clamps the kubelet's negative oom_score_adj
//! (`restrict_oom_score_adj`); cgroup v1 (`failCgroupV1: false`); the node
//! IP cannot be loopback, so the kubelet takes the default route's address;
//! the kubelet hard-codes `/var/lib/kubelet/device-plugins`, so it runs in a
//! mount namespace where that path is the node's own directory.

mod kubelet_common;

use gputopo_kubelet_api::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use gputopo_kubelet_api::deviceplugin::registration_client::RegistrationClient;
use gputopo_kubelet_api::deviceplugin::{self as dp, HEALTHY, VERSION};
use gputopo_kubelet_api::{connect_unix, serve_unix, socket};
use gputopo_testenv::TestEnv;
use gputopo_testenv::kubelet_node::{KubeletNode, KubeletNodeError};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kubelet_common::{list_pod_resources, listed_devices, names, pod, pod_state, poll, wait_phase};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn pods_run_on_a_real_kubelet_node_and_its_pod_resources_socket_lists_them() {
    let env = TestEnv::shared().await;
    let mut node = KubeletNode::start(env)
        .await
        .expect("starting a kubelet node");
    let client = env.client().await;
    let registered = Api::<Node>::all(client.clone())
        .get(node.name())
        .await
        .unwrap();
    let info = registered.status.unwrap().node_info.unwrap();
    assert_eq!(info.kubelet_version, gputopo_testenv::kubernetes_version());
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "{}",
        info.container_runtime_version
    );

    let ns = env.create_namespace("real-kubelet").await;
    let pods = Api::<Pod>::namespaced(client, &ns);
    let post = PostParams::default();
    let name = node.name().to_owned();
    pods.create(&post, &pod("sleeper", Some(&name), "sleep 3600", None))
        .await
        .unwrap();
    pods.create(&post, &pod("ok", Some(&name), "test -x /bin/busybox", None))
        .await
        .unwrap();
    pods.create(&post, &pod("fails", Some(&name), "exit 3", None))
        .await
        .unwrap();
    wait_phase(&mut node, &pods, "sleeper", "Running").await;
    assert_eq!(
        wait_phase(&mut node, &pods, "ok", "Succeeded").await,
        Some(0)
    );
    assert_eq!(
        wait_phase(&mut node, &pods, "fails", "Failed").await,
        Some(3)
    );

    let socket = node.pod_resources_socket();
    let listed = poll(&mut node, "PodResources lists the sleeper", || async {
        let pods = list_pod_resources(&socket).await?;
        let found = pods
            .iter()
            .find(|p| p.namespace == ns && p.name == "sleeper")
            .ok_or_else(|| format!("listed {:?}", names(&pods)))?;
        Ok(found
            .containers
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>())
    })
    .await;
    assert_eq!(listed, ["main"]);

    // A kubelet restart keeps the pod (containerd runs on) and serves again.
    node.restart_kubelet()
        .await
        .expect("restarting the kubelet");
    let socket = node.pod_resources_socket();
    poll(
        &mut node,
        "PodResources lists the sleeper after a restart",
        || async {
            let pods = list_pod_resources(&socket).await?;
            names(&pods)
                .contains(&format!("{ns}/sleeper"))
                .then_some(())
                .ok_or_else(|| format!("listed {:?}", names(&pods)))
        },
    )
    .await;
    let (phase, _) = pod_state(&pods, "sleeper").await.unwrap();
    assert_eq!(phase, "Running");

    // Dropping the node ends every process it started and removes its cgroups and files.
    let dir = node.dir().to_owned();
    let cgroup = node.cgroup_root();
    drop(node);
    let needle = dir.display().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = processes_mentioning(&needle);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes left: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for entry in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let left = entry.path().join(&cgroup);
        assert!(!left.exists(), "cgroup left: {}", left.display());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&needle), "mounts left under {needle}");
    if std::env::var_os("GPUTOPO_KEEP_LOGS").is_none() {
        assert!(!dir.exists(), "{} left", dir.display());
    }
}

/// `pid: cmdline` of every process whose command line contains `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(needle)
                .then(|| format!("{}: {cmdline}", e.file_name().to_string_lossy()))
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_bad_node_name_is_refused_before_anything_starts() {
    let env = TestEnv::shared().await;
    for bad in [
        "Upper",
        "under_score",
        "-lead",
        "trail-",
        "",
        &"x".repeat(51),
    ] {
        match KubeletNode::start_named(env, bad).await {
            Err(KubeletNodeError::BadName { name }) => assert_eq!(name, bad),
            Err(e) => panic!("{bad:?}: expected BadName, got {e}"),
            Ok(node) => panic!("{bad:?} was accepted as {}", node.name()),
        }
    }
}

/// A device plugin of two devices, `dev-a` and `dev-b`, recording what the kubelet allocates.
#[derive(Clone, Default)]
struct TestPlugin {
    allocated: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl DevicePlugin for TestPlugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(dp::DevicePluginOptions::default()))
    }

    type ListAndWatchStream =
        futures::stream::BoxStream<'static, Result<dp::ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let devices = ["dev-a", "dev-b"]
            .map(|id| dp::Device {
                id: id.into(),
                health: HEALTHY.into(),
                topology: None,
            })
            .to_vec();
        // One list, then the stream stays open: the kubelet reads a closed
        // stream as the plugin going away.
        let first = futures::stream::iter([Ok(dp::ListAndWatchResponse { devices })]);
        Ok(Response::new(Box::pin(futures::StreamExt::chain(
            first,
            futures::stream::pending(),
        ))))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        Err(Status::unimplemented(
            "the options say no preferred allocation",
        ))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let mut responses = Vec::new();
        for container in request.into_inner().container_requests {
            self.allocated
                .lock()
                .unwrap()
                .extend(container.devices_ids.iter().cloned());
            responses.push(dp::ContainerAllocateResponse {
                envs: [("EXAMPLE_DEV".to_owned(), container.devices_ids.join(","))].into(),
                ..Default::default()
            });
        }
        Ok(Response::new(dp::AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_device_plugin_registers_with_the_real_kubelet_and_its_device_reaches_a_pod() {
    const RESOURCE: &str = "example.com/dev";
    let env = TestEnv::shared().await;
    let mut node = KubeletNode::start(env)
        .await
        .expect("starting a kubelet node");
    let plugin = TestPlugin::default();
    let endpoint = "gputopo-test.sock";
    let plugin_socket = node.device_plugin_dir().join(endpoint);
    let router = socket::server().add_service(DevicePluginServer::new(plugin.clone()));
    let serve_at = plugin_socket.clone();
    let server =
        tokio::spawn(async move { serve_unix(&serve_at, router, std::future::pending()).await });
    let channel = poll(&mut node, "the plugin socket is served", || async {
        connect_unix(&plugin_socket, Duration::from_secs(2))
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    drop(channel);

    let kubelet = connect_unix(&node.registration_socket(), Duration::from_secs(5))
        .await
        .expect("dialing the kubelet's Registration socket");
    RegistrationClient::new(kubelet)
        .register(dp::RegisterRequest {
            version: VERSION.into(),
            endpoint: endpoint.into(),
            resource_name: RESOURCE.into(),
            options: Some(dp::DevicePluginOptions::default()),
        })
        .await
        .expect("registering with the real kubelet");

    let client = env.client().await;
    let nodes = Api::<Node>::all(client.clone());
    let name = node.name().to_owned();
    poll(
        &mut node,
        "the node's allocatable has 2 example.com/dev",
        || async {
            let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
            let alloc = n.status.and_then(|s| s.allocatable).unwrap_or_default();
            match alloc.get(RESOURCE) {
                Some(q) if q.0 == "2" => Ok(()),
                other => Err(format!("{RESOURCE} allocatable: {other:?}")),
            }
        },
    )
    .await;

    let ns = env.create_namespace("real-kubelet-dp").await;
    let pods = Api::<Pod>::namespaced(client, &ns);
    pods.create(
        &PostParams::default(),
        &pod(
            "user",
            Some(&name),
            "test -n \"$EXAMPLE_DEV\" && sleep 3600",
            Some((RESOURCE, "1")),
        ),
    )
    .await
    .unwrap();
    wait_phase(&mut node, &pods, "user", "Running").await;
    let allocated = plugin.allocated.lock().unwrap().clone();
    assert_eq!(allocated.len(), 1, "Allocate calls: {allocated:?}");
    assert!(["dev-a", "dev-b"].contains(&allocated[0].as_str()));

    let devices = listed_devices(&mut node, &ns, "user").await;
    assert_eq!(devices, [(RESOURCE.to_owned(), allocated)]);

    // Not a graceful stop: the kubelet keeps ListAndWatch open for as long
    // as the plugin serves, which a graceful shutdown would wait for.
    server.abort();
}
