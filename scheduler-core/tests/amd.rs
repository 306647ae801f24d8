//! AMD nodes: the same ring / all-to-all objectives pick sets over XGMI, and
//! the GPU resource comes from the node's vendor (`amd.com/gpu` on AMD nodes,
//! `nvidia.com/gpu` on NVIDIA and unknown ones).

mod common;

use common::*;
use gputopo_api::{GpuTopologySpec, GpuVendor, LinkClass};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::NodeInput;

/// Two XGMI hives of 4 with PCIe across sockets between them
/// (fixtures/amd/amd-8gpu-two-xgmi-hives-of-4-pcie-between-64gb-likely-mi210-rocm-smi-showtopo.txt).
fn two_hives() -> GpuTopologySpec {
    let mut s = spec(|a, b| {
        if a / 4 == b / 4 {
            LinkClass::Xgmi
        } else {
            LinkClass::Sys
        }
    });
    for l in &mut s.links {
        if l.class() == LinkClass::Xgmi {
            l.hops = Some(1);
        }
    }
    s.vendor = Some(GpuVendor::Amd);
    s
}

fn amd_node(name: &str, spec: GpuTopologySpec) -> NodeInput {
    let n = spec.gpus.len().to_string();
    NodeInput {
        allocatable: Resources::allocatable(
            [
                ("cpu", "128"),
                ("memory", "1Ti"),
                ("pods", "110"),
                ("amd.com/gpu", n.as_str()),
            ],
            "test",
        )
        .expect("valid quantities"),
        ..gpu_node(name, spec)
    }
}

fn amd_pod(gpus: u32) -> PendingPod {
    let mut req = request(gpus, &[]);
    req.vendor = GpuVendor::Amd;
    PendingPod::new("default", "amd", req)
}

#[test]
fn a_four_gpu_pod_on_the_two_hive_box_gets_one_hive() {
    let snap = snapshot(vec![amd_node("mi210-1", two_hives())], vec![]);
    let d = schedule(&snap, &amd_pod(4), &SchedulerConfig::default());
    let p = d.placement().expect("placed");
    assert_eq!(p.gpus, vec![0, 1, 2, 3], "{}", p.explanation);
    assert_eq!(p.bottleneck, Some(LinkClass::Xgmi));

    // With a GPU of the first hive held, the other hive is the only XGMI set.
    let held = holder("h", "mi210-1", &[2], None);
    let snap = snapshot(vec![amd_node("mi210-1", two_hives())], vec![held]);
    let p = schedule(&snap, &amd_pod(4), &SchedulerConfig::default())
        .placement()
        .cloned()
        .expect("placed");
    assert_eq!(p.gpus, vec![4, 5, 6, 7], "{}", p.explanation);
}

#[test]
fn pods_go_only_to_their_vendors_nodes() {
    let snap = snapshot(
        vec![amd_node("mi210-1", two_hives()), gpu_node("dgx1", dgx1())],
        vec![],
    );
    let amd = schedule(&snap, &amd_pod(2), &SchedulerConfig::default());
    assert_eq!(amd.placement().map(|p| p.node.as_str()), Some("mi210-1"));
    let nvidia = schedule(&snap, &pod(2, &[]), &SchedulerConfig::default());
    assert_eq!(nvidia.placement().map(|p| p.node.as_str()), Some("dgx1"));

    // Only the NVIDIA node: the AMD pod is refused with the reason, never placed.
    let snap = snapshot(vec![gpu_node("dgx1", dgx1())], vec![]);
    let d = schedule(&snap, &amd_pod(2), &SchedulerConfig::default());
    assert!(d.placement().is_none());
    let msg = &d.unschedulable().expect("unschedulable").message;
    assert!(msg.contains("amd.com/gpu"), "{msg}");
}
