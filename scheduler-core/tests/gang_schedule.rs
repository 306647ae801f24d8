//! Gangs on the cluster snapshot: the 2/4/8 rule of docs/contract.md,
//! "Network domains", end to end through `schedule_gang`, all or nothing.

mod common;

use common::{a100, gpu_node, holder, labels, request, snapshot};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::gang_schedule::{GangDecision, schedule_gang};
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::snapshot::{BoundPodInput, NodeInput};
use std::collections::{BTreeMap, BTreeSet};

fn fabric() -> Vec<NodeInput> {
    common::spine_leaf_fabric()
}

fn gang(name: &str, size: u32, gpus: u32) -> Vec<PendingPod> {
    let s = size.to_string();
    (0..size)
        .map(|i| {
            PendingPod::new(
                "train",
                &format!("{name}-{i}"),
                request(
                    gpus,
                    &[("gputopo.dev/gang", name), ("gputopo.dev/gang-size", &s)],
                ),
            )
        })
        .collect()
}

fn leaf(node: &str) -> String {
    // s<spine>-l<leaf>-n<n>
    node.rsplit_once("-n")
        .map(|(l, _)| l.to_string())
        .unwrap_or_default()
}

fn placed(d: GangDecision) -> Vec<gputopo_scheduler_core::schedule::Placement> {
    match d {
        GangDecision::Placed(p) => p,
        GangDecision::Waiting { message } => panic!("gang waits: {message}"),
    }
}

#[test]
fn gang_of_two_shares_a_leaf_and_of_eight_takes_two_leaves_under_one_spine() {
    let snap = snapshot(fabric(), vec![]);
    let config = SchedulerConfig::default();

    let two = placed(schedule_gang(&snap, &gang("g2", 2, 8), &config));
    assert_eq!(two.len(), 2);
    let leaves: BTreeSet<String> = two.iter().map(|p| leaf(&p.node)).collect();
    assert_eq!(leaves.len(), 1, "{two:?}");

    let eight = placed(schedule_gang(&snap, &gang("g8", 8, 8), &config));
    assert_eq!(eight.len(), 8);
    let nodes: BTreeSet<&str> = eight.iter().map(|p| p.node.as_str()).collect();
    assert_eq!(nodes.len(), 8, "one 8-GPU member per node");
    let leaves: BTreeSet<String> = eight.iter().map(|p| leaf(&p.node)).collect();
    assert_eq!(leaves.len(), 2, "{leaves:?}");
    let spines: BTreeSet<&str> = eight.iter().map(|p| &p.node[..2]).collect();
    assert_eq!(
        spines.len(),
        1,
        "two adjacent leaves: one spine, {spines:?}"
    );
    for p in &eight {
        assert_eq!(p.gpus, (0..8).collect::<Vec<_>>());
        assert!(
            p.explanation.starts_with("gang g8, 8 members"),
            "{}",
            p.explanation
        );
    }
}

#[test]
fn members_sharing_a_node_get_disjoint_gpus_and_are_counted_together() {
    let snap = snapshot(fabric(), vec![]);
    let placements = placed(schedule_gang(
        &snap,
        &gang("g4x2", 4, 2),
        &SchedulerConfig::default(),
    ));
    let mut per_node: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for p in &placements {
        let gpus = per_node.entry(&p.node).or_default();
        for g in &p.gpus {
            assert!(!gpus.contains(g), "GPU {g} of {} given twice", p.node);
            gpus.push(*g);
        }
    }
    // Small members pack onto one node rather than spreading.
    assert_eq!(per_node.len(), 1, "{per_node:?}");
}

