//! The baselines' node scores (FGD's plugins, best fit, GPU clustering and
//! packing), the GPU chosen inside a node, and the two rules for equal scores:
//! the run's node order, or uniform random as kube-scheduler's `selectHost`.

use super::{MAX_GPU, MAX_SCORE};
use crate::simulate::{SimPod, World, below};
use rand_chacha::ChaCha8Rng;

/// `a / b`, 0 when `b` is 0.
pub(super) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// GPUs with at least `milli` free, ascending.
pub(super) fn fitting(left: &[u32], milli: u32) -> impl Iterator<Item = u32> + '_ {
    left.iter()
        .enumerate()
        .filter(move |&(_, &l)| l >= milli)
        .map(|(g, _)| g as u32)
}

/// The fitting GPU with the least free milli (lowest index on ties).
pub(super) fn best_fit_gpu(left: &[u32], milli: u32) -> u32 {
    fitting(left, milli)
        .min_by_key(|&g| left[g as usize])
        .unwrap_or(0)
}

/// FGD's score: `⌊100 · sigmoid((before − after) / 1000)⌋`, the node's
/// measure before and after placement in milli-GPU (upstream's
/// `calculateGpuShareFragExtendScore`). For a share, every fitting GPU is
/// tried and the first with the highest score is taken; whole GPUs all leave
/// the same multiset of free amounts, so one evaluation suffices.
pub(super) fn fgd_score(world: &World<'_>, node: usize, pod: &SimPod) -> (i64, u32) {
    let s = &world.state;
    let before = s.frag[node];
    let left = &s.gpu_left[node];
    let mut buf = [0u32; 32];
    let n = left.len().min(32);
    buf[..n].copy_from_slice(&left[..n]);
    let model = world.nodes[node].model;
    let cpu_left = s.cpu_left[node] - pod.cpu_milli;
    let score = |buf: &[u32]| {
        let after = world.frag.node(&crate::simulate::frag::NodeFree {
            cpu_left,
            model,
            gpu_left: buf,
        });
        fgd_points(before - after)
    };
    if pod.num_gpu == 0 {
        return (score(&buf[..n]), 0);
    }
    if !pod.is_share() {
        let mut taken = 0;
        for l in buf[..n].iter_mut() {
            if taken < pod.num_gpu && *l == 1000 {
                *l = 0;
                taken += 1;
            }
        }
        return (score(&buf[..n]), 0);
    }
    let mut best: Option<(i64, u32)> = None;
    for g in fitting(left, pod.gpu_milli) {
        let l = left[g as usize];
        // GPUs with equal free amounts score alike: the first one stands for them.
        if (0..g).any(|h| left[h as usize] == l) {
            continue;
        }
        buf[g as usize] = l - pod.gpu_milli;
        let points = score(&buf[..n]);
        buf[g as usize] = l;
        if best.is_none_or(|b| points > b.0) {
            best = Some((points, g));
        }
    }
    best.unwrap_or((i64::MIN, 0))
}

/// `⌊100 · sigmoid(decrease / 1000)⌋`: 50 when the measure does not change.
pub fn fgd_points(decrease: f64) -> i64 {
    (MAX_SCORE as f64 / (1.0 + (-decrease / 1000.0).exp())) as i64
}

/// GPU clustering (upstream's `GpuClusteringScorePlugin`): pods are grouped
/// by kind, `share-gpu` or `k-gpu`; a node that runs only pods of the pod's
/// kind scores 75–100, one that runs that kind among others 50–75, a node
/// with no GPU pod 25–50, the rest 0–25; inside a band, fuller nodes first
/// (`25 · (8000 − free milli) / 8000`, integer). Pods without GPUs score 0.
pub(super) fn clustering_score(classes: &[(u32, u32, u32)], left: &[u32], pod: &SimPod) -> i64 {
    if pod.num_gpu == 0 {
        return 0;
    }
    let kind = |k: u32, m: u32| if k == 1 && m < 1000 { 0 } else { k };
    let mine = kind(pod.num_gpu, pod.gpu_milli);
    let mut kinds = 0u64;
    for &(k, m, count) in classes {
        if count > 0 {
            kinds |= 1 << kind(k, m).min(63);
        }
    }
    let free: i64 = left.iter().map(|&l| i64::from(l)).sum();
    let fill = MAX_SCORE / 4 * (MAX_GPU as i64 - free) / MAX_GPU as i64;
    let band = if kinds & (1 << mine.min(63)) != 0 {
        if kinds.count_ones() == 1 { 3 } else { 2 }
    } else if kinds == 0 {
        1
    } else {
        0
    };
    fill + MAX_SCORE / 4 * band
}

