//! No fit: typed reasons that name what was short and where.

use crate::cluster::{ALL, fabric, nv12, spines_used, whole_node};
use gputopo_api::Collective;
use gputopo_scheduler_core::gang::{GangNoFit, GangSpec, Within, place_gang};
use gputopo_scheduler_core::gpuset::SetRequest;
use std::collections::BTreeSet;

#[test]
fn a_shortage_names_the_hosts_and_the_best_domains() {
    let shape = nv12();
    let mut cluster = fabric(2, 2, 4, &shape);
    // Five whole nodes free: three under spine 0, two under spine 1.
    for n in cluster.nodes.iter_mut() {
        n.free = 0x3f;
    }
    for id in [0, 1, 4, 8, 12] {
        cluster.nodes[id].free = ALL;
    }
    let request = SetRequest {
        min_nvlink_level: Some(12),
        ..SetRequest::new(8, Collective::Ring)
    };
    let err = place_gang(&GangSpec::uniform(8, request), &cluster).expect_err("5 < 8");
    let GangNoFit::Short(s) = &err else {
        panic!("expected a shortage, got {err:?}")
    };
    assert_eq!(s.fit, 5);
    assert_eq!(s.hosts, 5);
    assert_eq!(s.best[0].members, 3);
    assert_eq!(s.best[0].domain, "spine-0");
    assert_eq!(s.best[1].members, 2);
    assert_eq!(s.node_reasons, vec![("too few free GPUs".to_string(), 11)]);
    let message = err.to_string();
    assert!(
        message.starts_with("8 members need 8 free GPUs with NV12 between every pair each"),
        "{message}"
    );
    assert!(
        message.contains("the most under one spine is 3 (spine-0)"),
        "{message}"
    );
}

#[test]
fn a_required_tier_keeps_the_gang_in_one_domain_or_says_it_cannot() {
    let shape = nv12();
    let cluster = fabric(2, 4, 4, &shape);
    let in_one_leaf = whole_node(4).within(Within::OneDomainAt { tier: 1 });
    let p = place_gang(&in_one_leaf, &cluster).expect("a leaf holds 4");
    assert_eq!(p.leaf_domains(), 1);

    let err = place_gang(
        &whole_node(5).within(Within::OneDomainAt { tier: 1 }),
        &cluster,
    )
    .expect_err("no leaf holds 5");
    let message = err.to_string();
    assert!(message.contains("all in one leaf"), "{message}");
    assert!(
        message.contains("the most under one leaf is 4"),
        "{message}"
    );

    let named = whole_node(4).within(Within::Domain {
        tier: 0,
        name: "spine-1".into(),
    });
    let p = place_gang(&named, &cluster).expect("fits in spine-1");
    assert_eq!(
        spines_used(&cluster, &p),
        BTreeSet::from(["spine-1".to_string()])
    );

    assert_eq!(
        place_gang(
            &whole_node(1).within(Within::OneDomainAt { tier: 2 }),
            &cluster
        ),
        Err(GangNoFit::NoSuchTier { tier: 2, tiers: 2 })
    );
    assert!(matches!(
        place_gang(
            &whole_node(1).within(Within::Domain {
                tier: 0,
                name: "spine-9".into()
            }),
            &cluster
        ),
        Err(GangNoFit::NoSuchDomain { .. })
    ));
    assert_eq!(
        place_gang(&whole_node(0), &cluster),
        Err(GangNoFit::NoMembers)
    );
}

#[test]
fn nodes_without_labels_are_leaves_of_their_own() {
    let shape = nv12();
    let mut cluster = fabric(1, 1, 2, &shape);
    for n in &mut cluster.nodes {
        n.tiers = vec![Some("spine-0".into()), None];
    }
    let p = place_gang(&whole_node(2), &cluster).expect("fits");
    assert_eq!(
        p.leaf_domains(),
        2,
        "no locality assumed between unlabelled nodes"
    );
    assert_eq!(p.spans[0].domains, vec!["spine-0".to_string()]);
}
