//! Which scheduler a trial runs, and the log lines it is named in.

use serde::Serialize;

/// Which scheduler a trial runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Which {
    #[serde(rename = "kube-scheduler")]
    Stock,
    #[serde(rename = "gputopo-scheduler")]
    Gputopo,
}

impl Which {
    pub fn name(self) -> &'static str {
        match self {
            Which::Stock => "kube-scheduler",
            Which::Gputopo => "gputopo-scheduler",
        }
    }

    /// The pods' `spec.schedulerName`.
    pub fn scheduler_name(self) -> &'static str {
        match self {
            Which::Stock => "default-scheduler",
            Which::Gputopo => "gputopo-scheduler",
        }
    }
}

/// A progress line on stderr, named after the trial's scheduler.
pub fn log(which: Which, msg: impl std::fmt::Display) {
    eprintln!("[{}] {msg}", which.name());
}
