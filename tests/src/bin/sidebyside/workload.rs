//! The seeded workload both schedulers get: gangs of 8-GPU pods, 4-GPU DDP
//! pods, 2- and 1-GPU pods, in one shuffled submission order.

use gputopo_api::keys::pod as keys;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;

/// What kind of job a pod belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A member of a gang of 8-GPU pods.
    Gang,
    /// A 4-GPU data-parallel pod.
    Ddp4,
    Two,
    One,
    /// More GPUs than any node has: every scheduler must report it.
    TooBig,
}

impl Kind {
    pub fn gpus(self) -> u32 {
        match self {
            Kind::Gang => 8,
            Kind::Ddp4 => 4,
            Kind::Two => 2,
            Kind::One => 1,
            Kind::TooBig => 9,
        }
    }
}

/// One pod of the workload.
#[derive(Clone, Debug, Serialize)]
pub struct PodPlan {
    pub name: String,
    pub kind: Kind,
    pub gpus: u32,
    /// The gang's name and size.
    pub gang: Option<(String, u32)>,
    /// Its pod rule, in the `rules` mix.
    pub rule: Option<Rule>,
}

/// The shares of GPU demand per kind (gangs, 4-GPU, 2-GPU, 1-GPU).
pub const SHARES: [(Kind, f64); 4] = [
    (Kind::Gang, 0.45),
    (Kind::Ddp4, 0.25),
    (Kind::Two, 0.15),
    (Kind::One, 0.15),
];

/// Which workload: the mixed one above, or only 1-GPU pods (the shape of
/// kube-scheduler's `scheduler_perf` SchedulingBasic, which measures a
/// scheduler's raw rate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mix {
    Mixed,
    OneGpu,
    /// The mixed workload with a fifth of its single pods in one of 50
    /// services, half with required anti-affinity against their service
    /// per node, half spread over leaves (`DoNotSchedule`, maxSkew 1) and
    /// hostnames (`ScheduleAnyway`): #27's mix with pod rules.
    Rules,
}

/// A pod rule of the `rules` mix: its service and what it states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// Required anti-affinity against its own service per hostname.
    ApartPerNode { service: u32 },
    /// Spread over leaves (hard) and hostnames (soft).
    Spread { service: u32 },
}

/// Services the `rules` mix's pods belong to.
const SERVICES: u64 = 50;

/// Gang sizes (members) and their weights.
const GANG_SIZES: [(u32, u32); 4] = [(2, 4), (4, 3), (8, 2), (16, 1)];

