//! `place` on every recorded `nvidia-smi topo -m` fixture that parses, for
//! every request size and several free masks, against an independent
//! brute-force optimum: the best bottleneck any `k` free GPUs reach.
//!
//! The oracle shares no code with `gpuset`: the best ring of level `L`
//! exists exactly when the graph of links at least `L` among the free GPUs
//! has a simple cycle through `k` of them (found by depth-first search); the
//! best all-to-all set of level `L` is a `k`-clique of that graph.

use gputopo::place::{PlaceRequest, place};
use gputopo_api::{Collective, GpuTopologySpec, LinkClass};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::normalize::normalize;
use std::collections::HashSet;
use std::path::PathBuf;

fn fixtures() -> Vec<(String, GpuTopologySpec)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nvidia");
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures/nvidia exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(facts) = facts_from_topo(&text) else {
            continue;
        };
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let Ok(spec) = normalize(&name, &facts) else {
            continue;
        };
        if !spec.gpus.is_empty() && spec.gpus.iter().all(|g| g.index < 32) {
            out.push((name, spec));
        }
    }
    out
}

/// The link class between two GPUs (absent pairs read as SYS, as gpuset does).
fn class(spec: &GpuTopologySpec, a: u32, b: u32) -> LinkClass {
    spec.link(a, b).map_or(LinkClass::Sys, |l| l.class())
}

/// Adjacency masks of the graph of links at least `level`.
fn graph(spec: &GpuTopologySpec, level: LinkClass) -> Vec<u32> {
    let n = spec.gpus.iter().map(|g| g.index + 1).max().unwrap_or(0);
    (0..n)
        .map(|a| {
            (0..n)
                .filter(|&b| b != a && class(spec, a, b) >= level)
                .fold(0u32, |m, b| m | (1 << b))
        })
        .collect()
}

/// Whether `adj` restricted to `pool` has a simple cycle through exactly `k` vertices.
fn has_cycle(adj: &[u32], pool: u32, k: u32) -> bool {
    fn dfs(
        adj: &[u32],
        pool: u32,
        start: u32,
        cur: u32,
        visited: u32,
        left: u32,
        failed: &mut HashSet<(u32, u32)>,
    ) -> bool {
        if left == 0 {
            return adj[cur as usize] & (1 << start) != 0;
        }
        if failed.contains(&(cur, visited)) {
            return false;
        }
        // Only vertices above `start` join, so each cycle is found from its lowest vertex.
        let mut next = adj[cur as usize] & pool & !visited & !((2u32 << start) - 1);
        while next != 0 {
            let v = next.trailing_zeros();
            next &= next - 1;
            if dfs(adj, pool, start, v, visited | (1 << v), left - 1, failed) {
                return true;
            }
        }
        failed.insert((cur, visited));
        false
    }
    let mut starts = pool;
    while starts != 0 {
        let s = starts.trailing_zeros();
        starts &= starts - 1;
        let mut failed = HashSet::new();
        if dfs(adj, pool, s, s, 1 << s, k - 1, &mut failed) {
            return true;
        }
    }
    false
}

/// Whether `adj` restricted to `pool` has a clique of `k` vertices.
fn has_clique(adj: &[u32], pool: u32, k: u32) -> bool {
    if k == 0 {
        return true;
    }
    let mut rest = pool;
    while rest != 0 {
        if rest.count_ones() < k {
            return false;
        }
        let v = rest.trailing_zeros();
        rest &= rest - 1;
        if has_clique(adj, rest & adj[v as usize], k - 1) {
            return true;
        }
    }
    false
}

