//! `gputopo place`: the GPU set one request gets on one node, with the reasons.

use gputopo_api::{Collective, GpuTopologySpec};
use gputopo_scheduler_core::gpuset::{
    GpuSetChoice, NoFitReason, NodeShape, SetRequest, ShapeError,
};
use serde::Serialize;

/// What `place` prints on success (`-o json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlaceOutput {
    pub gpus: Vec<u32>,
    /// `NV2`, `PIX`, …; null for a single GPU (no link to cross).
    pub bottleneck: Option<String>,
    pub score: u8,
    pub explanation: String,
}

impl From<GpuSetChoice> for PlaceOutput {
    fn from(c: GpuSetChoice) -> PlaceOutput {
        PlaceOutput {
            gpus: c.gpus,
            bottleneck: c.bottleneck.map(|b| b.to_string()),
            score: c.score,
            explanation: c.explanation,
        }
    }
}

/// Bad input to `place`: exit status 2, a message naming what was wrong and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlaceInputError {
    #[error("--gpus must be at least 1")]
    ZeroGpus,
    #[error(
        "--free: {token:?} is not a GPU index; accepted: comma-separated indices of this node's GPUs ({gpus}), e.g. 0,1,5"
    )]
    BadIndex { token: String, gpus: String },
    #[error("--free: GPU {index} is not on this node; its GPUs are {gpus}")]
    UnknownGpu { index: u32, gpus: String },
    #[error("--free: GPU {index} is listed twice")]
    Repeated { index: u32 },
    #[error(
        "--min-nvlink-level: {value:?} is not valid; accepted: an NVLink count 1..=64, as 2 or NV2"
    )]
    BadLevel { value: String },
    #[error("the topology cannot be used: {0}")]
    Shape(#[from] ShapeError),
}

/// The GPUs of a spec as `0-7` or `0,2,5`.
pub fn describe_gpus(spec: &GpuTopologySpec) -> String {
    let mut indices: Vec<u32> = spec.gpus.iter().map(|g| g.index).collect();
    indices.sort_unstable();
    let contiguous = indices.windows(2).all(|w| w[1] == w[0] + 1);
    match (indices.first(), indices.last()) {
        (Some(first), Some(last)) if contiguous && indices.len() > 2 => format!("{first}-{last}"),
        _ => indices
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// `--free 0,1,5` as a mask of the spec's GPUs; `None` (no flag) is every GPU.
pub fn parse_free(list: Option<&str>, spec: &GpuTopologySpec) -> Result<u32, PlaceInputError> {
    let listed: u32 = spec
        .gpus
        .iter()
        .filter(|g| g.index < 32)
        .fold(0, |m, g| m | (1 << g.index));
    let Some(list) = list else {
        return Ok(listed);
    };
    let mut mask = 0u32;
    if list.trim().is_empty() {
        return Ok(0);
    }
    for token in list.split(',') {
        let t = token.trim();
        let index: u32 = t
            .parse()
            .ok()
            .filter(|_| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| PlaceInputError::BadIndex {
                token: token.to_string(),
                gpus: describe_gpus(spec),
            })?;
        if index >= 32 || listed & (1 << index) == 0 {
            return Err(PlaceInputError::UnknownGpu {
                index,
                gpus: describe_gpus(spec),
            });
        }
        if mask & (1 << index) != 0 {
            return Err(PlaceInputError::Repeated { index });
        }
        mask |= 1 << index;
    }
    Ok(mask)
}

/// `2` or `NV2`, 1..=64.
pub fn parse_level(value: &str) -> Result<u32, PlaceInputError> {
    let digits = value.trim().strip_prefix("NV").unwrap_or(value.trim());
    digits
        .parse::<u32>()
        .ok()
        .filter(|l| (1..=64).contains(l) && digits.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| PlaceInputError::BadLevel {
            value: value.to_string(),
        })
}

/// What one `place` invocation asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlaceRequest {
    pub gpus: u32,
    pub collective: Collective,
    pub min_nvlink_level: Option<u32>,
    /// Mask of free GPUs.
    pub free: u32,
}

/// The outcome: a set, or why none fits (exit 1).
pub fn place(
    spec: &GpuTopologySpec,
    request: &PlaceRequest,
) -> Result<Result<PlaceOutput, NoFitReason>, PlaceInputError> {
    if request.gpus == 0 {
        return Err(PlaceInputError::ZeroGpus);
    }
    let shape = NodeShape::from_spec(spec)?;
    let set_request = SetRequest {
        min_nvlink_level: request.min_nvlink_level,
        ..SetRequest::new(request.gpus, request.collective)
    };
    Ok(shape
        .choose(request.free, &set_request)
        .map(PlaceOutput::from))
}
