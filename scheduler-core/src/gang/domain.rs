//! The network-domain tree built from the nodes' tier paths.
//!
//! A node's domain at tier `t` is identified by its labels at tiers `0..=t`,
//! so a leaf named `leaf-1` under `spine-1` and one under `spine-2` are two
//! domains. A label missing at an outer tier is a value of its own ("no spine
//! label"), shared by the nodes under the same parent: clusters that label only
//! their leaves still group by leaf. A node missing its innermost label is a
//! lowest-tier domain of its own: the scheduler never assumes locality it
//! cannot see at the tier that counts most.

use super::GangNode;
use std::cmp::Ordering;
use std::collections::HashMap;

/// One domain at one tier.
#[derive(Clone, Debug)]
pub(crate) struct Domain {
    pub(crate) tier: usize,
    /// The label value; `None` for an unlabelled group or an unlabelled node.
    pub(crate) label: Option<String>,
    /// `spine-1/leaf-3`: the names from the outermost tier down.
    pub(crate) path: String,
    /// Domain ids at tiers `0..=tier`; the last is this domain.
    pub(crate) ancestors: Vec<u32>,
    /// Lowest-tier domains inside (a leaf lists itself), in id order.
    pub(crate) leaves: Vec<u32>,
    /// Positions (in the input slice) of the nodes inside, in input order.
    pub(crate) nodes: Vec<u32>,
}

/// Every domain of every tier, ids in (tier, natural path) order so that
/// comparing ids compares names.
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    /// The tier names reported to callers (empty when the cluster has no tiers).
    pub(crate) tier_names: Vec<String>,
    /// Tiers used internally: at least 1 (a cluster without tiers is one domain).
    pub(crate) depth: usize,
    pub(crate) domains: Vec<Domain>,
    /// Domain ids per tier, outermost first.
    pub(crate) by_tier: Vec<Vec<u32>>,
    /// The lowest-tier domain of each node (by input position).
    pub(crate) node_leaf: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key<'a> {
    Label(&'a str),
    /// No label at this outer tier: one group per parent.
    Unlabelled,
    /// No label at the innermost tier: the node (by position) alone.
    Alone(usize),
}

