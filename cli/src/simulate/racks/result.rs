//! What a run reports, and the side-by-side table.

use super::engine::{Outcome, in_one, racks_spanned, slices_in_order, slices_possible};
use super::fabric::Fabric;
use super::workload::{UnitKind, Workload};
use serde::Serialize;
use std::fmt::Write as _;

/// Queue times of one class of units, in hours.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassStats {
    pub class: String,
    pub members: u32,
    pub arrived: u64,
    pub placed: u64,
    pub queue_p50_h: Option<f64>,
    pub queue_p99_h: Option<f64>,
    pub queue_mean_h: Option<f64>,
    /// Gangs: mean racks spanned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub racks_spanned_mean: Option<f64>,
    /// Training gangs: the share placed inside one domain of their
    /// preferred tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_held_pct: Option<f64>,
}

/// One policy's run of the scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RacksResult {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub racks: usize,
    pub nodes: usize,
    pub gpus: u32,
    pub hours: f64,
    pub load: f64,
    /// The measures' window, hours from the start.
    pub window_h: (f64, f64),
    pub units: u64,
    pub placed: u64,
    /// Structured training gangs placed.
    pub gangs_placed: u64,
    /// Of those, the share whose nodes hold every slice inside one rack
    /// (each rack hosts a whole number of slices).
    pub required_held_pct: Option<f64>,
    /// Of those, the share whose ranks, in order, are cut into slices each
    /// inside one rack (the placement's own rank layout).
    pub ranks_in_slices_pct: Option<f64>,
    /// Of those, the share inside one domain of their preferred tier.
    pub preferred_held_pct: Option<f64>,
    /// The class with the most members.
    pub largest: ClassStats,
    /// Racks with no GPU allocated or reserved, time-weighted mean.
    pub whole_racks_free_mean: f64,
    /// Racks with at least 16 whole trays available, time-weighted mean.
    pub slice16_racks_mean: f64,
    /// Allocated GPUs over all GPUs, time-weighted mean, %.
    pub gpu_allocation_pct_mean: f64,
    pub classes: Vec<ClassStats>,
    pub reservations_made: u64,
    pub makespan_h: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_ms: Option<u64>,
}

/// The `pct` percentile of sorted values (nearest rank).
fn percentile(sorted: &[f64], pct: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn pct(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| round(part as f64 * 100.0 / whole as f64))
}

