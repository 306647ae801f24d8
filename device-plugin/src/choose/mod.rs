//! The pure choice behind `GetPreferredAllocation`: which of the devices the
//! kubelet offers this container should get.
//!
//! The kubelet's request names no pod: only the devices still `available`
//! (healthy, unallocated), those it `must_include` (already given to the
//! container, e.g. reused from an init container) and the `size` wanted. So
//! the plugin recognises the pod by its set. Each pod bound to this node and
//! not yet started that carries `gputopo.dev/assigned-gpus` is an [`AssignedPod`];
//! an assignment *fits* when its GPUs, as UUIDs, number `size`, all lie in
//! `available` and include every `must_include` device.
//!
//! - one assignment fits: its devices ([`Outcome::Matched`]);
//! - several fit: the earliest created pod's, ties broken by namespace, then
//!   name ([`Outcome::Ambiguous`]). The kubelet admits new pods in creation
//!   order (`HandlePodAdditions` sorts them by creation time), so the earliest
//!   is the likeliest to be the one asking. If it is not, two pods swap sets:
//!   each still gets a whole set gputopo chose, nothing outside `available` is
//!   ever returned, and the agent's PodResources reading tells the scheduler
//!   which pod holds which GPUs, so its accounting follows the truth;
//! - none fits: scheduler-core's own rule for pods gputopo did not place
//!   ([`Outcome::TopologyRule`]): the best set among `available` on the node's
//!   wiring (a 1-GPU request thus takes the worst-connected GPU, keeping good
//!   groups whole; larger ones the best ring), leaving out the GPUs of every
//!   readable assignment when the rest can hold the request, so that a pod with
//!   no record does not take what was chosen for a pod still waiting;
//! - no rule applies (the node's wiring cannot be read into a shape): no
//!   preference, and the kubelet picks ([`Outcome::None`]).
//!
//! An assignment whose annotation cannot be read (not an index list, or naming a GPU
//! this node does not have) never fits; it comes back in
//! [`Preference::problems`] so the caller can say so, once per pod.

mod assignment;
mod inventory;
#[cfg(test)]
mod tests;

pub use assignment::{AnnotationProblem, AssignedPod, PodRef};
pub use inventory::{Gpu, Inventory, InventoryError};

use gputopo_api::Collective;
use gputopo_scheduler_core::gpuset::{NoFitReason, SetRequest, ShapeError};

/// What the kubelet asks for one container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub available: Vec<String>,
    pub must_include: Vec<String>,
    pub size: i32,
}

/// A request that cannot be answered as asked; the plugin answers
/// `InvalidArgument` with this text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("allocation size {size} is not a positive number of GPUs")]
    NonPositiveSize { size: i32 },
    #[error(
        "device {id:?} is not a GPU this plugin advertises (it advertises GPU UUIDs such as {example:?})"
    )]
    UnknownDevice { id: String, example: String },
    #[error("must-include device {id:?} is not among the available devices")]
    MustIncludeNotAvailable { id: String },
    #[error("{must_include} must-include devices exceed the allocation size {size}")]
    MustIncludeExceedsSize { must_include: usize, size: i32 },
    #[error("{size} devices asked for but only {available} available")]
    TooFewAvailable { size: i32, available: usize },
}

/// How the answer was found; `metric_label` names it in
/// `gputopo_device_plugin_preferred_allocations_total{outcome}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exactly one assignment fits.
    Matched { pod: PodRef },
    /// Several fit; `pod`'s was chosen by the documented rule over `others`.
    Ambiguous { pod: PodRef, others: Vec<PodRef> },
    /// No assignment fits: the topology rule chose.
    TopologyRule,
    /// No preference: the kubelet picks.
    None { why: NoPreference },
}

/// Why no preference is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoPreference {
    /// The node's wiring could not be read into a shape (e.g. more than 32 GPUs).
    Shape(ShapeError),
    /// scheduler-core found no set among the available GPUs.
    NoFit(NoFitReason),
}

impl Outcome {
    pub const METRIC_LABELS: [&'static str; 4] = ["matched", "ambiguous", "topology-rule", "none"];

    /// Whether a pod's assignment decided (matched or ambiguous).
    pub fn is_assigned(&self) -> bool {
        matches!(self, Outcome::Matched { .. } | Outcome::Ambiguous { .. })
    }

    pub fn metric_label(&self) -> &'static str {
        match self {
            Outcome::Matched { .. } => "matched",
            Outcome::Ambiguous { .. } => "ambiguous",
            Outcome::TopologyRule => "topology-rule",
            Outcome::None { .. } => "none",
        }
    }
}

/// The answer for one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preference {
    /// Device IDs (UUIDs) in GPU index order; empty with [`Outcome::None`].
    pub devices: Vec<String>,
    pub outcome: Outcome,
    /// AssignedPods that could not be read, with why.
    pub problems: Vec<(PodRef, AnnotationProblem)>,
}

