//! Rules 1–5 of the gang module docs inside one scope: the leaf sets that hold
//! the gang, enumerated exactly while few enough, else heuristically, then
//! filled to compare GPU-set quality.

use super::fill::Filled;
use super::{Choice, Problem, Rank};
use crate::gang::{EXACT_LEAF_SETS, QUALITY_CANDIDATES};

/// Leaf counts tried past the fewest for a mixed gang before trying the whole scope.
const MIXED_EXTRA_LEAVES: usize = 8;

impl Problem<'_> {
    /// Rules 1–5 inside one scope.
    pub(super) fn consolidated(&self, scope: Option<u32>) -> Option<Choice> {
        let leaves = self.useful_leaves(scope);
        let caps: Vec<u64> = leaves.iter().map(|&l| self.leaf_cap[l as usize]).collect();
        let mut prefix = vec![0u64; caps.len() + 1];
        for (i, c) in caps.iter().enumerate() {
            prefix[i + 1] = prefix[i] + c;
        }
        let fewest = (1..=caps.len()).find(|&k| prefix[k] >= self.need)?;
        // Mixed gangs may fail to pack where the GPU count suffices: a few more
        // leaves are tried, then every leaf of the scope as the last resort.
        let mut counts: Vec<usize> = (fewest..=caps.len()).take(MIXED_EXTRA_LEAVES).collect();
        counts.push(caps.len());
        counts.dedup();
        for k in counts {
            let mut sets: Vec<Vec<u32>> =
                if binomial(caps.len() as u64, k as u64) <= EXACT_LEAF_SETS {
                    exact_sets(&caps, &prefix, k, self.need)
                        .into_iter()
                        .map(|set| set.into_iter().map(|i| leaves[i]).collect())
                        .collect()
                } else {
                    self.heuristic_sets(scope, k)
                };
            for set in &mut sets {
                set.sort_unstable();
            }
            sets.sort_unstable();
            sets.dedup();
            let mut ranked: Vec<(Rank, Vec<u32>)> =
                sets.into_iter().map(|s| (self.rank(&s), s)).collect();
            ranked.sort();
            if let Some(choice) = self.best_filled(&ranked) {
                return Some(choice);
            }
            if self.prep.uniform() {
                // Every candidate of a uniform gang fills; nothing larger can be better.
                return None;
            }
        }
        None
    }

    /// The first rank group with a set that fills, and its best-quality set.
    fn best_filled(&self, ranked: &[(Rank, Vec<u32>)]) -> Option<Choice> {
        let mut budget = QUALITY_CANDIDATES;
        let mut start = 0;
        while start < ranked.len() && budget > 0 {
            let rank = &ranked[start].0;
            let end = start + ranked[start..].partition_point(|(r, _)| r == rank);
            let mut best: Option<(i64, usize, Filled)> = None;
            let mut qualities: Vec<i64> = Vec::new();
            for (i, (_, set)) in ranked[start..end].iter().enumerate() {
                if budget == 0 {
                    break;
                }
                budget -= 1;
                let Ok(filled) = self.fill(set) else {
                    continue;
                };
                qualities.push(filled.quality);
                if best.as_ref().is_none_or(|(q, _, _)| filled.quality > *q) {
                    best = Some((filled.quality, start + i, filled));
                }
            }
            if let Some((quality, at, filled)) = best {
                let decided_by = if qualities.iter().filter(|&&q| q == quality).count() > 1 {
                    "name order"
                } else if qualities.len() > 1 {
                    "better GPU sets"
                } else {
                    match ranked.get(end) {
                        None => "the only option",
                        Some((next, _)) if next.spans != rank.spans => "fewer parent domains",
                        Some(_) => "fills its leaves more completely",
                    }
                };
                return Some(Choice {
                    rank: rank.clone(),
                    quality,
                    leaves: ranked[at].1.clone(),
                    filled,
                    compared: ranked.len(),
                    decided_by,
                });
            }
            start = end;
        }
        None
    }

    /// Candidate `k`-sets when there are too many to enumerate: per domain of the
    /// scope, its largest leaves with the last swapped for the smallest that still
    /// completes the gang, and its top `k` leaves.
    fn heuristic_sets(&self, scope: Option<u32>, k: usize) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        let inside = |d: u32| match scope {
            None => true,
            Some(s) => self.tree.domain(d).ancestors.contains(&s),
        };
        let mut domains: Vec<Option<u32>> = vec![scope];
        domains.extend(
            (0..self.tree.domains.len() as u32)
                .filter(|&d| inside(d) && Some(d) != scope)
                .map(Some),
        );
        for domain in domains {
            // `domain` is `None` only for a whole-cluster scope.
            let leaves = self.useful_leaves(domain);
            if leaves.len() < k {
                continue;
            }
            let cap = |l: u32| self.leaf_cap[l as usize];
            let top: u64 = leaves[..k].iter().map(|&l| cap(l)).sum();
            if top < self.need {
                continue;
            }
            out.push(leaves[..k].to_vec());
            let before_last: u64 = leaves[..k - 1].iter().map(|&l| cap(l)).sum();
            if before_last < self.need
                && let Some(&smallest) = leaves[k - 1..]
                    .iter()
                    .rev()
                    .find(|&&l| before_last + cap(l) >= self.need)
            {
                let mut set = leaves[..k - 1].to_vec();
                set.push(smallest);
                out.push(set);
            }
        }
        out
    }
}