/// GPU packing (upstream's `GpuPackingScorePlugin`): a share that fits on
/// partly used GPUs scores `max(100 − Σ free% / 10, 50)` over the GPUs it
/// would use; a pod that needs `u` idle GPUs of a node already in use
/// `max(50 − u, 33)`; on an idle node of `g` GPUs `max(33 − g, g)`. The
/// GPUs are taken least free first. Pods without GPUs score 0.
pub(super) fn packing_score(left: &[u32], pod: &SimPod) -> i64 {
    if pod.num_gpu == 0 {
        return 0;
    }
    let idle = left.iter().filter(|&&l| l == 1000).count() as i64;
    if idle == left.len() as i64 {
        return (MAX_SCORE / 3 - idle).max(idle);
    }
    let mut order: Vec<usize> = (0..left.len()).collect();
    order.sort_by_key(|&g| left[g]);
    let mut want = pod.num_gpu;
    let mut idle_used = 0i64;
    let mut free_pct = 0i64;
    for g in order {
        if want == 0 {
            break;
        }
        if left[g] >= pod.gpu_milli {
            want -= 1;
            if left[g] == 1000 {
                idle_used += 1;
            }
            free_pct += i64::from(left[g]) * 100 / 1000;
        }
    }
    if idle_used > 0 {
        (MAX_SCORE / 2 - idle_used).max(MAX_SCORE / 3)
    } else {
        (MAX_SCORE - free_pct / 10).max(MAX_SCORE / 2)
    }
}

/// Upstream's `NormalizeScore`: scores mapped onto 0–100 by min and max
/// (integer arithmetic); all equal gives all 0.
pub(super) fn normalize(scores: &mut [(usize, i64, u32)]) {
    let (Some(lo), Some(hi)) = (
        scores.iter().map(|s| s.1).min(),
        scores.iter().map(|s| s.1).max(),
    ) else {
        return;
    };
    for s in scores.iter_mut() {
        s.1 = if hi == lo {
            0
        } else {
            (s.1 - lo) * MAX_SCORE / (hi - lo)
        };
    }
}

/// The feasible node with the highest score (and its share GPU); equal best
/// scores broken uniformly at random (seeded), as kube-scheduler's
/// `selectHost` does.
pub(super) fn random_ties(
    world: &World<'_>,
    pod: &SimPod,
    rng: &mut ChaCha8Rng,
    mut score: impl FnMut(usize) -> (f64, u32),
) -> Option<(usize, u32)> {
    let mut top: Option<(f64, usize, u32)> = None;
    let mut ties = 0usize;
    for node in 0..world.nodes.len() {
        if !world.feasible(node, pod) {
            continue;
        }
        let (s, gpu) = score(node);
        match top {
            Some((t, ..)) if s < t => {}
            Some((t, ..)) if s == t => {
                ties += 1;
                if below(rng, ties) == 0 {
                    top = Some((s, node, gpu));
                }
            }
            _ => {
                top = Some((s, node, gpu));
                ties = 1;
            }
        }
    }
    top.map(|(_, node, gpu)| (node, gpu))
}

/// The feasible node with the highest integer score (0–100, as a
/// kube-scheduler plugin returns it); equal scores go to the node that comes
/// first in the run's node order ([`World::node_order`]).
pub(super) fn ordered(
    world: &World<'_>,
    pod: &SimPod,
    mut score: impl FnMut(usize) -> (i64, u32),
) -> Option<(usize, u32)> {
    let mut top: Option<(i64, u32, usize, u32)> = None;
    for node in 0..world.nodes.len() {
        if !world.feasible(node, pod) {
            continue;
        }
        let (s, gpu) = score(node);
        let place = world.node_order[node];
        if top.is_none_or(|(t, p, ..)| s > t || (s == t && place < p)) {
            top = Some((s, place, node, gpu));
        }
    }
    top.map(|(.., node, gpu)| (node, gpu))
}

