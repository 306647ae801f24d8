//! The choice on recorded machines (`fixtures/`): an HGX H100 behind NVSwitch
//! (and the same box with GPU 3's links degraded), a DGX-1 V100 hybrid cube
//! mesh, an 8x RTX 4090 PCIe box with PHB pairs over two sockets, and a 4x
//! A100 PCIe box with NVLink-bridged pairs.

use super::*;
use gputopo_api::LinkClass;
use gputopo_topology::discover::{Source, build, gather};
use k8s_openapi::jiff::Timestamp;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(rel)
}

/// The inventory of a fixture; sources without UUIDs (a bare `topo -m`)
/// get `GPU-test-<index>`.
fn inventory(source: Source) -> Inventory {
    let (facts, node) = gather(&source).expect("fixture reads");
    let mut spec = build(node.as_deref().unwrap_or("node"), facts)
        .expect("fixture normalizes")
        .spec;
    for g in &mut spec.gpus {
        g.uuid
            .get_or_insert_with(|| format!("GPU-test-{}", g.index));
    }
    Inventory::from_spec(&spec).expect("inventory")
}

fn h100() -> Inventory {
    inventory(Source::Fixture(fixture(
        "recorded/hgx-h100-8gpu-nvswitch-nvml.yaml",
    )))
}

fn h100_degraded() -> Inventory {
    inventory(Source::Fixture(fixture(
        "recorded/hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml",
    )))
}

fn dgx1() -> Inventory {
    inventory(Source::Fixture(fixture("recorded/dgx1-v100-nvml.yaml")))
}

fn pcie() -> Inventory {
    inventory(Source::NvidiaSmi {
        topo: fixture("nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt"),
        nvlink_status: None,
        query: None,
    })
}

fn bridged_pairs() -> Inventory {
    inventory(Source::NvidiaSmi {
        topo: fixture(
            "nvidia/a100-80gb-pcie-4gpu-nvlink-bridge-nv12-pairs-xeon8470-driver610-NO-LEGEND-topo-m.txt",
        ),
        nvlink_status: None,
        query: None,
    })
}

fn uuids(inv: &Inventory, indices: &[u32]) -> Vec<String> {
    indices
        .iter()
        .map(|&i| inv.uuid_of(i).expect("index on this node").to_string())
        .collect()
}

fn all_but(inv: &Inventory, busy: &[u32]) -> Vec<String> {
    inv.gpus()
        .filter(|g| !busy.contains(&g.index))
        .map(|g| g.uuid.clone())
        .collect()
}

fn indices(inv: &Inventory, devices: &[String]) -> Vec<u32> {
    devices
        .iter()
        .map(|d| inv.index_of(d).expect("advertised"))
        .collect()
}

fn claim(name: &str, created: i64, assigned: &str) -> AssignedPod {
    AssignedPod {
        pod: PodRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        created: Some(Timestamp::from_second(created).unwrap()),
        assigned: assigned.into(),
    }
}

fn request(available: Vec<String>, size: i32) -> Request {
    Request {
        available,
        must_include: vec![],
        size,
    }
}

#[test]
fn the_one_fitting_pod_gets_exactly_its_chosen_gpus() {
    let inv = h100();
    let claims = [claim("a", 10, "0,3"), claim("b", 11, "1,2,5,6")];
    let p = prefer(&inv, &claims, &request(all_but(&inv, &[]), 2)).unwrap();
    assert_eq!(p.devices, uuids(&inv, &[0, 3]));
    assert_eq!(
        p.outcome,
        Outcome::Matched {
            pod: claims[0].pod.clone()
        }
    );
    assert!(p.problems.is_empty());
    let p = prefer(&inv, &claims, &request(all_but(&inv, &[]), 4)).unwrap();
    assert_eq!(p.devices, uuids(&inv, &[1, 2, 5, 6]));
}