/// `C(n, k)`, saturating.
fn binomial(n: u64, k: u64) -> u64 {
    if k > n {
        return 0;
    }
    let k = k.min(n - k);
    let mut acc: u64 = 1;
    for i in 0..k {
        acc = match acc.checked_mul(n - i) {
            Some(v) => v / (i + 1),
            None => return u64::MAX,
        };
    }
    acc
}

/// Every `k`-subset (indices into `caps`, sorted descending) whose sum reaches
/// `need`, pruned where even the largest remaining leaves fall short.
fn exact_sets(caps: &[u64], prefix: &[u64], k: usize, need: u64) -> Vec<Vec<usize>> {
    struct Walk<'c> {
        caps: &'c [u64],
        prefix: &'c [u64],
        k: usize,
        need: u64,
        chosen: Vec<usize>,
        out: Vec<Vec<usize>>,
    }
    impl Walk<'_> {
        fn walk(&mut self, start: usize, sum: u64) {
            let r = self.k - self.chosen.len();
            if r == 0 {
                if sum >= self.need {
                    self.out.push(self.chosen.clone());
                }
                return;
            }
            for i in start..self.caps.len() {
                // Sorted descending: the next `r` from `i` are the most reachable.
                if i + r > self.caps.len()
                    || sum + (self.prefix[i + r] - self.prefix[i]) < self.need
                {
                    break;
                }
                self.chosen.push(i);
                self.walk(i + 1, sum + self.caps[i]);
                self.chosen.pop();
            }
        }
    }
    let mut w = Walk {
        caps,
        prefix,
        k,
        need,
        chosen: Vec::new(),
        out: Vec::new(),
    };
    w.walk(0, 0);
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_saturates() {
        assert_eq!(binomial(40, 1), 40);
        assert_eq!(binomial(40, 3), 9880);
        assert_eq!(binomial(3, 5), 0);
        assert_eq!(binomial(200, 100), u64::MAX);
    }

    #[test]
    fn exact_sets_reach_need() {
        let caps = [5, 4, 3, 1];
        let mut prefix = vec![0];
        for c in caps {
            prefix.push(prefix.last().copied().unwrap_or(0) + c);
        }
        let sets = exact_sets(&caps, &prefix, 2, 7);
        assert_eq!(sets, vec![vec![0, 1], vec![0, 2], vec![1, 2]]);
        assert!(exact_sets(&caps, &prefix, 1, 6).is_empty());
    }
}
