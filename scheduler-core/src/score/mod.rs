//! The score of a feasible node, 0–100.
//!
//! # Formula
//!
//! `score = round(100 · Σ wᵢ·pᵢ / Σ wᵢ)` over the parts that apply to the pod
//! (each part `pᵢ` is 0–1; weights are [`ScoreWeights`], defaults in
//! parentheses). Whether a part applies depends on the pod and the cluster, never
//! on the node, so every node of one decision is scored on the same parts.
//!
//! * **GPU set** (default 40), whole-GPU pods: the mean of the set's own `gpuset`
//!   score (bottleneck against the best of *this* node, what the placement
//!   leaves connected, NUMA span) and its bottleneck rank against the best
//!   bottleneck any node model of the cluster offers `k` GPUs; so a better
//!   wired node wins when all else is equal, and on one model the set that
//!   fragments least wins. A node without `GpuTopology` scores 0 here.
//! * **Allocation** (default 20), always (but see fragmentation):
//!   `0.5 + s·(u − 0.5)` where `u` is how busy the node is after placement
//!   (GPUs held or shared, fractional shares counted by ‰; for a pod without
//!   GPUs the mean of cpu and memory), averaged
//!   with how busy its innermost network domain is (GPU pods); `s` is `+1`
//!   for `consolidated` (bin-pack: prefer busy nodes and domains), `+0.5` for
//!   `balanced` (the default: lean to packing, since empty nodes are what
//!   8-GPU and gang jobs need) and `−1` for `distributed` (least allocated).
//! * **Domain fit** (default 15), GPU pods other than `distributed` ones,
//!   on clusters where some network tier has two domains with GPUs: best
//!   fit at the level of network domains, every tier, the innermost
//!   counting most; a domain already in use (the fullest, in GPUs left,
//!   first) before an untouched one, so whole domains stay free for gangs
//!   (`domain_fit.rs`).
//! * **Keep GPUs free** (default 40), pods asking no GPU, share, MIG slice
//!   or claim and naming no preferred domain, on clusters with nodes both
//!   with and without GPUs: 1 on a node without GPUs, `0.5·(1 − f/F)` on
//!   a GPU node (`f` its free GPUs, `F` the most any node has), so a Ray
//!   head goes to a CPU node when one fits (`keep_gpus_free.rs`).
//! * **Memory fit** (default 15), shared pods and inference pods with `gpu-memory`: the
//!   GPU's memory use after placement against the target band (70–80 %):
//!   1 inside, falling linearly to 0 at an empty or a full GPU.
//! * **Interference** (default 15), training pods: `1/(1 + inference pods on the
//!   node)` (isolation); latency-sensitive pods: `1/(1 + training pods)`.
//! * **Preferred domain** (default 10), pods with `preferred-domain`: 1 when the node
//!   lies in a domain of that name at any tier, else 0.
//! * **Cost** (default 10), clusters where some node has `gputopo.dev/cost-per-hour` or
//!   is spot: `1 − (price − cheapest) / (dearest − cheapest)`; an unpriced
//!   node 0.5, an unpriced spot node 1. Spot nodes score 0 for training and
//!   gang pods: an interruption costs them more than the discount saves.
//! * **Node preference** (default 5), clusters with `PreferNoSchedule` taints:
//!   `1/(1 + untolerated PreferNoSchedule taints)`.
//! * **Generation** (default 10), when the configuration prefers the newest
//!   or the oldest GPUs ([`crate::config::GenerationPreference`]) and the
//!   cluster's nodes differ in GPU generation, for GPU pods:
//!   `(g − oldest) / (newest − oldest)` for `newest`, one minus that for
//!   `oldest`; a node of unknown generation 0.5.
//! * **Balanced allocation** (default 5), pods requesting cpu or memory:
//!   kube-scheduler's NodeResourcesBalancedAllocation, whether placement
//!   brings the node's cpu and memory use closer (`node_resources.rs`).
//! * **Image locality** (default 10), when some node holds one of the pod's
//!   images: kube-scheduler's ImageLocality, the pod's images already on
//!   the node by size, discounted by how many nodes hold them. Both weigh
//!   below the GPU parts: the GPUs' wiring lasts the job, a pull happens once.
//! * **Fragmentation** (default 1000), when the configuration names a target
//!   workload ([`crate::config::SchedulerConfig::target_workload`]):
//!   `⌊100 / (1 + e^{Δ/1000})⌋ / 100` where `Δ` is the change placement makes
//!   to the node's FGD fragmentation in milli-GPU ([`crate::fragmentation`]):
//!   0.5 when it leaves the free GPU as usable as it was, more when it uses up
//!   GPU the expected pods could not have used, less when it strands some.
//!   It moves in whole points, as FGD's score does: a change of less than
//!   about 40 milli-GPU is no reason to prefer a node, and the other parts
//!   and then the node name decide among nodes it rates alike (on the openb
//!   default trace the exact value allocates 93.7 % at 100 % arrived, whole
//!   points 95.3 %, FGD 95.3 %). With the default weight one point weighs
//!   10, a quarter of the GPU-set part's range, so fragmentation leads.
//!   With a target workload, two parts step aside for it: allocation for
//!   `balanced` pods (the measure already says when packing pays; an
//!   explicit `consolidated` or `distributed` still counts) and memory fit
//!   for shares asked in thousandths (their GPU is the one that strands
//!   least; shares asked in memory and inference pods with `gpu-memory` keep
//!   it). Without a target workload the part is left out and nothing else
//!   changes.
//!
//! Nodes are compared on the unrounded total, then by name.

