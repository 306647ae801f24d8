//! Splitting one chosen GPU set over the requests that asked for it: a
//! bipartite matching between request slots (request `r` has `counts[r]`
//! slots) and GPUs, each slot taking a GPU of its request's candidates.
//!
//! Kuhn's augmenting paths, slots in request order, GPUs in ascending index
//! order: deterministic, and it finds a split whenever one exists. When
//! several exist, earlier requests tend to keep lower indices.

/// Per request, the GPUs it takes, each from `masks[r]`, exactly
/// `counts[r]` of them, together exactly `set`. `None` when no split exists.
pub fn split(set: u32, counts: &[u32], masks: &[u32]) -> Option<Vec<u32>> {
    let total: u32 = counts.iter().sum();
    if total != set.count_ones() {
        return None;
    }
    // owner[gpu] = the slot holding it.
    let mut owner: [Option<usize>; 32] = [None; 32];
    let slots: Vec<usize> = counts
        .iter()
        .enumerate()
        .flat_map(|(r, &c)| std::iter::repeat_n(r, c as usize))
        .collect();
    for slot in 0..slots.len() {
        let mut visited = 0u32;
        if !augment(slot, &slots, masks, set, &mut owner, &mut visited) {
            return None;
        }
    }
    let mut out = vec![0u32; counts.len()];
    for (gpu, o) in owner.iter().enumerate() {
        if let Some(slot) = o {
            out[slots[*slot]] |= 1 << gpu;
        }
    }
    Some(out)
}

fn augment(
    slot: usize,
    slots: &[usize],
    masks: &[u32],
    set: u32,
    owner: &mut [Option<usize>; 32],
    visited: &mut u32,
) -> bool {
    let mut candidates = masks[slots[slot]] & set & !*visited;
    while candidates != 0 {
        let gpu = candidates.trailing_zeros() as usize;
        candidates &= candidates - 1;
        *visited |= 1 << gpu;
        let free = match owner[gpu] {
            None => true,
            Some(other) => augment(other, slots, masks, set, owner, visited),
        };
        if free {
            owner[gpu] = Some(slot);
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_takes_the_set() {
        assert_eq!(split(0b1111, &[4], &[0xff]), Some(vec![0b1111]));
    }

    #[test]
    fn augmenting_paths_rearrange_earlier_slots() {
        // Request 0 may use 0 or 1, request 1 only 0: request 0 must yield GPU 0.
        assert_eq!(split(0b11, &[1, 1], &[0b11, 0b01]), Some(vec![0b10, 0b01]));
    }

    #[test]
    fn impossible_splits_are_none() {
        assert_eq!(split(0b11, &[1, 1], &[0b01, 0b01]), None);
        assert_eq!(split(0b111, &[1, 1], &[0b111, 0b111]), None);
    }
}
