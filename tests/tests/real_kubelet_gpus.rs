//! gputopo end to end on a real kubelet (`gputopo_testenv::kubelet_node`):
//! the real `gputopo-device-plugin` registers `nvidia.com/gpu` with the
//! upstream kubelet v1.37, `gputopo-agent` reads the kubelet's own
//! PodResources socket, and the real `gputopo-scheduler` places a pod. Both
//! daemons replay one recorded machine (`fixtures/recorded/dgx1-v100-nvml.yaml`,
//! the DGX-1's hybrid cube-mesh: which GPUs a set takes matters), so their
//! UUIDs agree; the node has no GPU, so nothing reaches a driver.
//!
//! - a pod gputopo-scheduler placed gets exactly the GPUs it chose: the
//!   kubelet's PodResources `List` names those UUIDs, and inside the
//!   container `NVIDIA_VISIBLE_DEVICES` does too;
//! - a pod bound without gputopo's record gets what scheduler-core's rule
//!   picks among the free GPUs;
//! - the agent publishes who holds which GPU (`status.allocations[].holders`)
//!   from the real socket, with `status.podResources` fresh and error-free;
//! - after the kubelet restarts, the plugin registers again, the GPUs come
//!   back to the node's allocatable, the running pods keep theirs, and a pod
//!   admitted then still gets the set its record names.
//!
//! Why the real scheduler: a pod whose record is written by the code that
//! writes it in production tests the contract the plugin reads (the
//! annotation's form, and that it arrives with the binding), not a copy of
//! it; the agent is needed for part of the test anyway, and the scheduler
//! adds one process and a second or two. The pod admitted after the restart
//! carries a record written by the test instead (the same keys), on the one
//! free GPU the topology rule would *not* pick, so that only the record
//! explains the outcome.
//!
//! What this machine cannot do: the containers see the GPU list only as the
//! environment variable (`--device-list-strategy=envvar`); no NVIDIA
//! container runtime hook turns it into device nodes, since there is no GPU.
//! The `cdi-cri` strategy is not exercised: it needs a CDI-enabled runtime
//! (containerd 1.7+), and Debian 12's containerd is 1.6.20, whose CRI plugin
//! ignores CDI devices.
//!
//! Rerun: `cargo build -p gputopo-device-plugin -p gputopo-agent -p
//! gputopo-scheduler && cargo test -p gputopo-testenv --test real_kubelet_gpus --
//! --include-ignored`
//! (root, with the packages `tests/tests/real_kubelet.rs` names).

mod kubelet_common;

use gputopo_api::keys::pod::{ASSIGNED_GPU_UUIDS, ASSIGNED_GPUS};
use gputopo_api::{Collective, DeviceForm, GpuTopology};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_testenv::TestEnv;
use gputopo_testenv::kubelet_node::KubeletNode;
use k8s_openapi::api::core::v1::{HostPathVolumeSource, Node, Pod, Volume, VolumeMount};
use kube::api::{Api, PostParams};
use kubelet_common::gpu_node::{GpuStack, recording};
use kubelet_common::{listed_devices, pod, poll_with, wait_phase};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const GPU: &str = "nvidia.com/gpu";
const RECORDING: &str = "dgx1-v100-nvml.yaml";

/// A pod asking `gpus` GPUs that writes its `NVIDIA_VISIBLE_DEVICES` to its
/// termination message, then runs until `handoff/stop` exists.
fn gpu_pod(name: &str, node: Option<&str>, gpus: u32, handoff: &Path) -> Pod {
    let script = "printf %s \"$NVIDIA_VISIBLE_DEVICES\" > /dev/termination-log; \
                  until [ -e /handoff/stop ]; do sleep 1; done";
    let mut pod = pod(name, node, script, Some((GPU, &gpus.to_string())));
    let spec = pod.spec.as_mut().expect("a spec");
    spec.volumes = Some(vec![Volume {
        name: "handoff".into(),
        host_path: Some(HostPathVolumeSource {
            path: handoff.display().to_string(),
            type_: Some("Directory".into()),
        }),
        ..Default::default()
    }]);
    spec.containers[0].volume_mounts = Some(vec![VolumeMount {
        name: "handoff".into(),
        mount_path: "/handoff".into(),
        read_only: Some(true),
        ..Default::default()
    }]);
    pod
}

