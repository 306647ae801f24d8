//! The plain-English explanation of a choice: what the set's bottleneck is and
//! how it compares with the node's best, how many NUMA nodes it spans, which
//! rule beat the runner-up, and what it leaves behind.

use super::request::{DecidedBy, SetPick, SetRequest, name_set};
use super::shape::NodeShape;
use gputopo_api::Collective;

pub(crate) fn explain(shape: &NodeShape, request: &SetRequest, pick: &SetPick) -> String {
    let k = pick.gpu_count();
    if k == 0 {
        return "no GPUs requested".to_string();
    }
    let collective = request.collective;
    let what = match collective {
        Collective::Ring => "ring bottleneck",
        Collective::AllToAll => "weakest pair",
    };
    let mut parts = Vec::with_capacity(5);

    parts.push(match pick.bottleneck {
        None => format!("{}: a single GPU, no link to cross", name_set(pick.gpus)),
        Some(class) => {
            let best = shape.tables.class(shape.best_empty_level(k, collective));
            let relation = match best {
                Some(best) if best == class => {
                    format!("the best any {k} GPUs of this node reach")
                }
                Some(best) => format!("{best} on an empty node"),
                None => "no reference: the node has fewer whole GPUs".to_string(),
            };
            format!("{}: {what} {class} ({relation})", name_set(pick.gpus))
        }
    });

    if let Some(level) = request.min_nvlink_level.filter(|&l| l > 0 && k >= 2) {
        parts.push(format!("every pair NV{level} or better as required"));
    }

    let numa = match pick.numa_nodes {
        1 => "1 NUMA node".to_string(),
        n => format!("{n} NUMA nodes"),
    };
    parts.push(if request.single_numa_node {
        format!("{numa} (single-numa-node policy)")
    } else {
        numa
    });

    let among = match pick.candidates {
        1 => String::new(),
        n => format!(" among {n} candidate sets"),
    };
    parts.push(match (pick.decided_by, pick.runner_up) {
        (DecidedBy::OnlyCandidate, _) | (_, None) => "the only feasible set".to_string(),
        (DecidedBy::Bottleneck, Some(other)) => {
            let theirs = shape
                .tables
                .class(shape.quality_level(other, collective))
                .map_or_else(|| "no link".to_string(), |c| c.to_string());
            format!(
                "the strongest {what}{among} (next best: {} at {theirs})",
                name_set(other)
            )
        }
        (DecidedBy::NumaNodes, Some(other)) => format!(
            "ties {} on {what} but spans fewer NUMA nodes ({} vs {}){among}",
            name_set(other),
            pick.numa_nodes,
            shape.numa_nodes(other)
        ),
        (DecidedBy::Leftover, Some(other)) => format!(
            "ties {} on {what} and NUMA nodes but leaves the free GPUs better connected{among}",
            name_set(other)
        ),
        (DecidedBy::LowestIndices, Some(other)) => format!(
            "ties {} on {what}, NUMA nodes and what it leaves; lower indices win{among}",
            name_set(other)
        ),
    });

    let left = pick.leftover.gpus;
    parts.push(if left == 0 {
        "leaves no free GPUs".to_string()
    } else {
        let detail = pick.leftover.describe();
        if detail.is_empty() {
            format!("leaves {} free", name_set(left))
        } else {
            format!("leaves {} free: {detail}", name_set(left))
        }
    });
    parts.join("; ")
}
