//! Network domains (one value of one tier's label) and their GPU usage,
//! kept in step as pods come and go.

use super::{NodeId, Snapshot};
use std::num::NonZeroU32;
use std::sync::Arc;

/// A network domain: one value of one tier's label, under its parent's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainId(pub(super) NonZeroU32);

impl DomainId {
    pub(crate) fn index(self) -> usize {
        self.0.get() as usize - 1
    }

    pub(super) fn from_index(i: usize) -> DomainId {
        DomainId(NonZeroU32::new(i as u32 + 1).unwrap_or(NonZeroU32::MIN))
    }
}

/// A network domain and the nodes in it.
#[derive(Clone, Debug)]
pub struct Domain {
    pub(super) tier: u8,
    pub(super) name: Arc<str>,
    pub(super) parent: Option<DomainId>,
    /// Shared between copies of the snapshot: set when it is built.
    pub(super) nodes: Arc<Vec<NodeId>>,
    /// Listed GPUs of its nodes, and how many are held whole or shared.
    pub(super) gpus: u32,
    pub(super) gpus_used: u32,
}

impl Domain {
    /// Tier index, 0 the outermost.
    pub fn tier(&self) -> usize {
        usize::from(self.tier)
    }

    /// The label value naming it (`leaf-3`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The enclosing domain one tier out, if the nodes name one.
    pub fn parent(&self) -> Option<DomainId> {
        self.parent
    }

    /// Its nodes, sorted by name.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// GPUs listed by its nodes' topologies.
    pub fn gpu_count(&self) -> u32 {
        self.gpus
    }

    /// Of those, GPUs held whole or in shared use.
    pub fn gpus_used(&self) -> u32 {
        self.gpus_used
    }
}

impl Snapshot {
    /// Per configured tier (outermost first), how many of its domains have
    /// GPUs and every one of them free: the whole domains a gang that
    /// needs one can still have (`gputopo_free_domains{tier}`). A domain
    /// without GPUs is not counted.
    pub fn free_domains(&self) -> Vec<u32> {
        let mut free = vec![0u32; self.tiers.len()];
        for d in &self.domains {
            if d.gpus > 0
                && d.gpus_used == 0
                && let Some(n) = free.get_mut(d.tier())
            {
                *n += 1;
            }
        }
        free
    }

    pub(crate) fn shift_domain_usage(&mut self, node_index: usize, before: u32, after: u32) {
        let path = self.nodes[node_index].domains;
        for d in path.iter().flatten() {
            let domain = &mut self.domains[d.index()];
            domain.gpus_used = (domain.gpus_used + after).saturating_sub(before);
        }
    }
}
