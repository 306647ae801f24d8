//! One node replaying a stream: scheduler-core chooses each pod's GPUs on
//! the node's free set (the scheduler's real choice), then the "kubelet"
//! admits the pods of a burst one by one and a rule picks the devices among
//! those still available. The scheduler's next choices see the devices
//! pods really got (gputopo follows the kubelet's PodResources reading).
//! Pods another scheduler placed have no choice; they are admitted among
//! the others, and whatever they get is measured against the best set
//! available then and against the sets waiting placed pods were given.

use super::machines::Machine;
use super::workload::{Event, Stream};
use gputopo_api::{Collective, LinkClass};
use gputopo_device_plugin::choose::{AssignedPod, Outcome, PodRef, Request, prefer};
use gputopo_scheduler_core::gpuset::SetRequest;
use k8s_openapi::jiff::Timestamp;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// Who picks the devices at admission.
#[derive(Clone, Copy, Debug)]
pub enum Rule {
    /// NVIDIA's device plugin (go-gpuallocator's best effort).
    Nvidia,
    /// gputopo's plugin (`prefer`, from the pending pods' assignments).
    Gputopo,
}

#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Pods gputopo placed.
    pub pods: u64,
    /// The devices are exactly the scheduler's choice.
    pub equal: u64,
    /// The set's weakest link is a worse class than the choice's.
    pub worse: u64,
    /// Pods another scheduler placed.
    pub unplaced: u64,
    /// ...whose set's weakest link is worse than the best set available.
    pub unplaced_worse: u64,
    /// ...that got a GPU chosen for a placed pod not yet admitted.
    pub took_chosen: u64,
    /// gputopo's `prefer` outcomes, by metric label.
    pub outcomes: BTreeMap<&'static str, u64>,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.pods += other.pods;
        self.equal += other.equal;
        self.worse += other.worse;
        self.unplaced += other.unplaced;
        self.unplaced_worse += other.unplaced_worse;
        self.took_chosen += other.took_chosen;
        for (k, v) in &other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
    }
}

fn bits(mask: u32) -> impl Iterator<Item = u32> {
    (0..32).filter(move |i| mask & (1 << i) != 0)
}

/// The weakest link among the set's pairs; None for one GPU.
fn weakest(machine: &Machine, set: u32) -> Option<LinkClass> {
    let gpus: Vec<u32> = bits(set).collect();
    let mut weakest = None;
    for (i, &a) in gpus.iter().enumerate() {
        for &b in &gpus[i + 1..] {
            let link = machine
                .shape
                .link(a, b)
                .expect("a link between listed GPUs");
            weakest = Some(weakest.map_or(link, |w: LinkClass| w.min(link)));
        }
    }
    weakest
}

pub fn replay(machine: &Machine, stream: &Stream, rule: Rule, seed: u64) -> Tally {
    // The kubelet's Go map order of the available devices (NVIDIA's ties).
    let mut order_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5DEE_CE66_D1CE_5EED);
    let all = machine.shape.gpus_mask();
    let mut allocated = 0u32;
    let mut held: BTreeMap<u32, u32> = BTreeMap::new();
    let mut tally = Tally::default();
    for event in &stream.events {
        let (pods, admitted) = match event {
            Event::Finish { id } => {
                allocated &= !held.remove(id).unwrap_or(0);
                continue;
            }
            Event::Burst { pods, admitted } => (pods, admitted),
        };
        // The scheduler places the burst in creation order, each choice
        // taken out of the free GPUs the next one sees.
        let mut chosen: Vec<Option<u32>> = Vec::with_capacity(pods.len());
        let mut taken = allocated;
        for pod in pods {
            if !pod.placed {
                chosen.push(None);
                continue;
            }
            let request = SetRequest::new(pod.size, Collective::default());
            let pick = machine
                .shape
                .pick(all & !taken, &request)
                .expect("the stream only sends pods that fit");
            taken |= pick.gpus;
            chosen.push(Some(pick.gpus));
        }
        let claim = |i: usize| AssignedPod {
            pod: PodRef {
                namespace: "bench".into(),
                name: format!("pod-{}", pods[i].id),
                uid: pods[i].id.to_string(),
            },
            created: Some(Timestamp::from_second(i64::from(pods[i].id)).expect("a time")),
            assigned: bits(chosen[i].expect("a placed pod"))
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(","),
        };
        for (n, &i) in admitted.iter().enumerate() {
            let size = pods[i].size;
            let available: Vec<u32> = bits(all & !allocated).collect();
            let got = match rule {
                Rule::Nvidia => {
                    let mut listed = available.clone();
                    for j in (1..listed.len()).rev() {
                        let k = (order_rng.next_u64() % (j as u64 + 1)) as usize;
                        listed.swap(j, k);
                    }
                    machine
                        .nvidia
                        .best_effort(&listed, size as usize)
                        .iter()
                        .fold(0, |m, g| m | (1 << g))
                }
                Rule::Gputopo => {
                    // Every pod of the burst is still Pending (admitted ones
                    // start their containers later): all are assignments.
                    let claims: Vec<AssignedPod> = (0..pods.len())
                        .filter(|&j| pods[j].placed)
                        .map(claim)
                        .collect();
                    let uuid = |g: u32| machine.inventory.uuid_of(g).expect("a GPU").to_string();
                    let request = Request {
                        available: available.iter().map(|&g| uuid(g)).collect(),
                        must_include: Vec::new(),
                        size: size as i32,
                    };
                    let preference =
                        prefer(&machine.inventory, &claims, &request).expect("a valid request");
                    *tally
                        .outcomes
                        .entry(preference.outcome.metric_label())
                        .or_default() += 1;
                    let preferred = preference.devices.iter().fold(0u32, |m, d| {
                        m | 1 << machine.inventory.index_of(d).expect("an advertised GPU")
                    });
                    if matches!(preference.outcome, Outcome::None { .. }) {
                        // No preference: the kubelet takes the first available.
                        available
                            .iter()
                            .take(size as usize)
                            .fold(0, |m, g| m | (1 << g))
                    } else {
                        preferred
                    }
                }
            };
            assert_eq!(got.count_ones(), size, "{rule:?} gave a wrong count");
            assert_eq!(got & allocated, 0, "{rule:?} gave an allocated GPU");
            match chosen[i] {
                Some(choice) => {
                    tally.pods += 1;
                    if got == choice {
                        tally.equal += 1;
                    }
                    if let (Some(c), Some(g)) = (weakest(machine, choice), weakest(machine, got))
                        && g < c
                    {
                        tally.worse += 1;
                    }
                }
                None => {
                    tally.unplaced += 1;
                    let request = SetRequest::new(size, Collective::default());
                    let best = machine
                        .shape
                        .pick(all & !allocated, &request)
                        .expect("the pod fits")
                        .gpus;
                    if let (Some(b), Some(g)) = (weakest(machine, best), weakest(machine, got))
                        && g < b
                    {
                        tally.unplaced_worse += 1;
                    }
                    let waiting = admitted[n + 1..]
                        .iter()
                        .filter_map(|&j| chosen[j])
                        .fold(0, |m, c| m | c);
                    if got & waiting != 0 {
                        tally.took_chosen += 1;
                    }
                }
            }
            allocated |= got;
            held.insert(pods[i].id, got);
        }
    }
    tally
}
