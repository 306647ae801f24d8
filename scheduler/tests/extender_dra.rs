//! The extender mode with Dynamic Resource Allocation, end to end: the
//! stock kube-scheduler (its own DRA plugin allocates the claims, first
//! fit) with gputopo as its extender, on kwok nodes whose GPUs only
//! NVIDIA's DRA driver publishes (the ResourceSlices it would publish for
//! the recorded machines; no driver or kubelet runs here). The extender
//! steers the node: a pod asking NVLink through `gputopo.dev/min-nvlink-level`
//! never lands on the PCIe box. It cannot steer the devices, and says so in
//! a `SuboptimalGPUAllocation` event when kube-scheduler's pick is worse
//! than gputopo's set on the node.

mod common;

use common::dra::{allocated, claim, claim_of, claim_pod, dra_node, request, template};
use common::extender::{ExtenderProcess, env, wait_for};
use common::{DGX1, PCIE_2SOCKET, events, gpu_pod, node_of, topology};
use gputopo_api::LinkClass;
use gputopo_scheduler_core::reported::SetLinks;
use gputopo_testenv::loopback::request as http_request;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::DeviceClass;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const V100: &str = "Tesla V100-SXM2-32GB";
const RTX4090: &str = "NVIDIA GeForce RTX 4090";