/// The best bottleneck any `k` GPUs of `pool` reach; `None` when `k` is 1
/// (no hop) or fewer than `k` are free (then `Err`).
fn optimum(
    spec: &GpuTopologySpec,
    classes: &[LinkClass],
    pool: u32,
    k: u32,
    collective: Collective,
) -> Result<Option<LinkClass>, ()> {
    if pool.count_ones() < k {
        return Err(());
    }
    if k == 1 {
        return Ok(None);
    }
    for &level in classes.iter().rev() {
        let adj = graph(spec, level);
        let found = match (collective, k) {
            (Collective::Ring, 2) | (Collective::AllToAll, _) => has_clique(&adj, pool, k),
            (Collective::Ring, _) => has_cycle(&adj, pool, k),
        };
        if found {
            return Ok(Some(level));
        }
    }
    Err(())
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[test]
fn place_reaches_the_brute_force_optimum_on_every_fixture() {
    let fixtures = fixtures();
    assert!(
        fixtures.len() >= 20,
        "only {} fixtures parsed",
        fixtures.len()
    );
    let mut rng = Rng(2026);
    let mut cases = 0u32;
    for (name, spec) in &fixtures {
        let listed = spec.gpus.iter().fold(0u32, |m, g| m | (1 << g.index));
        // The spec's distinct classes plus SYS (absent pairs), worst first.
        let mut classes: Vec<LinkClass> = spec.links.iter().map(|l| l.class()).collect();
        classes.push(LinkClass::Sys);
        classes.sort();
        classes.dedup();
        let mut masks = vec![listed];
        for _ in 0..3 {
            masks.push(listed & rng.next() as u32);
        }
        for &free in &masks {
            for k in 1..=listed.count_ones() {
                for collective in [Collective::Ring, Collective::AllToAll] {
                    let request = PlaceRequest {
                        gpus: k,
                        collective,
                        min_nvlink_level: None,
                        free,
                    };
                    let outcome = place(spec, &request).expect("a valid request");
                    let best = optimum(spec, &classes, free, k, collective);
                    cases += 1;
                    let what = format!("{name} k={k} free={free:#x} {collective}");
                    match (outcome, best) {
                        (Ok(placed), Ok(best)) => {
                            let set = placed.gpus.iter().fold(0u32, |m, g| m | (1 << g));
                            assert_eq!(placed.gpus.len() as u32, k, "{what}");
                            assert_eq!(set & !free, 0, "{what}: used a busy GPU");
                            let claimed = placed.bottleneck.clone();
                            assert_eq!(
                                claimed,
                                best.map(|b| b.to_string()),
                                "{what}: not the optimum ({})",
                                placed.explanation
                            );
                            // The set itself reaches what it claims.
                            let own = optimum(spec, &classes, set, k, collective)
                                .expect("the set has k GPUs");
                            assert_eq!(own, best, "{what}: the set's own bottleneck");
                        }
                        (Err(reason), Err(())) => {
                            assert!(reason.to_string().contains("too few"), "{what}: {reason}");
                        }
                        (outcome, best) => panic!("{what}: place {outcome:?}, oracle {best:?}"),
                    }
                }
            }
        }
    }
    assert!(cases > 1000, "{cases} cases");
}

#[test]
fn min_nvlink_level_matches_the_oracle() {
    for (name, spec) in fixtures() {
        let listed = spec.gpus.iter().fold(0u32, |m, g| m | (1 << g.index));
        for level in [1u32, 2, 4, 12] {
            for k in 2..=listed.count_ones().min(8) {
                let request = PlaceRequest {
                    gpus: k,
                    collective: Collective::Ring,
                    min_nvlink_level: Some(level),
                    free: listed,
                };
                let adj = graph(&spec, LinkClass::Nv(level));
                let possible = has_clique(&adj, listed, k);
                let outcome = place(&spec, &request).expect("valid");
                assert_eq!(
                    outcome.is_ok(),
                    possible,
                    "{name} k={k} NV{level}: {outcome:?}"
                );
                if let Ok(placed) = outcome {
                    for (i, &a) in placed.gpus.iter().enumerate() {
                        for &b in &placed.gpus[i + 1..] {
                            assert!(class(&spec, a, b) >= LinkClass::Nv(level), "{name}");
                        }
                    }
                }
            }
        }
    }
}