mod domain_fit;
mod keep_gpus_free;
mod node_parts;
mod node_resources;
mod preferences;

use node_parts::{fragmentation_part, smallest_memory};

use crate::config::{GenerationPreference, ScoreWeights};
use crate::filter::{Fit, PodContext};
use crate::snapshot::Hot;
use gputopo_api::{GpuShare, LinkClass, PlacementStrategy, WorkloadKind};
use std::fmt;

/// A feasible node's score, part by part: each 0–1, `None` when the part
/// does not apply to this pod.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreParts {
    pub gpu_set: Option<f64>,
    pub allocation: f64,
    /// Best fit among network domains (`domain_fit.rs`).
    pub domain_fit: Option<f64>,
    /// Pods without GPUs kept off GPU nodes (`keep_gpus_free.rs`).
    pub keep_gpus_free: Option<f64>,
    pub memory_fit: Option<f64>,
    pub interference: Option<f64>,
    pub preferred_domain: Option<f64>,
    pub cost: Option<f64>,
    pub node_preference: Option<f64>,
    pub fragmentation: Option<f64>,
    pub generation: Option<f64>,
    pub balanced_allocation: Option<f64>,
    pub image_locality: Option<f64>,
    /// What the pod prefers, as kube-scheduler scores it (`preferences.rs`).
    pub pod_preferences: Option<f64>,
    /// The weighted mean, 0–1, before rounding.
    pub total: f64,
}

impl ScoreParts {
    /// 0–100.
    pub fn score(&self) -> u8 {
        (self.total * 100.0).round().clamp(0.0, 100.0) as u8
    }
}

impl fmt::Display for ScoreParts {
    /// `GPU set 95, allocation 62, cost 100`: each part that applies, 0–100.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            ("GPU set", self.gpu_set),
            ("allocation", Some(self.allocation)),
            ("domain fit", self.domain_fit),
            ("keep GPUs free", self.keep_gpus_free),
            ("memory fit", self.memory_fit),
            ("interference", self.interference),
            ("preferred domain", self.preferred_domain),
            ("cost", self.cost),
            ("node preference", self.node_preference),
            ("fragmentation", self.fragmentation),
            ("generation", self.generation),
            ("balanced allocation", self.balanced_allocation),
            ("image locality", self.image_locality),
            ("pod preferences", self.pod_preferences),
        ];
        let mut first = true;
        for (name, value) in parts {
            if let Some(v) = value {
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                write!(f, "{name} {}", (v * 100.0).round() as i64)?;
            }
        }
        Ok(())
    }
}

