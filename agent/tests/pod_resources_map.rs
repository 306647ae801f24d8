//! The kubelet's answer → `status.allocations`, on literal answers: whole
//! GPUs, MIG devices, shared replicas, AMD GPUs by PCI address, device IDs
//! the node does not have, a pod holding one GPU through two containers,
//! and the saved-answer format (the protobuf JSON `grpcurl` prints).

use gputopo_agent::podres::map::{
    MAX_PER_GPU, NodeGpu, NodeGpus, UnknownDevice, UnknownReason, map_answer,
};
use gputopo_agent::podres::saved::parse;
use gputopo_agent::podres::{
    AllocatableAnswer, ContainerAnswer, DevicesAnswer, KubeletAnswer, ListAnswer, PodAnswer,
    PodResourcesError,
};
use gputopo_api::{DeviceForm, GpuAllocation, GpuHolder};

const GPU0: &str = "GPU-41000001-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-41000001-0000-4000-8000-000000000001";
const GPU2: &str = "GPU-41000001-0000-4000-8000-000000000002";
const MIG_ON_1: &str = "MIG-5c4cb2a1-0d62-5ec7-b7c5-1f1b0b1c2d3e";

/// Three NVIDIA GPUs; GPU 1 has MIG on with one MIG device.
fn nvidia() -> NodeGpus {
    NodeGpus {
        gpus: [GPU0, GPU1, GPU2]
            .iter()
            .enumerate()
            .map(|(i, uuid)| NodeGpu {
                index: i as u32,
                uuid: Some(uuid.to_string()),
                pci_bus_id: Some(format!("00000000:{:02x}:00.0", 0x18 + i)),
                mig: if i == 1 {
                    vec![MIG_ON_1.into()]
                } else {
                    vec![]
                },
            })
            .collect(),
    }
}

fn devices(resource: &str, ids: &[&str]) -> DevicesAnswer {
    DevicesAnswer {
        resource_name: resource.into(),
        device_ids: ids.iter().map(|s| s.to_string()).collect(),
        topology: None,
    }
}

fn container(name: &str, devs: Vec<DevicesAnswer>) -> ContainerAnswer {
    ContainerAnswer {
        name: name.into(),
        devices: devs,
        ..ContainerAnswer::default()
    }
}

fn pod(ns_name: &str, containers: Vec<ContainerAnswer>) -> PodAnswer {
    let (namespace, name) = ns_name.split_once('/').expect("namespace/name");
    PodAnswer {
        name: name.into(),
        namespace: namespace.into(),
        containers,
    }
}

fn answer(pods: Vec<PodAnswer>) -> KubeletAnswer {
    KubeletAnswer {
        list: ListAnswer {
            pod_resources: pods,
        },
        allocatable: None,
    }
}

fn holder(pod: &str, container: &str, resource: &str, device: &str, form: DeviceForm) -> GpuHolder {
    GpuHolder {
        pod: pod.into(),
        container: container.into(),
        resource: resource.into(),
        device: device.into(),
        form,
    }
}

#[test]
fn whole_gpus_are_found_by_uuid_in_any_case() {
    let a = answer(vec![pod(
        "ml/trainer",
        vec![container(
            "main",
            vec![devices(
                "nvidia.com/gpu",
                &[GPU2, &GPU0.to_ascii_uppercase()],
            )],
        )],
    )]);
    let m = map_answer(&a, &nvidia());
    assert_eq!(
        m.allocations,
        [
            GpuAllocation {
                gpu: 0,
                pods: vec!["ml/trainer".into()],
                holders: vec![holder(
                    "ml/trainer",
                    "main",
                    "nvidia.com/gpu",
                    &GPU0.to_ascii_uppercase(),
                    DeviceForm::Whole
                )],
            },
            GpuAllocation {
                gpu: 2,
                pods: vec!["ml/trainer".into()],
                holders: vec![holder(
                    "ml/trainer",
                    "main",
                    "nvidia.com/gpu",
                    GPU2,
                    DeviceForm::Whole
                )],
            },
        ]
    );
    assert!(m.unknown.is_empty() && m.left_out.is_empty());
}

