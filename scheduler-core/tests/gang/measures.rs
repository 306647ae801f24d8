//! The cluster measures: fragmentation summed over nodes, and gang spans per
//! tier.

use crate::cluster::{ALL, dgx1, nv12};
use gputopo_scheduler_core::gang::metrics::{fragmentation, gang_spans, span_summary};
use gputopo_scheduler_core::gpuset::NodeShape;

#[test]
fn the_cluster_summary_adds_up_node_measures() {
    let nv = nv12();
    let mesh = dgx1();
    let nodes: Vec<(&NodeShape, u32)> = vec![
        (&nv, ALL),           // one whole 8-slot, nothing stranded
        (&nv, 0x3f),          // 6 free: stranded for 8
        (&mesh, 0b1001_0110), // DGX-1 GPUs 1,2,4,7: pairs 1-2 (NV2) and 4-7 (NV2)
        (&nv, 0),
    ];
    let s = fragmentation(nodes.iter().copied());
    assert_eq!(s.nodes, 4);
    assert_eq!(s.free_gpus, 8 + 6 + 4);
    assert_eq!(s.empty_nodes, 1);
    assert_eq!(s.full_nvlink_slots_8, 1);
    assert_eq!(s.stranded(8), 6 + 4);
    assert_eq!(s.stranded(2), 0);
    assert_eq!(
        s.stranded(4),
        4,
        "no DGX-1 quad of the best class in 1,2,4,7"
    );
    assert!((s.stranded_fraction(8) - 10.0 / 18.0).abs() < 1e-9);
}

#[test]
fn gang_spans_count_domains_per_tier() {
    let names = vec![
        "gputopo.dev/spine".to_string(),
        "gputopo.dev/leaf".to_string(),
    ];
    let p = |s: &str, l: &str| vec![Some(s.to_string()), Some(l.to_string())];
    let members = [p("s1", "l1"), p("s1", "l1"), p("s1", "l2"), p("s2", "l1")];
    let spans = gang_spans(&names, members.iter().map(Vec::as_slice));
    assert_eq!(spans[0].domains, vec!["s1", "s2"]);
    assert_eq!(spans[1].domains, vec!["s1/l1", "s1/l2", "s2/l1"]);
    let one = gang_spans(&names, members[..2].iter().map(Vec::as_slice));
    let summary = span_summary([spans.as_slice(), one.as_slice()]);
    assert_eq!(summary.gangs, 2);
    assert_eq!(summary.max_leaves, 3);
    assert_eq!(summary.across_outer, 1);
    assert!((summary.mean_leaves - 2.0).abs() < 1e-9);
}
