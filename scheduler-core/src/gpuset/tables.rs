//! What is expensive about a link matrix, computed once and shared by every
//! node whose GPUs are wired the same way.
//!
//! Link classes are stored as dense *levels*: the distinct classes of the
//! matrix sorted worst to best are levels `1..=L`, so a table entry is one
//! byte. Level [`NONE`] means "no such set" and [`NO_HOP`] means "a single GPU,
//! no link to cross", which beats every link.
//!
//! For `n ≤ 16` GPUs ([`MAX_EXACT_GPUS`]) three tables cover every subset `S`
//! of the node (`2^n` entries each):
//!
//! * `ring[S]`: the bottleneck of the best Hamiltonian cycle through `S`, by a
//!   max–min dynamic programme over (subset, last GPU) of paths that start at
//!   the lowest GPU of the subset. Time `O(2^n · n²)` (16.7 M steps at n = 16),
//!   scratch `2^n · n` bytes (1 MiB at n = 16), freed after the build.
//! * `all_to_all[S]`: the weakest pair of `S`, `O(2^n · n)`.
//! * `leftover[S]`: [`LeftoverKey`] of `S` read as the free GPUs left behind:
//!   for sizes 8, 4 and 2, the best ring bottleneck of any subset of that size
//!   and how many subsets reach it, by a sum-over-subsets transform in the
//!   (max, count) semiring, `O(3 · 2^n · n)`.
//!
//! Memory at n = 16: 64 KiB + 64 KiB + 512 KiB; at n = 8: under 3 KiB.

use super::mask::{bit, bits, low_bits};
use gputopo_api::LinkClass;

/// No set of that size exists (or no link of that class).
pub(crate) const NONE: u8 = 0;
/// A single GPU: no hop, better than any link.
pub(crate) const NO_HOP: u8 = u8::MAX;
/// The largest node for which every subset is tabulated and the choice is exact.
pub const MAX_EXACT_GPUS: u32 = 16;
/// The largest number of distinct link classes one node may have (levels are bytes).
pub(crate) const MAX_LEVELS: usize = 254;
/// The request sizes the leftover measure looks at, most important first.
pub const LEFTOVER_SIZES: [u32; 3] = [8, 4, 2];

/// Bits per leftover slot: an 8-bit level above a 13-bit count.
const SLOT_BITS: u32 = 21;
const COUNT_BITS: u32 = 13;
const COUNT_MAX: u32 = (1 << COUNT_BITS) - 1;

/// The leftover measure packed into one integer whose numeric order is the
/// measure's order: slots for sizes 8, 4, 2 from the high bits down, each a
/// level above a saturating count.
pub(crate) type LeftoverKey = u64;

/// Packs one size's (best level, number of sets at that level).
pub(crate) fn pack_slot(level: u8, count: u32) -> u32 {
    if level == NONE {
        0
    } else {
        (u32::from(level) << COUNT_BITS) | count.min(COUNT_MAX)
    }
}

/// Packs three slots (sizes 8, 4, 2) into a [`LeftoverKey`].
pub(crate) fn pack_leftover(slots: [u32; 3]) -> LeftoverKey {
    slots
        .iter()
        .fold(0u64, |acc, &slot| (acc << SLOT_BITS) | u64::from(slot))
}

/// The (level, count) of slot `i` (0 = size 8, 1 = size 4, 2 = size 2).
pub(crate) fn unpack_slot(key: LeftoverKey, i: usize) -> (u8, u32) {
    let shift = SLOT_BITS * (2 - i as u32);
    let slot = ((key >> shift) & ((1 << SLOT_BITS) - 1)) as u32;
    ((slot >> COUNT_BITS) as u8, slot & COUNT_MAX)
}

/// The link matrix of one node model as levels, plus the exact tables when small enough.
pub(crate) struct LinkTables {
    n: u32,
    /// Distinct classes, worst first; level `l` is `classes[l - 1]`.
    classes: Vec<LinkClass>,
    /// `level[i * n + j]`, the level of the link between GPUs `i ≠ j`.
    level: Vec<u8>,
    /// `at_least[t * n + i]`: the GPUs joined to `i` at level ≥ `t`, for `t` in `0..=L + 1`.
    at_least: Vec<u32>,
    exact: Option<ExactTables>,
}

struct ExactTables {
    ring: Box<[u8]>,
    all_to_all: Box<[u8]>,
    leftover: Box<[LeftoverKey]>,
}