#[test]
fn mig_devices_land_on_their_gpu() {
    let legacy = format!("MIG-{GPU2}/1/0");
    let a = answer(vec![
        pod(
            "ml/small",
            vec![container(
                "main",
                vec![devices("nvidia.com/mig-1g.10gb", &[MIG_ON_1])],
            )],
        ),
        // Drivers before R470 named MIG devices after their GPU.
        pod(
            "ml/old",
            vec![container(
                "main",
                vec![devices("nvidia.com/mig-3g.40gb", &[&legacy])],
            )],
        ),
    ]);
    let m = map_answer(&a, &nvidia());
    let on = |gpu| {
        m.allocations
            .iter()
            .find(|a| a.gpu == gpu)
            .expect("allocated")
    };
    assert_eq!(
        on(1).holders,
        [holder(
            "ml/small",
            "main",
            "nvidia.com/mig-1g.10gb",
            MIG_ON_1,
            DeviceForm::Mig
        )]
    );
    assert_eq!(
        on(2).holders,
        [holder(
            "ml/old",
            "main",
            "nvidia.com/mig-3g.40gb",
            &legacy,
            DeviceForm::Mig
        )]
    );
    // A MIG device no GPU lists (MIG reconfigured, or a source without NVML).
    let gone = answer(vec![pod(
        "ml/x",
        vec![container(
            "main",
            vec![devices(
                "nvidia.com/mig-1g.10gb",
                &["MIG-00000000-0000-0000-0000-00000000dead"],
            )],
        )],
    )]);
    let m = map_answer(&gone, &nvidia());
    assert!(m.allocations.is_empty());
    assert_eq!(m.unknown[0].reason, UnknownReason::NoSuchMig);
}

#[test]
fn shared_replicas_are_one_pod_per_gpu_and_one_holder_per_container() {
    // Time-slicing: the pod's two containers each hold a replica of GPU 0;
    // another pod holds a third; a replica of a MIG device is a replica too.
    let r = |n: u32| format!("{GPU0}::{n}");
    let mig_replica = format!("{MIG_ON_1}::2");
    let a = answer(vec![
        pod(
            "ml/pair",
            vec![
                container("a", vec![devices("nvidia.com/gpu", &[&r(0)])]),
                container("b", vec![devices("nvidia.com/gpu", &[&r(1)])]),
            ],
        ),
        pod(
            "ml/other",
            vec![container(
                "main",
                vec![
                    devices("nvidia.com/gpu.shared", &[&r(7)]),
                    devices("nvidia.com/mig-1g.10gb.shared", &[&mig_replica]),
                ],
            )],
        ),
    ]);
    let m = map_answer(&a, &nvidia());
    let gpu0 = &m.allocations[0];
    assert_eq!(gpu0.gpu, 0);
    assert_eq!(gpu0.pods, ["ml/other", "ml/pair"], "each pod once");
    assert_eq!(
        gpu0.holders,
        [
            holder(
                "ml/other",
                "main",
                "nvidia.com/gpu.shared",
                &r(7),
                DeviceForm::Replica
            ),
            holder("ml/pair", "a", "nvidia.com/gpu", &r(0), DeviceForm::Replica),
            holder("ml/pair", "b", "nvidia.com/gpu", &r(1), DeviceForm::Replica),
        ]
    );
    assert_eq!(
        m.allocations[1].holders,
        [holder(
            "ml/other",
            "main",
            "nvidia.com/mig-1g.10gb.shared",
            &mig_replica,
            DeviceForm::Replica
        )]
    );
}

