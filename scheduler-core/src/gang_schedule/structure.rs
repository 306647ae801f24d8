//! A gang's structure as its members state it (`GpuRequest::gang_structure`,
//! `rank`), put on this snapshot's network tiers (docs/contract/gang-structure.md).
//!
//! A constraint names a node label key: one of the configured tiers (by
//! key, or by its short name: `leaf` for `gputopo.dev/leaf`), or
//! `kubernetes.io/hostname`, which adds the node itself as the innermost
//! tier of this one decision. Members that state a structure must state
//! the same one; it applies to every GPU member.

use crate::gang::domain::short_tier_name;
use crate::gang::{GangNode, Slice, Within};
use crate::pod::PendingPod;
use crate::snapshot::{NodeId, Snapshot};
use gputopo_api::{GangStructure, TierKey};

/// The node label that names the node itself.
pub(super) const HOSTNAME: &str = "kubernetes.io/hostname";

/// The structure on tier indices (outermost first; the hostname tier, when
/// used, after the configured ones).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Structure {
    pub within: Within,
    pub preferred: Option<usize>,
    pub slices: Vec<Slice>,
    /// Whether a constraint names `kubernetes.io/hostname`.
    pub hostname: bool,
}

/// Why a gang's stated structure cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StructureError {
    #[error(
        "members {first} and {other} state different structures ({first_says} and {other_says}); members of one gang must state the same"
    )]
    Disagree {
        first: String,
        other: String,
        first_says: String,
        other_says: String,
    },
    #[error(
        "{from} names node label {key}, which is not a network tier of this scheduler (its tiers, outermost first: {tiers}; or {HOSTNAME}); name one of them, or add the label to networkTiers"
    )]
    NotATier {
        from: String,
        key: String,
        tiers: String,
    },
}

/// The GPU members' common structure, or why the gang cannot use it.
pub(crate) fn read(
    snapshot: &Snapshot,
    members: &[&PendingPod],
) -> Result<Structure, StructureError> {
    let mut stated: Option<(&PendingPod, &GangStructure)> = None;
    for m in members {
        let s = &m.request.gang_structure;
        if s.is_empty() {
            continue;
        }
        match stated {
            None => stated = Some((m, s)),
            Some((first, f)) if !same(f, s) => {
                return Err(StructureError::Disagree {
                    first: first.key(),
                    other: m.key(),
                    first_says: describe(f),
                    other_says: describe(s),
                });
            }
            Some(_) => {}
        }
    }
    let Some((_, s)) = stated else {
        return Ok(Structure::default());
    };
    let keys = snapshot.tiers().keys();
    let mut hostname = false;
    let mut tier = |key: &str, from: &str| -> Result<usize, StructureError> {
        if key == HOSTNAME {
            hostname = true;
            return Ok(keys.len());
        }
        keys.iter()
            .position(|k| k == key)
            .or_else(|| keys.iter().position(|k| short_tier_name(k) == key))
            .ok_or_else(|| StructureError::NotATier {
                from: from.to_string(),
                key: key.to_string(),
                tiers: keys.join(", "),
            })
    };
    let within = match &s.required {
        Some(TierKey { key, from }) => Within::OneDomainAt {
            tier: tier(key, from)?,
        },
        None => Within::Anywhere,
    };
    let preferred = match &s.preferred {
        Some(TierKey { key, from }) => Some(tier(key, from)?),
        None => None,
    };
    let mut slices = Vec::new();
    for layer in &s.slices {
        slices.push(Slice {
            size: layer.size,
            tier: tier(&layer.key, layer.from)?,
            required: layer.required,
        });
    }
    Ok(Structure {
        within,
        preferred,
        slices,
        hostname,
    })
}

/// Adds each node's name as the innermost tier.
pub(super) fn add_hostname_tier(
    snapshot: &Snapshot,
    tier_names: &mut Vec<String>,
    nodes: &mut [GangNode],
) {
    let depth = tier_names.len();
    tier_names.push(HOSTNAME.to_string());
    for node in nodes {
        node.tiers.resize(depth, None);
        let name = snapshot.node(NodeId(node.id as u32)).name().to_string();
        node.tiers.push(Some(name));
    }
}

/// Members in rank order: those with a rank by rank, then the rest, each
/// in name order (`namespace/name`).
pub(super) fn in_rank_order(members: &[PendingPod], indices: &mut [usize]) {
    indices.sort_by(|&a, &b| {
        let (a, b) = (&members[a], &members[b]);
        let key = |m: &PendingPod| (m.request.rank.is_none(), m.request.rank.clone());
        key(a)
            .cmp(&key(b))
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// The same structure, whichever vocabulary said it.
fn same(a: &GangStructure, b: &GangStructure) -> bool {
    let tier = |x: &Option<TierKey>, y: &Option<TierKey>| {
        x.as_ref().map(|t| &t.key) == y.as_ref().map(|t| &t.key)
    };
    tier(&a.required, &b.required)
        && tier(&a.preferred, &b.preferred)
        && a.slices.len() == b.slices.len()
        && a.slices
            .iter()
            .zip(&b.slices)
            .all(|(x, y)| x.key == y.key && x.size == y.size && x.required == y.required)
}

fn describe(s: &GangStructure) -> String {
    let mut parts = Vec::new();
    if let Some(r) = &s.required {
        parts.push(format!("required {}", r.key));
    }
    if let Some(p) = &s.preferred {
        parts.push(format!("preferred {}", p.key));
    }
    for l in &s.slices {
        let kind = if l.required { "required" } else { "preferred" };
        parts.push(format!("slices of {} in {} ({kind})", l.size, l.key));
    }
    parts.join(", ")
}