impl Tree {
    /// Builds the tree for nodes given as `(id, tier path)`, in input order.
    ///
    /// The tiers are `tier_names` (outermost first); a path longer than the
    /// names adds tiers named `tier-<i>`, a shorter one lacks the inner labels.
    pub(crate) fn build<'a>(
        tier_names: &[String],
        nodes: impl ExactSizeIterator<Item = (usize, &'a [Option<String>])> + Clone,
    ) -> Tree {
        let longest = nodes.clone().map(|(_, p)| p.len()).max().unwrap_or(0);
        let reported = tier_names.len().max(longest);
        let mut names: Vec<String> = tier_names.to_vec();
        names.extend((tier_names.len()..reported).map(|i| format!("tier-{i}")));
        let depth = reported.max(1);

        // Build with insertion ids, renumber by (tier, path) at the end.
        let mut raw: Vec<Domain> = Vec::new();
        let mut index: HashMap<(Option<u32>, Key<'a>), u32> = HashMap::new();
        let mut node_leaf = Vec::with_capacity(nodes.len());
        for (position, (id, path)) in nodes.enumerate() {
            let mut parent: Option<u32> = None;
            for tier in 0..depth {
                let label = path.get(tier).and_then(|l| l.as_deref());
                let key = match label {
                    Some(value) => Key::Label(value),
                    None if reported == 0 => Key::Unlabelled,
                    None if tier + 1 == depth => Key::Alone(position),
                    None => Key::Unlabelled,
                };
                let domain = *index.entry((parent, key)).or_insert_with(|| {
                    let name = match key {
                        Key::Label(v) => v.to_string(),
                        Key::Unlabelled if reported == 0 => "cluster".to_string(),
                        Key::Unlabelled => format!("(no {} label)", tier_label(&names, tier)),
                        Key::Alone(_) => {
                            format!("(no {} label: node {id})", tier_label(&names, tier))
                        }
                    };
                    let (path, mut ancestors) = match parent {
                        Some(p) => {
                            let up = &raw[p as usize];
                            (format!("{}/{name}", up.path), up.ancestors.clone())
                        }
                        None => (name, Vec::new()),
                    };
                    let new = raw.len() as u32;
                    ancestors.push(new);
                    raw.push(Domain {
                        tier,
                        label: label.map(str::to_string),
                        path,
                        ancestors,
                        leaves: Vec::new(),
                        nodes: Vec::new(),
                    });
                    new
                });
                raw[domain as usize].nodes.push(position as u32);
                parent = Some(domain);
            }
            node_leaf.push(parent.unwrap_or_default());
        }

        let mut order: Vec<u32> = (0..raw.len() as u32).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&raw[a as usize], &raw[b as usize]);
            a.tier
                .cmp(&b.tier)
                .then_with(|| natural_cmp(&a.path, &b.path))
        });
        let mut renumber = vec![0u32; raw.len()];
        for (new, &old) in order.iter().enumerate() {
            renumber[old as usize] = new as u32;
        }
        let mut domains: Vec<Domain> = order
            .iter()
            .map(|&old| {
                let mut d = raw[old as usize].clone();
                for a in &mut d.ancestors {
                    *a = renumber[*a as usize];
                }
                d
            })
            .collect();
        for leaf in 0..domains.len() {
            if domains[leaf].tier + 1 == depth {
                for a in domains[leaf].ancestors.clone() {
                    domains[a as usize].leaves.push(leaf as u32);
                }
            }
        }
        let mut by_tier = vec![Vec::new(); depth];
        for (id, d) in domains.iter().enumerate() {
            by_tier[d.tier].push(id as u32);
        }
        for leaf in &mut node_leaf {
            *leaf = renumber[*leaf as usize];
        }
        Tree {
            tier_names: names,
            depth,
            domains,
            by_tier,
            node_leaf,
        }
    }

    /// The tree of a search's candidate nodes (positions in `nodes`): what
    /// the gang search and the eviction search both start from.
    pub(crate) fn of_nodes<'a>(
        tier_names: &[String],
        nodes: impl ExactSizeIterator<Item = &'a GangNode> + Clone,
    ) -> Tree {
        Tree::build(tier_names, nodes.map(|n| (n.id, n.tiers.as_slice())))
    }

    pub(crate) fn domain(&self, id: u32) -> &Domain {
        &self.domains[id as usize]
    }

    /// The lowest-tier domains, in name order.
    pub(crate) fn leaves(&self) -> &[u32] {
        &self.by_tier[self.depth - 1]
    }

    /// Whether `tier` is one the caller can name (the tiers are reported).
    pub(crate) fn has_tier(&self, tier: usize) -> bool {
        tier < self.tier_names.len()
    }

    /// The name of a tier for messages: `spine`, or the label key given.
    pub(crate) fn tier_name(&self, tier: usize) -> &str {
        self.tier_names
            .get(tier)
            .map_or("domain", |name| short_tier_name(name))
    }

    /// The distinct domains at `tier` that contain `leaves`, in id order.
    fn ancestors_at(&self, tier: usize, leaves: &[u32]) -> Vec<u32> {
        let mut at: Vec<u32> = leaves
            .iter()
            .map(|&l| self.domain(l).ancestors[tier])
            .collect();
        at.sort_unstable();
        at.dedup();
        at
    }

    /// Distinct domains per reported tier spanned by a set of leaves.
    pub(crate) fn spans_of_leaves(&self, leaves: &[u32]) -> Vec<Vec<u32>> {
        (0..self.tier_names.len())
            .map(|tier| self.ancestors_at(tier, leaves))
            .collect()
    }

    /// How many domains a set of leaves spans at each tier above the leaves,
    /// outermost first: what the gang search and the eviction search rank by
    /// (the leaves themselves are counted apart).
    pub(crate) fn span_counts(&self, leaves: &[u32]) -> Vec<usize> {
        (0..self.depth - 1)
            .map(|tier| self.ancestors_at(tier, leaves).len())
            .collect()
    }

    /// The domains a set of leaves spans, per tier, by name: what a placement reports.
    pub(crate) fn tier_spans(&self, leaves: &[u32]) -> Vec<super::TierSpan> {
        self.spans_of_leaves(leaves)
            .into_iter()
            .enumerate()
            .map(|(tier, ids)| super::TierSpan {
                tier: self.tier_names[tier].clone(),
                domains: ids.iter().map(|&d| self.domain(d).path.clone()).collect(),
            })
            .collect()
    }
}