#[test]
fn amd_gpus_are_found_by_pci_address() {
    let gpus = NodeGpus {
        gpus: vec![
            NodeGpu {
                index: 0,
                pci_bus_id: Some("0000:c1:00.0".into()),
                ..NodeGpu::default()
            },
            NodeGpu {
                index: 1,
                pci_bus_id: Some("00000000:C2:00.0".into()),
                ..NodeGpu::default()
            },
        ],
    };
    // As spec.gpus[].pciBusId canonicalises it: the lookup must too.
    let gpus = NodeGpus {
        gpus: gpus
            .gpus
            .into_iter()
            .map(|mut g| {
                g.pci_bus_id = g
                    .pci_bus_id
                    .as_deref()
                    .and_then(gputopo_topology::pci::canonical_pci_bus_id);
                g
            })
            .collect(),
    };
    let a = answer(vec![pod(
        "ml/rocm",
        vec![container(
            "main",
            vec![devices("amd.com/gpu", &["0000:c2:00.0", "0000:c9:00.0"])],
        )],
    )]);
    let m = map_answer(&a, &gpus);
    assert_eq!(m.allocations.len(), 1);
    assert_eq!(m.allocations[0].gpu, 1);
    assert_eq!(m.allocations[0].holders[0].form, DeviceForm::Whole);
    assert_eq!(
        m.unknown,
        [UnknownDevice {
            device: "0000:c9:00.0".into(),
            resource: "amd.com/gpu".into(),
            reason: UnknownReason::NoSuchPciAddress,
        }]
    );
}

#[test]
fn unknown_devices_are_kept_apart_and_the_rest_is_published() {
    let long = format!("GPU-{}", "f".repeat(260));
    let a = KubeletAnswer {
        list: ListAnswer {
            pod_resources: vec![pod(
                "ml/mixed",
                vec![container(
                    "main",
                    vec![devices(
                        "nvidia.com/gpu",
                        &[
                            GPU1,
                            "GPU-ffffffff-0000-0000-0000-000000000000",
                            "3",
                            "GPU-1::x",
                            &long,
                        ],
                    )],
                )],
            )],
        },
        allocatable: Some(AllocatableAnswer {
            devices: vec![devices(
                "nvidia.com/gpu",
                &[
                    GPU0,
                    GPU1,
                    GPU2,
                    "GPU-ffffffff-0000-0000-0000-000000000000",
                    "GPU-eeee",
                ],
            )],
            ..AllocatableAnswer::default()
        }),
    };
    let m = map_answer(&a, &nvidia());
    assert_eq!(m.allocations.len(), 1);
    assert_eq!(m.allocations[0].gpu, 1);
    let reasons: Vec<(&str, UnknownReason)> = m
        .unknown
        .iter()
        .map(|u| (u.device.as_str(), u.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("3", UnknownReason::Unrecognized),
            ("GPU-1::x", UnknownReason::Unrecognized),
            ("GPU-eeee", UnknownReason::NoSuchGpu),
            (
                "GPU-ffffffff-0000-0000-0000-000000000000",
                UnknownReason::NoSuchGpu
            ),
            (long.as_str(), UnknownReason::TooLong),
        ],
        "sorted, each once, from List and GetAllocatableResources"
    );
}

#[test]
fn only_gpu_resources_count() {
    let a = KubeletAnswer {
        list: ListAnswer {
            pod_resources: vec![pod(
                "ml/mixed",
                vec![container(
                    "main",
                    vec![
                        devices("rdma/hca_shared_devices_a", &["0000:18:00.0", "mlx5_0"]),
                        devices("example.com/renamed-gpu", &[GPU2]),
                        devices("nvidia.com/gpu", &[GPU0]),
                    ],
                )],
            )],
        },
        allocatable: None,
    };
    // Without GetAllocatableResources, a resource named otherwise is not read,
    // even when its ID happens to be a GPU address.
    let m = map_answer(&a, &nvidia());
    assert_eq!(m.allocations.iter().map(|a| a.gpu).collect::<Vec<_>>(), [0]);
    assert!(m.unknown.is_empty(), "{:?}", m.unknown);
    // When GetAllocatableResources lists it with this node's GPUs, it counts.
    let with = KubeletAnswer {
        allocatable: Some(AllocatableAnswer {
            devices: vec![
                devices("example.com/renamed-gpu", &[GPU1, GPU2]),
                devices("rdma/hca_shared_devices_a", &["mlx5_0"]),
            ],
            ..AllocatableAnswer::default()
        }),
        ..a
    };
    let m = map_answer(&with, &nvidia());
    assert_eq!(
        m.allocations.iter().map(|a| a.gpu).collect::<Vec<_>>(),
        [0, 2]
    );
    assert_eq!(
        m.allocations[1].holders[0].resource,
        "example.com/renamed-gpu"
    );
    assert!(m.unknown.is_empty(), "{:?}", m.unknown);
}