/// SplitMix64: small, seeded, the same everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The workload for a cluster of `nodes` 8-GPU nodes: GPU demand
/// `fill` × capacity, split by [`SHARES`]; gangs of 2 to 16 members (at most
/// a quarter of the nodes); jobs shuffled by `seed`, each gang's members
/// kept together; each name prefixed with its place in that order
/// (`p0042-ddp4-0007`); then `too_big` pods of 9 GPUs, which no node can hold.
pub fn generate(nodes: usize, fill: f64, seed: u64, too_big: usize, mix: Mix) -> Vec<PodPlan> {
    let mut rng = Rng::new(seed);
    let demand = fill * (nodes as f64) * 8.0;
    let shares: &[(Kind, f64)] = match mix {
        Mix::Mixed | Mix::Rules => &SHARES,
        Mix::OneGpu => &[(Kind::Gang, 0.0), (Kind::One, 1.0)],
    };
    let max_gang = ((nodes / 4) as u32).clamp(2, 16);
    let sizes: Vec<(u32, u32)> = GANG_SIZES
        .iter()
        .copied()
        .filter(|(s, _)| *s <= max_gang)
        .collect();
    let total_weight: u32 = sizes.iter().map(|(_, w)| w).sum();
    let mut jobs: Vec<Vec<PodPlan>> = Vec::new();

    // Gangs until the next would overshoot the gang share.
    let gang_target = demand * shares[0].1;
    let mut gang_gpus = 0.0;
    let mut g = 0;
    loop {
        let mut pick = rng.below(u64::from(total_weight)) as u32;
        let mut size = sizes[0].0;
        for (s, w) in &sizes {
            if pick < *w {
                size = *s;
                break;
            }
            pick -= w;
        }
        // Too big for what is left: the largest size that fits, if any.
        let left = gang_target - gang_gpus;
        if f64::from(size * 8) > left {
            match sizes.iter().rev().find(|(s, _)| f64::from(s * 8) <= left) {
                Some((s, _)) => size = *s,
                None => break,
            }
        }
        let gang = format!("gang-{g:03}");
        jobs.push(
            (0..size)
                .map(|m| PodPlan {
                    name: format!("{gang}-{m:02}"),
                    kind: Kind::Gang,
                    gpus: 8,
                    gang: Some((gang.clone(), size)),
                    rule: None,
                })
                .collect(),
        );
        gang_gpus += f64::from(size * 8);
        g += 1;
    }
    for (kind, share) in &shares[1..] {
        let count = (demand * share / f64::from(kind.gpus())).round() as usize;
        let prefix = match kind {
            Kind::Ddp4 => "ddp4",
            Kind::Two => "two",
            _ => "one",
        };
        for i in 0..count {
            // Drawn only for the rules mix, so the others stay as they were.
            let rule = (mix == Mix::Rules && rng.below(5) == 0).then(|| {
                let service = rng.below(SERVICES) as u32;
                if rng.below(2) == 0 {
                    Rule::ApartPerNode { service }
                } else {
                    Rule::Spread { service }
                }
            });
            jobs.push(vec![PodPlan {
                name: format!("{prefix}-{i:04}"),
                kind: *kind,
                gpus: kind.gpus(),
                gang: None,
                rule,
            }]);
        }
    }
    // Fisher-Yates over jobs.
    for i in (1..jobs.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        jobs.swap(i, j);
    }
    // Names start with the submission order, so that every listing (a
    // scheduler's initial LIST, a queue's tie-break by name) keeps it.
    let mut pods: Vec<PodPlan> = jobs.into_iter().flatten().collect();
    for (i, p) in pods.iter_mut().enumerate() {
        p.name = format!("p{i:04}-{}", p.name);
    }
    let n = pods.len();
    pods.extend((0..too_big).map(|i| PodPlan {
        name: format!("p{:04}-too-big-{i}", n + i),
        kind: Kind::TooBig,
        gpus: Kind::TooBig.gpus(),
        gang: None,
        rule: None,
    }));
    pods
}

/// CPU and memory a pod asks per GPU: 10 cores and 96 GiB, so that any mix
/// of pods up to 8 GPUs fits a node's 128 cores and 1 TiB and the GPUs are
/// what runs out (kube-scheduler's default scoring spreads on CPU and memory).
pub const CPU_PER_GPU: u32 = 10;
pub const MEMORY_GIB_PER_GPU: u32 = 96;

/// The pod for `scheduler_name`; every other field is the same for both
/// schedulers (kube-scheduler ignores the `gputopo.dev/` annotations).
pub fn pod(plan: &PodPlan, scheduler_name: &str) -> Pod {
    let mut annotations = BTreeMap::new();
    if plan.gpus > 1 {
        annotations.insert(keys::WORKLOAD, "training".to_string());
    }
    if let Some((gang, size)) = &plan.gang {
        annotations.insert(keys::GANG, gang.clone());
        annotations.insert(keys::GANG_SIZE, size.to_string());
    }
    let kind = serde_json::to_value(plan.kind).unwrap_or_default();
    let mut pod: serde_json::Value = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": plan.name,
            "labels": {"app": "gputopo-sidebyside", "sidebyside/kind": kind},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {
                    "requests": {
                        "cpu": (CPU_PER_GPU * plan.gpus).to_string(),
                        "memory": format!("{}Gi", MEMORY_GIB_PER_GPU * plan.gpus),
                    },
                    "limits": {"nvidia.com/gpu": plan.gpus.to_string()}
                }
            }]
        }
    });
    if let Some(rule) = plan.rule {
        add_rule(&mut pod, rule);
    }
    serde_json::from_value(pod).expect("a valid pod")
}

