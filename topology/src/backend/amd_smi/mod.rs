//! The AMD discovery backend.
//!
//! AMD SMI (`libamd_smi.so`, loaded at run time by the agent) sits behind
//! [`AmdSmiSource`], whose one job is to take an [`AmdSmiAnswers`] snapshot.
//! The agent's live source asks the library; [`RecordedAmdSmi`] replays a
//! snapshot stored in a recording; the text parsers (`rocm-smi --showtopo`,
//! `amd-smi topology`, `crate::parse::rocm_smi`, `crate::parse::amd_smi`)
//! fill the same snapshot with what their text says. [`facts_from_answers`]
//! turns any of them into [`NodeFacts`](crate::facts::NodeFacts), then the one
//! normalizer runs.
//!
//! # How answers become links
//!
//! * `XGMI` (`AMDSMI_IOLINK_TYPE_XGMI`): an XGMI link; 1 hop is a direct link,
//!   2 or more are routed through other GPUs of the hive
//!   (`LinkClass::XgmiRouted`). Hops, weight and bandwidth are kept on the link.
//! * `PCIE`: AMD's tools do not say which PCIe switches or bridges the path
//!   crosses, so the class is the worst the known facts allow, never a better
//!   guess: `NODE` when both GPUs sit on the same known NUMA node, else `SYS`.
//! * A pair whose link type is unknown (no link-type answer, `UNDEFINED`) is
//!   an error: gputopo does not invent a path.

mod answers;
mod facts;

pub use answers::{AmdDeviceAnswers, AmdLinkType, AmdPairAnswer, AmdSmiAnswers};
pub use facts::{facts_from_amd_smi, facts_from_answers};

use gputopo_api::TopologySource;

/// An AMD SMI failure, naming the call and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmdSmiError {
    /// The library could not be loaded or initialized (no driver, no GPU).
    #[error("AMD SMI not available: {reason}")]
    Unavailable { reason: String },
    /// A must-have query failed (handles, counts).
    #[error("{call} failed: {reason}")]
    Call { call: &'static str, reason: String },
    /// The answers contradict themselves or leave a pair unknown.
    #[error("AMD SMI answers are inconsistent: {what}")]
    Inconsistent { what: String },
}

/// Where AMD SMI answers come from: the real library, a recording or saved text.
pub trait AmdSmiSource {
    /// All answers, taken once.
    fn snapshot(&self) -> Result<AmdSmiAnswers, AmdSmiError>;

    /// What `NodeFacts.source` should say for facts built from this source.
    fn topology_source(&self) -> TopologySource {
        TopologySource::AmdSmi
    }
}

/// Answers replayed from a recording.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedAmdSmi {
    pub answers: AmdSmiAnswers,
}

impl AmdSmiSource for RecordedAmdSmi {
    fn snapshot(&self) -> Result<AmdSmiAnswers, AmdSmiError> {
        Ok(self.answers.clone())
    }

    fn topology_source(&self) -> TopologySource {
        TopologySource::Fixture
    }
}