#[test]
fn a_set_with_a_busy_gpu_or_a_missing_must_include_does_not_fit() {
    let inv = dgx1();
    let claims = [claim("a", 10, "0,3")];
    let p = prefer(&inv, &claims, &request(all_but(&inv, &[3]), 2)).unwrap();
    assert_eq!(p.outcome, Outcome::TopologyRule);
    assert!(!indices(&inv, &p.devices).contains(&3), "{:?}", p.devices);

    let must = Request {
        available: all_but(&inv, &[]),
        must_include: uuids(&inv, &[1]),
        size: 2,
    };
    let p = prefer(&inv, &claims, &must).unwrap();
    assert_eq!(p.outcome, Outcome::TopologyRule);
    assert!(indices(&inv, &p.devices).contains(&1), "{:?}", p.devices);
    assert_eq!(p.devices.len(), 2);
}

#[test]
fn several_fitting_pods_go_to_the_earliest_created_then_by_name() {
    let inv = h100();
    let claims = [
        claim("late", 20, "0,1"),
        claim("early", 10, "2,3"),
        claim("also-early", 10, "4,5"),
    ];
    let p = prefer(&inv, &claims, &request(all_but(&inv, &[]), 2)).unwrap();
    assert_eq!(
        p.devices,
        uuids(&inv, &[4, 5]),
        "also-early < early by name"
    );
    match p.outcome {
        Outcome::Ambiguous { pod, others } => {
            assert_eq!(pod.name, "also-early");
            let names: Vec<_> = others.iter().map(|o| o.name.as_str()).collect();
            assert_eq!(names, ["early", "late"]);
        }
        other => panic!("expected Ambiguous, got {other:?}"),
    }
    // Once the first is admitted (its GPUs gone), the next one matches alone... by order.
    let p = prefer(&inv, &claims, &request(all_but(&inv, &[4, 5]), 2)).unwrap();
    assert_eq!(p.devices, uuids(&inv, &[2, 3]));
    assert_eq!(p.outcome.metric_label(), "ambiguous");
    let p = prefer(&inv, &claims, &request(all_but(&inv, &[2, 3, 4, 5]), 2)).unwrap();
    assert_eq!(
        p.outcome,
        Outcome::Matched {
            pod: claims[0].pod.clone()
        }
    );
}

#[test]
fn unreadable_annotations_are_reported_and_the_topology_rule_decides() {
    let inv = pcie();
    let claims = [
        claim("beyond", 1, "0,9"),
        claim("text", 2, "zero,one"),
        claim("twice", 3, "1,1"),
        claim("empty", 4, " "),
    ];
    let p = prefer(&inv, &claims, &request(all_but(&inv, &[]), 2)).unwrap();
    assert_eq!(p.outcome, Outcome::TopologyRule);
    let labels: Vec<_> = p
        .problems
        .iter()
        .map(|(pod, why)| (pod.name.as_str(), why.metric_label()))
        .collect();
    assert_eq!(
        labels,
        [
            ("beyond", "unknown-gpu"),
            ("text", "unparsable"),
            ("twice", "duplicate"),
            ("empty", "unparsable")
        ]
    );
    let text = p.problems[0].1.to_string();
    assert!(
        text.contains("GPU 9") && text.contains("0,1,2,3,4,5,6,7"),
        "{text}"
    );
}

#[test]
fn one_gpu_without_a_claim_takes_the_orphan_of_a_broken_pair() {
    // 4x A100 PCIe, NV12 bridges 0-1 and 2-3, SYS across; GPU 1 busy: GPU 0
    // is the orphan, and 2-3 stays whole (NVIDIA/k8s-device-plugin#1193).
    let inv = bridged_pairs();
    let p = prefer(&inv, &[], &request(all_but(&inv, &[1]), 1)).unwrap();
    assert_eq!(p.outcome, Outcome::TopologyRule);
    assert_eq!(indices(&inv, &p.devices), [0]);
}

#[test]
fn one_gpu_without_a_claim_takes_the_degraded_gpu_on_nvswitch() {
    let inv = h100_degraded();
    let p = prefer(&inv, &[], &request(all_but(&inv, &[]), 1)).unwrap();
    assert_eq!(indices(&inv, &p.devices), [3]);
}