/// [`ordered`] over scores already computed: `(node, score, share GPU)`.
pub(super) fn first_in_order(
    world: &World<'_>,
    scores: Vec<(usize, i64, u32)>,
) -> Option<(usize, u32)> {
    scores
        .into_iter()
        .max_by(|a, b| {
            a.1.cmp(&b.1)
                .then(world.node_order[b.0].cmp(&world.node_order[a.0]))
        })
        .map(|(node, _, gpu)| (node, gpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(num_gpu: u32, gpu_milli: u32) -> SimPod {
        SimPod {
            name: String::new(),
            cpu_milli: 1000,
            memory_mib: 0,
            num_gpu,
            gpu_milli,
            models: 0,
            arrival: 0.0,
            duration: None,
            gang: None,
        }
    }

    #[test]
    fn packing_scores_follow_upstream_bands() {
        // Idle node of g GPUs: max(33 - g, g).
        assert_eq!(packing_score(&[1000; 8], &pod(1, 1000)), 25);
        assert_eq!(packing_score(&[1000; 2], &pod(1, 1000)), 31);
        // A used node where the pod needs u idle GPUs: max(50 - u, 33).
        let used = [0, 1000, 1000, 1000];
        assert_eq!(packing_score(&used, &pod(1, 1000)), 49);
        assert_eq!(packing_score(&used, &pod(2, 1000)), 48);
        // A share on a partly used GPU: max(100 - free% / 10, 50); least free first.
        assert_eq!(packing_score(&[600, 1000], &pod(1, 500)), 94);
        assert_eq!(packing_score(&[300, 1000], &pod(1, 500)), 49);
        assert_eq!(packing_score(&[1000; 4], &pod(0, 0)), 0);
        // Each band ranks above the next.
        assert!(packing_score(&[600, 1000], &pod(1, 500)) > 50);
        assert!((33..=50).contains(&packing_score(&used, &pod(3, 1000))));
    }

    #[test]
    fn clustering_scores_follow_upstream_bands() {
        let one = pod(1, 1000);
        // Node with only 1-GPU pods, 2 of 8 GPUs free: 25·6000/8000 + 75.
        let only = [(1, 1000, 2)];
        assert_eq!(
            clustering_score(&only, &[0, 0, 0, 0, 0, 0, 1000, 1000], &one),
            93
        );
        // With shares too: band 50-75; shares of any size count as one kind.
        let mixed = [(1, 1000, 1), (1, 250, 1), (1, 500, 1)];
        let left = [0, 250, 1000, 1000, 1000, 1000, 1000, 1000];
        assert_eq!(clustering_score(&mixed, &left, &one), 5 + 50);
        assert_eq!(clustering_score(&mixed, &left, &pod(1, 100)), 5 + 50);
        // Idle node 25-50; other kinds 0-25; no GPU asked: 0.
        assert_eq!(clustering_score(&[], &[1000; 8], &one), 25);
        assert_eq!(
            clustering_score(&[(2, 1000, 1)], &[0, 0, 1000, 1000], &one),
            18
        );
        assert_eq!(clustering_score(&only, &[1000; 8], &pod(0, 0)), 0);
    }

    #[test]
    fn fgd_points_are_whole_and_centred_on_no_change() {
        assert_eq!(fgd_points(0.0), 50);
        assert_eq!(fgd_points(1000.0), 73);
        assert_eq!(fgd_points(-1000.0), 26);
        assert!(fgd_points(30.0) == 50 && fgd_points(60.0) == 51);
    }

    #[test]
    fn normalize_maps_min_and_max_to_0_and_100() {
        let mut s = vec![(0, 40, 0), (1, 90, 0), (2, 65, 0)];
        normalize(&mut s);
        assert_eq!(s.iter().map(|x| x.1).collect::<Vec<_>>(), [0, 100, 50]);
        let mut same = vec![(0, 7, 0), (1, 7, 0)];
        normalize(&mut same);
        assert!(same.iter().all(|x| x.1 == 0));
    }
}