/// The pod-level half of scoring, computed once per decision.
pub(crate) struct Scorer {
    /// Normalised weights (0 where the part does not apply).
    gpu_set: f64,
    allocation: f64,
    domain_fit: f64,
    keep_gpus_free: f64,
    memory_fit: f64,
    interference: f64,
    preferred_domain: f64,
    cost: f64,
    node_preference: f64,
    fragmentation: f64,
    generation: f64,
    balanced_allocation: f64,
    image_locality: f64,
    pod_preferences: f64,
    /// The pod's balanced-allocation resources, when it requests any.
    balanced: Option<node_resources::Balanced>,
    /// The pod's images, when some node holds one.
    images: Option<node_resources::PodImages>,
    /// Per domain, the domain-fit part, when it applies.
    fits: Option<domain_fit::DomainFit>,
    /// The keep-GPUs-free part, when it applies.
    keep_free: Option<keep_gpus_free::KeepGpusFree>,
    /// Per node of the snapshot, the pod-preferences part (`NaN` where the
    /// filter refused); empty when the part does not apply.
    preferences: Vec<f64>,
    /// Whether the newest generation scores highest (else the oldest).
    newest: bool,
    /// `1 / (newest − oldest)` generation of the cluster.
    per_generation_range: f64,
    slope: f64,
    training: bool,
    latency_sensitive: bool,
    spot_averse: bool,
    inference_memory: Option<u64>,
    /// Per domain, the share of its GPUs in use (read once per decision).
    domain_busy: Vec<f64>,
    /// `1 / cluster_best_rank` (0 when no shape can hold the request).
    per_best_rank: f64,
    /// `1 / (dearest − cheapest)` (0 when all prices are equal).
    per_cost_range: f64,
}

impl Scorer {
    /// [`Scorer::alone`] with the pod's own preferences scored as well (the
    /// scheduler's decisions; the extender leaves them to kube-scheduler).
    pub(crate) fn with_preferences(ctx: &PodContext<'_>) -> Scorer {
        if !Scorer::prefers(ctx) {
            return Scorer::alone(ctx);
        }
        let feasible: Vec<usize> = (0..ctx.snapshot.len())
            .filter(|&i| ctx.filter(i).is_ok())
            .collect();
        Scorer::weighted(ctx, preferences::pod_preferences(ctx, &feasible), true)
    }

    /// Whether the pod-preferences part may apply, so that the caller
    /// collects the feasible nodes first (cheap: never per node).
    pub(crate) fn prefers(ctx: &PodContext<'_>) -> bool {
        preferences::may_apply(ctx)
    }

    /// A decision taken alone among the feasible nodes `fits`: with the
    /// pod's preferences normalised over them when it has any, else
    /// [`Scorer::alone`].
    pub(crate) fn over(ctx: &PodContext<'_>, fits: &[(usize, Fit)]) -> Scorer {
        if Scorer::prefers(ctx) {
            let indices: Vec<usize> = fits.iter().map(|(i, _)| *i).collect();
            Scorer::weighted(ctx, preferences::pod_preferences(ctx, &indices), true)
        } else {
            Scorer::alone(ctx)
        }
    }

    /// The GPU parts only: the extender's score, beside which kube-scheduler
    /// runs its own plugins.
    pub(crate) fn new(ctx: &PodContext<'_>) -> Scorer {
        Scorer::weighted(ctx, None, false)
    }

    /// The GPU parts and kube-scheduler's node scores (balanced allocation,
    /// image locality): a decision taken alone, for a pod without preferences.
    pub(crate) fn alone(ctx: &PodContext<'_>) -> Scorer {
        Scorer::weighted(ctx, None, true)
    }

