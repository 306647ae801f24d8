//! The scheduler's configuration file (`--config`), from docs/scheduler.md's
//! complete example and the chart's rendering of it.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::value::Documents;
use gputopo_scheduler::Settings;
use proptest::prelude::*;
use std::path::Path;
use std::sync::{Arc, LazyLock};

/// Every field set (docs/scheduler.md).
const FULL: &str = "\
schedulerNames: [gputopo-scheduler]
networkTiers: {preset: gputopo}
weights: {gpuSet: 40, allocation: 20, memoryFit: 15, interference: 15,
          preferredDomain: 10, cost: 10, nodePreference: 5, fragmentation: 1000}
gpuGeneration: prefer-newer
defaultTopologyManagerPolicy: none
memoryTarget: {low: 0.70, high: 0.80}
spotInstanceTypes: []
backoff: {initial: 1s, max: 30s, unschedulableTimeout: 60s}
preemption:
  enabled: true
  checkpointMaxAge: 30m
  finishWindow: 2h
  inferenceRestart: 6m
gangs:
  scheduleTimeout: 10m
  partialBindTimeout: 5m
  mixedModels: false
  reservations: {enabled: true, maxFraction: 0.25, maxReservations: 4, ttl: 15m}
accounting:
  reportedAllocationsMaxAge: 15m
targetWorkload:
  modelLabel: nvidia.com/gpu.product
  podTypes:
    - {cpuMilli: 8000, gpus: 1, weight: 5}
    - {cpuMilli: 4000, gpus: 1, gpuMilli: 250, weight: 3, models: [NVIDIA-A100-SXM4-80GB]}
profiles:
  - schedulerName: gputopo-cost
    weights: {cost: 60}
    preemption: {enabled: false}
    memoryTarget: {low: 0.5, high: 0.6}
";

/// Network tiers as keys, single-numa-node, a profile per field.
const KEYS: &str = "\
networkTiers:
  keys: [topology.kubernetes.io/region, gputopo.dev/spine, gputopo.dev/leaf]
defaultTopologyManagerPolicy: single-numa-node
backoff: {initial: 200ms, max: 5s}
profiles:
  - {schedulerName: a, gpuGeneration: any, spotInstanceTypes: [p4d.spot]}
  - {schedulerName: b, weights: {gpuSet: 80}}
";

static SEEDS: LazyLock<Arc<[String]>> =
    LazyLock::new(|| vec![FULL.to_string(), KEYS.to_string(), "# defaults\n".into()].into());

static DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&SEEDS[..2]));

const WORDS: &[&str] = &[
    "weights:", "gpuSet: ", "preset: ", "keys: ", "- ", ": ", "ms", "s", "m", "h", "d", "y", "ns",
    "w", "&a", "*a", "<<: *a", "!!float", "~", "? ", "--- ",
];

pub fn strategy() -> BoxedStrategy<String> {
    prop_oneof![
        1 => texts(SEEDS.clone(), WORDS),
        1 => DOCUMENTS.yaml(),
    ]
    .boxed()
}

pub fn check(text: &str) -> Verdict {
    let settings = Settings::from_yaml(text, Path::new("config.yaml"));
    if let Ok(s) = &settings {
        for name in s.all_scheduler_names() {
            let (core, _) = s.profile_for(&name);
            super::schedule::decide_on_fixture(core);
        }
    }
    Verdict::from(&settings)
}
