//! `gputopo` as a library: the file formats and commands the binary runs, so
//! tests and the simulator call them without a process per case.

pub mod claims;
pub mod cluster;
pub mod manual;
pub mod place;
pub mod report;
pub mod simulate;
pub mod topology;