#[test]
fn a_device_listed_twice_is_one_holder_and_lists_are_bounded() {
    let a = answer(vec![pod(
        "ml/twice",
        vec![container(
            "main",
            vec![devices("nvidia.com/gpu", &[GPU0, GPU0])],
        )],
    )]);
    assert_eq!(map_answer(&a, &nvidia()).allocations[0].holders.len(), 1);

    let many: Vec<PodAnswer> = (0..MAX_PER_GPU + 4)
        .map(|i| {
            let id = format!("{GPU0}::{i}");
            pod(
                &format!("ml/p{i:03}"),
                vec![container("main", vec![devices("nvidia.com/gpu", &[&id])])],
            )
        })
        .collect();
    let m = map_answer(&answer(many), &nvidia());
    assert_eq!(m.allocations[0].pods.len(), MAX_PER_GPU);
    assert_eq!(m.allocations[0].holders.len(), MAX_PER_GPU);
    assert_eq!(m.left_out.len(), 1, "{:?}", m.left_out);
    assert!(
        m.left_out[0].contains("GPU 0: 260 pods"),
        "{}",
        m.left_out[0]
    );
}

#[test]
fn a_saved_answer_reads_as_grpcurl_prints_it() {
    let text = format!(
        r#"{{
          "list": {{"podResources": [{{"name": "trainer", "namespace": "ml", "containers": [
            {{"name": "main", "cpuIds": ["2", "3"], "memory": [{{"memoryType": "memory", "size": "1024"}}],
             "devices": [{{"resourceName": "nvidia.com/gpu", "deviceIds": ["{GPU1}"],
                          "topology": {{"nodes": [{{"ID": "0"}}]}}}}]}}]}}]}},
          "allocatable": {{"devices": [{{"resource_name": "nvidia.com/gpu", "device_ids": ["{GPU0}", "{GPU1}"]}}],
                          "cpuIds": ["0"]}}
        }}"#
    );
    let a = parse(&text, "answer.json").expect("parses");
    let m = map_answer(&a, &nvidia());
    assert_eq!(m.allocations[0].pods, ["ml/trainer"]);
    assert_eq!(
        a.allocatable.expect("allocatable").devices[0]
            .device_ids
            .len(),
        2
    );
}

#[test]
fn a_bad_saved_answer_names_the_file_and_the_field() {
    let e = parse(
        r#"{"list": {"podResources": [{"name": "p", "namespace": "n", "containers": [{"name": "c", "devices": [{"resourceName": "nvidia.com/gpu", "deviceID": ["x"]}]}]}]}}"#,
        "answer.json",
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, PodResourcesError::ParseSaved { .. }), "{e:?}");
    assert!(
        text.starts_with("answer.json: list.podResources[0].containers[0].devices[0]"),
        "{text}"
    );
    assert!(text.contains("deviceID"), "{text}");
    assert_eq!(e.reason(), "answer_invalid");

    let e = parse(
        r#"{"list": {"podResources": [{"namespace": "ml"}]}}"#,
        "answer.json",
    )
    .unwrap_err();
    assert!(matches!(e, PodResourcesError::Invalid { .. }), "{e:?}");
    assert!(
        e.to_string().contains("list.podResources[0] has no name"),
        "{e}"
    );

    let e = parse(r#"{"pods": []}"#, "answer.json").unwrap_err();
    assert!(e.to_string().contains("unknown field `pods`"), "{e}");
}
