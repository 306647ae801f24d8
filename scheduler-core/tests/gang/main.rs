//! Gang placement across network tiers and the cluster measures, on
//! spine/leaf clusters of hand-written node shapes. (Gangs waiting, queued
//! and holding reservations are the scheduler cycle's bookkeeping: see
//! `scheduler/src/cycle/tests/gangs.rs`.)
//!
//! One test binary: test clusters and the validity check (`cluster`), where
//! gangs go (`placement`), why they do not fit (`no_fit`), the cluster
//! measures (`measures`) and the brute-force property (`properties`).

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod measures;
mod no_fit;
mod placement;
mod properties;
mod structure;