/// The devices a pod's PodResources entries list, all `nvidia.com/gpu`
/// (the kubelet lists one entry per device, with its NUMA node).
fn gpu_devices(listed: Vec<(String, Vec<String>)>) -> BTreeSet<String> {
    assert!(
        !listed.is_empty() && listed.iter().all(|(resource, _)| resource == GPU),
        "expected {GPU} devices only, listed {listed:?}"
    );
    listed.into_iter().flat_map(|(_, ids)| ids).collect()
}

/// The message of `name`'s `gputopo.dev/gpu-assignment` condition, once
/// the kubelet has written its own (`Ready`) beside it.
async fn status_record_of(pods: &Api<Pod>, name: &str) -> Result<String, String> {
    let p = pods.get(name).await.map_err(|e| e.to_string())?;
    let conditions = p.status.and_then(|s| s.conditions).unwrap_or_default();
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
    match (find("Ready"), find("gputopo.dev/gpu-assignment")) {
        (Some(_), Some(c)) => Ok(c.message.clone().unwrap_or_default()),
        other => Err(format!("Ready and the record: {other:?}")),
    }
}

/// scheduler-core's set of `size` GPUs among `free` (a mask) on the
/// recording's wiring: its rule for pods gputopo did not place.
fn rule_pick(stack: &GpuStack, free: u32, size: u32) -> BTreeSet<String> {
    let shape = NodeShape::from_spec(&stack.spec).expect("the recording's shape");
    let request = SetRequest {
        allow_mig: true,
        ..SetRequest::new(size, Collective::default())
    };
    let picked = shape.pick(free, &request).expect("a set fits").gpus;
    (0..32)
        .filter(|i| picked & (1 << i) != 0)
        .map(|i| stack.uuid(i))
        .collect()
}

fn mask(stack: &GpuStack, uuids: &BTreeSet<String>) -> u32 {
    uuids.iter().fold(0, |m, u| m | (1 << stack.index(u)))
}

/// (GPU index, container, device) of every holder the agent published for `pod`.
fn holders_of(topology: &GpuTopology, pod: &str) -> BTreeSet<(u32, String, String)> {
    let status = topology.status.as_ref();
    status
        .map(|s| s.allocations.as_slice())
        .unwrap_or_default()
        .iter()
        .flat_map(|a| a.holders.iter().map(move |h| (a.gpu, h)))
        .filter(|(_, h)| h.pod == pod && h.resource == GPU && h.form == DeviceForm::Whole)
        .map(|(gpu, h)| (gpu, h.container.clone(), h.device.clone()))
        .collect()
}

/// Waits until the agent's `GpuTopology` names `pod`'s container `main` as
/// the holder of exactly `devices`, from a reading without error.
async fn wait_holders(
    node: &mut KubeletNode,
    stack: &mut GpuStack,
    topologies: &Api<GpuTopology>,
    pod: &str,
    devices: &BTreeSet<String>,
) {
    let want: BTreeSet<(u32, String, String)> = devices
        .iter()
        .map(|d| (stack.index(d), "main".to_owned(), d.clone()))
        .collect();
    let name = node.name().to_owned();
    poll_with(
        node,
        Some(stack),
        &format!("the agent names {pod}'s holds"),
        || async {
            let t = topologies.get(&name).await.map_err(|e| e.to_string())?;
            let reading = t.status.as_ref().and_then(|s| s.pod_resources.clone());
            let reading = reading.ok_or("no status.podResources yet")?;
            if let Some(e) = reading.last_error {
                return Err(format!("lastError: {e}"));
            }
            let got = holders_of(&t, pod);
            (got == want)
                .then_some(())
                .ok_or_else(|| format!("holders {got:?}, want {want:?}"))
        },
    )
    .await
}

/// Waits until the node's allocatable `nvidia.com/gpu` is `count`.
async fn wait_allocatable(node: &mut KubeletNode, stack: &mut GpuStack, count: usize) {
    let nodes = Api::<Node>::all(TestEnv::shared().await.client().await);
    let name = node.name().to_owned();
    let what = format!("the node's allocatable {GPU} is {count}");
    poll_with(node, Some(stack), &what, || async {
        let n = nodes.get(&name).await.map_err(|e| e.to_string())?;
        let alloc = n.status.and_then(|s| s.allocatable).unwrap_or_default();
        match alloc.get(GPU) {
            Some(q) if q.0 == count.to_string() => Ok(()),
            other => Err(format!("allocatable {GPU}: {other:?}")),
        }
    })
    .await
}

