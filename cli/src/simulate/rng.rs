//! The seeded random streams (see "Determinism" in [`super`]): the workload's,
//! the policy's and the node order, and unbiased draws from them.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// A uniform index below `n` (rejection sampling: no modulo bias).
pub fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let n = n as u64;
    let zone = u64::MAX - (u64::MAX % n);
    loop {
        let x = rng.next_u64();
        if x < zone {
            return (x % n) as usize;
        }
    }
}

/// Fisher–Yates.
pub(super) fn shuffle<T>(rng: &mut ChaCha8Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = below(rng, i + 1);
        items.swap(i, j);
    }
}

/// A seeded random order of `n` nodes, as each node's place in it. The FGD
/// simulator names every node with a seeded random prefix before creating
/// it, so the order in which equal scores are met is random per run but
/// fixed for the run; a third stream keeps the other two unchanged.
pub(super) fn node_order(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xD1B5_4A32_D192_ED03);
    let mut order: Vec<u32> = (0..n as u32).collect();
    shuffle(&mut rng, &mut order);
    let mut place = vec![0u32; n];
    for (i, &node) in order.iter().enumerate() {
        place[node as usize] = i as u32;
    }
    place
}

/// Seeds of the two streams: the workload's and the policy's.
pub(super) fn streams(seed: u64) -> (ChaCha8Rng, ChaCha8Rng) {
    let workload = ChaCha8Rng::seed_from_u64(seed);
    let policy = ChaCha8Rng::seed_from_u64(seed ^ 0x9E37_79B9_7F4A_7C15);
    (workload, policy)
}