    /// `alone`: whether kube-scheduler's node scores are gputopo's to give.
    fn weighted(ctx: &PodContext<'_>, preferences: Option<Vec<f64>>, alone: bool) -> Scorer {
        let w: ScoreWeights = ctx.config.weights;
        let request = &ctx.pod.request;
        let signals = ctx.snapshot.signals;
        let training = request.workload == Some(WorkloadKind::Training);
        let inference_memory = match request.workload {
            Some(WorkloadKind::Inference) if ctx.wants_whole_gpus() => request.gpu_memory_mib,
            _ => None,
        };
        let on = |applies: bool, weight: u32| if applies { f64::from(weight) } else { 0.0 };
        // With a target workload, the fragmentation part decides what packing
        // is worth: `balanced` pods leave it to that part, and a share asked
        // in thousandths is not packed toward the memory band (its GPU is the
        // one that strands least); explicit strategies and memory asks stay.
        let target = ctx.config.target_workload.is_some();
        // Read only where gputopo gives these scores (not beside kube-scheduler).
        let images = alone.then(|| node_resources::PodImages::of(ctx)).flatten();
        let balanced = alone.then(|| node_resources::Balanced::of(ctx)).flatten();
        let milli_share = matches!(request.gpu_share, Some(GpuShare::Milli(_)));
        let fits = domain_fit::DomainFit::of(ctx, w.domain_fit);
        let keep_free = keep_gpus_free::KeepGpusFree::of(ctx, w.keep_gpus_free);
        let mut scorer = Scorer {
            gpu_set: on(ctx.wants_whole_gpus(), w.gpu_set),
            allocation: on(
                !(target && request.placement_strategy == PlacementStrategy::Balanced),
                w.allocation,
            ),
            domain_fit: on(fits.is_some(), w.domain_fit),
            keep_gpus_free: on(keep_free.is_some(), w.keep_gpus_free),
            memory_fit: on(
                (ctx.wants_shared_gpu() && !(target && milli_share)) || inference_memory.is_some(),
                w.memory_fit,
            ),
            interference: on(training || request.latency_sensitive, w.interference),
            preferred_domain: on(request.preferred_domain.is_some(), w.preferred_domain),
            cost: on(signals.priced || signals.spot, w.cost),
            node_preference: on(signals.prefer_no_schedule, w.node_preference),
            fragmentation: on(target, w.fragmentation),
            generation: on(
                ctx.config.gpu_generation != GenerationPreference::Off
                    && signals.generation_max > signals.generation_min
                    && (ctx.wants_whole_gpus() || ctx.wants_shared_gpu()),
                w.generation,
            ),
            balanced_allocation: on(balanced.is_some(), w.balanced_allocation),
            image_locality: on(images.is_some(), w.image_locality),
            pod_preferences: on(preferences.is_some(), w.pod_preferences),
            balanced,
            images,
            fits,
            keep_free,
            preferences: preferences.unwrap_or_default(),
            newest: ctx.config.gpu_generation == GenerationPreference::Newest,
            per_generation_range: if signals.generation_max > signals.generation_min {
                1.0 / f64::from(signals.generation_max - signals.generation_min)
            } else {
                0.0
            },
            slope: match request.placement_strategy {
                PlacementStrategy::Consolidated => 1.0,
                PlacementStrategy::Balanced => 0.5,
                PlacementStrategy::Distributed => -1.0,
            },
            training,
            latency_sensitive: request.latency_sensitive,
            spot_averse: training || request.gang.is_some(),
            inference_memory,
            domain_busy: domain_fit::domain_busy(ctx),
            per_best_rank: if ctx.cluster_best_rank > 0 {
                1.0 / f64::from(ctx.cluster_best_rank)
            } else {
                0.0
            },
            per_cost_range: if signals.cost_max > signals.cost_min {
                1.0 / f64::from(signals.cost_max - signals.cost_min)
            } else {
                0.0
            },
        };
        let sum = scorer.gpu_set
            + scorer.allocation
            + scorer.domain_fit
            + scorer.keep_gpus_free
            + scorer.memory_fit
            + scorer.interference
            + scorer.preferred_domain
            + scorer.cost
            + scorer.node_preference
            + scorer.fragmentation
            + scorer.generation
            + scorer.balanced_allocation
            + scorer.image_locality
            + scorer.pod_preferences;
        if sum > 0.0 {
            for w in [
                &mut scorer.gpu_set,
                &mut scorer.allocation,
                &mut scorer.domain_fit,
                &mut scorer.keep_gpus_free,
                &mut scorer.memory_fit,
                &mut scorer.interference,
                &mut scorer.preferred_domain,
                &mut scorer.cost,
                &mut scorer.node_preference,
                &mut scorer.fragmentation,
                &mut scorer.generation,
                &mut scorer.balanced_allocation,
                &mut scorer.image_locality,
                &mut scorer.pod_preferences,
            ] {
                *w /= sum;
            }
        }
        scorer
    }

