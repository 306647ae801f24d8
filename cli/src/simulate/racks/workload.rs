//! The workload: structured training gangs, unconstrained multi-node jobs
//! and inference pods, arriving as three seeded Poisson streams, with
//! log-normal durations (the mix is in the module docs of [`super`]).

use super::fabric::{Fabric, LEAF, SPINE};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// What a unit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitKind {
    /// A training gang: members, in rank order, cut into slices of `slice`
    /// each required inside one rack; the whole gang preferred inside one
    /// domain of tier `preferred`.
    Structured { slice: u32, preferred: usize },
    /// A multi-node job with no topology constraint (all or nothing).
    Multi,
    /// One inference pod.
    Pod,
}

/// One arrival: a pod, or a gang's members together.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    pub id: usize,
    /// Index into [`Workload::classes`].
    pub class: usize,
    pub kind: UnitKind,
    pub members: u32,
    /// GPUs per member.
    pub gpus: u32,
    /// Seconds from the start.
    pub arrival: u64,
    pub duration: u64,
}

impl Unit {
    pub fn is_gang(&self) -> bool {
        !matches!(self.kind, UnitKind::Pod)
    }
}

/// A kind of unit in the mix.
#[derive(Clone, Debug, PartialEq)]
pub struct Class {
    pub name: String,
    pub kind: UnitKind,
    pub members: u32,
    pub gpus: u32,
    /// Share of its family's arrivals.
    pub weight: f64,
}

/// The arrivals of one run.
#[derive(Clone, Debug)]
pub struct Workload {
    pub classes: Vec<Class>,
    pub units: Vec<Unit>,
    /// Offered load: GPU-hours asked per hour over the cluster's GPUs.
    pub load: f64,
    /// Arrivals happen in `[0, horizon)` seconds.
    pub horizon: u64,
}

/// A family: one Poisson stream, its share of the offered GPU-hours and
/// its log-normal duration (median hours, sigma).
struct Family {
    share: f64,
    median_h: f64,
    sigma: f64,
    classes: Vec<Class>,
}

fn structured(members: u32, slice: u32, preferred: usize, weight: f64) -> Class {
    let tier = if preferred == SPINE { "spine" } else { "leaf" };
    Class {
        name: format!("train-{members} ({}×{slice}, {tier})", members / slice),
        kind: UnitKind::Structured { slice, preferred },
        members,
        gpus: 4,
        weight,
    }
}

fn families() -> Vec<Family> {
    let multi = (2..=8u32)
        .map(|m| Class {
            name: format!("multi-{m}"),
            kind: UnitKind::Multi,
            members: m,
            gpus: 4,
            weight: 1.0,
        })
        .collect();
    let pods = [(1u32, 4.0), (2, 3.0), (3, 1.0), (4, 2.0)]
        .into_iter()
        .map(|(gpus, weight)| Class {
            name: format!("pod-{gpus}gpu"),
            kind: UnitKind::Pod,
            members: 1,
            gpus,
            weight,
        })
        .collect();
    vec![
        Family {
            share: 0.60,
            median_h: 4.0,
            sigma: 0.75,
            classes: vec![
                structured(16, 4, LEAF, 4.0),
                structured(32, 8, LEAF, 3.0),
                structured(64, 16, LEAF, 2.0),
                structured(128, 16, SPINE, 1.0),
            ],
        },
        Family {
            share: 0.15,
            median_h: 2.0,
            sigma: 0.75,
            classes: multi,
        },
        Family {
            share: 0.25,
            median_h: 1.0,
            sigma: 1.0,
            classes: pods,
        },
    ]
}

/// Whether an empty fabric holds `class` (its slices whole, in racks).
fn fits_empty(fabric: &Fabric, class: &Class) -> bool {
    let per_rack = fabric.size.nodes_per_rack as u32;
    match class.kind {
        UnitKind::Structured { slice, .. } => {
            slice <= per_rack
                && fabric.size.racks as u32 * (per_rack / slice) >= class.members / slice
        }
        UnitKind::Multi => class.members as usize <= fabric.nodes(),
        UnitKind::Pod => class.gpus <= fabric.size.gpus_per_node,
    }
}

fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Exponential with `rate` per second.
fn exponential(rng: &mut ChaCha8Rng, rate: f64) -> f64 {
    -(1.0 - uniform(rng)).ln() / rate
}

/// Standard normal (Box–Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = 1.0 - uniform(rng);
    let u2 = uniform(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn pick(rng: &mut ChaCha8Rng, classes: &[Class]) -> usize {
    let total: f64 = classes.iter().map(|c| c.weight).sum();
    let mut x = uniform(rng) * total;
    for (i, c) in classes.iter().enumerate() {
        if x < c.weight {
            return i;
        }
        x -= c.weight;
    }
    classes.len() - 1
}

/// The arrivals over `hours` at offered `load`, from `seed` (the same for
/// every policy). Classes an empty fabric cannot hold are left out.
pub fn generate(fabric: &Fabric, load: f64, hours: f64, seed: u64) -> Workload {
    let horizon = (hours * 3600.0) as u64;
    let mut classes = Vec::new();
    let mut units = Vec::new();
    for (f, mut family) in families().into_iter().enumerate() {
        family.classes.retain(|c| fits_empty(fabric, c));
        if family.classes.is_empty() {
            continue;
        }
        let first = classes.len();
        classes.extend(family.classes.iter().cloned());
        let total: f64 = family.classes.iter().map(|c| c.weight).sum();
        let mean_gpus: f64 = family
            .classes
            .iter()
            .map(|c| c.weight / total * f64::from(c.members * c.gpus))
            .sum();
        let mean_h = family.median_h * (family.sigma * family.sigma / 2.0).exp();
        // Units per second so that this family asks `share` of the load.
        let rate = family.share * load * f64::from(fabric.gpus()) / (mean_gpus * mean_h * 3600.0);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (0xA5A5_0000_0000_0000 + f as u64));
        let mut t = 0.0;
        loop {
            t += exponential(&mut rng, rate);
            if t >= horizon as f64 {
                break;
            }
            let c = pick(&mut rng, &family.classes);
            let class = &family.classes[c];
            let hours = family.median_h * (family.sigma * normal(&mut rng)).exp();
            let duration = (hours * 3600.0).clamp(60.0, 7.0 * 86_400.0) as u64;
            units.push(Unit {
                id: 0,
                class: first + c,
                kind: class.kind,
                members: class.members,
                gpus: class.gpus,
                arrival: t as u64,
                duration,
            });
        }
    }
    units.sort_by_key(|u| (u.arrival, u.class));
    for (i, u) in units.iter_mut().enumerate() {
        u.id = i;
    }
    Workload {
        classes,
        units,
        load,
        horizon,
    }
}
