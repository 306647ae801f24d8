//! Parts read from one node's own state: the fragmentation part's change
//! to FGD's measure, and the smallest memory of a GPU set (memory fit).

use crate::filter::{Fit, PodContext};
use crate::fragmentation;
use crate::snapshot::Hot;

/// The fragmentation part: `1/(1 + e^{Δ/1000})` for the change placement
/// makes to the node's measure.
pub(super) fn fragmentation_part(
    target: &fragmentation::Compiled,
    ctx: &PodContext<'_>,
    index: usize,
    hot: &Hot,
    fit: &Fit,
) -> f64 {
    let mut state = target.state(&ctx.snapshot.nodes[index], hot);
    let n = state.len;
    let before = target.measure(&state, state.cpu_milli, &state.free[..n]);
    let mut free = state.free;
    let taken = match fit {
        Fit::Whole(pick) => pick.gpus,
        Fit::WholeUnknown { gpus, .. } => *gpus,
        Fit::Shared { gpu, milli, .. } => {
            if let Some(slot) = free.get_mut(*gpu as usize) {
                *slot = slot.saturating_sub(*milli);
            }
            0
        }
        Fit::NoGpu => 0,
    };
    for (g, slot) in free.iter_mut().enumerate().take(n) {
        if taken & (1 << g) != 0 {
            *slot = 0;
        }
    }
    let cpu_after = state
        .cpu_milli
        .saturating_sub(ctx.pod.requests.cpu_milli.max(0));
    state.free = free;
    let after = target.measure(&state, cpu_after, &state.free[..n]);
    // In whole points, as FGD scores: see the module docs.
    (fragmentation::part(after - before) * 100.0).floor() / 100.0
}

/// The smallest known memory among `gpus` of the node.
pub(super) fn smallest_memory(ctx: &PodContext<'_>, hot: &Hot, gpus: u32) -> Option<u64> {
    if hot.kind != Hot::SHAPE {
        return None;
    }
    let entry = ctx.snapshot.shapes.get(hot.shape as usize)?;
    let mut rest = gpus;
    let mut smallest: Option<u64> = None;
    while rest != 0 {
        let g = rest.trailing_zeros();
        rest &= rest - 1;
        if let Some(m) = entry.memory_mib.get(g as usize).copied().flatten() {
            smallest = Some(smallest.map_or(m, |s| s.min(m)));
        }
    }
    smallest
}
