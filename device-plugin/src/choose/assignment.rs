//! A pod's recorded choice (`gputopo.dev/assigned-gpus`) and what can be wrong with it.

use k8s_openapi::jiff::Timestamp;
use std::fmt;

/// A pod, as logs and outcomes name it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod bound to this node, not yet started, with gputopo's choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedPod {
    pub pod: PodRef,
    /// The pod's creation time (the kubelet admits new pods in this order).
    pub created: Option<Timestamp>,
    /// The `gputopo.dev/assigned-gpus` value, as written.
    pub assigned: String,
}

/// Why an assignment's annotation names no usable set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationProblem {
    #[error(
        "gputopo.dev/assigned-gpus {value:?} is not a list of GPU indices (accepted: comma-separated indices such as \"0,3\")"
    )]
    Unparsable { value: String },
    #[error(
        "gputopo.dev/assigned-gpus {value:?} names GPU {index}, which this node does not have (its GPUs: {present})"
    )]
    UnknownGpu {
        value: String,
        index: u32,
        present: String,
    },
    #[error("gputopo.dev/assigned-gpus {value:?} names GPU {index} twice")]
    Duplicate { value: String, index: u32 },
}

impl AnnotationProblem {
    pub const METRIC_LABELS: [&'static str; 3] = ["unparsable", "unknown-gpu", "duplicate"];

    pub fn metric_label(&self) -> &'static str {
        match self {
            AnnotationProblem::Unparsable { .. } => "unparsable",
            AnnotationProblem::UnknownGpu { .. } => "unknown-gpu",
            AnnotationProblem::Duplicate { .. } => "duplicate",
        }
    }
}

/// `0,3` (spaces around indices allowed) as indices, in the order written.
pub(crate) fn parse_indices(value: &str) -> Result<Vec<u32>, AnnotationProblem> {
    let unparsable = || AnnotationProblem::Unparsable {
        value: value.to_string(),
    };
    if value.trim().is_empty() {
        return Err(unparsable());
    }
    value
        .split(',')
        .map(|t| {
            let t = t.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(unparsable());
            }
            t.parse::<u32>().map_err(|_| unparsable())
        })
        .collect()
}
