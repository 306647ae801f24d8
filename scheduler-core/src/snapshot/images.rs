//! The images nodes hold (`status.images`), for ImageLocality's score: per
//! node, each name it holds with the image's size; per name, on how many
//! nodes (kube-scheduler's `ImageStateSummary.NumNodes`). A kubelet
//! reports a new image list after every pull, so a change touches its node
//! and the counts, never the whole snapshot.

use super::intern::Sym;
use super::{NodeId, NodeImage, Snapshot};
use std::collections::HashMap;
use std::sync::Arc;

/// Per image name, how many nodes hold it.
pub(crate) type ImageCounts = Arc<HashMap<Sym, u32>>;

impl Snapshot {
    /// The node's images as stored: each name once (the first image naming
    /// it gives the size), sorted by symbol.
    pub(super) fn intern_images(&mut self, images: &[NodeImage]) -> Box<[(Sym, i64)]> {
        let mut out: Vec<(Sym, i64)> = Vec::new();
        for image in images {
            for name in &image.names {
                out.push((self.strings.intern(name), image.size_bytes));
            }
        }
        // Stable: the first image listed keeps a name listed twice.
        out.sort_by_key(|(s, _)| *s);
        out.dedup_by_key(|(s, _)| *s);
        out.into_boxed_slice()
    }

    /// Counts the node's images in (`add`) or out of the per-name counts.
    pub(super) fn count_images(&mut self, id: NodeId, add: bool) {
        let Some(node) = self.nodes.get(id.0 as usize) else {
            return;
        };
        if node.images.is_empty() {
            return;
        }
        let names: Vec<Sym> = node.images.iter().map(|(s, _)| *s).collect();
        let counts = Arc::make_mut(&mut self.image_counts);
        for name in names {
            if add {
                *counts.entry(name).or_insert(0) += 1;
            } else if let Some(n) = counts.get_mut(&name) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&name);
                }
            }
        }
    }

    /// Replaces one node's images (a kubelet's new list after a pull).
    pub(crate) fn set_node_images(&mut self, id: NodeId, images: &[NodeImage]) {
        self.count_images(id, false);
        let interned = self.intern_images(images);
        if let Some(node) = self.nodes.get_mut(id.0 as usize) {
            node.images = interned;
        }
        self.count_images(id, true);
    }

    /// The node's images by name: size and on how many nodes (for the
    /// snapshot's text).
    pub(super) fn images_by_name(&self, id: NodeId) -> Vec<(&str, i64, u32)> {
        let mut out: Vec<(&str, i64, u32)> = self
            .nodes
            .get(id.0 as usize)
            .map(|n| &n.images[..])
            .unwrap_or_default()
            .iter()
            .map(|&(s, size)| (self.strings.resolve(s), size, self.image_nodes(s)))
            .collect();
        out.sort_unstable();
        out
    }

    /// On how many nodes an image name is (0 for a name none holds).
    pub(crate) fn image_nodes(&self, name: Sym) -> u32 {
        self.image_counts.get(&name).copied().unwrap_or(0)
    }
}
