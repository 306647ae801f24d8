//! A seeded stream of pods arriving and finishing on one node, decided by
//! GPU counts only, so that both kubelet rules replay the very same stream.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// Sizes and their weights: mostly small pods, some whole-board ones.
const SIZES: [(u32, u32); 4] = [(1, 40), (2, 30), (4, 20), (8, 10)];
/// The node is kept between these shares of its GPUs busy.
pub const LOW: f64 = 0.6;
pub const HIGH: f64 = 0.9;

#[derive(Clone, Debug)]
pub struct Pod {
    /// Creation order.
    pub id: u32,
    pub size: u32,
    /// Placed by gputopo (it carries `gputopo.dev/assigned-gpus`); else
    /// bound by another scheduler, with no record.
    pub placed: bool,
}

#[derive(Clone, Debug)]
pub enum Event {
    /// Pods created and bound together, before the kubelet admits any; the
    /// order in which the kubelet admits them (indices into the burst).
    Burst {
        pods: Vec<Pod>,
        admitted: Vec<usize>,
    },
    /// A running pod ends.
    Finish { id: u32 },
}

pub struct Stream {
    pub events: Vec<Event>,
    /// Mean share of GPUs busy once a burst is placed.
    pub mean_busy: f64,
}

fn below(rng: &mut ChaCha8Rng, n: u32) -> u32 {
    (rng.next_u64() % u64::from(n)) as u32
}

/// How a stream is drawn, beside its node's size, length and seed.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// The probability that the kubelet admits a burst of several pods in a
    /// random order (e.g. pods bound after a retry), else in creation order.
    pub out_of_order: f64,
    /// The share of pods another scheduler placed (no gputopo record).
    pub unplaced: f64,
}

fn chance(rng: &mut ChaCha8Rng) -> f64 {
    rng.next_u64() as f64 / u64::MAX as f64
}

/// `pods` arrivals on a node of `gpus`, drawn as `mix` says.
pub fn stream(gpus: u32, pods: u32, seed: u64, mix: Mix) -> Stream {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sizes: Vec<(u32, u32)> = SIZES.iter().copied().filter(|(s, _)| *s <= gpus).collect();
    let total_weight: u32 = sizes.iter().map(|(_, w)| w).sum();
    let draw = |rng: &mut ChaCha8Rng| {
        let mut r = below(rng, total_weight);
        for (size, weight) in &sizes {
            if r < *weight {
                return *size;
            }
            r -= weight;
        }
        unreachable!("weights sum to total_weight")
    };
    let (low, high) = (LOW * f64::from(gpus), HIGH * f64::from(gpus));
    let mut running: Vec<Pod> = Vec::new();
    let mut used = 0u32;
    let mut events = Vec::new();
    let (mut next_id, mut busy_sum, mut bursts) = (0u32, 0.0, 0u32);
    while next_id < pods {
        // Finish pods: always above the band, half the time within it.
        while !running.is_empty()
            && (f64::from(used) > high || (f64::from(used) >= low && below(&mut rng, 2) == 0))
        {
            let pod = running.remove(below(&mut rng, running.len() as u32) as usize);
            used -= pod.size;
            events.push(Event::Finish { id: pod.id });
            if f64::from(used) < low {
                break;
            }
        }
        let wanted = 1 + below(&mut rng, 3);
        let mut burst = Vec::new();
        for _ in 0..wanted {
            let size = draw(&mut rng);
            if used + size > gpus {
                break;
            }
            used += size;
            // No draw without unplaced pods: such streams stay as they were.
            let placed = mix.unplaced == 0.0 || chance(&mut rng) >= mix.unplaced;
            burst.push(Pod {
                id: next_id,
                size,
                placed,
            });
            next_id += 1;
        }
        if burst.is_empty() {
            if !running.is_empty() {
                let pod = running.remove(below(&mut rng, running.len() as u32) as usize);
                used -= pod.size;
                events.push(Event::Finish { id: pod.id });
            }
            continue;
        }
        busy_sum += f64::from(used) / f64::from(gpus);
        bursts += 1;
        let mut admitted: Vec<usize> = (0..burst.len()).collect();
        let shuffle = burst.len() > 1 && chance(&mut rng) < mix.out_of_order;
        if shuffle {
            // Fisher-Yates; redrawn until the order differs from creation order.
            while admitted.windows(2).all(|w| w[0] < w[1]) {
                for i in (1..admitted.len()).rev() {
                    admitted.swap(i, below(&mut rng, i as u32 + 1) as usize);
                }
            }
        }
        running.extend(burst.iter().cloned());
        events.push(Event::Burst {
            pods: burst,
            admitted,
        });
    }
    Stream {
        events,
        mean_busy: busy_sum / f64::from(bursts.max(1)),
    }
}
