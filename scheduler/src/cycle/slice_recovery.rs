//! The rest of a partly bound gang with structure: a replacement goes to
//! its slice's domain, and never outside the gang's required domain.
//! Pure: the gang step passes the unit and the snapshot.
//!
//! A member's slice is its position in rank order over all members, bound
//! and pending (docs/contract/gang-structure.md), divided by the slice size.
//! Where bound members of that slice share a domain of the slice's tier, the
//! pending member is sent there by a node selector on the tier's label.
//! Pending members of slices with no bound member are placed with the
//! gang's required domain only (their slice is not formed anew).

use super::gang::GangUnit;
use gputopo_api::Rank;
use gputopo_scheduler_core::snapshot::Snapshot;
use std::collections::{BTreeMap, BTreeSet};

/// Per pending member (in `unit.members` order), the `(label, value)` of its
/// slice's domain, where its bound slice-mates name one.
pub fn slice_selectors(snapshot: &Snapshot, unit: &GangUnit) -> Vec<Option<(String, String)>> {
    let none = vec![None; unit.members.len()];
    let Some(slice) = unit
        .members
        .iter()
        .find_map(|(_, p)| p.request.gang_structure.slices.first().cloned())
    else {
        return none;
    };
    if unit.bound_members.is_empty() || slice.size == 0 {
        return none;
    }
    // Every member by rank: (no rank last, rank, name), then pending or bound.
    let mut all: Vec<(bool, Option<Rank>, String, Member)> = unit
        .members
        .iter()
        .enumerate()
        .map(|(i, (_, p))| {
            (
                p.request.rank.is_none(),
                p.request.rank.clone(),
                p.key(),
                Member::Pending(i),
            )
        })
        .collect();
    all.extend(unit.bound_members.iter().enumerate().map(|(i, (key, _))| {
        let rank = unit.bound_ranks.get(i).cloned().flatten();
        (rank.is_none(), rank, key.clone(), Member::Bound(i))
    }));
    all.sort_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
    let size = slice.size as usize;
    let mut domains: BTreeMap<usize, BTreeSet<Option<String>>> = BTreeMap::new();
    for (pos, entry) in all.iter().enumerate() {
        if let Member::Bound(i) = entry.3 {
            let node = &unit.bound_members[i].1;
            let value = snapshot
                .node_id(node)
                .and_then(|id| snapshot.node(id).label(&slice.key).map(str::to_string))
                .or_else(|| (slice.key == HOSTNAME).then(|| node.clone()));
            domains.entry(pos / size).or_default().insert(value);
        }
    }
    let mut out = none;
    for (pos, entry) in all.iter().enumerate() {
        if let Member::Pending(i) = entry.3
            && let Some(values) = domains.get(&(pos / size))
            && let [Some(value)] = values.iter().collect::<Vec<_>>()[..]
        {
            out[i] = Some((slice.key.clone(), value.clone()));
        }
    }
    out
}

/// Keeps only the selectors that stay inside the gang's required domain:
/// those that fix the required tier's label (the bound members' domain).
/// The most specific selector is kept where none does.
pub fn within_required(
    selectors: Vec<BTreeMap<String, String>>,
    required: Option<&str>,
) -> Vec<BTreeMap<String, String>> {
    let Some(key) = required else {
        return selectors;
    };
    let inside: Vec<BTreeMap<String, String>> = selectors
        .iter()
        .filter(|s| s.contains_key(key))
        .cloned()
        .collect();
    if inside.is_empty() {
        selectors.into_iter().take(1).collect()
    } else {
        inside
    }
}

const HOSTNAME: &str = "kubernetes.io/hostname";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Member {
    Pending(usize),
    Bound(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_required_tier_keeps_the_rest_inside_the_bound_members_domain() {
        let selectors = vec![
            sel(&[("spine", "s1"), ("leaf", "l1")]),
            sel(&[("spine", "s1")]),
            sel(&[]),
        ];
        assert_eq!(within_required(selectors.clone(), None).len(), 3);
        assert_eq!(
            within_required(selectors.clone(), Some("spine")),
            selectors[..2].to_vec()
        );
        assert_eq!(
            within_required(selectors.clone(), Some("leaf")),
            selectors[..1].to_vec()
        );
        // Bound members in two racks already: the closest selector only.
        assert_eq!(
            within_required(vec![sel(&[("spine", "s1")]), sel(&[])], Some("rack")),
            vec![sel(&[("spine", "s1")])]
        );
    }
}