/// GPU indices of `gpu-N` device names.
fn indices(devices: &[String]) -> Vec<u32> {
    devices
        .iter()
        .map(|d| {
            d.strip_prefix("gpu-")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a gpu-N device: {d}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn the_extender_steers_claim_pods_to_nvlink_and_says_when_kube_schedulers_devices_are_worse()
{
    let env = env().await;
    let client = env.client().await;
    // Two groups of a DGX-1 and a PCIe box: one for a claim pod, one for a
    // plain nvidia.com/gpu pod served through DRA (KEP-5004).
    let mut groups = Vec::new();
    for what in ["claim", "plain"] {
        let group = env.unique_name(&format!("extdra-{what}"));
        let dgx1 = env.unique_name(&format!("extdra-{what}-dgx1"));
        let pcie = env.unique_name(&format!("extdra-{what}-pcie"));
        dra_node(env, &dgx1, DGX1, V100, &group, false).await;
        dra_node(env, &pcie, PCIE_2SOCKET, RTX4090, &group, false).await;
        groups.push((group, dgx1, pcie));
    }
    let class: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu-extended"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": "nvidia.com/gpu"
        }
    }))
    .expect("a class");
    Api::<DeviceClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("creating the extended-resource DeviceClass");
    let profile = env.unique_name("gputopo-extender-dra");
    let ext = ExtenderProcess::start(env, &profile).await;
    let ns = env.create_namespace("extdra").await;
    let (group, dgx1, pcie) = groups[0].clone();

    // The filter as kube-scheduler calls it, for a pod of a named claim of
    // two GPUs asking NVLink: the PCIe box has no such pair even empty.
    claim(&client, &ns, "probe-pair", request(2)).await;
    let mut probe = claim_pod("probe", &profile, &group, "probe-pair", false);
    probe.metadata.namespace = Some(ns.clone());
    probe.metadata.annotations = Some([("gputopo.dev/min-nvlink-level".into(), "2".into())].into());
    let body = json!({"Pod": probe, "NodeNames": [dgx1, pcie]}).to_string();
    // Until its watch has the claim, the extender leaves the pod unjudged.
    let answer: Value = wait_for_answer(&ext, &body, |a| a["NodeNames"] == json!([dgx1])).await;
    assert_eq!(
        answer["FailedAndUnresolvableNodes"],
        json!({pcie.clone(): "no 2-GPU set with NV2"}),
        "{answer}"
    );

    // kube-scheduler with gputopo as its extender for every pod of the
    // profile (no managedResources: a claim pod asks for no nvidia.com/gpu).
    let mut ks = env
        .start_scheduler_with_config(
            &env.unique_name("kube-scheduler-extender-dra"),
            json!({
                "podInitialBackoffSeconds": 1,
                "podMaxBackoffSeconds": 2,
                "profiles": [{"schedulerName": profile}],
                "extenders": [ext.stanza_for_every_pod()]
            }),
        )
        .await
        .expect("kube-scheduler starts with the extender configuration");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    // A pod whose two GPUs come from a claim template, asking NVLink.
    template(&client, &ns, "pair", request(2)).await;
    let mut pair = claim_pod("pair-nv2", &profile, &group, "pair", true);
    pair.metadata.annotations = probe.metadata.annotations.clone();
    pods.create(&PostParams::default(), &pair)
        .await
        .expect("creating pair-nv2");
    // The plain pod, in the second group.
    let (plain_group, plain_dgx1, _) = groups[1].clone();
    let plain = gpu_pod(
        "plain-nv2",
        &profile,
        &plain_group,
        2,
        &[("gputopo.dev/min-nvlink-level", "2")],
    );
    pods.create(&PostParams::default(), &plain)
        .await
        .expect("creating plain-nv2");

    let dgx1_topology = topology(&dgx1, DGX1);
    for (name, node) in [("pair-nv2", &dgx1), ("plain-nv2", &plain_dgx1)] {
        let pod = wait_for(&format!("pod {name} bound"), &ext, &ks, || async {
            pods.get(name).await.ok().filter(|p| node_of(p).is_some())
        })
        .await;
        assert_eq!(
            node_of(&pod).as_deref(),
            Some(node.as_str()),
            "{name}: NVLink only on the DGX-1"
        );
        assert!(
            pod.metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key("gputopo.dev/assigned-gpus")),
            "{name}: the devices are kube-scheduler's, no GPU annotation: {:?}",
            pod.metadata.annotations
        );
        // kube-scheduler's DRA plugin allocated the claim (the template's, or
        // the plain pod's special claim); its first fit on a DGX-1 is GPUs
        // 0 and 1, joined by one NVLink where gputopo's pair has two.
        let claim_name = match name {
            "plain-nv2" => pod
                .status
                .as_ref()
                .and_then(|s| s.extended_resource_claim_status.as_ref())
                .map(|s| s.resource_claim_name.clone())
                .expect("kube-scheduler records the special claim"),
            _ => claim_of(&client, &ns, &pod)
                .await
                .metadata
                .name
                .expect("a name"),
        };
        let claim =
            Api::<k8s_openapi::api::resource::v1::ResourceClaim>::namespaced(client.clone(), &ns)
                .get(&claim_name)
                .await
                .expect("the claim");
        let (on, devices) = allocated(&claim).expect("allocated by kube-scheduler");
        assert_eq!(&on, node);
        let gpus = indices(&devices);
        let links = SetLinks::of(Some(&dgx1_topology), &gpus);
        assert!(
            matches!(links, SetLinks::Worst(c) if c < LinkClass::Nv(2)),
            "{name}: this test needs kube-scheduler's first fit below NV2, got {gpus:?} ({links})"
        );
        let list = gpus
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let event = wait_for(
            &format!("{name}: SuboptimalGPUAllocation"),
            &ext,
            &ks,
            || async {
                events(&client, &ns, name, "SuboptimalGPUAllocation")
                    .await
                    .into_iter()
                    .next()
            },
        )
        .await;
        let note = event.note.unwrap_or_default();
        assert!(
            note.starts_with(&format!(
                "kube-scheduler allocated GPUs {list} (bottleneck NV1"
            )) && note.contains(&format!(
                "on node {node} where gputopo would have chosen GPUs "
            )) && note.contains("(bottleneck NV2"),
            "{name}: {note}"
        );
        assert_eq!(event.type_.as_deref(), Some("Warning"));
    }
    ks.check_running().expect("kube-scheduler still runs");
    let (code, metrics) = http_request(ext.port, "GET", "/metrics", "")
        .await
        .expect("metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("gputopo_extender_suboptimal_dra_allocations_total 2"),
        "{metrics}"
    );
}

/// Posts `body` to /filter until `done` accepts the answer (the extender's
/// watch catching up with a claim just created), at most 30 s.
async fn wait_for_answer(
    ext: &ExtenderProcess,
    body: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, text) = ext.post("/filter", body).await;
        assert_eq!(code, 200, "{text}");
        let answer: Value = serde_json::from_str(&text).expect("JSON");
        if done(&answer) {
            return answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the extender's answer is still {answer}; log:\n{}",
            ext.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
