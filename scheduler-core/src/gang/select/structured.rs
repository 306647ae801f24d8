//! A gang with structure: a preferred domain and slices, as searches tried
//! in order, the first that fits winning (docs/contract/gang-structure.md).
//!
//! - A **preferred** tier is tried first (every member in one domain of
//!   it), then each tier outward, then the gang's required scope (or the
//!   whole cluster). A required tier bounds the fallback: the preference
//!   is tried only where it is inside the requirement.
//! - **Slices** required stay required in every attempt. Slices preferred
//!   fall back outward tier by tier, then go unsliced; they are relaxed
//!   only after every gang-level fallback has been tried with them, since
//!   a slice (a tensor-parallel group) is the tighter coupling.
//! - A slice layer no finer than the gang's domain is implied by it and
//!   dropped from that attempt.
//!
//! The placement says which tier held; when nothing fits, the error is the
//! loosest attempt's, which names the required constraints that failed.

use super::place_exact;
use crate::gang::domain::short_tier_name;
use crate::gang::{GangCluster, GangNoFit, GangPlacement, GangSpec, Members, Slice, Within};

pub(super) fn place(spec: &GangSpec, cluster: &GangCluster) -> Result<GangPlacement, GangNoFit> {
    check(spec, cluster)?;
    let required = match &spec.within {
        Within::Anywhere => None,
        Within::OneDomainAt { tier } | Within::Domain { tier, .. } => Some(*tier),
    };
    let gang_tiers: Vec<Option<usize>> = match spec.preferred {
        Some(p) => {
            let outermost = required.map_or(0, |r| r + 1);
            (outermost..=p).rev().map(Some).chain([None]).collect()
        }
        None => vec![None],
    };
    let slice_tiers: Vec<Option<usize>> = match spec.slices.first() {
        None => vec![None],
        Some(s) if s.required => vec![Some(s.tier)],
        Some(s) => (0..=s.tier).rev().map(Some).chain([None]).collect(),
    };
    let name = |tier: usize| {
        cluster
            .tier_names
            .get(tier)
            .map_or("domain", |n| short_tier_name(n))
            .to_string()
    };
    let mut last = None;
    let mut first: Option<GangNoFit> = None;
    for &slice_tier in &slice_tiers {
        for &gang_tier in &gang_tiers {
            let scope = gang_tier.or(required);
            let layers = layers_for(&spec.slices, slice_tier, scope);
            let attempt = GangSpec {
                preferred: None,
                slices: layers.clone(),
                ..spec.clone()
            };
            match place_exact(&attempt, cluster, gang_tier) {
                Ok(mut placed) => {
                    let mut notes = notes(spec, gang_tier, slice_tier, &layers, &name);
                    if let (Some(p), Some(GangNoFit::Short(short))) = (spec.preferred, &first)
                        && gang_tier != Some(p)
                        && let Some(best) = short.best.iter().find(|b| b.tier == name(p))
                    {
                        notes.push(format!(
                            "the fullest-fitting {} held {} of {} members ({})",
                            best.tier,
                            best.members,
                            spec.members.len(),
                            best.domain
                        ));
                    }
                    if !notes.is_empty() {
                        placed.explanation =
                            format!("{}; {}", placed.explanation, notes.join("; "));
                    }
                    return Ok(placed);
                }
                Err(e) => {
                    first.get_or_insert_with(|| e.clone());
                    last = Some(e);
                }
            }
        }
    }
    Err(last.unwrap_or(GangNoFit::NoMembers))
}

/// The slice layers of one attempt: the outermost at `slice_tier` (none
/// when `None`), inner layers kept, any layer not inside `scope`'s tier
/// dropped as implied by the gang's domain.
fn layers_for(slices: &[Slice], slice_tier: Option<usize>, scope: Option<usize>) -> Vec<Slice> {
    let Some(outer_tier) = slice_tier else {
        return Vec::new();
    };
    let mut layers = slices.to_vec();
    if let Some(first) = layers.first_mut() {
        first.tier = outer_tier;
    }
    layers.retain(|s| scope.is_none_or(|g| s.tier > g));
    layers
}

/// What the explanation adds: which preferred tier held, how the members
/// were sliced.
fn notes(
    spec: &GangSpec,
    gang_tier: Option<usize>,
    slice_tier: Option<usize>,
    layers: &[Slice],
    name: &dyn Fn(usize) -> String,
) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(p) = spec.preferred {
        notes.push(match gang_tier {
            Some(t) if t == p => format!("preferred one {}: held", name(p)),
            Some(t) => format!(
                "preferred one {}: none had room, held at one {}",
                name(p),
                name(t)
            ),
            None => format!(
                "preferred one {}: no domain of it or of a tier outward had room",
                name(p)
            ),
        });
    }
    if let Some(first) = spec.slices.first() {
        let kind = if first.required {
            "required"
        } else {
            "preferred"
        };
        let asked = spec
            .slices
            .iter()
            .map(|s| format!("{} each in one {}", s.size, name(s.tier)))
            .collect::<Vec<_>>()
            .join(", then ");
        let held = match (slice_tier, layers.is_empty()) {
            (_, true) if slice_tier.is_some() => {
                "held: the gang's domain holds every slice".to_string()
            }
            (Some(t), _) if t == first.tier => "held".to_string(),
            (Some(t), _) => format!("none fit one {}, held at one {}", name(first.tier), name(t)),
            (None, _) => "no tier held them, placed unsliced".to_string(),
        };
        notes.push(format!("slices of {asked} ({kind}): {held}"));
    }
    notes
}

/// Slices must cut the members evenly, nest, stay inside the tiers, and
/// slice alike members.
fn check(spec: &GangSpec, cluster: &GangCluster) -> Result<(), GangNoFit> {
    let n = spec.members.len();
    let tiers = cluster.tier_names.len();
    for tier in spec
        .preferred
        .iter()
        .chain(spec.slices.iter().map(|s| &s.tier))
    {
        if *tier >= tiers {
            return Err(GangNoFit::NoSuchTier { tier: *tier, tiers });
        }
    }
    let Some(first) = spec.slices.first() else {
        return Ok(());
    };
    if first.size == 0 || !n.is_multiple_of(first.size as usize) {
        return Err(GangNoFit::SlicesUneven {
            members: n,
            size: first.size,
        });
    }
    for pair in spec.slices.windows(2) {
        let (outer, inner) = (pair[0], pair[1]);
        if inner.size == 0 || outer.size % inner.size != 0 {
            return Err(GangNoFit::SlicesNotNested {
                outer: outer.size,
                inner: inner.size,
            });
        }
        if inner.tier < outer.tier {
            return Err(GangNoFit::SlicesOutward {
                outer: cluster.tier_names[outer.tier].clone(),
                inner: cluster.tier_names[inner.tier].clone(),
            });
        }
    }
    if let Members::Each(each) = &spec.members
        && each.windows(2).any(|w| w[0] != w[1])
    {
        let sizes: Vec<String> = each.iter().map(|r| r.gpus.to_string()).collect();
        return Err(GangNoFit::SlicesNeedOneRequest {
            sizes: sizes.join("+"),
        });
    }
    Ok(())
}
