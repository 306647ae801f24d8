//! Resource amounts as the snapshot stores and compares them: a node's or a
//! bound pod's with extended resource names interned, a pending pod's
//! against those names, and a GPU share's milli and MiB on one GPU. Shared by
//! building (`build_node.rs`), pod changes (`pod_changes.rs`) and the filter.

use super::Amounts;
use super::intern::{Interner, Sym};
use crate::resources::Resources;
use gputopo_api::GpuShare;

/// Interns `r`'s extended resource names: what a node's amounts are stored as.
pub(crate) fn amounts(r: &Resources, strings: &mut Interner) -> Amounts {
    let mut extended: Vec<(Sym, i64)> = r
        .extended
        .iter()
        .filter(|(_, a)| *a != 0)
        .map(|(n, a)| (strings.intern(n), *a))
        .collect();
    extended.sort_unstable_by_key(|(s, _)| *s);
    Amounts {
        cpu_milli: r.cpu_milli,
        memory: r.memory,
        ephemeral_storage: r.ephemeral_storage,
        pods: r.pods,
        gpus: r.gpus,
        extended: extended.into_boxed_slice(),
    }
}

/// A pending pod's extended requests against the snapshot's names: `None`
/// for a name no node has (so no node can fit a non-zero request of it).
pub(crate) fn resolve_amounts(r: &Resources, strings: &Interner) -> Vec<(Option<u32>, i64, usize)> {
    r.extended
        .iter()
        .enumerate()
        .filter(|(_, (_, a))| *a > 0)
        .map(|(i, (n, a))| (strings.get(n).map(|s| s.0), *a, i))
        .collect()
}

/// A share's amounts on a GPU of `memory_mib`: `None` for a memory share on a
/// GPU whose memory is unknown (nothing can say it fits).
pub fn share_amounts(share: GpuShare, memory_mib: Option<u64>) -> Option<(u32, u64)> {
    match share {
        GpuShare::Milli(milli) => Some((
            milli,
            memory_mib.map_or(0, |m| m.saturating_mul(u64::from(milli)).div_ceil(1000)),
        )),
        GpuShare::MemoryMiB(mib) => {
            let total = memory_mib?;
            let milli = (mib.saturating_mul(1000)).div_ceil(total.max(1));
            Some((u32::try_from(milli).unwrap_or(u32::MAX), mib))
        }
    }
}
