//! The cycle's snapshot kept from cycle to cycle (`live_cluster.rs`) equals
//! the snapshot built whole from the same objects, after every change of a
//! seeded random walk: pods bound (with and without their GPUs recorded),
//! changed and gone, assumptions made and dropped, nodes relabelled,
//! removed and back, kubelet readings fresh and stale, PodGroups.

use super::fixtures::{World, node, pod, pod_group, topology};
use crate::change_feed::ChangedObjects;
use crate::cluster::{AssumeCache, Assumed, ReadingTrust, build_snapshot, is_pending_for, pod_key};
use crate::live_cluster::LiveCluster;
use gputopo_api::{GpuAllocation, PodResourcesReading};
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::snapshot::{BoundPodInput, GpuHolding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

const NODES: u64 = 4;
const PODS: u64 = 10;

fn step(w: &mut World, assumed: &mut AssumeCache, now: Timestamp, rng: &mut Rng) -> String {
    let name = format!("p{}", rng.below(PODS));
    let n = format!("n{}", 1 + rng.below(NODES));
    match rng.below(9) {
        0 | 1 => {
            // Bound with its GPUs recorded (`0..k`), or by another
            // scheduler without them: a pod created anew (a bound pod's
            // record is kept as first read, so another uid).
            w.remove(&name);
            let k = 1 + rng.below(4) as u32;
            let mut p = pod(&name, k, Some(&n), 0);
            p.metadata.uid = Some(format!("uid-{name}-{}", rng.below(1 << 30)));
            if rng.below(2) == 0 {
                p.metadata.annotations = None;
            }
            w.add(p);
            format!("bind {name} to {n}")
        }
        2 => {
            w.remove(&name);
            format!("{name} gone")
        }
        3 => {
            // Pending, and assumed on a node by this scheduler.
            w.remove(&name);
            w.add(pod(&name, 2, None, 0));
            let mut input = BoundPodInput::new("ml", &name, &n);
            input.requests.gpus = 2;
            input.holding = GpuHolding::Whole(vec![6, 7]);
            assumed.assume(
                format!("ml/{name}"),
                Assumed {
                    uid: Some(format!("uid-{name}")),
                    input,
                    since: Instant::now(),
                },
            );
            format!("assume {name} on {n}")
        }
        4 => {
            // A pending pod (no assumption).
            w.remove(&name);
            w.add(pod(&name, 1, None, 0));
            format!("{name} pending")
        }
        5 => {
            let leaf = format!("leaf-{}", rng.below(2));
            w.nodes
                .retain(|x| x.metadata.name.as_deref() != Some(n.as_str()));
            w.nodes.push(Arc::new(node(&n, &leaf)));
            format!("{n} on {leaf}")
        }
        6 => {
            w.nodes
                .retain(|x| x.metadata.name.as_deref() != Some(n.as_str()));
            w.topologies
                .retain(|x| x.metadata.name.as_deref() != Some(n.as_str()));
            format!("{n} removed")
        }
        7 => {
            // The kubelet's reading: fresh, or ten minutes old.
            let age = if rng.below(3) == 0 { 600 } else { 5 };
            let mut t = topology(&n);
            let status = t.status.get_or_insert_default();
            status.allocations = vec![GpuAllocation {
                gpu: rng.below(8) as u32,
                pods: vec![format!("ml/{name}")],
                holders: Vec::new(),
            }];
            status.pod_resources = Some(PodResourcesReading {
                observed_at: Time(now - SignedDuration::from_secs(age)),
                last_error: None,
                unknown_devices: Vec::new(),
            });
            w.topologies
                .retain(|x| x.metadata.name.as_deref() != Some(n.as_str()));
            w.topologies.push(Arc::new(t));
            if !w
                .nodes
                .iter()
                .any(|x| x.metadata.name.as_deref() == Some(n.as_str()))
            {
                w.nodes.push(Arc::new(node(&n, "leaf-1")));
            }
            format!("{n} read {age}s ago")
        }
        _ => {
            let g = pod_group(&format!("g{}", rng.below(2)), 1 + rng.below(3) as u32, None);
            w.gangs
                .pod_groups
                .retain(|x| x.metadata.name != g.metadata.name);
            w.gangs.pod_groups.push(Arc::new(g));
            "a PodGroup".into()
        }
    }
}

/// What the watches' change feed would name between two worlds: each
/// object whose `Arc` differs or is gone, plus (the feed may name a key
/// that did not change, or name it twice) one unchanged pod.
fn changes(before: &World, after: &World, rng: &mut Rng) -> ChangedObjects {
    fn diff<T>(
        before: &[Arc<T>],
        after: &[Arc<T>],
        key: impl Fn(&T) -> String,
    ) -> Vec<(String, Option<Arc<T>>)> {
        let old: HashMap<String, &Arc<T>> = before.iter().map(|o| (key(o), o)).collect();
        let new: HashMap<String, &Arc<T>> = after.iter().map(|o| (key(o), o)).collect();
        let mut out: Vec<(String, Option<Arc<T>>)> = new
            .iter()
            .filter(|(k, o)| !old.get(*k).is_some_and(|p| Arc::ptr_eq(p, o)))
            .map(|(k, o)| (k.clone(), Some((*o).clone())))
            .collect();
        out.extend(
            old.keys()
                .filter(|k| !new.contains_key(*k))
                .map(|k| (k.clone(), None)),
        );
        out
    }
    let name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.name.clone().unwrap_or_default()
    };
    let mut pods = diff(&before.pods, &after.pods, pod_key);
    if !after.pods.is_empty() {
        let p = &after.pods[rng.below(after.pods.len() as u64) as usize];
        pods.push((pod_key(p), Some(p.clone())));
    }
    ChangedObjects {
        nodes: diff(&before.nodes, &after.nodes, |n| name(&n.metadata)),
        topologies: diff(&before.topologies, &after.topologies, |t| name(&t.metadata)),
        pods,
    }
}

