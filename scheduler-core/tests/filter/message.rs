//! The aggregated "0/N nodes are available" message, in kube-scheduler's
//! exact format.

use crate::common::*;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::gpuset::NoFitReason;
use gputopo_scheduler_core::schedule::{failed_scheduling_message, schedule};

#[test]
fn aggregated_message_counts_reasons_like_kube_scheduler() {
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for i in 0..40 {
        let name = format!("a100-{i:02}");
        nodes.push(gpu_node(&name, a100()));
        pods.push(holder(
            &format!("busy-{i}"),
            &name,
            &[0, 1, 2, 3, 4, 5],
            None,
        ));
    }
    for i in 0..24 {
        nodes.push(gpu_node(&format!("dgx1-{i:02}"), dgx1()));
    }
    let snap = snapshot(nodes, pods);
    let d = schedule(
        &snap,
        &pod(4, &[("gputopo.dev/min-nvlink-level", "NV12")]),
        &SchedulerConfig::default(),
    );
    let u = d.unschedulable().expect("nothing fits");
    assert_eq!(
        u.message,
        "0/64 nodes are available: 40 too few free GPUs, 24 no 4-GPU set with NV12."
    );
    assert_eq!(u.rejections.len(), 64);

    // Equal counts order by text; one node counts once per short resource.
    let reasons = [
        FilterReason::NodeAffinity,
        FilterReason::Unschedulable,
        FilterReason::GpuSet(NoFitReason::TooFewFreeGpus {
            requested: 1,
            free: 0,
        }),
    ];
    assert_eq!(
        failed_scheduling_message(3, &reasons),
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable, 1 too few free GPUs."
    );
    assert_eq!(
        failed_scheduling_message(0, &[]),
        "no nodes available to schedule pods"
    );
}
