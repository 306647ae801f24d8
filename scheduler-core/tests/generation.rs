//! The generation part of the score: with `newest` a pod goes to the newer
//! GPUs, with `oldest` to the older ones, `off` (the default) ignores them;
//! a node label overrides the product, and a bad label is a warning.

mod common;

use common::*;
use gputopo_scheduler_core::config::{GenerationPreference, SchedulerConfig};
use gputopo_scheduler_core::schedule::schedule;
use gputopo_scheduler_core::snapshot::{NodeInput, Snapshot};

/// Two identical NVSwitch nodes but for their product: "a-old" is a V100
/// box, "b-new" an H100 box. Names sort so that a tie goes to "a-old".
fn old_and_new(new_label: Option<&str>) -> Snapshot {
    let node = |name: &str, product: &str| -> NodeInput {
        let mut spec = a100();
        spec.summary.product = Some(product.to_string());
        let mut n = gpu_node(name, spec);
        if let (Some(v), "b-new") = (new_label, name) {
            n.labels
                .insert("gputopo.dev/gpu-generation".into(), v.to_string());
        }
        n
    };
    snapshot(
        vec![
            node("a-old", "Tesla V100-SXM2-32GB"),
            node("b-new", "NVIDIA H100 80GB HBM3"),
        ],
        vec![],
    )
}

fn chosen(snap: &Snapshot, preference: GenerationPreference) -> String {
    let config = SchedulerConfig {
        gpu_generation: preference,
        ..SchedulerConfig::default()
    };
    schedule(snap, &pod(8, &[]), &config)
        .placement()
        .expect("placed")
        .node
        .clone()
}

#[test]
fn the_preference_picks_the_newest_or_the_oldest_and_off_leaves_the_tie() {
    let snap = old_and_new(None);
    assert_eq!(chosen(&snap, GenerationPreference::Newest), "b-new");
    assert_eq!(chosen(&snap, GenerationPreference::Oldest), "a-old");
    assert_eq!(chosen(&snap, GenerationPreference::Off), "a-old", "by name");
}

#[test]
fn a_node_label_overrides_the_product_and_a_bad_one_is_a_warning() {
    // Labelled generation 1: older than the V100 box (4).
    let snap = old_and_new(Some("1"));
    assert_eq!(chosen(&snap, GenerationPreference::Newest), "a-old");
    let snap = old_and_new(Some("newest"));
    assert_eq!(chosen(&snap, GenerationPreference::Newest), "b-new");
    let warned = snap
        .warnings()
        .iter()
        .map(ToString::to_string)
        .any(|w| w.contains("gputopo.dev/gpu-generation") && w.contains("1..=99"));
    assert!(warned, "{:?}", snap.warnings());
}

#[test]
fn the_part_shows_in_the_score_only_when_generations_differ() {
    let config = SchedulerConfig {
        gpu_generation: GenerationPreference::Newest,
        ..SchedulerConfig::default()
    };
    let snap = old_and_new(None);
    let p = schedule(&snap, &pod(8, &[]), &config)
        .placement()
        .expect("placed")
        .clone();
    assert_eq!(p.parts.generation, Some(1.0));
    let same = snapshot(vec![gpu_node("a", a100()), gpu_node("b", a100())], vec![]);
    let p = schedule(&same, &pod(8, &[]), &config)
        .placement()
        .expect("placed")
        .clone();
    assert_eq!(p.parts.generation, None);
}