#[test]
fn the_kept_snapshot_equals_one_built_whole_after_every_change() {
    let config = SchedulerConfig::default();
    let names = vec!["gputopo-scheduler".to_string()];
    for seed in 1..=6u64 {
        let mut rng = Rng(seed);
        let mut w = World::dgx(NODES as usize, 2);
        let mut assumed = AssumeCache::default();
        // One compares every object each step; the other reads only what
        // the change list names (after its first read).
        let mut compared = LiveCluster::new(&config, names.clone());
        let mut fed = LiveCluster::new(&config, names.clone());
        let start = Timestamp::from_second(1_767_225_600).expect("a time");
        for i in 0..150u32 {
            let now = start + SignedDuration::from_secs(i64::from(i) * 7);
            let before = w.clone();
            let what = step(&mut w, &mut assumed, now, &mut rng);
            let changed = changes(&before, &w, &mut rng);
            // As every cycle does first: assumptions seen bound or gone end.
            let by_key = w.pods.iter().map(|p| (pod_key(p), p.clone())).collect();
            assumed.reconcile(&by_key);
            let trust = ReadingTrust {
                now,
                max_age: Duration::from_secs(120),
            };
            let (whole, whole_warnings) =
                build_snapshot(&w.objects(), &assumed, &config, trust).expect("builds");
            let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
            let mut with_changes = w.objects();
            with_changes.changed = Some(&changed);
            for (how, live, objects) in [
                ("compared", &mut compared, w.objects()),
                ("by change list", &mut fed, with_changes),
            ] {
                let (kept, kept_warnings) = live
                    .sync(&objects, &assumed, trust)
                    .expect("no duplicate names");
                let context = format!("{how}, seed {seed}, step {i}: {what}");
                assert_eq!(kept.state_text(), whole.state_text(), "{context}");
                assert_eq!(set(kept_warnings), set(whole_warnings.clone()), "{context}");
                let pods: BTreeSet<String> = live.pods().keys().cloned().collect();
                let watched: BTreeSet<String> = w.pods.iter().map(|p| pod_key(p)).collect();
                assert_eq!(pods, watched, "{context}");
                let pending: Vec<&str> = live.pending().map(|(k, _)| k).collect();
                let mut expected: Vec<String> = w
                    .pods
                    .iter()
                    .filter(|p| is_pending_for(p, &names))
                    .map(|p| pod_key(p))
                    .collect();
                expected.sort();
                assert_eq!(pending, expected, "{context}");
            }
        }
        for live in [&compared, &fed] {
            let counts = live.counts();
            assert!(
                counts.node_updates > counts.full_builds,
                "most changes touched one node: {counts:?}"
            );
        }
    }
}

/// A pod change is given to the live snapshot when observed, not kept
/// until a pod is due: a scheduler with nothing pending, watching other
/// schedulers' pods churn, would otherwise hold every key they name.
#[test]
fn observed_pod_changes_reach_the_snapshot_without_a_due_pod() {
    let config = SchedulerConfig::default();
    let mut w = World::dgx(2, 0);
    let mut live = LiveCluster::new(&config, vec!["gputopo-scheduler".to_string()]);
    let trust = ReadingTrust::at(Timestamp::from_second(1_767_225_600).expect("a time"));
    live.sync(&w.objects(), &AssumeCache::default(), trust)
        .expect("builds");
    let before = live.counts().node_updates;
    for i in 0..50u64 {
        let before = w.clone();
        w.add(pod(&format!("other-{i}"), 1, Some("n1"), 0));
        let changed = changes(&before, &w, &mut Rng(i));
        let mut objects = w.objects();
        objects.changed = Some(&changed);
        live.observe(&objects, trust);
    }
    assert!(
        live.counts().node_updates >= before + 50,
        "each bound pod re-read its node as observed: {:?}",
        live.counts()
    );
    let (kept, _) = live.snapshot(&AssumeCache::default()).expect("up to date");
    let whole = w.snapshot();
    assert_eq!(kept.state_text(), whole.state_text());
}
