//! The choice pipeline: canonical query, hard constraints in reason order,
//! the exact or heuristic search, the score, and the cached entry points.

use super::exact;
use super::explain::explain;
use super::heuristic;
use super::query::{Outcome, Query, Winner};
use super::request::{
    DecidedBy, GpuSetChoice, Leftover, LeftoverSlot, Method, NoFitReason, SetPick, SetRequest,
};
use super::shape::NodeShape;
use super::tables::{LEFTOVER_SIZES, LeftoverKey, NONE, unpack_slot};
use gputopo_api::LinkClass;

/// A request canonicalised for one [`NodeShape`]; see [`NodeShape::picker`].
#[derive(Clone, Copy, Debug)]
pub struct Picker<'a> {
    shape: &'a NodeShape,
    query: Query,
    /// Start of the dense cells for this request, when it has them.
    dense_row: Option<usize>,
}

impl Picker<'_> {
    /// The choice among `free` (as [`NodeShape::pick`]).
    pub fn pick(&self, free: u32) -> Result<SetPick, NoFitReason> {
        let shape = self.shape;
        let query = Query {
            free: free & shape.present,
            ..self.query
        };
        if let Some(row) = self.dense_row
            && let Some(cell) = shape.cache.dense_cell(row | query.free as usize)
        {
            return *cell.get_or_init(|| shape.compute(&query, shape.default_method()));
        }
        shape
            .cache
            .get_or_compute(&query, || shape.compute(&query, shape.default_method()))
    }
}

impl NodeShape {
    /// Chooses the GPU set for `request` among the `free` GPUs (bit i = GPU i;
    /// bits of unlisted GPUs are ignored), with the explanation. Allocates; the
    /// filter/score hot path should use [`NodeShape::pick`] or [`NodeShape::picker`].
    pub fn choose(&self, free: u32, request: &SetRequest) -> Result<GpuSetChoice, NoFitReason> {
        let pick = self.pick(free, request)?;
        Ok(self.describe(request, &pick))
    }

    /// The choice without its explanation, from the cache when this shape has
    /// answered the same canonical query before. No allocation on a hit.
    pub fn pick(&self, free: u32, request: &SetRequest) -> Result<SetPick, NoFitReason> {
        let query = self.canonical(free, request);
        self.cache
            .get_or_compute(&query, || self.compute(&query, self.default_method()))
    }

