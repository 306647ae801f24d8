//! `kubectl gputopo`: the scheduler's view of the live cluster, for people.
//!
//! Data flow, one way, once per command:
//!
//! 1. **In** (`connect.rs`, `listing.rs`, `settings.rs`): the API server
//!    found as kubectl finds it (`--kubeconfig`, `--context`); every kind
//!    the secondary scheduler watches, listed once ([`listing::Cluster`]:
//!    pods, nodes, namespaces, `GpuTopology`, the gang kinds and DRA's where
//!    served, owners, storage), trimmed as its watches trim them; the
//!    scheduler's configuration from its ConfigMap (or `--config FILE`).
//! 2. **Decide** (`dry_run.rs`): a fresh scheduling cycle of
//!    `gputopo-scheduler` itself ([`gputopo_scheduler::cycle::Cycle`]) runs
//!    once over those objects with writes that go nowhere: each pending
//!    pod's outcome and `FailedScheduling` text are the scheduler's own,
//!    not a copy of its rules. The snapshot the views read is the one the
//!    scheduler builds ([`gputopo_scheduler::cluster::build_snapshot`]).
//! 3. **Out** (`explain.rs`, `pending.rs`, `nodes.rs`, `gangs.rs`, with
//!    `events.rs` for a pod's recorded events): one serializable report per
//!    command, printed as a table (`table.rs`) or as JSON (`-o json`).
//!
//! Nothing is written to the cluster. The binary (`src/main.rs`) parses
//! the command line and prints; everything else is here, so the tests call
//! the same functions against a real API server.

pub mod connect;
pub mod dry_run;
pub mod events;
pub mod explain;
pub mod gangs;
pub mod listing;
pub mod nodes;
pub mod pending;
pub mod settings;
pub mod table;
pub mod view;

/// The pod's key, `namespace/name`, as the scheduler writes it.
pub use gputopo_scheduler::cluster::pod_key;

/// Which namespaces a command looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespace(String),
    All,
}

impl Scope {
    /// Whether `namespace` is in scope.
    pub fn includes(&self, namespace: &str) -> bool {
        match self {
            Scope::Namespace(n) => n == namespace,
            Scope::All => true,
        }
    }
}

/// `0,1,2` for a GPU list; `-` when empty.
pub fn gpu_list(gpus: &[u32]) -> String {
    if gpus.is_empty() {
        return "-".into();
    }
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The GPU indices of a bit mask (bit i = GPU i), ascending.
pub fn mask_gpus(mask: u32) -> Vec<u32> {
    (0..32).filter(|i| mask & (1 << i) != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_lists() {
        assert_eq!(mask_gpus(0b1010_0001), vec![0, 5, 7]);
        assert_eq!(gpu_list(&[0, 5, 7]), "0,5,7");
        assert_eq!(gpu_list(&[]), "-");
        assert!(Scope::All.includes("x"));
        assert!(!Scope::Namespace("a".into()).includes("b"));
    }
}
