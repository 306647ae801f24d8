//! NVIDIA's rule: the best-effort policy of go-gpuallocator
//! (`gpuallocator.NewBestEffortPolicy`), which NVIDIA's k8s-device-plugin
//! answers `GetPreferredAllocation` with for whole GPUs. Reimplemented from
//! its published description (README and the policy's doc comments):
//!
//! - **Pair score**: the sum over the links between two GPUs. The PCIe link
//!   (NVML's common ancestor) scores 60 on the same board, 50 behind one
//!   switch, 40 behind several, 30 through the host bridge, 20 within a CPU
//!   (NUMA node), 10 across CPUs. Each NVLink whose far end is the other GPU
//!   adds 100. NVLinks to an NVSwitch are not counted (the library leaves
//!   "NVSwitch semantics" as a TODO), so on an HGX board only the PCIe
//!   distance separates GPUs.
//! - **Set score**: the sum of its pair scores.
//! - The available GPUs, padded with empty slots to a multiple of `size`, are
//!   split into groups of `size` in every way (a group holds no padding or all
//!   of it); the partition with the highest total wins ("it assumes all future
//!   allocations will be of size `size`"), the first found on ties, in the
//!   order of the available list. Its best full group is the answer (first on
//!   ties). A single GPU: the first available.
//!
//! The kubelet lists the available devices in Go map order, so ties go to
//! whichever comes first: the caller shuffles the list with its seed.

/// Pair scores of one node, as go-gpuallocator sees it; `score[a][b]`.
pub struct PairScores {
    pub score: Vec<Vec<u32>>,
}

impl PairScores {
    fn set(&self, set: &[u32]) -> u32 {
        let mut total = 0;
        for (i, &a) in set.iter().enumerate() {
            for &b in &set[i + 1..] {
                total += self.score[a as usize][b as usize];
            }
        }
        total
    }

    /// The GPUs the policy picks among `available` (in the kubelet's order).
    pub fn best_effort(&self, available: &[u32], size: usize) -> Vec<u32> {
        if size == 0 || available.len() < size {
            return Vec::new();
        }
        if size == 1 {
            return vec![available[0]];
        }
        // None marks padding.
        let mut slots: Vec<Option<u32>> = available.iter().copied().map(Some).collect();
        while !slots.len().is_multiple_of(size) {
            slots.push(None);
        }
        let padding = slots.len() - available.len();
        let mut search = Search {
            scores: self,
            size,
            padding,
            groups: Vec::new(),
            best: None,
        };
        search.partitions(&slots);
        let (_, groups) = search.best.expect("at least one partition");
        let mut best: Option<(u32, Vec<u32>)> = None;
        for group in groups {
            if group.len() < size {
                continue; // Holds the padding.
            }
            let score = self.set(&group);
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, group));
            }
        }
        best.map(|(_, g)| g).unwrap_or_default()
    }
}

struct Search<'a> {
    scores: &'a PairScores,
    size: usize,
    padding: usize,
    /// The groups of the partition being built (real GPUs only).
    groups: Vec<Vec<u32>>,
    /// The best partition so far: total score and its groups.
    best: Option<(u32, Vec<Vec<u32>>)>,
}

impl Search<'_> {
    /// Every partition of `rest` into groups of `size`, each group holding
    /// `rest[0]`'s position first so that no partition is seen twice.
    fn partitions(&mut self, rest: &[Option<u32>]) {
        if rest.len() == self.size {
            self.groups.push(rest.iter().flatten().copied().collect());
            let total: u32 = self.groups.iter().map(|g| self.scores.set(g)).sum();
            let full = self.groups.iter().any(|g| g.len() == self.size);
            if full && self.best.as_ref().is_none_or(|(t, _)| total > *t) {
                self.best = Some((total, self.groups.clone()));
            }
            self.groups.pop();
            return;
        }
        let mut pick = Vec::with_capacity(self.size - 1);
        self.combinations(rest, 1, &mut pick);
    }

    /// Groups of `rest[0]` and `size - 1` of `rest[from..]`, then the rest.
    fn combinations(&mut self, rest: &[Option<u32>], from: usize, pick: &mut Vec<usize>) {
        if pick.len() == self.size - 1 {
            let chosen: Vec<usize> = std::iter::once(0).chain(pick.iter().copied()).collect();
            let pads = chosen.iter().filter(|&&i| rest[i].is_none()).count();
            if pads != 0 && pads != self.padding {
                return;
            }
            self.groups
                .push(chosen.iter().filter_map(|&i| rest[i]).collect());
            let remaining: Vec<Option<u32>> = (0..rest.len())
                .filter(|i| !chosen.contains(i))
                .map(|i| rest[i])
                .collect();
            self.partitions(&remaining);
            self.groups.pop();
            return;
        }
        for i in from..rest.len() {
            pick.push(i);
            self.combinations(rest, i + 1, pick);
            pick.pop();
        }
    }
}