#[test]
fn a_gang_that_cannot_fit_binds_none_and_says_why() {
    // Busy nodes: GPU 0 taken on every node of spine 0, so only spine 1's 8
    // nodes can take an 8-GPU member.
    let busy: Vec<BoundPodInput> = fabric()
        .iter()
        .filter(|n| n.name.starts_with("s0"))
        .map(|n| holder(&format!("busy-{}", n.name), &n.name, &[0], None))
        .collect();
    let snap = snapshot(fabric(), busy);
    let config = SchedulerConfig::default();
    match schedule_gang(&snap, &gang("big", 9, 8), &config) {
        GangDecision::Waiting { message } => {
            assert!(
                message.contains("gang big (9 members) waits, nothing bound"),
                "{message}"
            );
        }
        GangDecision::Placed(p) => panic!("9 members placed on 8 free nodes: {p:?}"),
    }
    // Eight fit exactly: spine 1, both leaves.
    let p = placed(schedule_gang(&snap, &gang("fits", 8, 8), &config));
    assert!(p.iter().all(|p| p.node.starts_with("s1")), "{p:?}");
}

#[test]
fn shared_gpu_members_are_refused_with_the_reason() {
    let snap = snapshot(fabric(), vec![]);
    let members = vec![PendingPod::new(
        "x",
        "share-0",
        common::request(
            0,
            &[
                ("gputopo.dev/gpu-share", "0.5"),
                ("gputopo.dev/gang", "s"),
                ("gputopo.dev/gang-size", "1"),
            ],
        ),
    )];
    match schedule_gang(&snap, &members, &SchedulerConfig::default()) {
        GangDecision::Waiting { message } => assert!(message.contains("gpu-share"), "{message}"),
        GangDecision::Placed(_) => panic!("a shared-GPU gang member was placed"),
    }
}

/// Nodes named `name` with `product` GPUs on `leaf`.
fn model_node(name: &str, product: &str, leaf: &str) -> NodeInput {
    let mut spec = a100();
    spec.summary.product = Some(product.into());
    let mut node = gpu_node(name, spec);
    node.labels.extend(labels(&[
        ("gputopo.dev/spine", "spine-0"),
        ("gputopo.dev/leaf", leaf),
    ]));
    node
}

/// A data-parallel step runs at its slowest member's speed: by default a
/// gang keeps to one GPU model, even at the cost of a second leaf; the
/// annotation lets it mix; where no model has room it waits and says why.
#[test]
fn a_gang_keeps_to_one_gpu_model_unless_told_otherwise() {
    let nodes = || {
        vec![
            model_node("a100-near", "A100-SXM4-80GB", "leaf-1"),
            model_node("v100-near", "Tesla V100-SXM2-32GB", "leaf-1"),
            model_node("a100-far-1", "A100-SXM4-80GB", "leaf-2"),
        ]
    };
    let config = SchedulerConfig::default();
    let snap = snapshot(nodes(), vec![]);
    let models = |d: GangDecision| -> BTreeSet<String> {
        placed(d)
            .into_iter()
            .map(|p| p.node.split('-').next().unwrap_or_default().to_string())
            .collect()
    };
    let one = schedule_gang(&snap, &gang("ddp", 2, 8), &config);
    let text = match &one {
        GangDecision::Placed(p) => p[0].explanation.clone(),
        GangDecision::Waiting { message } => panic!("{message}"),
    };
    assert!(text.contains("one GPU model (A100-SXM4-80GB"), "{text}");
    assert_eq!(models(one), BTreeSet::from(["a100".to_string()]));

    // Allowed to mix: one leaf wins over one model.
    let mut mixed = gang("ddp", 2, 8);
    for m in &mut mixed {
        m.request.gang_mixed_models = Some(true);
    }
    let d = schedule_gang(&snap, &mixed, &config);
    let leaves: BTreeSet<String> = placed(d.clone()).into_iter().map(|p| p.node).collect();
    assert_eq!(
        leaves,
        BTreeSet::from(["a100-near".to_string(), "v100-near".to_string()])
    );
    let configured = SchedulerConfig {
        gang_mixed_models: true,
        ..SchedulerConfig::default()
    };
    assert_eq!(schedule_gang(&snap, &gang("ddp", 2, 8), &configured), d);

    // The far A100 is busy: no model has room for both members.
    let busy = snapshot(nodes(), vec![holder("x", "a100-far-1", &[0], None)]);
    match schedule_gang(&busy, &gang("ddp", 2, 8), &config) {
        GangDecision::Waiting { message } => {
            assert!(
                message.contains("no single GPU model has room"),
                "{message}"
            );
            assert!(
                message.contains("gputopo.dev/gang-mixed-models"),
                "{message}"
            );
        }
        GangDecision::Placed(p) => panic!(
            "mixed models: {:?}",
            p.iter().map(|p| &p.node).collect::<Vec<_>>()
        ),
    }
}

