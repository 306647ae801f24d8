//! The problem read once: request groups, a picker per node shape and group,
//! and how many members (or GPUs) each node can host.

use crate::gang::{GangNode, Members};
use crate::gpuset::{NoFitReason, Picker, SetRequest};
use gputopo_api::PlacementStrategy;
use std::cmp::Reverse;
use std::collections::HashMap;

/// Members sharing one request.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) request: SetRequest,
    pub(crate) members: Vec<u32>,
}

/// The problem read once: free masks, request groups, a picker per shape and group.
pub(crate) struct Prepared<'a> {
    pub(crate) nodes: &'a [GangNode],
    pub(crate) free: Vec<u32>,
    /// Largest request first.
    pub(crate) groups: Vec<Group>,
    pub(crate) strategy: PlacementStrategy,
    /// At most this many members per node (members whose required
    /// anti-affinity keeps each other off a node: 1).
    pub(crate) max_per_node: Option<u32>,
    shape_of: Vec<u32>,
    /// `[shape][group]`.
    pickers: Vec<Vec<Picker<'a>>>,
}

impl<'a> Prepared<'a> {
    pub(crate) fn new(
        nodes: &'a [GangNode],
        members: &Members,
        strategy: PlacementStrategy,
    ) -> Prepared<'a> {
        let groups = groups(members);
        let mut shape_index: HashMap<*const crate::gpuset::NodeShape, u32> = HashMap::new();
        let mut pickers: Vec<Vec<Picker<'a>>> = Vec::new();
        let shape_of = nodes
            .iter()
            .map(|node| {
                *shape_index
                    .entry(std::sync::Arc::as_ptr(&node.shape))
                    .or_insert_with(|| {
                        pickers.push(
                            groups
                                .iter()
                                .map(|g| node.shape.picker(&g.request))
                                .collect(),
                        );
                        pickers.len() as u32 - 1
                    })
            })
            .collect();
        let free = nodes.iter().map(|n| n.free).collect();
        Prepared {
            nodes,
            free,
            groups,
            strategy,
            max_per_node: None,
            shape_of,
            pickers,
        }
    }

    pub(crate) fn picker(&self, position: u32, group: usize) -> &Picker<'a> {
        &self.pickers[self.shape_of[position as usize] as usize][group]
    }

    pub(crate) fn uniform(&self) -> bool {
        self.groups.len() == 1
    }

    /// Members a node hosts (uniform gangs: by repeated picks until none fits;
    /// `members` when the request is for no GPU), or its free whole GPUs if it
    /// can host the smallest request (mixed gangs), with the reason it hosts none.
    pub(super) fn capacity(&self, position: u32, members: u32) -> (u32, Option<NoFitReason>) {
        let free = self.free[position as usize];
        if self.uniform() {
            if self.groups[0].request.gpus == 0 {
                return (members, None);
            }
            let picker = self.picker(position, 0);
            let mut left = free;
            let mut hosted = 0u32;
            loop {
                match picker.pick(left) {
                    Ok(pick) if pick.gpus != 0 => {
                        left &= !pick.gpus;
                        hosted += 1;
                    }
                    Ok(_) => return (hosted, None),
                    Err(reason) => return (hosted, (hosted == 0).then_some(reason)),
                }
            }
        } else {
            let smallest = self.groups.len() - 1;
            match self.picker(position, smallest).pick(free) {
                Ok(_) => {
                    let shape = &self.nodes[position as usize].shape;
                    let whole = free & shape.gpus_mask() & !shape.mig_mask();
                    (whole.count_ones().max(1), None)
                }
                Err(reason) => (0, Some(reason)),
            }
        }
    }
}

/// Members grouped by request, largest first (then by first member).
fn groups(members: &Members) -> Vec<Group> {
    match members {
        Members::Uniform { count, request } => vec![Group {
            request: *request,
            members: (0..*count).collect(),
        }],
        Members::Each(each) => {
            let mut groups: Vec<Group> = Vec::new();
            for (i, request) in each.iter().enumerate() {
                match groups.iter_mut().find(|g| g.request == *request) {
                    Some(g) => g.members.push(i as u32),
                    None => groups.push(Group {
                        request: *request,
                        members: vec![i as u32],
                    }),
                }
            }
            groups.sort_by_key(|g| (Reverse(g.request.gpus), g.members[0]));
            groups
        }
    }
}