#[test]
fn two_gpus_without_a_claim_take_a_pcie_pair_in_one_numa_node() {
    let inv = pcie();
    let shape = inv.shape().unwrap();
    let p = prefer(&inv, &[], &request(all_but(&inv, &[]), 2)).unwrap();
    let got = indices(&inv, &p.devices);
    assert_eq!(got.len(), 2);
    assert_eq!(shape.link(got[0], got[1]), Some(LinkClass::Phb), "{got:?}");
    assert_eq!(shape.numa_nodes(mask(&got)), 1);
}

#[test]
fn a_pod_without_a_claim_leaves_the_gpus_chosen_for_waiting_pods() {
    // The degraded H100: alone, one GPU goes to GPU 3 (see above). GPU 3 is
    // chosen for a waiting 2-GPU pod, so the rule picks among the others.
    let inv = h100_degraded();
    let shape = inv.shape().unwrap();
    let waiting = [claim("waiting", 10, "3,5")];
    let p = prefer(&inv, &waiting, &request(all_but(&inv, &[]), 1)).unwrap();
    assert_eq!(p.outcome, Outcome::TopologyRule);
    let got = mask(&indices(&inv, &p.devices));
    let one = SetRequest {
        allow_mig: true,
        ..SetRequest::new(1, Collective::default())
    };
    let rest = shape.pick(0xff & !mask(&[3, 5]), &one).unwrap().gpus;
    assert_eq!(got, rest);
    // When the others cannot hold the request, the rule takes from all.
    let most = [claim("big", 10, "0,1,2,3,4,5,6")];
    let p = prefer(&inv, &most, &request(all_but(&inv, &[]), 2)).unwrap();
    let alone = prefer(&inv, &[], &request(all_but(&inv, &[]), 2)).unwrap();
    assert_eq!(p.devices, alone.devices);
}

fn mask(indices: &[u32]) -> u32 {
    indices.iter().fold(0, |m, i| m | (1 << i))
}

#[test]
fn four_gpus_without_a_claim_take_a_best_ring_of_the_cube_mesh() {
    let inv = dgx1();
    let shape = inv.shape().unwrap();
    // GPU 0 busy: the best 4-ring must come from what is left.
    let p = prefer(&inv, &[], &request(all_but(&inv, &[0]), 4)).unwrap();
    let got = mask(&indices(&inv, &p.devices));
    assert_eq!(got.count_ones(), 4);
    assert_eq!(got & 1, 0, "GPU 0 is busy");
    let best = (0u32..256)
        .filter(|m| m.count_ones() == 4 && m & 1 == 0)
        .filter_map(|m| shape.ring_bottleneck(m))
        .max()
        .unwrap();
    assert_eq!(shape.ring_bottleneck(got), Some(best));
    assert!(matches!(best, LinkClass::Nv(_)), "{best:?}");
}

#[test]
fn bad_requests_are_refused_with_what_was_wrong() {
    let inv = h100();
    let all = all_but(&inv, &[]);
    let err = |r: Request| prefer(&inv, &[], &r).unwrap_err();
    assert_eq!(
        err(request(all.clone(), 0)),
        RequestError::NonPositiveSize { size: 0 }
    );
    assert!(matches!(
        err(request(vec!["GPU-nope".into()], 1)),
        RequestError::UnknownDevice { id, .. } if id == "GPU-nope"
    ));
    assert!(matches!(
        err(Request {
            available: uuids(&inv, &[0, 1]),
            must_include: uuids(&inv, &[2]),
            size: 2
        }),
        RequestError::MustIncludeNotAvailable { .. }
    ));
    assert_eq!(
        err(request(uuids(&inv, &[0, 1]), 3)),
        RequestError::TooFewAvailable {
            size: 3,
            available: 2
        }
    );
}

#[test]
fn a_topology_without_uuids_cannot_be_advertised() {
    let (facts, _) = gather(&Source::NvidiaSmi {
        topo: fixture("nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt"),
        nvlink_status: None,
        query: None,
    })
    .unwrap();
    let spec = build("n", facts).unwrap().spec;
    assert_eq!(
        Inventory::from_spec(&spec).unwrap_err(),
        InventoryError::MissingUuid { index: 0 }
    );
}