impl LinkTables {
    /// Builds the tables for `n` GPUs from a full level matrix (`levels[i * n + j]`).
    ///
    /// The caller guarantees `n ≤ 32`, `classes` sorted ascending and distinct,
    /// and every off-diagonal level in `1..=classes.len()`.
    pub(crate) fn new(n: u32, classes: Vec<LinkClass>, level: Vec<u8>) -> LinkTables {
        let nu = n as usize;
        let top = classes.len();
        let mut at_least = vec![0u32; (top + 2) * nu];
        for t in 0..=top + 1 {
            for i in 0..nu {
                let mut row = 0u32;
                for j in 0..nu {
                    if i != j && usize::from(level[i * nu + j]) >= t {
                        row |= bit(j as u32);
                    }
                }
                at_least[t * nu + i] = row;
            }
        }
        let mut tables = LinkTables {
            n,
            classes,
            level,
            at_least,
            exact: None,
        };
        if n <= MAX_EXACT_GPUS {
            tables.exact = Some(tables.build_exact());
        }
        tables
    }

    pub(crate) fn gpu_count(&self) -> u32 {
        self.n
    }

    pub(crate) fn is_exact(&self) -> bool {
        self.exact.is_some()
    }

    /// The number of distinct link classes `L` (the best level).
    pub(crate) fn top_level(&self) -> u8 {
        // `classes.len() ≤ MAX_LEVELS` is checked when the shape is built.
        self.classes.len() as u8
    }

    /// The class of a level in `1..=L`.
    pub(crate) fn class(&self, level: u8) -> Option<LinkClass> {
        match level {
            NONE | NO_HOP => None,
            l => self.classes.get(usize::from(l) - 1).copied(),
        }
    }

    /// `LinkClass::rank` of a level, with [`NO_HOP`] ranked above every link.
    pub(crate) fn rank(&self, level: u8) -> u32 {
        match level {
            NO_HOP => self
                .classes
                .last()
                .map_or(1, |c| c.rank())
                .saturating_add(1),
            l => self.class(l).map_or(0, LinkClass::rank),
        }
    }

    /// The lowest level whose class is at least `class`, or `None` if no link reaches it.
    pub(crate) fn level_at_least(&self, class: LinkClass) -> Option<u8> {
        self.classes
            .iter()
            .position(|&c| c >= class)
            .map(|i| (i + 1) as u8)
    }

    pub(crate) fn level(&self, i: u32, j: u32) -> u8 {
        self.level[(i * self.n + j) as usize]
    }

    /// GPUs joined to `i` at level ≥ `t` (`t` may be `0..=L + 1`).
    pub(crate) fn neighbours_at_least(&self, t: u8, i: u32) -> u32 {
        let t = usize::from(t).min(self.classes.len() + 1);
        self.at_least[t * self.n as usize + i as usize]
    }

    /// The exact ring bottleneck level of `set` when tabulated.
    pub(crate) fn ring_table(&self, set: u32) -> Option<u8> {
        self.exact.as_ref().map(|e| e.ring[set as usize])
    }

    /// The exact leftover key of `free` when tabulated.
    pub(crate) fn leftover_table(&self, free: u32) -> Option<LeftoverKey> {
        self.exact.as_ref().map(|e| e.leftover[free as usize])
    }

    /// The exact tables as slices (ring, all-to-all, leftover), for the hot loop.
    pub(crate) fn exact_slices(&self) -> Option<(&[u8], &[u8], &[LeftoverKey])> {
        self.exact
            .as_ref()
            .map(|e| (&e.ring[..], &e.all_to_all[..], &e.leftover[..]))
    }

    /// The weakest pair of `set`: [`NO_HOP`] for fewer than two GPUs. `O(|set|²)`.
    pub(crate) fn all_to_all_level(&self, set: u32) -> u8 {
        if let Some(e) = &self.exact {
            return e.all_to_all[set as usize];
        }
        let mut worst = NO_HOP;
        for i in bits(set) {
            for j in bits(set & !low_bits(i + 1)) {
                worst = worst.min(self.level(i, j));
            }
        }
        worst
    }

    /// Bytes held by the tables (the link matrix and the exact tables).
    pub(crate) fn table_bytes(&self) -> usize {
        let exact = self.exact.as_ref().map_or(0, |e| {
            e.ring.len() + e.all_to_all.len() + e.leftover.len() * size_of::<LeftoverKey>()
        });
        self.level.len() + self.at_least.len() * size_of::<u32>() + exact
    }

