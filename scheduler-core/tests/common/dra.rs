//! Recorded machines as NVIDIA's DRA driver (`gpu.nvidia.com`,
//! `cmd/gpu-kubelet-plugin`: `GpuInfo.GetDevice()`) would publish them: one
//! node-local ResourceSlice per node, pool named after the node, one device
//! `gpu-<minor>` per GPU with the attributes `type`, `uuid`, `productName`,
//! `brand`, `architecture`, `cudaComputeCapability`, `driverVersion`,
//! `cudaDriverVersion`, `resource.kubernetes.io/pciBusID`,
//! `resource.kubernetes.io/pcieRoot` and the capacity `memory`; beside it
//! NVIDIA's ComputeDomain driver (`channel-0`, `daemon-0`) and dranet's NICs
//! (`topology::dra_slice`). Claims, classes and pods as literal objects.

#![allow(dead_code)] // each test binary uses its own subset

use gputopo_api::GpuRequest;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_api::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use gputopo_api::{GpuTopology, GpuTopologySpec};
use gputopo_scheduler_core::dra::{DraFit, DraInventory, DraPod, NodeReason};
use gputopo_scheduler_core::gpuset::{NodeShape, SetRequest};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::backend::recording::{Recording, replay_nvml};
use gputopo_topology::dra_slice::{
    DriverFacts, compute_domain_resource_slice, nic_resource_slice, nvidia_resource_slice,
};
use gputopo_topology::normalize::normalize;
use serde_json::{Value, json};
use std::path::PathBuf;

pub const DRIVER: &str = "gpu.nvidia.com";

/// A recorded machine and how the driver describes its GPUs.
pub struct Machine {
    pub node: &'static str,
    pub product: &'static str,
    pub architecture: &'static str,
    pub compute_capability: &'static str,
    pub memory: &'static str,
    /// The driver publishes `index` (versions before v25.8 did; the
    /// topology of this machine names no UUID, so that is what maps it).
    pub publish_index: bool,
}

pub const DGX_A100: Machine = Machine {
    node: "dgx-a100",
    product: "NVIDIA A100-SXM4-40GB",
    architecture: "Ampere",
    compute_capability: "8.0.0",
    memory: "40Gi",
    publish_index: false,
};

pub const DGX1_V100: Machine = Machine {
    node: "dgx1-v100",
    product: "Tesla V100-SXM2-32GB",
    architecture: "Volta",
    compute_capability: "7.0.0",
    memory: "32Gi",
    publish_index: false,
};

pub const PCIE_2SOCKET: Machine = Machine {
    node: "rtx4090-pcie",
    product: "NVIDIA GeForce RTX 4090",
    architecture: "Ada Lovelace",
    compute_capability: "8.9.0",
    memory: "24Gi",
    publish_index: true,
};

pub const MACHINES: [&Machine; 3] = [&DGX_A100, &DGX1_V100, &PCIE_2SOCKET];

pub fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_path(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// The node's `GpuTopology` spec, as the agent would publish it.
///
/// * DGX A100: `fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt`
///   normalized; a bare `topo -m` names no UUID, so UUIDs in the style of
///   the recordings (`GPU-a1000001-0000-4000-8000-00000000000<i>`) are set,
///   as NVML would have reported them.
/// * DGX-1 V100: the NVML recording `fixtures/recorded/dgx1-v100-nvml.yaml`
///   (UUIDs and PCI bus ids included).
/// * PCIe box: `fixtures/nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt`
///   normalized, without UUIDs (devices map by `index`).
pub fn topology_spec(m: &Machine) -> GpuTopologySpec {
    match m.node {
        "dgx-a100" => {
            let facts = facts_from_topo(&read(
                "fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt",
            ))
            .expect("the fixture parses");
            let mut spec = normalize(m.node, &facts).expect("it normalizes");
            for g in &mut spec.gpus {
                g.uuid = Some(format!("GPU-a1000001-0000-4000-8000-{:012}", g.index));
            }
            spec
        }
        "dgx1-v100" => {
            let rec = Recording::from_yaml_str(
                &read("fixtures/recorded/dgx1-v100-nvml.yaml"),
                "dgx1-v100-nvml.yaml",
            )
            .expect("the recording reads");
            let facts = replay_nvml(&rec).expect("it replays");
            normalize(m.node, &facts).expect("it normalizes")
        }
        "rtx4090-pcie" => {
            let facts = facts_from_topo(&read(
                "fixtures/nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt",
            ))
            .expect("the fixture parses");
            normalize(m.node, &facts).expect("it normalizes")
        }
        other => panic!("unknown machine {other}"),
    }
}

pub fn topology(m: &Machine) -> GpuTopology {
    GpuTopology::new(m.node, topology_spec(m))
}

/// The ResourceSlice the driver publishes for the machine.
pub fn slice_json(m: &Machine) -> Value {
    let facts = DriverFacts {
        product: m.product.to_string(),
        architecture: m.architecture.to_string(),
        compute_capability: m.compute_capability.to_string(),
        memory: m.memory.to_string(),
        publish_index: m.publish_index,
    };
    nvidia_resource_slice(m.node, &topology_spec(m), &facts)
}

pub fn slice(m: &Machine) -> ResourceSlice {
    serde_json::from_value(slice_json(m)).expect("a valid ResourceSlice")
}

/// `fixtures/dra/<node>-resourceslice.yaml`: the committed copy.
pub fn slice_yaml(m: &Machine) -> String {
    let header = format!(
        "# Generated by scheduler-core/tests/dra_fixtures.rs from the recorded machine\n# ({}): the ResourceSlice NVIDIA's DRA driver would publish. Do not edit.\n",
        m.node
    );
    header + &serde_yaml::to_string(&slice_json(m)).expect("YAML")
}

/// The ComputeDomain driver's slice for the machine.
pub fn compute_domain_slice(m: &Machine) -> ResourceSlice {
    serde_json::from_value(compute_domain_resource_slice(m.node)).expect("a valid ResourceSlice")
}

/// dranet's slice for the machine's NICs, if its topology knows any.
pub fn nic_slice(m: &Machine) -> Option<ResourceSlice> {
    nic_resource_slice(m.node, &topology_spec(m))
        .map(|v| serde_json::from_value(v).expect("a valid ResourceSlice"))
}

/// Every driver's slices for the machine: GPUs, IMEX channel and daemon, NICs.
pub fn all_slices(m: &Machine) -> Vec<ResourceSlice> {
    let mut out = vec![slice(m), compute_domain_slice(m)];
    out.extend(nic_slice(m));
    out
}

/// A committed fixture's text: a header naming its builder, then the YAML.
pub fn fixture_yaml(m: &Machine, what: &str, object: &Value) -> String {
    let header = format!(
        "# Generated by scheduler-core/tests/dra_fixtures.rs from the recorded machine\n# ({}): the ResourceSlice {what} would publish. Do not edit.\n",
        m.node
    );
    header + &serde_yaml::to_string(object).expect("YAML")
}

fn class(name: &str, expression: &str) -> DeviceClass {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }))
    .expect("a valid DeviceClass")
}

