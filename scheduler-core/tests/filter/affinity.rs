//! Node selectors and node affinity: each operator, and the filter's compiled
//! matcher checked against the reference string matcher.

use crate::common::*;
use crate::{fits, only_reason, verdicts};
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::selector::{
    LabelRequirement, NameRequirement, NodeAffinity, SelectorOperator, SelectorTerm,
};

#[test]
fn node_selector_must_match_every_pair() {
    let mut n = gpu_node("n", a100());
    n.labels.insert("pool".into(), "train".into());
    n.labels.insert("zone".into(), "a".into());
    let snap = snapshot(vec![n], vec![]);
    let mut p = pod(1, &[]);
    p.node_selector = labels(&[("pool", "train"), ("zone", "a")]);
    assert!(fits(&snap, &p));
    p.node_selector = labels(&[("pool", "train"), ("zone", "b")]);
    assert_eq!(only_reason(&snap, &p), FilterReason::NodeAffinity);
    p.node_selector = labels(&[("never-seen-key", "x")]);
    assert_eq!(
        only_reason(&snap, &p).summaries(),
        ["node(s) didn't match Pod's node affinity/selector"]
    );
}

fn term(reqs: Vec<LabelRequirement>) -> SelectorTerm {
    SelectorTerm {
        labels: reqs,
        fields: vec![],
    }
}

fn req(key: &str, operator: SelectorOperator) -> LabelRequirement {
    LabelRequirement {
        key: key.into(),
        operator,
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn affinity_operators() {
    let mut n = gpu_node("gpu-1", a100());
    n.labels.insert("tier".into(), "gold".into());
    n.labels.insert("gpus".into(), "8".into());
    let snap = snapshot(vec![n], vec![]);
    let check = |terms: Vec<SelectorTerm>, expect: bool| {
        let mut p = pod(1, &[]);
        p.affinity = Some(NodeAffinity { terms });
        assert_eq!(fits(&snap, &p), expect, "{:?}", p.affinity);
    };
    use SelectorOperator::*;
    check(
        vec![term(vec![req("tier", In(strings(&["gold", "silver"])))])],
        true,
    );
    check(
        vec![term(vec![req("tier", In(strings(&["silver"])))])],
        false,
    );
    check(
        vec![term(vec![req("tier", NotIn(strings(&["silver"])))])],
        true,
    );
    check(
        vec![term(vec![req("tier", NotIn(strings(&["gold"])))])],
        false,
    );
    check(
        vec![term(vec![req("absent", NotIn(strings(&["x"])))])],
        true,
    );
    check(vec![term(vec![req("tier", Exists)])], true);
    check(vec![term(vec![req("absent", Exists)])], false);
    check(vec![term(vec![req("absent", DoesNotExist)])], true);
    check(vec![term(vec![req("tier", DoesNotExist)])], false);
    check(vec![term(vec![req("gpus", Gt(4))])], true);
    check(vec![term(vec![req("gpus", Gt(8))])], false);
    check(vec![term(vec![req("gpus", Lt(9))])], true);
    check(vec![term(vec![req("gpus", Lt(8))])], false);
    check(vec![term(vec![req("tier", Gt(1))])], false); // not an integer
    // Expressions in a term are ANDed; terms are ORed.
    check(
        vec![term(vec![req("tier", Exists), req("gpus", Gt(8))])],
        false,
    );
    check(
        vec![
            term(vec![req("gpus", Gt(8))]),
            term(vec![req("tier", In(strings(&["gold"])))]),
        ],
        true,
    );
    // An empty term and an empty term list match nothing.
    check(vec![SelectorTerm::default()], false);
    check(vec![], false);
    // matchFields metadata.name.
    let names = |within, n: &[&str]| SelectorTerm {
        labels: vec![],
        fields: vec![NameRequirement {
            within,
            names: strings(n),
        }],
    };
    check(vec![names(true, &["gpu-1"])], true);
    check(vec![names(true, &["gpu-2"])], false);
    check(vec![names(false, &["gpu-1"])], false);
    check(vec![names(false, &["gpu-2"])], true);
}

/// The filter's compiled matcher agrees with the reference on random labels and terms.
#[test]
fn compiled_affinity_agrees_with_reference() {
    let keys = ["a", "b", "c"];
    let values = ["1", "2", "10", "x"];
    let mut rng = Rng(7);
    let mut nodes = Vec::new();
    for i in 0..24 {
        let mut n = gpu_node(&format!("n{i:02}"), a100());
        for k in keys {
            if rng.below(3) > 0 {
                n.labels
                    .insert(k.into(), values[rng.below(4) as usize].into());
            }
        }
        nodes.push(n);
    }
    let snap = snapshot(nodes.clone(), vec![]);
    for _ in 0..300 {
        let mut terms = Vec::new();
        for _ in 0..=rng.below(2) {
            let mut reqs = Vec::new();
            for _ in 0..=rng.below(2) {
                let key = keys[rng.below(3) as usize];
                let some = |rng: &mut Rng| {
                    (0..=rng.below(2))
                        .map(|_| values[rng.below(4) as usize].to_string())
                        .collect::<Vec<_>>()
                };
                let op = match rng.below(6) {
                    0 => SelectorOperator::In(some(&mut rng)),
                    1 => SelectorOperator::NotIn(some(&mut rng)),
                    2 => SelectorOperator::Exists,
                    3 => SelectorOperator::DoesNotExist,
                    4 => SelectorOperator::Gt(rng.below(5) as i64),
                    _ => SelectorOperator::Lt(rng.below(5) as i64),
                };
                reqs.push(req(key, op));
            }
            terms.push(term(reqs));
        }
        let affinity = NodeAffinity { terms };
        let mut p = pod(1, &[]);
        p.affinity = Some(affinity.clone());
        for (name, reason) in verdicts(&snap, &p) {
            let node = nodes.iter().find(|n| n.name == name).unwrap();
            let expected = affinity.matches(&node.name, &node.labels);
            assert_eq!(reason.is_none(), expected, "{name} {affinity:?}");
        }
    }
}
