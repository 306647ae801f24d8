//! The workload: its pods, and [`arrival_plan`]: resampled to `--inflate`
//! and put in arrival order (`load.rs` reads it from a file).

use super::rng::{below, shuffle, streams};
use super::{Order, SimError, SimOptions};
use std::collections::BTreeMap;

/// A pod of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SimPod {
    pub name: String,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// GPUs: whole ones, or 1 with `gpu_milli < 1000` for a share.
    pub num_gpu: u32,
    /// Milli per GPU (1000 whole; 0 for a CPU-only pod).
    pub gpu_milli: u32,
    /// Allowed GPU models as a [`Models`](super::Models) mask; 0: any.
    pub models: u64,
    /// Seconds from the start.
    pub arrival: f64,
    /// Seconds it runs once placed; `None`: until the end.
    pub duration: Option<f64>,
    /// Index into [`Workload::gangs`].
    pub gang: Option<u32>,
}

impl SimPod {
    /// GPU demand in milli-GPU.
    pub fn demand(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    pub fn is_share(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < 1000
    }
}

/// Pods and the names of their gangs.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    pub pods: Vec<SimPod>,
    pub gangs: Vec<String>,
}

/// The arrival units: pod indices, a gang's members together.
fn units(pods: &[SimPod]) -> Vec<Vec<usize>> {
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut gang_unit: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        match p.gang {
            Some(g) => match gang_unit.get(&g) {
                Some(&u) => units[u].push(i),
                None => {
                    gang_unit.insert(g, units.len());
                    units.push(vec![i]);
                }
            },
            None => units.push(vec![i]),
        }
    }
    units
}

/// The workload as it will arrive: resampled to `inflate` × capacity and
/// ordered. The same for every policy at one seed.
pub fn arrival_plan(
    workload: &Workload,
    total_milli: u64,
    options: &SimOptions,
) -> Result<(Vec<SimPod>, Vec<Vec<usize>>), SimError> {
    let (mut rng, _) = streams(options.seed);
    let mut pods = workload.pods.clone();
    if pods.is_empty() {
        return Err(SimError::EmptyWorkload);
    }
    if let Some(x) = options.inflate {
        if !(x.is_finite() && x >= 1.0) {
            return Err(SimError::Inflate(x));
        }
        let target = (x * total_milli as f64).round() as u64;
        let mut demand: u64 = pods.iter().map(SimPod::demand).sum();
        let originals = workload.pods.len();
        let gpu_pods = workload.pods.iter().any(|p| p.demand() > 0);
        let mut k = 0u64;
        // Only solo pods are resampled: a gang is copied whole or not at all
        // would need renumbering; openb traces have no gangs.
        while gpu_pods && demand < target {
            let p = &workload.pods[below(&mut rng, originals)];
            if p.gang.is_some() {
                continue;
            }
            k += 1;
            let mut copy = p.clone();
            copy.name = format!("{}-clone-{k}", p.name);
            demand += copy.demand();
            pods.push(copy);
        }
    }
    let mut units = units(&pods);
    match options.order {
        Order::Shuffle => {
            // The trace's own pods in random order, then the copies in the
            // order they were drawn (already random): as the FGD simulator
            // does (it shuffles the pod list, then appends the copies).
            let originals = workload.pods.len();
            let copies = units.iter().position(|u| u[0] >= originals);
            let end = copies.unwrap_or(units.len());
            shuffle(&mut rng, &mut units[..end]);
        }
        Order::Arrival => units.sort_by(|a, b| pods[a[0]].arrival.total_cmp(&pods[b[0]].arrival)),
    }
    Ok((pods, units))
}
