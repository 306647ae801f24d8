//! gputopo-agent as a library: discovery backends, the normalizer, link health
//! and labels. The binary (`src/main.rs`) is a thin CLI over this.

pub mod backend;
pub mod facts;
pub mod parse;
