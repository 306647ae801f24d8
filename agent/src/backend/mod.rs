//! Discovery backends. Each turns what it can see into [`crate::facts::NodeFacts`].