/// A bare `nvidia-smi topo -m` names no product: such nodes are known by
/// their wiring, so two unlabelled NVSwitch boxes pair up rather than one of
/// them with a PCIe box that happens to share its leaf.
#[test]
fn nodes_of_unknown_model_are_known_by_their_wiring() {
    let bare = |name: &str, spec, leaf: &str| {
        let mut node = gpu_node(name, spec);
        node.labels.extend(labels(&[
            ("gputopo.dev/spine", "spine-0"),
            ("gputopo.dev/leaf", leaf),
        ]));
        node
    };
    // The summaries the normalizer writes for these wirings.
    let nvswitch = || {
        let mut s = a100();
        s.summary.interconnect = gputopo_api::Interconnect::Nvswitch;
        s.summary.p2p_level = Some("NV12".into());
        s
    };
    let mut pcie = common::pcie();
    pcie.summary.interconnect = gputopo_api::Interconnect::Pcie;
    pcie.summary.p2p_level = None;
    let snap = snapshot(
        vec![
            bare("nvswitch-near", nvswitch(), "leaf-1"),
            bare("pcie-near", pcie, "leaf-1"),
            bare("nvswitch-far", nvswitch(), "leaf-2"),
        ],
        vec![],
    );
    let nodes: BTreeSet<String> = placed(schedule_gang(
        &snap,
        &gang("ddp", 2, 8),
        &SchedulerConfig::default(),
    ))
    .into_iter()
    .map(|p| p.node)
    .collect();
    assert_eq!(
        nodes,
        BTreeSet::from(["nvswitch-far".to_string(), "nvswitch-near".to_string()])
    );
}

/// Members are judged against each other inside the one gang decision: a
/// gang whose members keep apart by required anti-affinity (one per node)
/// is placed one member per node, though packing alone would put both 4-GPU
/// members on one 8-GPU node.
#[test]
fn members_with_anti_affinity_to_each_other_never_share_a_node() {
    use gputopo_scheduler_core::pod_constraints::{
        AffinityTerm, LabelSelector, PodAffinity, PodConstraints,
    };
    use std::sync::Arc;
    let mut members = gang("apart", 2, 4);
    for m in &mut members {
        let mut c = PodConstraints::labelled(&[("job", "apart")]);
        c.affinity = PodAffinity {
            required_anti: vec![AffinityTerm::new(
                "train",
                LabelSelector::equal(&[("job", "apart")]),
                "kubernetes.io/hostname",
            )],
            ..PodAffinity::default()
        };
        m.constraints = Arc::new(c);
    }
    let snap = snapshot(fabric(), vec![]);
    match schedule_gang(&snap, &members, &SchedulerConfig::default()) {
        GangDecision::Placed(p) => {
            let nodes: BTreeSet<&str> = p.iter().map(|p| p.node.as_str()).collect();
            assert_eq!(nodes.len(), 2, "one member per node: {p:?}");
        }
        GangDecision::Waiting { message } => panic!("the gang waits: {message}"),
    }
    // Without the rule, the two members share a node (packing).
    let plain = gang("apart", 2, 4);
    match schedule_gang(&snap, &plain, &SchedulerConfig::default()) {
        GangDecision::Placed(p) => {
            let nodes: BTreeSet<&str> = p.iter().map(|p| p.node.as_str()).collect();
            assert_eq!(nodes.len(), 1, "packed: {p:?}");
        }
        GangDecision::Waiting { message } => panic!("the gang waits: {message}"),
    }
}

