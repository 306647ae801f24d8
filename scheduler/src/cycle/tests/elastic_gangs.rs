//! Elastic gangs (`steps/elastic.rs`): members beyond the gang's minimum
//! never hold the minimum back; they join as room comes, in rank order.

use super::fixtures::{World, member, pod};
use super::{Harness, binds};
use crate::config::Settings;

/// Member `i` of an annotated gang of minimum `size`, with a completion
/// index that ranks it against its name (`job-0` ranks last).
fn ranked(size: u32, i: u32, rank: u32) -> k8s_openapi::api::core::v1::Pod {
    let mut p = member("job", size, i, 8, 0);
    p.metadata.labels.get_or_insert_default().insert(
        "batch.kubernetes.io/job-completion-index".into(),
        rank.to_string(),
    );
    p
}

#[test]
fn the_minimum_binds_first_in_rank_order_and_the_rest_join_as_room_comes() {
    // Two DGX A100 free, one busy: room for two whole-node members.
    let mut w = World::dgx(3, 3);
    w.add(pod("busy", 8, Some("n3"), 0));
    // Minimum 2, three pending: ranks 0 and 1 are job-2 and job-1.
    w.add(ranked(2, 0, 2));
    w.add(ranked(2, 1, 1));
    w.add(ranked(2, 2, 0));
    let mut h = Harness::new(w, Settings::default());
    let (report, writes) = h.cycle();
    let mut bound: Vec<String> = binds(&writes).into_iter().map(|(p, _)| p).collect();
    bound.sort();
    assert_eq!(
        bound,
        ["ml/job-1", "ml/job-2"],
        "the minimum, ranks 0 and 1: {:?}",
        report.outcomes
    );

    // Room comes: the third member joins.
    h.world.remove("busy");
    h.cycle.cluster_changed();
    let (report, writes) = h.cycle();
    assert_eq!(
        binds(&writes),
        [("ml/job-0".to_string(), "n3".to_string())],
        "{:?}",
        report.outcomes
    );
}

#[test]
fn a_gang_whose_minimum_does_not_fit_binds_nothing() {
    let mut w = World::dgx(2, 2);
    w.add(pod("busy", 8, Some("n2"), 0));
    for i in 0..3 {
        w.add(ranked(2, i, i));
    }
    let mut h = Harness::new(w, Settings::default());
    let (_, writes) = h.cycle();
    assert!(
        binds(&writes).is_empty(),
        "all or nothing up to the minimum"
    );
}
