//! Matching pods per topology domain of one constraint: a dense table
//! indexed by the domain value's interned symbol, with one more slot for
//! nodes that lack the key (upstream reads such a node's value as `""`,
//! so that slot is the symbol of `""` when some node has that value).

use crate::snapshot::Snapshot;
use crate::snapshot::intern::Sym;

pub(super) struct Domains {
    key: Option<Sym>,
    missing: usize,
    counts: Vec<u32>,
    present: Vec<bool>,
    len: usize,
}

impl Domains {
    pub(super) fn new(snapshot: &Snapshot, key: Option<Sym>) -> Domains {
        let width = snapshot.interned_strings();
        Domains {
            key,
            missing: snapshot.strings.get("").map_or(width, |s| s.0 as usize),
            counts: vec![0; width + 1],
            present: vec![false; width + 1],
            len: 0,
        }
    }

    /// The node's value of the key; `None` when it lacks the key.
    pub(super) fn value(&self, snapshot: &Snapshot, index: usize) -> Option<usize> {
        let key = self.key?;
        snapshot.label_sym(index, key).map(|v| v.0 as usize)
    }

    /// The node's domain slot, the missing-key slot when it lacks the key.
    pub(super) fn slot(&self, snapshot: &Snapshot, index: usize) -> usize {
        self.value(snapshot, index).unwrap_or(self.missing)
    }

    /// Makes the domain at `slot` exist (with no pods yet).
    pub(super) fn touch(&mut self, slot: usize) {
        if let Some(p) = self.present.get_mut(slot)
            && !*p
        {
            *p = true;
            self.len += 1;
        }
    }

    pub(super) fn add(&mut self, slot: usize, pods: u32) {
        if let Some(c) = self.counts.get_mut(slot) {
            *c += pods;
        }
    }

    pub(super) fn is_present(&self, slot: usize) -> bool {
        self.present.get(slot).copied().unwrap_or(false)
    }

    pub(super) fn count(&self, slot: usize) -> u32 {
        self.counts.get(slot).copied().unwrap_or(0)
    }

    /// How many domains exist.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The fewest matching pods in any existing domain; `None` without one.
    pub(super) fn min(&self) -> Option<u32> {
        self.present
            .iter()
            .zip(&self.counts)
            .filter(|(p, _)| **p)
            .map(|(_, c)| *c)
            .min()
    }
}
