//! Two of kube-scheduler's default scores that read the node, not the
//! pod's wishes: NodeResourcesBalancedAllocation (the node's resources used
//! alike) and ImageLocality (the pod's images already on the node). Each is
//! upstream's 0–100 plugin score (Kubernetes 1.37), as a 0–1 part.

use crate::config::balanced::MAX_RESOURCES;
use crate::filter::PodContext;
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, UNLIMITED};
use crate::snapshot::Amounts;
use crate::snapshot::intern::Sym;
use gputopo_api::keys::RESOURCE_GPU;

const MB: i64 = 1024 * 1024;
/// Below this much image already there, no node is preferred.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per image the pod pulls, what counts at most.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// One configured resource as the snapshot stores it.
#[derive(Clone, Copy)]
enum Amount {
    Cpu,
    Memory,
    EphemeralStorage,
    Gpus,
    /// An extended resource; `None` when no node has it.
    Extended(Option<Sym>),
}

impl Amount {
    /// Allocatable and requested on the node, from its digest where it
    /// holds them (cpu, memory: no read of the full node record).
    fn on(self, ctx: &PodContext<'_>, index: usize) -> (i64, i64) {
        let hot = &ctx.snapshot.hot[index];
        match self {
            Amount::Cpu => (
                hot.cpu_milli,
                hot.cpu_milli.saturating_sub(hot.free_cpu_milli),
            ),
            Amount::Memory => (hot.memory, hot.memory.saturating_sub(hot.free_memory)),
            _ => {
                let node = &ctx.snapshot.nodes[index];
                (self.of(&node.allocatable), self.of(&node.requested))
            }
        }
    }

    fn of(self, amounts: &Amounts) -> i64 {
        match self {
            Amount::Cpu => amounts.cpu_milli,
            Amount::Memory => amounts.memory,
            Amount::EphemeralStorage => amounts.ephemeral_storage,
            Amount::Gpus => amounts.gpus,
            Amount::Extended(sym) => sym.map_or(0, |s| amounts.extended(s)),
        }
    }
}

/// BalancedAllocation for one decision: the configured resources the pod
/// brings (an extended one only when the pod requests it), with its requests.
pub(super) struct Balanced {
    resources: Vec<(Amount, i64)>,
}

impl Balanced {
    /// `None` for a pod requesting none of the configured resources: upstream
    /// skips best-effort pods, so that they do not all crowd one node.
    pub(super) fn of(ctx: &PodContext<'_>) -> Option<Balanced> {
        let requests = &ctx.pod.requests;
        let mut any = false;
        let mut resources = Vec::new();
        for name in ctx.config.balanced_resources.names() {
            let request = requests.get(name);
            any |= request != 0;
            let amount = match name.as_str() {
                CPU => Amount::Cpu,
                MEMORY => Amount::Memory,
                EPHEMERAL_STORAGE => Amount::EphemeralStorage,
                // Scalar resources count only when requested, as upstream.
                _ if request == 0 => continue,
                RESOURCE_GPU => Amount::Gpus,
                other => Amount::Extended(ctx.snapshot.strings.get(other)),
            };
            resources.push((amount, request));
        }
        any.then_some(Balanced { resources })
    }

    /// How much placing the pod improves the balance of the node's use:
    /// `(1 − std of the used fractions)·100` after and before placement
    /// (each fraction of allocatable, at most 1; a resource the node does
    /// not state left out), blended as upstream: `50 + (50 + after −
    /// before) / 2`, so 75 when the balance is unchanged.
    pub(super) fn score(&self, ctx: &PodContext<'_>, index: usize) -> f64 {
        // On the stack: this runs once per feasible node.
        let mut with_pod = [0.0f64; MAX_RESOURCES];
        let mut without = [0.0f64; MAX_RESOURCES];
        let mut n = 0;
        for &(amount, request) in self.resources.iter().take(MAX_RESOURCES) {
            let (allocatable, used) = amount.on(ctx, index);
            if allocatable <= 0 || allocatable == UNLIMITED {
                continue;
            }
            let fraction = |used: i64| (used as f64 / allocatable as f64).min(1.0);
            with_pod[n] = fraction(used.saturating_add(request));
            without[n] = fraction(used);
            n += 1;
        }
        // Integer steps, truncating toward zero, as upstream's Go does.
        let score = 50 + (50 + balance(&with_pod[..n]) - balance(&without[..n])) / 2;
        score as f64 / 100.0
    }
}

/// `(1 − std of the fractions) · 100`, truncated (two resources: half
/// their difference, as upstream computes it).
fn balance(fractions: &[f64]) -> i64 {
    let std = match *fractions {
        [] | [_] => 0.0,
        [a, b] => ((a - b) / 2.0).abs(),
        _ => {
            let n = fractions.len() as f64;
            let mean = fractions.iter().sum::<f64>() / n;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n)
                .sqrt()
        }
    };
    ((1.0 - std) * 100.0) as i64
}

/// The pod's images as the snapshot names them, per decision.
pub(super) struct PodImages {
    /// Per image the pod pulls: its symbol, `None` for a name no node holds.
    names: Vec<Option<Sym>>,
}

impl PodImages {
    /// `None` when no node holds any of the pod's images: the part would be
    /// 0 everywhere and is left out.
    pub(super) fn of(ctx: &PodContext<'_>) -> Option<PodImages> {
        let snapshot = ctx.snapshot;
        let names: Vec<Option<Sym>> = ctx
            .pod
            .images
            .iter()
            .map(|i| {
                snapshot
                    .strings
                    .get(i)
                    .filter(|s| snapshot.image_nodes(*s) > 0)
            })
            .collect();
        names
            .iter()
            .any(Option::is_some)
            .then_some(PodImages { names })
    }

    /// ImageLocality: the sizes of the pod's images the node holds, each
    /// scaled by the share of nodes holding it (an image everywhere says
    /// little), clamped to 23 MB – 1000 MB per image and scaled to 0–100.
    pub(super) fn score(&self, ctx: &PodContext<'_>, index: usize) -> f64 {
        let snapshot = ctx.snapshot;
        let node = &snapshot.nodes[index];
        let total_nodes = snapshot.len().max(1) as f64;
        let sum: i64 = self
            .names
            .iter()
            .flatten()
            .filter_map(|s| {
                let i = node.images.binary_search_by_key(s, |(n, _)| *n).ok()?;
                let spread = f64::from(snapshot.image_nodes(*s)) / total_nodes;
                Some((node.images[i].1 as f64 * spread) as i64)
            })
            .sum();
        let max = MAX_CONTAINER_THRESHOLD * self.names.len() as i64;
        let sum = sum.clamp(MIN_THRESHOLD, max);
        (100 * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)) as f64 / 100.0
    }
}