/// The fabric with zones: each spine is a zone (`topology.kubernetes.io/zone`).
fn zoned_fabric() -> Vec<NodeInput> {
    let mut nodes = fabric();
    for node in &mut nodes {
        let zone = node.labels["gputopo.dev/spine"].replace("spine", "zone");
        node.labels
            .insert("topology.kubernetes.io/zone".to_string(), zone);
    }
    nodes
}

/// Gives every member the same labels and rules.
fn with_rules(
    mut members: Vec<PendingPod>,
    rules: impl Fn(&mut gputopo_scheduler_core::pod_constraints::PodConstraints),
) -> Vec<PendingPod> {
    use gputopo_scheduler_core::pod_constraints::PodConstraints;
    for m in &mut members {
        let mut c = PodConstraints::labelled(&[("job", "ranked")]);
        rules(&mut c);
        m.constraints = std::sync::Arc::new(c);
    }
    members
}

fn zones_of(p: &[gputopo_scheduler_core::schedule::Placement]) -> BTreeMap<String, usize> {
    let mut zones = BTreeMap::new();
    for p in p {
        let spine = p.node.split('-').next().unwrap_or_default();
        *zones.entry(spine.replace('s', "zone-")).or_insert(0) += 1;
    }
    zones
}

fn zone_anti_affinity() -> gputopo_scheduler_core::pod_constraints::PodAffinity {
    use gputopo_scheduler_core::pod_constraints::{AffinityTerm, LabelSelector, PodAffinity};
    PodAffinity {
        required_anti: vec![AffinityTerm::new(
            "train",
            LabelSelector::equal(&[("job", "ranked")]),
            "topology.kubernetes.io/zone",
        )],
        ..PodAffinity::default()
    }
}