/// The preferred devices for `request` given the node's `inventory` and the
/// `assignments` of pods awaiting admission; see the module docs.
pub fn prefer(
    inventory: &Inventory,
    claims: &[AssignedPod],
    request: &Request,
) -> Result<Preference, RequestError> {
    let (available, must) = check(inventory, request)?;
    let size = request.size as u32;
    let mut problems = Vec::new();
    let mut fitting: Vec<(&AssignedPod, u32)> = Vec::new();
    let mut claimed = 0u32;
    for claim in claims {
        match inventory.mask_of(&claim.assigned) {
            Ok(mask) => {
                claimed |= mask;
                if mask.count_ones() == size && mask & !available == 0 && mask & must == must {
                    fitting.push((claim, mask));
                }
            }
            Err(problem) => problems.push((claim.pod.clone(), problem)),
        }
    }
    // Earliest created first (unknown creation last), then namespace, then name.
    fitting.sort_by(|(a, _), (b, _)| {
        (
            a.created.is_none(),
            a.created,
            &a.pod.namespace,
            &a.pod.name,
        )
            .cmp(&(
                b.created.is_none(),
                b.created,
                &b.pod.namespace,
                &b.pod.name,
            ))
    });
    let (devices_mask, outcome) = match fitting.split_first() {
        Some(((claim, mask), [])) => (
            *mask,
            Outcome::Matched {
                pod: claim.pod.clone(),
            },
        ),
        Some(((claim, mask), rest)) => (
            *mask,
            Outcome::Ambiguous {
                pod: claim.pod.clone(),
                others: rest.iter().map(|(c, _)| c.pod.clone()).collect(),
            },
        ),
        None => {
            // GPUs chosen for pods still waiting stay theirs while the
            // others can hold the request.
            let spare = (available & !claimed) | must;
            let rule = if spare.count_ones() >= size {
                topology_rule(inventory, spare, must, size)
                    .or_else(|_| topology_rule(inventory, available, must, size))
            } else {
                topology_rule(inventory, available, must, size)
            };
            match rule {
                Ok(mask) => (mask, Outcome::TopologyRule),
                Err(why) => (0, Outcome::None { why }),
            }
        }
    };
    Ok(Preference {
        devices: inventory.uuids(devices_mask),
        outcome,
        problems,
    })
}

/// The request as masks (available, must include), after checking it.
fn check(inventory: &Inventory, request: &Request) -> Result<(u32, u32), RequestError> {
    if request.size <= 0 {
        return Err(RequestError::NonPositiveSize { size: request.size });
    }
    let mask = |ids: &[String]| -> Result<u32, RequestError> {
        ids.iter()
            .try_fold(0u32, |m, id| match inventory.index_of(id) {
                Some(i) => Ok(m | (1 << i)),
                None => Err(RequestError::UnknownDevice {
                    id: id.clone(),
                    example: inventory.example_uuid().to_string(),
                }),
            })
    };
    let available = mask(&request.available)?;
    let must = mask(&request.must_include)?;
    if let Some(missing) = request.must_include.iter().find(|id| {
        inventory
            .index_of(id)
            .is_some_and(|i| available & (1 << i) == 0)
    }) {
        return Err(RequestError::MustIncludeNotAvailable {
            id: missing.clone(),
        });
    }
    let must_count = must.count_ones() as usize;
    if must_count > request.size as usize {
        return Err(RequestError::MustIncludeExceedsSize {
            must_include: must_count,
            size: request.size,
        });
    }
    if (available.count_ones() as usize) < request.size as usize {
        return Err(RequestError::TooFewAvailable {
            size: request.size,
            available: available.count_ones() as usize,
        });
    }
    Ok((available, must))
}

/// scheduler-core's choice of `size` GPUs among `available` that includes
/// `must`. scheduler-core has no "must include", so when its best set leaves
/// out a required GPU, the rest is chosen among the others and added to
/// `must` (the kubelet only asks with `must` non-empty when it reuses an init
/// container's GPUs, rare for GPUs).
fn topology_rule(
    inventory: &Inventory,
    available: u32,
    must: u32,
    size: u32,
) -> Result<u32, NoPreference> {
    let shape = inventory.shape().map_err(NoPreference::Shape)?;
    let pick = |free: u32, k: u32| -> Result<u32, NoPreference> {
        if k == 0 {
            return Ok(0);
        }
        let request = SetRequest {
            // MIG-enabled GPUs are still whole devices to this plugin.
            allow_mig: true,
            ..SetRequest::new(k, Collective::default())
        };
        shape
            .pick(free, &request)
            .map(|p| p.gpus)
            .map_err(NoPreference::NoFit)
    };
    let best = pick(available, size)?;
    if best & must == must {
        return Ok(best);
    }
    Ok(must | pick(available & !must, size - must.count_ones())?)
}
