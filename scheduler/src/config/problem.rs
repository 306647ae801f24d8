//! One value of the configuration file that cannot hold.

/// A setting that contradicts another or cannot hold: the field and why.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub(super) struct Problem {
    pub(super) field: &'static str,
    pub(super) message: String,
}

impl Problem {
    pub(super) fn new(field: &'static str, message: String) -> Problem {
        Problem { field, message }
    }
}