    /// `request` prepared once for many free masks of this shape: one pod
    /// filtered against thousands of identical nodes. Same answers as
    /// [`NodeShape::pick`], without re-reading the request per node.
    pub fn picker(&self, request: &SetRequest) -> Picker<'_> {
        let query = self.canonical(0, request);
        Picker {
            shape: self,
            dense_row: self.cache.dense_row(&query),
            query,
        }
    }

    pub(super) fn default_method(&self) -> Method {
        if self.is_exact() {
            Method::Exact
        } else {
            Method::Heuristic
        }
    }

    /// Like [`NodeShape::pick`], uncached, with the method forced. `Exact` on a
    /// node of more than 16 GPUs falls back to the heuristic (see `method` in
    /// the answer). Forcing `Heuristic` on a small node measures its gap.
    pub fn pick_with(
        &self,
        free: u32,
        request: &SetRequest,
        method: Method,
    ) -> Result<SetPick, NoFitReason> {
        let query = self.canonical(free, request);
        let method = match self.default_method() {
            Method::Exact => method,
            Method::Heuristic => Method::Heuristic,
        };
        self.compute(&query, method)
    }

    /// The explained form of a pick made for `request`.
    pub fn describe(&self, request: &SetRequest, pick: &SetPick) -> GpuSetChoice {
        GpuSetChoice {
            gpus: pick.gpu_indices(),
            bottleneck: pick.bottleneck,
            numa_nodes: pick.numa_nodes,
            leftover: pick.leftover,
            score: pick.score,
            explanation: explain(self, request, pick),
            decided_by: pick.decided_by,
            method: pick.method,
        }
    }

    /// What the free GPUs offer as they are (no placement): the leftover measure
    /// of `free`'s whole GPUs. Exact for nodes of up to 16 GPUs.
    pub fn leftover(&self, free: u32) -> Leftover {
        let base = free & self.whole_gpus;
        self.leftover_of(base, self.leftover_key(base, self.default_method()))
    }

    /// Answers held in this shape's hash cache (not counting the dense layer).
    pub fn cached_answers(&self) -> usize {
        self.cache.len()
    }

    pub(crate) fn canonical(&self, free: u32, request: &SetRequest) -> Query {
        let min_nvlink_level = request
            .min_nvlink_level
            .filter(|&level| level > self.nvlink_level_everywhere);
        let min_memory_mib = request
            .min_memory_mib
            .filter(|&min| self.min_memory_all.is_none_or(|all| all < min));
        Query {
            free: free & self.present,
            k: request.gpus,
            collective: request.collective,
            min_nvlink_level,
            min_memory_mib,
            allow_mig: request.allow_mig && self.mig != 0,
            single_numa_node: request.single_numa_node && !self.one_numa_node,
        }
    }

    pub(crate) fn leftover_key(&self, base: u32, method: Method) -> LeftoverKey {
        match (method, self.tables.leftover_table(base)) {
            (Method::Exact, Some(key)) => key,
            _ => heuristic::leftover_key(self, base),
        }
    }

    /// The GPUs of `free` a request may use: without MIG-enabled ones unless
    /// it allows MIG, with at least `min_memory_mib` each; an error names the
    /// constraint that leaves fewer than `k`.
    pub(crate) fn eligible(
        &self,
        free: u32,
        k: u32,
        allow_mig: bool,
        min_memory_mib: Option<u64>,
    ) -> Result<u32, NoFitReason> {
        let mut pool = free;
        if !allow_mig {
            pool &= !self.mig;
            if pool.count_ones() < k {
                return Err(NoFitReason::MigEnabled {
                    requested: k,
                    usable: pool.count_ones(),
                });
            }
        }
        if let Some(min) = min_memory_mib {
            pool &= self.memory_at_least(min);
            if pool.count_ones() < k {
                return Err(NoFitReason::InsufficientMemory {
                    requested: k,
                    min_memory_mib: min,
                    eligible: pool.count_ones(),
                });
            }
        }
        Ok(pool)
    }

    fn compute(&self, query: &Query, method: Method) -> Outcome {
        let k = query.k;
        let base = query.free & self.whole_gpus;
        let free_count = query.free.count_ones();
        if k == 0 {
            return Ok(SetPick {
                gpus: 0,
                bottleneck: None,
                numa_nodes: 0,
                leftover: self.leftover_of(base, self.leftover_key(base, method)),
                score: 100,
                decided_by: DecidedBy::OnlyCandidate,
                runner_up: None,
                candidates: 1,
                method,
            });
        }
        if free_count < k {
            return Err(NoFitReason::TooFewFreeGpus {
                requested: k,
                free: free_count,
            });
        }
        let pool = self.eligible(query.free, k, query.allow_mig, query.min_memory_mib)?;
        let groups: Vec<u32> = if query.single_numa_node {
            let in_pool = self.numa_groups.iter().map(|g| g.gpus & pool);
            let largest = in_pool.clone().map(u32::count_ones).max().unwrap_or(0);
            if largest < k {
                return Err(NoFitReason::SingleNumaNode {
                    requested: k,
                    largest_group: largest,
                });
            }
            in_pool.filter(|g| g.count_ones() >= k).collect()
        } else {
            vec![pool]
        };
        // The level every pair must reach; one past the best when no link does.
        let nvlink_floor = match query.min_nvlink_level {
            None => NONE,
            Some(level) => self
                .tables
                .level_at_least(LinkClass::Nv(level))
                .unwrap_or(self.tables.top_level().saturating_add(1)),
        };
        let winner = match method {
            Method::Exact => exact::search(self, &groups, k, query.collective, nvlink_floor, base),
            Method::Heuristic => {
                heuristic::search(self, &groups, k, query.collective, nvlink_floor, base)
            }
        };
        let Some(winner) = winner else {
            return Err(NoFitReason::NoNvlinkSet {
                requested: k,
                level: query.min_nvlink_level.unwrap_or(0),
                single_numa_node: query.single_numa_node,
            });
        };
        let before = self.leftover_key(base, method);
        let score = self.score(query, &winner, before, base & !winner.gpus);
        Ok(self.set_pick(&winner, base, score, method))
    }

    /// The answer for `winner`, chosen among `base`'s free GPUs.
    pub(super) fn set_pick(
        &self,
        winner: &Winner,
        base: u32,
        score: u8,
        method: Method,
    ) -> SetPick {
        SetPick {
            gpus: winner.gpus,
            bottleneck: self.tables.class(winner.quality),
            numa_nodes: u32::from(winner.numa_nodes),
            leftover: self.leftover_of(base & !winner.gpus, winner.leftover),
            score,
            decided_by: winner.decided_by,
            runner_up: (winner.runner_up != 0).then_some(winner.runner_up),
            candidates: winner.candidates,
            method,
        }
    }

    /// `round(70·q + 20·l + 10·u)`; see the module docs.
    pub(super) fn score(
        &self,
        query: &Query,
        winner: &Winner,
        before: LeftoverKey,
        left: u32,
    ) -> u8 {
        let k = query.k;
        let quality_ratio = if k <= 1 {
            1.0
        } else {
            let best = self.best_empty_level(k, query.collective);
            ratio(self.tables.rank(winner.quality), self.tables.rank(best))
        };
        let left_count = left.count_ones();
        let mut leftover_sum = 0.0;
        let mut applicable = 0u32;
        for (i, &size) in LEFTOVER_SIZES.iter().enumerate() {
            let (before_level, _) = unpack_slot(before, i);
            if before_level == NONE || left_count < size {
                continue;
            }
            let (after_level, _) = unpack_slot(winner.leftover, i);
            leftover_sum += ratio(
                self.tables.rank(after_level),
                self.tables.rank(before_level),
            );
            applicable += 1;
        }
        let leftover_ratio = if applicable == 0 {
            1.0
        } else {
            leftover_sum / f64::from(applicable)
        };
        let numa_ratio = ratio(self.min_numa_span(k), u32::from(winner.numa_nodes).max(1));
        let score = 70.0 * quality_ratio + 20.0 * leftover_ratio + 10.0 * numa_ratio;
        score.round().clamp(0.0, 100.0) as u8
    }

    pub(super) fn leftover_of(&self, gpus: u32, key: LeftoverKey) -> Leftover {
        let slot = |i: usize| {
            let (level, sets) = unpack_slot(key, i);
            LeftoverSlot {
                size: LEFTOVER_SIZES[i],
                best_ring: self.tables.class(level),
                sets,
            }
        };
        Leftover {
            gpus,
            slots: [slot(0), slot(1), slot(2)],
        }
    }
}

/// `part / whole` clamped to `0..=1`; 1 when `whole` is 0.
fn ratio(part: u32, whole: u32) -> f64 {
    if whole == 0 {
        1.0
    } else {
        (f64::from(part) / f64::from(whole)).min(1.0)
    }
}