/// Four whole-node members spread over zones with maxSkew 1: the gang
/// search alone would keep them on one leaf (one zone), which the rule
/// forbids; the decision places them two and two, as kube-scheduler would
/// place four such pods one after another.
#[test]
fn members_spread_over_zones_are_placed_two_and_two() {
    use gputopo_scheduler_core::pod_constraints::{
        LabelSelector, SpreadConstraint, WhenUnsatisfiable,
    };
    let members = with_rules(gang("spread", 4, 8), |c| {
        c.spread = vec![SpreadConstraint::new(
            1,
            "topology.kubernetes.io/zone",
            WhenUnsatisfiable::DoNotSchedule,
            LabelSelector::equal(&[("job", "ranked")]),
        )];
    });
    let snap = snapshot(zoned_fabric(), vec![]);
    let p = placed(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    assert_eq!(p.len(), 4);
    let zones = zones_of(&p);
    assert_eq!(
        zones.values().copied().collect::<Vec<_>>(),
        vec![2, 2],
        "{zones:?}"
    );
    // Within a zone the members still keep to one leaf (the GPU topology
    // decides among the nodes the rule leaves equal).
    let leaves: BTreeSet<String> = p.iter().map(|p| leaf(&p.node)).collect();
    assert_eq!(leaves.len(), 2, "one leaf per zone: {leaves:?}");
    assert!(
        p.iter().all(|p| p.explanation.contains("one at a time")),
        "{:?}",
        p[0].explanation
    );
}

/// Members that repel each other per zone go one per zone.
#[test]
fn members_with_zone_anti_affinity_take_one_zone_each() {
    let members = with_rules(gang("apart", 2, 2), |c| c.affinity = zone_anti_affinity());
    let snap = snapshot(zoned_fabric(), vec![]);
    let p = placed(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    assert_eq!(zones_of(&p).len(), 2, "{p:?}");
}

/// When the rules among the members cannot all hold (three members, one
/// per zone, two zones), the gang waits, nothing bound, and says which
/// member the rules left without a node.
#[test]
fn a_gang_whose_rules_cannot_hold_waits_and_names_the_rule() {
    let members = with_rules(gang("apart", 3, 2), |c| c.affinity = zone_anti_affinity());
    let snap = snapshot(zoned_fabric(), vec![]);
    match schedule_gang(&snap, &members, &SchedulerConfig::default()) {
        GangDecision::Placed(p) => panic!("three members in two zones, one per zone: {p:?}"),
        GangDecision::Waiting { message } => {
            assert!(message.contains("nothing bound"), "{message}");
            assert!(message.contains("train/apart-2"), "{message}");
            assert!(
                message.contains("didn't match pod anti-affinity rules"),
                "{message}"
            );
        }
    }
}

/// Members that must share a zone (required affinity to each other; the
/// first member of a self-affine group goes anywhere) all land in one zone,
/// even where the zones cut across the network: here each zone holds one
/// leaf of each spine, and the gang search alone would take two leaves of
/// one spine (two zones).
#[test]
fn members_with_zone_affinity_to_each_other_share_one_zone() {
    use gputopo_scheduler_core::pod_constraints::{AffinityTerm, LabelSelector, PodAffinity};
    let members = with_rules(gang("together", 6, 8), |c| {
        c.affinity = PodAffinity {
            required: vec![AffinityTerm::new(
                "train",
                LabelSelector::equal(&[("job", "ranked")]),
                "topology.kubernetes.io/zone",
            )],
            ..PodAffinity::default()
        };
    });
    let mut nodes = fabric();
    for node in &mut nodes {
        let zone = if node.name.contains("-l0-") {
            "zone-a"
        } else {
            "zone-b"
        };
        node.labels
            .insert("topology.kubernetes.io/zone".to_string(), zone.to_string());
    }
    let snap = snapshot(nodes, vec![]);
    let p = placed(schedule_gang(&snap, &members, &SchedulerConfig::default()));
    let zones: BTreeSet<bool> = p.iter().map(|p| p.node.contains("-l0-")).collect();
    assert_eq!(zones.len(), 1, "{p:?}");
    // Still as close as the zone allows: one whole leaf, then the zone's
    // leaf on the other spine.
    let leaves: BTreeSet<String> = p.iter().map(|p| leaf(&p.node)).collect();
    assert_eq!(leaves.len(), 2, "{leaves:?}");
    assert!(
        p[0].explanation.contains("one at a time"),
        "{}",
        p[0].explanation
    );
}

#[test]
fn the_gangs_mean_gpu_set_is_the_mean_of_what_each_member_line_says() {
    let snap = snapshot(fabric(), vec![]);
    let placements = placed(schedule_gang(
        &snap,
        &gang("g4", 4, 2),
        &SchedulerConfig::default(),
    ));
    let members: Vec<f64> = placements
        .iter()
        .map(|p| p.parts.gpu_set.expect("whole-GPU members score their set"))
        .collect();
    let mean = (members.iter().sum::<f64>() / members.len() as f64 * 100.0).round() as i64;
    for p in &placements {
        let said = p
            .explanation
            .split("; mean GPU set ")
            .nth(1)
            .expect("a mean");
        let said: i64 = said
            .split(';')
            .next()
            .unwrap()
            .trim()
            .parse()
            .expect("a number");
        assert_eq!(said, mean, "{}", p.explanation);
        // The member's own line carries its own part, named the same way.
        let own = format!(
            "GPU set {}",
            (p.parts.gpu_set.unwrap() * 100.0).round() as i64
        );
        assert!(p.explanation.contains(&own), "{}", p.explanation);
        assert!(
            !p.explanation.contains("GPU-set score"),
            "{}",
            p.explanation
        );
    }
}
