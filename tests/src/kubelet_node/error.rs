//! What can go wrong starting a kubelet node.

use std::path::PathBuf;
use std::time::Duration;

/// Why a kubelet node could not start or restart.
#[derive(Debug, thiserror::Error)]
pub enum KubeletNodeError {
    #[error(
        "a real kubelet node needs {missing:?}, which this machine lacks (Debian 12: \
         apt-get install -y containerd runc containernetworking-plugins busybox-static; \
         scripts/test installs them)"
    )]
    Missing { missing: Vec<String> },
    #[error(
        "a real kubelet node needs root (it mounts, makes cgroups and runs containers); uid is {uid}"
    )]
    NotRoot { uid: u32 },
    #[error(
        "node name {name:?} is not accepted: it must be 1 to 50 lowercase letters, digits or \
         '-', starting and ending with a letter or digit (it names a Node and a cgroup)"
    )]
    BadName { name: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Harness {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{command} failed ({status}):\n{output}")]
    Command {
        command: String,
        status: std::process::ExitStatus,
        output: String,
    },
    #[error("{what} not within {timeout:?} (last check: {last}); logs in {dir}:\n{tails}")]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
        dir: PathBuf,
        tails: String,
    },
    #[error("{0}")]
    Exited(String),
    /// A condition being waited for does not hold yet (the last check of a [`KubeletNodeError::Timeout`]).
    #[error("{0}")]
    NotYet(String),
}

pub type Result<T, E = KubeletNodeError> = std::result::Result<T, E>;

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> KubeletNodeError {
    let what = what.into();
    move |source| KubeletNodeError::Io { what, source }
}

pub(crate) fn harness(what: impl Into<String>) -> impl FnOnce(anyhow::Error) -> KubeletNodeError {
    let what = what.into();
    move |e| KubeletNodeError::Harness {
        what,
        source: e.into(),
    }
}
