//! Why a pod's claims cannot be allocated: a claim gputopo cannot honour
//! exactly ([`ClaimError`], the same on every node), or one node that cannot
//! hold them ([`NodeReason`]).

use super::device::DeviceId;
use crate::gpuset::NoFitReason;
use std::fmt;

/// A claim, its class or the pod's claim list asks for something gputopo does
/// not allocate exactly, or is malformed. `object` is `ResourceClaim ns/name`,
/// `DeviceClass name` or `Pod ns/name`; `field` the path inside it
/// (`spec.devices.requests[0].exactly.allocationMode`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {field}: {kind}")]
pub struct ClaimError {
    pub object: String,
    pub field: String,
    pub kind: ClaimErrorKind,
}

impl ClaimError {
    pub(crate) fn new(object: &str, field: impl Into<String>, kind: ClaimErrorKind) -> ClaimError {
        ClaimError {
            object: object.to_string(),
            field: field.into(),
            kind,
        }
    }
}

/// A selector that could not be evaluated on a device, or a device that
/// could not be presented to CEL: upstream treats both as errors, not as "no
/// match", and so does gputopo.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    /// The expression evaluated to something other than a bool.
    #[error("must evaluate to bool, not {0}")]
    NotBool(String),
    /// The evaluator failed (a missing attribute looked up without `has()`,
    /// a wrong type): its message.
    #[error("{0}")]
    Evaluation(String),
    /// A version attribute that is not a semantic version.
    #[error("attribute {attribute}: version {value:?}: {error}")]
    Version {
        attribute: String,
        value: String,
        error: Box<CelError>,
    },
    /// An attribute with none of int, bool, string or version set.
    #[error("attribute {attribute}: no value")]
    NoValue { attribute: String },
    /// A capacity that is not a quantity.
    #[error("capacity {capacity}: {error}")]
    Capacity {
        capacity: String,
        error: Box<CelError>,
    },
}

/// What is wrong, and what is accepted instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimErrorKind {
    #[error("both `exactly` and `firstAvailable` are set; accepted: one of them")]
    ExactlyAndFirstAvailable,
    #[error("a request without `exactly` (unknown request type); accepted: `exactly`")]
    NoExactly,
    #[error("{0}")]
    CapacityQuantity(String),
    #[error("allocation mode {0:?} is unknown; accepted: ExactCount (the default) or All")]
    AllocationMode(String),
    #[error("count {0} is out of range; accepted: 1 to 32 (a claim holds at most 32 devices)")]
    Count(i64),
    #[error("count is set with allocationMode All; accepted: count only with ExactCount")]
    CountWithAll,
    #[error("the claim asks for {0} devices; a claim holds at most 32")]
    TooManyDevices(u64),
    #[error("deviceClassName is empty; accepted: the name of a DeviceClass")]
    NoDeviceClass,
    #[error("DeviceClass {0} does not exist")]
    DeviceClassNotFound(String),
    #[error("a selector without `cel` (unknown selector type); accepted: cel.expression")]
    NoCel,
    #[error("the CEL expression does not compile: {0}")]
    CelSyntax(String),
    #[error(
        "the CEL expression is {0} bytes long; accepted: at most 10240 (the API server's limit)"
    )]
    CelTooLong(usize),
    #[error(
        "the CEL expression has {0} member selections, index operations and calls ('.', '[', '('); accepted: at most 200 (a longer chain overflows the parser's stack; real selectors have a few dozen)"
    )]
    CelTooDeep(usize),
    #[error(
        "CEL function {0}() is not supported by gputopo's evaluator; accepted: the CEL standard functions and macros, and Kubernetes' quantity, semver, strings, lists, regex and sets libraries"
    )]
    CelFunction(String),
    #[error("distinctAttribute constraints are not supported; accepted: matchAttribute")]
    DistinctAttribute,
    #[error(
        "a constraint without matchAttribute (unknown constraint type); accepted: matchAttribute"
    )]
    NoConstraint,
    #[error(
        "attribute {0:?} is not fully qualified; accepted: <domain>/<name>, e.g. resource.kubernetes.io/pcieRoot or gpu.nvidia.com/productName"
    )]
    UnqualifiedAttribute(String),
    #[error("names request {0:?}, which the claim does not have")]
    UnknownRequest(String),
    #[error("two requests are named {0:?}")]
    DuplicateRequest(String),
    #[error("the claim has no requests")]
    NoRequests,
    #[error("the claim is being deleted")]
    Deleting,
    #[error("the claim is reserved for 256 consumers already, the most Kubernetes allows")]
    ReservedForFull,
    #[error(
        "the ResourceClaim for this entry has not been created yet (the resource claim controller creates it from the template)"
    )]
    TemplateClaimPending,
    #[error("names neither resourceClaimName nor resourceClaimTemplateName")]
    NoClaimSource,
    #[error("ResourceClaim {0} does not exist")]
    ClaimNotFound(String),
}

