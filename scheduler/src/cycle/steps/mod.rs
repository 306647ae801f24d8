//! The cycle's decisions, each a pure, synchronous step: from the cycle's
//! state, the [`Work`](super::work::Work) (snapshot, objects, clock) and
//! what the last writes answered, to a typed step the driver carries out
//! through [`ClusterWrites`](super::ClusterWrites):
//!
//! * `due.rs`: what each due pod is ([`DueStep`]), and the bookkeeping and
//!   writes every outcome ends with ([`Finish`]);
//! * `pod.rs`: one pod ([`PodStep`]), device plugin, claims or DRA for
//!   `nvidia.com/gpu`; `claims.rs` reads a pod's claims for it;
//! * `gang.rs`: one gang ([`GangStep`]): bind, undo a partial gang,
//!   preempt, reserve, wait, time out;
//! * `preempt.rs`: preemption's rounds ([`Preempting`]), one eviction,
//!   event or nomination at a time;
//! * `binds.rs`: what a binding's answer does, and the claim writes'
//!   order and undo ([`ClaimBinds`], [`ExtendedBind`]);
//! * `statuses.rs`: mismatch events, node conditions and gang statuses.
//!
//! Nothing here is `async`; `drive/` is.

mod binds;
mod claims;
mod due;
mod elastic;
pub(super) mod gang;
mod pod;
mod preempt;
mod statuses;

pub(super) use binds::{ClaimBindStep, ClaimBinds, ExtendedBind, ExtendedStep, MemberBinding};
pub(super) use due::{DueStep, Finish};
pub(super) use gang::GangStep;
pub(super) use pod::PodStep;
pub(super) use preempt::{PreemptStep, Preempting};