/// The short name of a tier for a made-up domain name.
fn tier_label(names: &[String], tier: usize) -> &str {
    names.get(tier).map_or("tier", |n| short_tier_name(n))
}

/// `gputopo.dev/leaf` reads as `leaf`; `fabric.topograph.run/tier-2` as `tier-2`.
pub(crate) fn short_tier_name(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

/// Orders names with their digit runs compared as numbers: `leaf-2` before `leaf-10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (trim_zeros(&a[..da]), trim_zeros(&b[..db]));
                let by_value = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if by_value.is_ne() {
                    return by_value;
                }
                // Equal values: fewer leading zeros first, so the order is total.
                if da != db {
                    return da.cmp(&db);
                }
                a = &a[da..];
                b = &b[db..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&c| c == b'0').count();
    &digits[zeros..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(labels: &[Option<&str>]) -> Vec<Option<String>> {
        labels.iter().map(|l| l.map(str::to_string)).collect()
    }

    #[test]
    fn natural_order_compares_numbers() {
        assert_eq!(natural_cmp("leaf-2", "leaf-10"), Ordering::Less);
        assert_eq!(natural_cmp("leaf-10", "leaf-9"), Ordering::Greater);
        assert_eq!(natural_cmp("a", "b"), Ordering::Less);
        assert_eq!(natural_cmp("leaf-02", "leaf-2"), Ordering::Greater);
        assert_eq!(natural_cmp("x1", "x1"), Ordering::Equal);
    }

    #[test]
    fn leaves_are_named_by_their_parents_and_missing_labels_follow_the_rules() {
        let names = vec![
            "gputopo.dev/spine".to_string(),
            "gputopo.dev/leaf".to_string(),
        ];
        let paths = [
            path(&[Some("s1"), Some("l1")]),
            path(&[Some("s2"), Some("l1")]),
            path(&[Some("s1"), Some("l1")]),
            path(&[None, Some("l9")]),
            path(&[None, Some("l9")]),
            path(&[Some("s1"), None]),
            path(&[Some("s1"), None]),
        ];
        let tree = Tree::build(
            &names,
            paths.iter().enumerate().map(|(i, p)| (i, p.as_slice())),
        );
        let leaf = |n: usize| tree.node_leaf[n];
        assert_eq!(leaf(0), leaf(2), "same spine and leaf");
        assert_ne!(leaf(0), leaf(1), "same leaf label under another spine");
        assert_eq!(leaf(3), leaf(4), "unlabelled spine groups its leaves");
        assert_ne!(leaf(5), leaf(6), "an unlabelled leaf is a node's own");
        assert_eq!(tree.leaves().len(), 5);
        assert_eq!(tree.domain(leaf(0)).path, "s1/l1");
        assert_eq!(tree.tier_name(0), "spine");
        let s1 = tree.domain(leaf(0)).ancestors[0];
        assert_eq!(tree.domain(s1).leaves.len(), 3);
    }

    #[test]
    fn span_counts_count_the_domains_above_the_leaves() {
        let names = vec![
            "gputopo.dev/spine".to_string(),
            "gputopo.dev/leaf".to_string(),
        ];
        // Two spines of two leaves each, one node per leaf.
        let paths = [
            path(&[Some("s1"), Some("l1")]),
            path(&[Some("s1"), Some("l2")]),
            path(&[Some("s2"), Some("l3")]),
            path(&[Some("s2"), Some("l4")]),
        ];
        let tree = Tree::build(
            &names,
            paths.iter().enumerate().map(|(i, p)| (i, p.as_slice())),
        );
        let leaf = |n: usize| tree.node_leaf[n];
        assert_eq!(tree.span_counts(&[leaf(0)]), vec![1], "one leaf");
        assert_eq!(tree.span_counts(&[leaf(0), leaf(0)]), vec![1], "repeated");
        assert_eq!(tree.span_counts(&[leaf(0), leaf(1)]), vec![1], "one spine");
        assert_eq!(
            tree.span_counts(&[leaf(1), leaf(2)]),
            vec![2],
            "both spines"
        );
        assert_eq!(tree.span_counts(&[]), vec![0]);
        // A cluster without tiers is one domain: nothing above its one leaf.
        let flat = Tree::build(&[], paths.iter().enumerate().map(|(i, _)| (i, &[][..])));
        assert_eq!(flat.span_counts(flat.leaves()), Vec::<usize>::new());
    }
}