/// Why one node cannot hold the pod's claims. `Display` gives the detail;
/// [`NodeReason::summary`] the node-independent phrase that a
/// `FailedScheduling` message counts over nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeReason {
    /// No usable device of any driver is published for the node.
    NoDevices,
    /// The node's devices exist but none is known to its `GpuTopology`.
    NoTopology,
    /// A request matches too few free, placeable devices here.
    TooFewDevices {
        claim: String,
        request: String,
        wanted: u32,
        /// Devices its class and selectors accept.
        matching: u32,
        /// Of those, allocated to a claim.
        busy: u32,
        /// Of those, tainted and not tolerated.
        tainted: u32,
        /// Of those, not placed on the topology (named in the snapshot warnings).
        unplaced: u32,
        /// Of those, without the capacity the request asks (or with it
        /// consumed by the device's other allocations).
        short: u32,
        /// Devices the request matches in slices gputopo does not read
        /// (reachable from many nodes: `allNodes`, `nodeSelector`).
        elsewhere: u32,
    },
    /// `allocationMode: All` and one of the devices it must take is not free.
    AllDeviceUnavailable {
        claim: String,
        request: String,
        device: Box<DeviceId>,
        why: &'static str,
    },
    /// A pool of the node is being updated or is invalid, and `All` asks for every device.
    PoolNotReady {
        claim: String,
        request: String,
        pool: String,
    },
    /// A claim the pod uses is allocated on another node.
    ClaimElsewhere { claim: String, node: String },
    /// A claim the pod uses is allocated to devices this node does not publish.
    ClaimDevicesMissing {
        claim: String,
        device: Box<DeviceId>,
    },
    /// No candidate device of the constrained requests has the attribute.
    ConstraintAttributeMissing {
        claim: String,
        field: String,
        attribute: String,
    },
    /// Devices share no value of the attribute in the numbers asked for.
    ConstraintUnsatisfiable { claim: String, attribute: String },
    /// A selector failed at run time on a device (as upstream, an error, not a mismatch).
    CelRuntime {
        object: String,
        field: String,
        device: Box<DeviceId>,
        error: CelError,
    },
    /// The GPU set's hard constraints (annotations, node policy) leave nothing.
    NoGpuSet(NoFitReason),
    /// GPU sets remain, but none can be split over the requests as their selectors demand.
    NoSplit { gpus: u32 },
    /// The requests for other drivers' devices cannot each get distinct devices.
    NotDistinct,
    /// The constrained search would visit too many subsets (nodes above 16 GPUs).
    SearchTooLarge,
}

impl NodeReason {
    /// The phrase for an aggregated `FailedScheduling` message.
    pub fn summary(&self) -> String {
        match self {
            NodeReason::NoDevices => "no DRA devices".to_string(),
            NodeReason::NoTopology => "DRA devices not on the topology".to_string(),
            NodeReason::TooFewDevices {
                claim,
                request,
                elsewhere,
                ..
            } => {
                let mut phrase = format!("too few free devices for {claim} request {request}");
                if *elsewhere > 0 {
                    phrase.push_str(UNREAD);
                }
                phrase
            }
            NodeReason::AllDeviceUnavailable { claim, request, .. } => {
                format!("not all devices free for {claim} request {request}")
            }
            NodeReason::PoolNotReady { .. } => "resource pool being updated".to_string(),
            NodeReason::ClaimElsewhere { claim, .. } => {
                format!("{claim} allocated on another node")
            }
            NodeReason::ClaimDevicesMissing { claim, .. } => {
                format!("{claim} allocated to devices not on this node")
            }
            NodeReason::ConstraintAttributeMissing { attribute, .. } => {
                format!("no device with attribute {attribute}")
            }
            NodeReason::ConstraintUnsatisfiable { attribute, .. } => {
                format!("too few devices sharing {attribute}")
            }
            NodeReason::CelRuntime { object, field, .. } => {
                format!("CEL error in {object} {field}")
            }
            NodeReason::NoGpuSet(reason) => reason.summary(),
            NodeReason::NoSplit { gpus } => {
                format!("no {gpus}-GPU set meets every request's selectors")
            }
            NodeReason::NotDistinct => "too few distinct devices for the claims".to_string(),
            NodeReason::SearchTooLarge => "GPU search too large for DRA".to_string(),
        }
    }
}

