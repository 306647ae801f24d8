//! `gputopo simulate --scenario nvl72` on 6 racks: every policy's required
//! constraints, no GPU held twice at any time, gangs whole, and the same
//! bytes for the same seed.

use gputopo::racks::workload::UnitKind;
use gputopo::racks::{self, INVESTIGATIONS, POLICIES, RacksOptions};

fn small() -> RacksOptions {
    RacksOptions {
        racks: 6,
        hours: 96.0,
        seed: 7,
        gang_timeout: None,
        omit_runtime: true,
    }
}

#[test]
fn every_policy_keeps_its_promises_on_six_racks() {
    let options = small();
    let (fabric, workload) = racks::setup(&options);
    assert!(workload.units.len() > 200, "{} units", workload.units.len());
    for policy in POLICIES.into_iter().chain(INVESTIGATIONS) {
        let outcome = racks::outcome(policy, &options, &fabric, &workload).unwrap();
        // Every placed unit whole, with the GPUs it asked for.
        for u in &workload.units {
            if let Some((start, members)) = &outcome.started[u.id] {
                assert!(*start >= u.arrival, "{policy}: unit {} started early", u.id);
                assert_eq!(members.len(), u.members as usize, "{policy}: unit {}", u.id);
                assert!(members.iter().all(|(_, m)| m.count_ones() == u.gpus));
            }
        }
        // No GPU held by two units at once: per (node, GPU), the intervals
        // it was held do not overlap.
        let mut held: Vec<(usize, u32, u64, u64)> = Vec::new();
        for u in &workload.units {
            if let Some((start, members)) = &outcome.started[u.id] {
                for &(node, mask) in members {
                    for g in (0..32).filter(|g| mask & (1 << g) != 0) {
                        held.push((node, g, *start, start + u.duration));
                    }
                }
            }
        }
        held.sort_unstable();
        for w in held.windows(2) {
            if (w[0].0, w[0].1) == (w[1].0, w[1].1) {
                assert!(w[0].3 <= w[1].2, "{policy}: GPU double-booked: {w:?}");
            }
        }
        let result = racks::run_on(policy, &options, &fabric, &workload).unwrap();
        assert!(result.gangs_placed > 20, "{policy}: {result:?}");
        assert_eq!(
            result.placed, result.units,
            "{policy}: every unit ends up placed"
        );
        if policy != "gputopo-flat" {
            assert_eq!(result.required_held_pct, Some(100.0), "{policy}");
            assert_eq!(result.ranks_in_slices_pct, Some(100.0), "{policy}");
        }
        assert!(
            result.gpu_allocation_pct_mean > 30.0,
            "{policy}: {result:?}"
        );
    }
    // The workload has every kind of unit.
    for kind in [UnitKind::Multi, UnitKind::Pod] {
        assert!(workload.units.iter().any(|u| u.kind == kind));
    }
    assert!(
        workload
            .units
            .iter()
            .any(|u| matches!(u.kind, UnitKind::Structured { .. }))
    );
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let options = RacksOptions {
        hours: 24.0,
        ..small()
    };
    let a = serde_json::to_string(&racks::run("gputopo", &options).unwrap()).unwrap();
    let b = serde_json::to_string(&racks::run("gputopo", &options).unwrap()).unwrap();
    assert_eq!(a, b);
}