    fn build_exact(&self) -> ExactTables {
        let n = self.n as usize;
        let all = low_bits(self.n);
        let full = 1usize << n;

        // path[s * n + v]: the best bottleneck of a path that starts at the
        // lowest GPU of `s`, visits exactly `s` and ends at `v` (NONE: no path).
        let mut path = vec![NONE; full * n];
        let mut ring = vec![NONE; full].into_boxed_slice();
        for s in 1..full {
            let set = s as u32;
            let lo = set.trailing_zeros();
            if set == bit(lo) {
                path[s * n + lo as usize] = NO_HOP;
                ring[s] = NO_HOP;
            } else {
                let mut best = NONE;
                for v in bits(set & !bit(lo)) {
                    let closing = path[s * n + v as usize].min(self.level(v, lo));
                    best = best.max(closing);
                }
                ring[s] = best;
            }
            let extend = all & !set & !low_bits(lo + 1);
            if extend == 0 {
                continue;
            }
            for v in bits(set) {
                let b = path[s * n + v as usize];
                if b == NONE {
                    continue;
                }
                let row = &self.level[v as usize * n..(v as usize + 1) * n];
                for u in bits(extend) {
                    let w = b.min(row[u as usize]);
                    let slot = &mut path[(s | bit(u) as usize) * n + u as usize];
                    if w > *slot {
                        *slot = w;
                    }
                }
            }
        }
        drop(path);

        let mut all_to_all = vec![NO_HOP; full].into_boxed_slice();
        for s in 1..full {
            let set = s as u32;
            let lo = set.trailing_zeros();
            let rest = set & !bit(lo);
            if rest == 0 {
                continue;
            }
            let mut worst = all_to_all[rest as usize];
            for j in bits(rest) {
                worst = worst.min(self.level(lo, j));
            }
            all_to_all[s] = worst;
        }

        // Sum over subsets in the (max level, count) semiring: after the
        // transform, slot[L] is the best ring level over size-`size` subsets
        // of L and how many reach it; each subset is counted exactly once.
        let mut leftover = vec![0u64; full].into_boxed_slice();
        for (i, &size) in LEFTOVER_SIZES.iter().enumerate() {
            let mut slot = vec![0u32; full];
            if size as usize <= n {
                for s in 0..full {
                    if (s as u32).count_ones() == size {
                        slot[s] = pack_slot(ring[s], 1);
                    }
                }
                for b in 0..n {
                    let step = 1usize << b;
                    for s in 0..full {
                        if s & step != 0 {
                            slot[s] = combine_slots(slot[s], slot[s ^ step]);
                        }
                    }
                }
            }
            let shift = SLOT_BITS * (2 - i as u32);
            for (key, &value) in leftover.iter_mut().zip(&slot) {
                *key |= u64::from(value) << shift;
            }
        }
        ExactTables {
            ring,
            all_to_all,
            leftover,
        }
    }
}

/// The (max, count) semiring's addition on packed slots.
fn combine_slots(a: u32, b: u32) -> u32 {
    let (la, lb) = (a >> COUNT_BITS, b >> COUNT_BITS);
    match la.cmp(&lb) {
        std::cmp::Ordering::Greater => a,
        std::cmp::Ordering::Less => b,
        std::cmp::Ordering::Equal if la == 0 => 0,
        std::cmp::Ordering::Equal => {
            (la << COUNT_BITS) | ((a & COUNT_MAX) + (b & COUNT_MAX)).min(COUNT_MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftover_packing_round_trips_and_orders_by_size_first() {
        let a = pack_leftover([pack_slot(3, 2), pack_slot(5, 1), pack_slot(1, 9)]);
        assert_eq!(unpack_slot(a, 0), (3, 2));
        assert_eq!(unpack_slot(a, 1), (5, 1));
        assert_eq!(unpack_slot(a, 2), (1, 9));
        let b = pack_leftover([pack_slot(3, 3), 0, 0]);
        assert!(b > a, "more 8-GPU sets outweigh everything below");
        let c = pack_leftover([0, pack_slot(200, 8000), pack_slot(200, 8000)]);
        assert!(a > c);
        assert_eq!(
            unpack_slot(pack_leftover([pack_slot(4, 100_000), 0, 0]), 0),
            (4, COUNT_MAX)
        );
    }
}
