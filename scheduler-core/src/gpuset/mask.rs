//! Bit-mask helpers: a GPU set is a `u32` whose bit `i` is GPU index `i`.

/// The set bits of `mask`, lowest first.
pub(crate) fn bits(mask: u32) -> Bits {
    Bits(mask)
}

/// Iterator over the set bits of a mask, lowest first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bits(u32);

impl Iterator for Bits {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let low = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(low)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.count_ones() as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Bits {}

/// The mask with bit `i` set: GPU `i` alone.
pub(crate) const fn bit(i: u32) -> u32 {
    1u32 << i
}

/// The mask of GPUs `0..n` (n ≤ 32).
pub(crate) const fn low_bits(n: u32) -> u32 {
    if n >= 32 { u32::MAX } else { (1u32 << n) - 1 }
}

/// The sorted GPU indices of a mask.
pub(crate) fn indices(mask: u32) -> Vec<u32> {
    bits(mask).collect()
}

/// `0,1,2,3`: the indices of a mask as the `gputopo.dev/assigned-gpus` annotation writes them.
pub(crate) fn index_list(mask: u32) -> String {
    let mut out = String::new();
    for (i, gpu) in bits(mask).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&gpu.to_string());
    }
    out
}

/// Calls `visit` with every `k`-element subset of `pool`.
///
/// Walks the `k`-combinations of the pool's `m` members with Gosper's hack on
/// `m`-bit "compressed" masks and deposits each onto the pool's bit positions,
/// so the cost is `C(m, k)` visits of `O(k)` each, never `2^m`.
pub(crate) fn for_each_k_subset(pool: u32, k: u32, mut visit: impl FnMut(u32)) {
    let m = pool.count_ones();
    if k > m {
        return;
    }
    if k == 0 {
        visit(0);
        return;
    }
    let mut positions = [0u32; 32];
    for (slot, gpu) in positions.iter_mut().zip(bits(pool)) {
        *slot = bit(gpu);
    }
    // Compressed combinations live in u64 so `m = 32` cannot overflow the hack.
    let limit: u64 = 1u64 << m;
    let mut combo: u64 = (1u64 << k) - 1;
    while combo < limit {
        let mut subset = 0u32;
        let mut rest = combo;
        while rest != 0 {
            subset |= positions[rest.trailing_zeros() as usize];
            rest &= rest - 1;
        }
        visit(subset);
        // Gosper's hack: the next larger integer with the same popcount.
        let lowest = combo & combo.wrapping_neg();
        let ripple = combo + lowest;
        combo = (((ripple ^ combo) >> 2) / lowest) | ripple;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_subsets_are_all_distinct_and_inside_the_pool() {
        let pool = 0b1011_0110_1001u32;
        for k in 0..=pool.count_ones() + 1 {
            let mut seen = Vec::new();
            for_each_k_subset(pool, k, |s| seen.push(s));
            let expected: Vec<u32> = (0..=pool)
                .filter(|s| s & !pool == 0 && s.count_ones() == k)
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, expected, "k = {k}");
        }
    }

    #[test]
    fn full_32_bit_pool_does_not_overflow() {
        let mut count = 0u32;
        for_each_k_subset(u32::MAX, 31, |_| count += 1);
        assert_eq!(count, 32);
        let mut all = 0;
        for_each_k_subset(u32::MAX, 32, |s| all = s);
        assert_eq!(all, u32::MAX);
    }

    #[test]
    fn index_list_is_comma_separated() {
        assert_eq!(index_list(0b1011), "0,1,3");
        assert_eq!(index_list(0), "");
        assert_eq!(indices(bit(31) | 1), vec![0, 31]);
    }
}