/// The GPUs in a pod's termination message (its `NVIDIA_VISIBLE_DEVICES`).
async fn visible_devices(node: &mut KubeletNode, pods: &Api<Pod>, name: &str) -> BTreeSet<String> {
    assert_eq!(wait_phase(node, pods, name, "Succeeded").await, Some(0));
    let pod = pods.get(name).await.expect("the pod");
    let message = pod
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.state?.terminated?.message)
        .unwrap_or_default();
    message.split(',').map(str::to_owned).collect()
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_device_plugin_on_a_real_kubelet_hands_out_the_chosen_gpus_and_the_agent_reads_them() {
    let env = TestEnv::shared().await;
    // Its node lifecycle controller lifts the not-ready taint every new
    // Node is created with, once the kubelet reports Ready.
    env.with_controller_manager().await;
    let mut node = KubeletNode::start(env)
        .await
        .expect("starting a kubelet node");
    let logs = node.dir().join("gputopo");
    let handoff = node.dir().join("handoff");
    for dir in [&logs, &handoff] {
        std::fs::create_dir_all(dir).expect("a directory in the node's temp dir");
    }
    let mut stack = GpuStack::start(env, &node, &recording(RECORDING), &logs);
    let count = stack.spec.gpus.len();
    assert_eq!(count, 8);
    let all = (1u32 << count) - 1;

    // The plugin registers with the real kubelet: every GPU is advertised.
    wait_allocatable(&mut node, &mut stack, count).await;
    let plugin_port = stack.plugin.port;
    assert_eq!(
        gputopo_testenv::loopback::get(plugin_port, "/readyz")
            .await
            .map(|(code, _)| code),
        Some(200)
    );
    let client = env.client().await;
    let topologies = Api::<GpuTopology>::all(client.clone());
    let ns = env.create_namespace("real-kubelet-gpus").await;
    let pods = Api::<Pod>::namespaced(client, &ns);
    let post = PostParams::default();

    // 1a. gputopo-scheduler places a 4-GPU pod; its record names the GPUs.
    let mut trainer = gpu_pod("trainer", None, 4, &handoff);
    trainer.spec.as_mut().expect("a spec").scheduler_name = Some(stack.scheduler_name.clone());
    pods.create(&post, &trainer)
        .await
        .expect("creating trainer");
    let name = node.name().to_owned();
    let record = poll_with(
        &mut node,
        Some(&mut stack),
        "trainer is bound with its GPUs",
        || async {
            let p = pods.get("trainer").await.map_err(|e| e.to_string())?;
            let why = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| {
                    let scheduled = c.iter().find(|c| c.type_ == "PodScheduled")?;
                    scheduled.message.clone()
                });
            let on = p.spec.and_then(|s| s.node_name);
            let a = p.metadata.annotations.unwrap_or_default();
            match (on, a.get(ASSIGNED_GPUS), a.get(ASSIGNED_GPU_UUIDS)) {
                (Some(on), Some(gpus), Some(uuids)) => Ok((on, gpus.clone(), uuids.clone())),
                other => Err(format!(
                    "binding and record: {other:?}; PodScheduled: {why:?}"
                )),
            }
        },
    )
    .await;
    assert_eq!(record.0, name);
    let chosen: BTreeSet<String> = record
        .1
        .split(',')
        .map(|i| stack.uuid(i.parse().expect("a GPU index")))
        .collect();
    assert_eq!(chosen.len(), 4, "{record:?}");
    assert_eq!(chosen, record.2.split(',').map(str::to_owned).collect());
    wait_phase(&mut node, &pods, "trainer", "Running").await;
    // The scheduler's copy of the record in the pod's status, beside the
    // conditions the kubelet wrote running it.
    let status_record = format!("gputopo.dev/assigned-gpus={}; ", record.1);
    let kept = poll_with(
        &mut node,
        Some(&mut stack),
        "trainer's status record",
        || status_record_of(&pods, "trainer"),
    )
    .await;
    assert!(kept.starts_with(&status_record), "{kept}");
    let trainer_devices = gpu_devices(listed_devices(&mut node, &ns, "trainer").await);
    assert_eq!(trainer_devices, chosen, "PodResources vs the record");
    let trainer_key = format!("{ns}/trainer");

    // 2. The agent reads the real PodResources socket: holders, fresh, no error.
    wait_holders(&mut node, &mut stack, &topologies, &trainer_key, &chosen).await;
    let reading = topologies.get(&name).await.expect("the GpuTopology");
    let reading = reading
        .status
        .and_then(|s| s.pod_resources)
        .expect("podResources");
    assert!(reading.unknown_devices.is_empty(), "{reading:?}");

    // 1b. A pod without gputopo's record gets scheduler-core's rule.
    let free = all & !mask(&stack, &chosen);
    let rule = rule_pick(&stack, free, 2);
    pods.create(&post, &gpu_pod("notebook", Some(&name), 2, &handoff))
        .await
        .expect("creating notebook");
    wait_phase(&mut node, &pods, "notebook", "Running").await;
    let notebook_devices = gpu_devices(listed_devices(&mut node, &ns, "notebook").await);
    assert_eq!(notebook_devices, rule, "PodResources vs the topology rule");
    let notebook_key = format!("{ns}/notebook");
    wait_holders(&mut node, &mut stack, &topologies, &notebook_key, &rule).await;
    let outcome =
        |o: &str| format!("gputopo_device_plugin_preferred_allocations_total{{outcome=\"{o}\"}}");
    assert_eq!(stack.plugin.metric(&outcome("matched")).await, Some(1.0));
    assert_eq!(
        stack.plugin.metric(&outcome("topology-rule")).await,
        Some(1.0)
    );

    // 1c. The kubelet restarts: the plugin registers again and the GPUs come back.
    node.restart_kubelet()
        .await
        .expect("restarting the kubelet");
    let ok = "gputopo_device_plugin_registrations_total{result=\"ok\"}";
    poll_with(
        &mut node,
        Some(&mut stack),
        "the plugin registered again",
        || async {
            match gputopo_testenv::loopback::get(plugin_port, "/metrics").await {
                Some((200, body)) if body.lines().any(|l| l == format!("{ok} 2")) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    wait_allocatable(&mut node, &mut stack, count).await;
    // The kubelet's checkpoint kept the running pods' devices.
    let after = gpu_devices(listed_devices(&mut node, &ns, "trainer").await);
    assert_eq!(after, chosen);
    let after = gpu_devices(listed_devices(&mut node, &ns, "notebook").await);
    assert_eq!(after, rule);

    // A pod admitted now, with a record naming the free GPU the rule would not take.
    let free = free & !mask(&stack, &rule);
    let not_rule = free & !mask(&stack, &rule_pick(&stack, free, 1));
    assert_eq!(not_rule.count_ones(), 1, "free {free:#b}");
    let index = not_rule.trailing_zeros();
    let late_uuid = stack.uuid(index);
    let mut late = gpu_pod("late", Some(&name), 1, &handoff);
    late.metadata.annotations = Some(BTreeMap::from([
        (ASSIGNED_GPUS.to_owned(), index.to_string()),
        (ASSIGNED_GPU_UUIDS.to_owned(), late_uuid.clone()),
    ]));
    pods.create(&post, &late).await.expect("creating late");
    wait_phase(&mut node, &pods, "late", "Running").await;
    let late_devices = gpu_devices(listed_devices(&mut node, &ns, "late").await);
    assert_eq!(late_devices, BTreeSet::from([late_uuid]));
    // The agent reads the restarted kubelet too.
    wait_holders(
        &mut node,
        &mut stack,
        &topologies,
        &format!("{ns}/late"),
        &late_devices,
    )
    .await;

    // The restarted kubelet rewrote every running pod's status: the
    // scheduler's record is still there, unchanged.
    let kept_after = status_record_of(&pods, "trainer").await;
    assert_eq!(
        kept_after,
        Ok(kept),
        "the status record after the kubelet's restart"
    );

    // Inside the containers: the GPUs the runtime was told are the same.
    std::fs::write(handoff.join("stop"), b"").expect("writing the stop file");
    for (pod, want) in [
        ("trainer", &chosen),
        ("notebook", &rule),
        ("late", &late_devices),
    ] {
        assert_eq!(&visible_devices(&mut node, &pods, pod).await, want, "{pod}");
    }
    stack.check_running().unwrap_or_else(|e| panic!("{e}"));
}
