//! A bound pod's GPU record is what the scheduler first saw or wrote: an
//! edit after binding is reported once and never makes a GPU look free;
//! where nobody says which GPUs a pod holds, the node's GPUs are handed
//! out by count (no index written).

use super::fake::Write;
use super::fixtures::{World, annotate, pod};
use super::{Harness, binds};
use crate::config::Settings;
use std::sync::Arc;
use std::time::Duration;

fn assigned(h: &Harness, name: &str) -> Option<String> {
    h.world
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))?
        .metadata
        .annotations
        .as_ref()?
        .get("gputopo.dev/assigned-gpus")
        .cloned()
}

fn events<'a>(writes: &'a [Write], reason: &str) -> Vec<&'a str> {
    writes
        .iter()
        .filter_map(|w| match w {
            Write::Event { pod, event } if event.reason == reason => Some(pod.as_str()),
            _ => None,
        })
        .collect()
}

/// The tenant's edit: `ml/name`'s record replaced in the watched world.
fn edit(h: &mut Harness, name: &str, value: &str) {
    let i = h
        .world
        .pods
        .iter()
        .position(|p| p.metadata.name.as_deref() == Some(name))
        .expect("the pod");
    let edited = annotate(
        (*h.world.pods[i]).clone(),
        "gputopo.dev/assigned-gpus",
        value,
    );
    h.world.pods[i] = Arc::new(edited);
    h.advance(Duration::from_secs(1));
}

#[test]
fn an_edited_record_is_not_believed_and_is_reported_once() {
    let mut w = World::dgx(1, 1);
    w.add(pod("first", 4, None, 0));
    let mut h = Harness::new(w, Settings::default());
    h.cycle();
    let first = assigned(&h, "first").expect("bound with its GPUs");

    // The tenant rewrites the record, then a second 4-GPU pod comes.
    edit(&mut h, "first", "x");
    h.world.add(pod("second", 4, None, 0));
    let (report, writes) = h.cycle();
    assert_eq!(events(&writes, "GPURecordEdited"), ["ml/first"]);
    assert_eq!(report.record_findings.len(), 1);
    assert_eq!(binds(&writes).len(), 1);
    let second = assigned(&h, "second").expect("bound with its GPUs");
    let held = |list: &str| -> Vec<u32> { list.split(',').map(|g| g.parse().unwrap()).collect() };
    assert!(
        held(&first).iter().all(|g| !held(&second).contains(g)),
        "first {first}, second {second}"
    );

    // Seen again unchanged: not reported again; another value is.
    h.advance(Duration::from_secs(1));
    let (_, writes) = h.cycle();
    assert!(events(&writes, "GPURecordEdited").is_empty());
    edit(&mut h, "first", "4,5,6,7");
    h.world.add(pod("third", 1, None, 0));
    let (_, writes) = h.cycle();
    assert_eq!(events(&writes, "GPURecordEdited"), ["ml/first"]);
    // The node is full whatever the record says now.
    assert!(binds(&writes).is_empty(), "{writes:?}");
}

#[test]
fn gpus_nobody_named_make_the_node_hand_out_gpus_by_count() {
    let mut w = World::dgx(1, 1);
    // Bound by another scheduler: no record, and the node reports nothing.
    let mut other = pod("other", 4, Some("n1"), 0);
    other.metadata.annotations = None;
    w.add(other).add(pod("new", 4, None, 0));
    let mut h = Harness::new(w, Settings::default());
    let (_, writes) = h.cycle();
    assert_eq!(binds(&writes), [("ml/new".to_string(), "n1".to_string())]);
    assert_eq!(assigned(&h, "new"), None, "no index is written");
    let scheduled: Vec<String> = writes
        .iter()
        .filter_map(|w| match w {
            Write::Event { event, .. } if event.reason == "Scheduled" => Some(event.note.clone()),
            _ => None,
        })
        .collect();
    assert!(
        scheduled
            .iter()
            .any(|n| n.contains("4 GPU(s) by count") && n.contains("ml/other")),
        "{scheduled:?}"
    );
    // Both pods hold four: nothing is left, by count.
    h.world.add(pod("late", 1, None, 0));
    h.advance(Duration::from_secs(1));
    let (_, writes) = h.cycle();
    assert!(binds(&writes).is_empty(), "{writes:?}");
}
