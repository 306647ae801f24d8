//! `gputopo` as a library: the file formats and commands the binary runs, so
//! tests and the simulator call them without a process per case.

pub mod claims;
pub mod cluster;
pub mod draw;
pub mod gang_report;
pub mod manual;
pub mod place;
/// `gputopo simulate --scenario nvl72` (its files are the simulator's, in
/// `simulate/racks/`).
#[path = "simulate/racks/mod.rs"]
pub mod racks;
pub mod report;
pub mod simulate;
pub mod topology;