    /// Scores the node at `index`, which the filter accepted with `fit`.
    #[inline]
    pub(crate) fn score(&self, ctx: &PodContext<'_>, index: usize, fit: &Fit) -> ScoreParts {
        let hot = &ctx.snapshot.hot[index];
        let gpu_set = (self.gpu_set > 0.0).then(|| match fit {
            Fit::Whole(pick) => {
                let own = f64::from(pick.score) * 0.01;
                let against_cluster = match pick.bottleneck {
                    Some(b) if self.per_best_rank > 0.0 => {
                        (f64::from(b.rank()) * self.per_best_rank).min(1.0)
                    }
                    _ => 1.0,
                };
                (own + against_cluster) / 2.0
            }
            _ => 0.0,
        });
        let allocation = 0.5 + self.slope * (self.busy_after(ctx, index, hot, fit) - 0.5);
        let domain_fit = match &self.fits {
            Some(fits) if self.domain_fit > 0.0 => Some(fits.value(hot)),
            _ => None,
        };
        let keep_gpus_free = match &self.keep_free {
            Some(k) if self.keep_gpus_free > 0.0 => Some(k.value(hot)),
            _ => None,
        };
        let memory_fit = (self.memory_fit > 0.0).then(|| match fit {
            Fit::Shared { fill, .. } => ctx.config.memory_target.fit(*fill),
            Fit::Whole(pick) => match self.inference_memory {
                Some(need) => smallest_memory(ctx, hot, pick.gpus).map_or(0.5, |m| {
                    ctx.config.memory_target.fit(need as f64 / m.max(1) as f64)
                }),
                None => 0.5,
            },
            _ => 0.5,
        });
        let interference = (self.interference > 0.0).then(|| {
            let mut v = 1.0;
            if self.training {
                v /= 1.0 + f64::from(hot.inference);
            }
            if self.latency_sensitive {
                v /= 1.0 + f64::from(hot.training);
            }
            v
        });
        let preferred_domain = (self.preferred_domain > 0.0).then(|| {
            let inside = ctx.snapshot.nodes[index]
                .domains
                .iter()
                .flatten()
                .any(|d| ctx.preferred.contains(d));
            if inside { 1.0 } else { 0.0 }
        });
        let cost = (self.cost > 0.0).then(|| self.cost_part(ctx, hot));
        let node_preference = (self.node_preference > 0.0).then(|| {
            let n = ctx
                .taint_prefer
                .get(hot.taints as usize)
                .copied()
                .unwrap_or(0);
            1.0 / (1.0 + f64::from(n))
        });
        let fragmentation = match &ctx.fragmentation {
            Some(target) if self.fragmentation > 0.0 => {
                Some(fragmentation_part(target, ctx, index, hot, fit))
            }
            _ => None,
        };
        let generation = (self.generation > 0.0).then(|| self.generation_part(ctx, hot));
        let balanced_allocation = match &self.balanced {
            Some(b) if self.balanced_allocation > 0.0 => Some(b.score(ctx, index)),
            _ => None,
        };
        let image_locality = match &self.images {
            Some(images) if self.image_locality > 0.0 => Some(images.score(ctx, index)),
            _ => None,
        };
        let pod_preferences = (self.pod_preferences > 0.0).then(|| {
            let v = self.preferences.get(index).copied().unwrap_or(0.0);
            if v.is_nan() { 0.0 } else { v }
        });
        let total = self.gpu_set * gpu_set.unwrap_or(0.0)
            + self.allocation * allocation
            + self.domain_fit * domain_fit.unwrap_or(0.0)
            + self.keep_gpus_free * keep_gpus_free.unwrap_or(0.0)
            + self.memory_fit * memory_fit.unwrap_or(0.0)
            + self.interference * interference.unwrap_or(0.0)
            + self.preferred_domain * preferred_domain.unwrap_or(0.0)
            + self.cost * cost.unwrap_or(0.0)
            + self.node_preference * node_preference.unwrap_or(0.0)
            + self.fragmentation * fragmentation.unwrap_or(0.0)
            + self.generation * generation.unwrap_or(0.0)
            + self.balanced_allocation * balanced_allocation.unwrap_or(0.0)
            + self.image_locality * image_locality.unwrap_or(0.0)
            + self.pod_preferences * pod_preferences.unwrap_or(0.0);
        ScoreParts {
            gpu_set,
            allocation,
            domain_fit,
            keep_gpus_free,
            memory_fit,
            interference,
            preferred_domain,
            cost,
            node_preference,
            fragmentation,
            generation,
            balanced_allocation,
            image_locality,
            pod_preferences,
            total,
        }
    }