/// What a request matching only devices of slices gputopo does not read is told.
const UNREAD: &str = " (devices that match are published in ResourceSlices reachable from many nodes, allNodes or nodeSelector, which gputopo does not allocate yet)";

impl fmt::Display for NodeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeReason::NoDevices => f.write_str(
                "no usable DRA device is published for this node (no node-local ResourceSlice, or its pools are incomplete or invalid)",
            ),
            NodeReason::NoTopology => f.write_str(
                "the node's DRA devices are not known to its GpuTopology (no GpuTopology, or no device's uuid matches), so gputopo cannot place them",
            ),
            NodeReason::TooFewDevices {
                claim,
                request,
                wanted,
                matching,
                busy,
                tainted,
                unplaced,
                short,
                elsewhere,
            } => {
                let usable = matching - busy - tainted - unplaced - short;
                write!(
                    f,
                    "{claim} request {request} wants {wanted} device(s); {matching} match its class and selectors here"
                )?;
                if *matching > 0 {
                    write!(
                        f,
                        " ({busy} allocated to other claims, {tainted} tainted, {unplaced} not on the topology, "
                    )?;
                    if *short > 0 {
                        write!(f, "{short} without the capacity asked, ")?;
                    }
                    write!(f, "{usable} usable)")?;
                }
                if *elsewhere > 0 {
                    write!(f, "; {elsewhere}{UNREAD}")?;
                }
                Ok(())
            }
            NodeReason::AllDeviceUnavailable {
                claim,
                request,
                device,
                why,
            } => write!(
                f,
                "{claim} request {request} asks for all matching devices, but {device} is {why}"
            ),
            NodeReason::PoolNotReady {
                claim,
                request,
                pool,
            } => write!(
                f,
                "{claim} request {request} asks for all matching devices, but resource pool {pool} is being updated or invalid"
            ),
            NodeReason::ClaimElsewhere { claim, node } => {
                write!(f, "{claim} is already allocated on node {node}")
            }
            NodeReason::ClaimDevicesMissing { claim, device } => write!(
                f,
                "{claim} is already allocated to {device}, which this node does not publish"
            ),
            NodeReason::ConstraintAttributeMissing {
                claim,
                field,
                attribute,
            } => write!(
                f,
                "{claim} {field}: no candidate device here has attribute {attribute}, so the constraint cannot hold"
            ),
            NodeReason::ConstraintUnsatisfiable { claim, attribute } => write!(
                f,
                "{claim}: no value of {attribute} is shared by enough free devices for its constrained requests"
            ),
            NodeReason::CelRuntime {
                object,
                field,
                device,
                error,
            } => write!(f, "{object} {field}: CEL runtime error on {device}: {error}"),
            NodeReason::NoGpuSet(reason) => write!(f, "{reason}"),
            NodeReason::NoSplit { gpus } => write!(
                f,
                "no {gpus}-GPU set meeting the pod's constraints can be split over its requests as their selectors demand"
            ),
            NodeReason::NotDistinct => f.write_str(
                "the pod's requests for devices of drivers other than the GPU drivers cannot each get distinct devices here",
            ),
            NodeReason::SearchTooLarge => f.write_str(
                "the pod's requests need a constrained GPU-set search larger than gputopo runs (more than 2^20 subsets)",
            ),
        }
    }
}

impl std::error::Error for NodeReason {}