/// The result of `outcome` (`policy` on `workload`).
pub fn summarize(
    policy: &str,
    seed: u64,
    fabric: &Fabric,
    workload: &Workload,
    outcome: &Outcome,
) -> RacksResult {
    let mut classes = Vec::new();
    for (c, class) in workload.classes.iter().enumerate() {
        let mut waits = Vec::new();
        let (mut arrived, mut spanned, mut preferred) = (0u64, 0usize, 0u64);
        for u in workload.units.iter().filter(|u| u.class == c) {
            arrived += 1;
            if let Some((start, members)) = &outcome.started[u.id] {
                waits.push((start - u.arrival) as f64 / 3600.0);
                spanned += racks_spanned(fabric, members);
                if let UnitKind::Structured {
                    preferred: tier, ..
                } = u.kind
                {
                    preferred += u64::from(in_one(fabric, members, tier));
                }
            }
        }
        waits.sort_by(f64::total_cmp);
        let placed = waits.len() as u64;
        let mean = |x: f64| (placed > 0).then(|| round(x / placed as f64));
        classes.push(ClassStats {
            class: class.name.clone(),
            members: class.members,
            arrived,
            placed,
            queue_p50_h: percentile(&waits, 50.0).map(round),
            queue_p99_h: percentile(&waits, 99.0).map(round),
            queue_mean_h: mean(waits.iter().sum()),
            racks_spanned_mean: (class.members > 1).then(|| mean(spanned as f64)).flatten(),
            preferred_held_pct: matches!(class.kind, UnitKind::Structured { .. })
                .then(|| pct(preferred, placed))
                .flatten(),
        });
    }
    let (mut gangs, mut held, mut ordered, mut preferred) = (0u64, 0u64, 0u64, 0u64);
    for u in &workload.units {
        let (
            UnitKind::Structured {
                slice,
                preferred: tier,
            },
            Some((_, members)),
        ) = (u.kind, &outcome.started[u.id])
        else {
            continue;
        };
        gangs += 1;
        held += u64::from(slices_possible(fabric, members, slice));
        ordered += u64::from(slices_in_order(fabric, members, slice));
        preferred += u64::from(in_one(fabric, members, tier));
    }
    let largest = classes
        .iter()
        .max_by_key(|c| c.members)
        .cloned()
        .unwrap_or_else(|| ClassStats {
            class: String::new(),
            members: 0,
            arrived: 0,
            placed: 0,
            queue_p50_h: None,
            queue_p99_h: None,
            queue_mean_h: None,
            racks_spanned_mean: None,
            preferred_held_pct: None,
        });
    RacksResult {
        scenario: "nvl72".into(),
        policy: policy.to_string(),
        seed,
        racks: fabric.size.racks,
        nodes: fabric.nodes(),
        gpus: fabric.gpus(),
        hours: workload.horizon as f64 / 3600.0,
        load: workload.load,
        window_h: (
            outcome.window.0 as f64 / 3600.0,
            outcome.window.1 as f64 / 3600.0,
        ),
        units: workload.units.len() as u64,
        placed: outcome.started.iter().filter(|s| s.is_some()).count() as u64,
        gangs_placed: gangs,
        required_held_pct: pct(held, gangs),
        ranks_in_slices_pct: pct(ordered, gangs),
        preferred_held_pct: pct(preferred, gangs),
        largest,
        whole_racks_free_mean: round(outcome.whole_racks_free_mean),
        slice16_racks_mean: round(outcome.slice16_racks_mean),
        gpu_allocation_pct_mean: round(outcome.gpu_allocation_mean),
        classes,
        reservations_made: outcome.reservations_made,
        makespan_h: round(outcome.makespan as f64 / 3600.0),
        runtime_ms: None,
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// The side-by-side table (markdown), one row per result.
pub fn table(results: &[RacksResult]) -> String {
    let mut md = String::from(
        "| policy | required held % | ranks in slices % | preferred tier held % | largest gangs queue p50 / p99 h | whole racks free (mean) | racks taking a 16-tray slice (mean) | GPU allocation % (mean) | placed / units |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in results {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} / {} | {:.2} | {:.2} | {:.2} | {} / {} |",
            r.policy,
            opt(r.required_held_pct, 1),
            opt(r.ranks_in_slices_pct, 1),
            opt(r.preferred_held_pct, 1),
            opt(r.largest.queue_p50_h, 2),
            opt(r.largest.queue_p99_h, 2),
            r.whole_racks_free_mean,
            r.slice16_racks_mean,
            r.gpu_allocation_pct_mean,
            r.placed,
            r.units,
        );
    }
    md
}

/// Queue times per class (markdown), one column per result.
pub fn class_table(results: &[RacksResult]) -> String {
    let mut md = String::from("| class | arrived |");
    for r in results {
        let _ = write!(md, " {} p50 / p99 h |", r.policy);
    }
    md.push_str("\n| --- | --- |");
    for _ in results {
        md.push_str(" --- |");
    }
    md.push('\n');
    let Some(first) = results.first() else {
        return md;
    };
    for (i, c) in first.classes.iter().enumerate() {
        let _ = write!(md, "| {} | {} |", c.class, c.arrived);
        for r in results {
            let s = &r.classes[i];
            let _ = write!(
                md,
                " {} / {}{} |",
                opt(s.queue_p50_h, 2),
                opt(s.queue_p99_h, 2),
                s.preferred_held_pct
                    .map_or(String::new(), |p| format!(" ({p:.0} % preferred)"))
            );
        }
        md.push('\n');
    }
    md
}