    /// Cheaper nodes higher; spot nodes 0 for pods an interruption costs most.
    fn cost_part(&self, ctx: &PodContext<'_>, hot: &Hot) -> f64 {
        let signals = ctx.snapshot.signals;
        if hot.spot && self.spot_averse {
            return 0.0;
        }
        let c = hot.cost;
        if c.is_nan() {
            if hot.spot { 1.0 } else { 0.5 }
        } else if self.per_cost_range > 0.0 {
            1.0 - f64::from(c - signals.cost_min) * self.per_cost_range
        } else {
            1.0
        }
    }

    /// The node's GPU generation toward the preferred end; unknown 0.5.
    fn generation_part(&self, ctx: &PodContext<'_>, hot: &Hot) -> f64 {
        if hot.generation == 0 {
            return 0.5;
        }
        let oldest = ctx.snapshot.signals.generation_min;
        let up = f64::from(hot.generation.saturating_sub(oldest)) * self.per_generation_range;
        let up = up.clamp(0.0, 1.0);
        if self.newest { up } else { 1.0 - up }
    }

    /// How busy the node (and its innermost domain) is after placement, 0–1.
    #[inline]
    fn busy_after(&self, ctx: &PodContext<'_>, index: usize, hot: &Hot, fit: &Fit) -> f64 {
        let gpus = hot.present.count_ones();
        if matches!(fit, Fit::NoGpu) || gpus == 0 {
            let node = &ctx.snapshot.nodes[index];
            let want = &ctx.pod.requests;
            let (a, r) = (&node.allocatable, &node.requested);
            let fraction = |alloc: i64, used: i64, add: i64| {
                (alloc > 0 && alloc != crate::resources::UNLIMITED)
                    .then(|| ((used + add) as f64 / alloc as f64).clamp(0.0, 1.0))
            };
            let parts = [
                fraction(a.cpu_milli, r.cpu_milli, want.cpu_milli),
                fraction(a.memory, r.memory, want.memory),
            ];
            let (sum, count) = parts
                .into_iter()
                .flatten()
                .fold((0.0, 0u32), |(s, n), p| (s + p, n + 1));
            return if count == 0 {
                0.0
            } else {
                sum / f64::from(count)
            };
        }
        let mut used = f64::from((hot.held & hot.present).count_ones());
        let mut shared = hot.shared_mask & !hot.held;
        if shared != 0 {
            let node = &ctx.snapshot.nodes[index];
            while shared != 0 {
                let g = shared.trailing_zeros();
                shared &= shared - 1;
                used += f64::from(node.gpus.shared_use(g).milli.min(1000)) / 1000.0;
            }
        }
        used += match fit {
            Fit::Whole(p) => f64::from(p.gpus.count_ones()),
            Fit::WholeUnknown { gpus, .. } => f64::from(gpus.count_ones()),
            Fit::Shared { milli, .. } => f64::from(*milli) / 1000.0,
            Fit::NoGpu => 0.0,
        };
        let node_busy = (used * RECIPROCALS[gpus.min(32) as usize]).min(1.0);
        match hot
            .domain
            .checked_sub(1)
            .and_then(|d| self.domain_busy.get(d as usize))
        {
            Some(&domain_busy) if !domain_busy.is_nan() => (node_busy + domain_busy) / 2.0,
            _ => node_busy,
        }
    }
}

/// `1/n` for `n` in 0..=32 (0 for 0): GPU counts, without a division per node.
const RECIPROCALS: [f64; 33] = {
    let mut table = [0.0; 33];
    let mut n = 1;
    while n <= 32 {
        table[n] = 1.0 / n as f64;
        n += 1;
    }
    table
};

/// The link class shown for a bottleneck: `NV12`, or `unknown` on a node without topology.
pub(crate) fn bottleneck_text(bottleneck: Option<LinkClass>, known: bool) -> String {
    match (bottleneck, known) {
        (Some(b), _) => b.to_string(),
        (None, true) => "none (a single GPU)".to_string(),
        (None, false) => "unknown (no GpuTopology)".to_string(),
    }
}
