//! A `GpuTopology` the API server's view contradicts is not believed: its
//! node is placed as if it had no topology, and the snapshot says why.

mod common;

use common::*;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::resources::Resources;
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::{NodeInput, Snapshot};

fn node(product: &str, allocatable_gpus: &str, nvlinks: u32) -> NodeInput {
    let mut spec = spec(|_, _| gputopo_api::LinkClass::Nv(nvlinks));
    spec.summary.product = Some(product.into());
    for g in &mut spec.gpus {
        g.product = Some(product.into());
    }
    let mut n = gpu_node("n1", spec);
    n.allocatable = Resources::allocatable(
        [
            ("cpu", "128"),
            ("memory", "1Ti"),
            ("pods", "110"),
            ("nvidia.com/gpu", allocatable_gpus),
        ],
        "test",
    )
    .expect("quantities");
    n
}

fn believed(snap: &Snapshot) -> Result<(), String> {
    let warning = snap
        .warnings()
        .iter()
        .map(ToString::to_string)
        .find(|w| w.contains("is not believed"));
    let placed = schedule(snap, &pod(4, &[]), &SchedulerConfig::default());
    let p = placed.placement().expect("placed either way");
    match warning {
        None => {
            assert!(p.topology_known, "a believed topology is used");
            Ok(())
        }
        Some(w) => {
            assert!(!p.topology_known, "an unbelieved one is not: {w}");
            Err(w)
        }
    }
}

#[test]
fn a_gpu_count_the_device_plugin_contradicts_is_not_believed() {
    let a100 = "NVIDIA A100-SXM4-80GB";
    for ok in ["8", "6", "16", "0"] {
        let snap = snapshot(vec![node(a100, ok, 12)], vec![]);
        if ok == "0" {
            // No device plugin count (yet): the topology stands, the count
            // filter keeps pods off until it comes.
            assert!(
                snap.warnings()
                    .iter()
                    .all(|w| !w.to_string().contains("not believed"))
            );
            continue;
        }
        assert_eq!(believed(&snap), Ok(()), "allocatable {ok}");
    }
    let snap = snapshot(vec![node(a100, "12", 12)], vec![]);
    let why = believed(&snap).unwrap_err();
    assert!(
        why.contains("lists 8 GPUs but the node's allocatable nvidia.com/gpu is 12"),
        "{why}"
    );
}

#[test]
fn more_nvlinks_than_the_product_has_are_not_believed() {
    let snap = snapshot(vec![node("Tesla V100-SXM2-32GB", "8", 6)], vec![]);
    assert_eq!(believed(&snap), Ok(()));
    let snap = snapshot(vec![node("Tesla V100-SXM2-32GB", "8", 12)], vec![]);
    let why = believed(&snap).unwrap_err();
    assert!(
        why.contains("claim NV12, but a Tesla V100-SXM2-32GB has at most 6 NVLinks"),
        "{why}"
    );
    // A product the table does not know is not judged.
    let snap = snapshot(vec![node("Acme Tensor 9000", "8", 18)], vec![]);
    assert_eq!(believed(&snap), Ok(()));
}