/// The rule's service label and what it states, on a pod's JSON.
fn add_rule(pod: &mut serde_json::Value, rule: Rule) {
    let (Rule::ApartPerNode { service } | Rule::Spread { service }) = rule;
    let svc = format!("svc-{service}");
    pod["metadata"]["labels"]["svc"] = json!(svc);
    let selector = json!({"matchLabels": {"svc": svc}});
    match rule {
        Rule::ApartPerNode { .. } => {
            pod["spec"]["affinity"] = json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
            ]}});
        }
        Rule::Spread { .. } => {
            pod["spec"]["topologySpreadConstraints"] = json!([
                {"maxSkew": 1, "topologyKey": "gputopo.dev/leaf",
                 "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector},
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                 "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}
            ]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_close_to_the_demand() {
        let a = generate(1000, 0.9, 42, 0, Mix::Mixed);
        let b = generate(1000, 0.9, 42, 0, Mix::Mixed);
        assert_eq!(
            a.iter().map(|p| &p.name).collect::<Vec<_>>(),
            b.iter().map(|p| &p.name).collect::<Vec<_>>()
        );
        let gpus: u32 = a.iter().map(|p| p.gpus).sum();
        assert!((7000..=7300).contains(&gpus), "{gpus}");
        // Gang members are contiguous and complete.
        let mut i = 0;
        while i < a.len() {
            if let Some((g, size)) = &a[i].gang {
                for m in 0..*size as usize {
                    assert_eq!(a[i + m].gang.as_ref().map(|x| &x.0), Some(g));
                }
                i += *size as usize;
            } else {
                i += 1;
            }
        }
    }

    #[test]
    fn one_gpu_is_the_same_demand_in_single_gpus() {
        let w = generate(1000, 0.9, 42, 0, Mix::OneGpu);
        assert_eq!(w.len(), 7200);
        assert!(
            w.iter()
                .all(|p| p.gpus == 1 && p.gang.is_none() && p.kind == Kind::One)
        );
    }

    #[test]
    fn the_rules_mix_is_the_mixed_one_with_a_fifth_of_single_pods_ruled() {
        let mixed = generate(1000, 0.9, 42, 0, Mix::Mixed);
        let ruled = generate(1000, 0.9, 42, 0, Mix::Rules);
        assert!(mixed.iter().all(|p| p.rule.is_none()));
        let singles = ruled.iter().filter(|p| p.gang.is_none()).count();
        let with_rules = ruled.iter().filter(|p| p.rule.is_some()).count();
        assert!(
            (singles / 7..=singles / 3).contains(&with_rules),
            "{with_rules} of {singles}"
        );
        assert!(ruled.iter().all(|p| p.gang.is_none() || p.rule.is_none()));
        let p = ruled
            .iter()
            .find(|p| p.rule.is_some())
            .expect("a ruled pod");
        let spec = pod(p, "x").spec.expect("a spec");
        assert!(spec.affinity.is_some() || spec.topology_spread_constraints.is_some());
    }

    #[test]
    fn small_cluster() {
        let w = generate(12, 0.4, 7, 1, Mix::Mixed);
        assert_eq!(w.last().map(|p| p.gpus), Some(9));
        assert!(w.iter().all(|p| p.gang.as_ref().is_none_or(|g| g.1 <= 3)));
        assert!(w.len() >= 8 && w.len() <= 20, "{}", w.len());
        let p = pod(&w[0], "x");
        assert_eq!(p.spec.unwrap().scheduler_name.as_deref(), Some("x"));
    }
}
