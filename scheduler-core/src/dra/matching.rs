//! Splitting one chosen GPU set over the requests that asked for it: a
//! bipartite matching between request slots (request `r` has `counts[r]`
//! slots) and GPUs, each slot taking a GPU of its request's candidates.
//!
//! Kuhn's augmenting paths, slots in request order, each slot taking the
//! lowest free GPU of its candidates and only otherwise moving an earlier
//! slot along an augmenting path: deterministic, it finds a split whenever
//! one exists, and earlier requests keep the lower indices where the
//! candidates allow.

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
    let candidates = masks[slots[slot]] & set & !*visited;
    // A free GPU first, lowest index first: earlier requests keep lower indices.
    let mut free = candidates;
    while free != 0 {
        let gpu = free.trailing_zeros() as usize;
        free &= free - 1;
        if owner[gpu].is_none() {
            *visited |= 1 << gpu;
            owner[gpu] = Some(slot);
            return true;
        }
    }
    // Otherwise move a holder elsewhere (an augmenting path).
    let mut taken = candidates;
    while taken != 0 {
        let gpu = taken.trailing_zeros() as usize;
        taken &= taken - 1;
        if *visited & (1 << gpu) != 0 {
            continue;
        }
        *visited |= 1 << gpu;
        if let Some(other) = owner[gpu]
            && augment(other, slots, masks, set, owner, visited)
        {
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
