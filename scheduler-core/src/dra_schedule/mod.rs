//! Decisions for pods whose GPUs come through ResourceClaims: what `dra`
//! allocates on one node ([`crate::dra::DraPod::fit`]) combined with the
//! node predicates and score every pod gets, over the whole cluster
//! ([`schedule_claims`], [`schedule_extended`]), over the nodes a caller
//! names ([`DraJudge`], the extender's filter and prioritize), for a gang
//! ([`schedule_claim_gang`]), for `gputopo explain` ([`explain_claims`]) and
//! for an allocation kube-scheduler made itself ([`review_allocation`]).
//!
//! The DRA counterpart of `schedule`, `node_fit`, `gang_schedule` and
//! `explain`, on the same level as they: it reads `dra` (the device model)
//! and those modules, and nothing below reads it.
//!
//! Where things are: `judge.rs` (one node, the one verdict all the others
//! read), `schedule.rs` (the whole cluster), `gang.rs`, `explain.rs`,
//! `review.rs`.

mod explain;
mod gang;
mod judge;
mod review;
mod schedule;

pub use explain::explain_claims;
pub use gang::{ClaimGangDecision, schedule_claim_gang};
pub use judge::{DraJudge, DraRejection, rank};
pub use review::{AllocationReview, review_allocation};
pub use schedule::{DraDecision, DraPlacement, schedule_claims, schedule_extended};