/// The ComputeDomain driver's classes (its Helm chart): the default channel
/// a workload claim asks for, and the IMEX daemon's device.
pub fn compute_domain_classes() -> Vec<DeviceClass> {
    vec![
        class(
            "compute-domain-default-channel.nvidia.com",
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel' && device.attributes['compute-domain.nvidia.com'].id == 0",
        ),
        class(
            "compute-domain-daemon.nvidia.com",
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
        ),
    ]
}

/// dranet's class for RDMA NICs, as its NVIDIA guide writes it.
pub fn nic_class() -> DeviceClass {
    class(
        "dranet-rdma",
        "device.driver == 'dra.net' && device.attributes['dra.net'].rdma == true",
    )
}

/// A request of one IMEX channel, as the ComputeDomain controller's
/// workload claim template writes it.
pub fn channel(name: &str) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}})
}

/// A request of `count` RDMA NICs.
pub fn nics(name: &str, count: u32) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "dranet-rdma", "count": count}})
}

/// NVIDIA's `gpu.nvidia.com` DeviceClass (the driver's Helm chart).
pub fn gpu_class() -> DeviceClass {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]},
    }))
    .expect("a valid DeviceClass")
}

/// A class with a config, to see it passed through.
pub fn configured_class() -> DeviceClass {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu-timesliced"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "config": [{"opaque": {"driver": DRIVER, "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing"}}}}],
        },
    }))
    .expect("a valid DeviceClass")
}

pub fn classes() -> Vec<DeviceClass> {
    let mut out = vec![gpu_class(), configured_class(), nic_class()];
    out.extend(compute_domain_classes());
    out
}

/// A claim in `default` whose `spec.devices` is `devices`.
pub fn claim(name: &str, devices: Value) -> ResourceClaim {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"devices": devices},
    }))
    .expect("a valid ResourceClaim")
}

/// A request of `count` GPUs of the `gpu.nvidia.com` class.
pub fn gpus(name: &str, count: u32) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}})
}

/// `claim` with `status.allocation` of `devices` (request, device) on `node`'s pool.
pub fn allocated(mut claim: ResourceClaim, node: &str, devices: &[(&str, &str)]) -> ResourceClaim {
    claim.status = Some(
        serde_json::from_value(json!({
            "allocation": {
                "devices": {"results": devices.iter().map(|(request, device)| json!({
                    "request": request, "driver": DRIVER, "pool": node, "device": device,
                })).collect::<Vec<_>>()},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            },
        }))
        .expect("a valid status"),
    );
    claim
}

/// `pod`'s claims read from `claims` (found by name) with `classes`.
pub fn read_claims(pod: &Pod, claims: &[ResourceClaim], classes: &[DeviceClass]) -> DraPod {
    DraPod::from_pod(
        pod,
        |_, name| {
            claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
        },
        classes,
    )
    .expect("the claims are read")
}

/// A pod in `default` using the claims (by name), with annotations.
pub fn pod(name: &str, claims: &[&str], annotations: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "annotations": annotations},
        "spec": {
            "resourceClaims": claims.iter().map(|c| json!({"name": c, "resourceClaimName": c})).collect::<Vec<_>>(),
            "containers": [{"name": "main", "image": "trainer",
                "resources": {"claims": claims.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()}}],
        },
    }))
    .expect("a valid Pod")
}

/// A pod using the claims `uses` (of `claims`, read with `classes`) fitted
/// on machine `m` against `inv`, with the machine's topology.
pub fn fit_on_machine(
    m: &Machine,
    inv: &DraInventory,
    uses: &[&str],
    claims: &[ResourceClaim],
    classes: &[DeviceClass],
) -> Result<DraFit, NodeReason> {
    let dra = read_claims(&pod("p", uses, json!({})), claims, classes);
    let shape = NodeShape::from_spec(&topology_spec(m)).expect("a shape");
    dra.fit(
        inv,
        m.node,
        Some(&shape),
        &SetRequest::from_gpu_request(&GpuRequest::default()),
    )
}
