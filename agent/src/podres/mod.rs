//! What the kubelet allocated: its PodResources v1 API (`List` and
//! `GetAllocatableResources`), read every scan behind [`PodResourcesSource`]
//! — from the kubelet's socket ([`kubelet::KubeletSocket`]) or a saved
//! answer ([`saved::SavedAnswer`]) — and mapped onto the node's GPUs by a
//! pure function ([`map`]).

pub mod kubelet;
pub mod map;
pub mod saved;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

/// A reading in progress.
pub type Reading<'a> =
    Pin<Box<dyn Future<Output = Result<KubeletAnswer, PodResourcesError>> + Send + 'a>>;

/// Where the kubelet's answer comes from.
pub trait PodResourcesSource: Send + Sync {
    /// `List` and `GetAllocatableResources`, asked now.
    fn read(&self) -> Reading<'_>;
}

/// Why a reading failed. [`PodResourcesError::reason`] is its metric label.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error(
        "no PodResources socket at {path} (is the kubelet running, and its pod-resources directory mounted?)"
    )]
    SocketMissing { path: PathBuf },
    #[error("{source}")]
    Connect {
        #[source]
        source: gputopo_kubelet_api::DialError,
    },
    #[error("the kubelet's {call} failed: {code:?}: {message}")]
    Call {
        call: &'static str,
        code: tonic::Code,
        message: String,
    },
    #[error("the kubelet's {call} did not answer within {after:?} (--pod-resources-timeout)")]
    Timeout { call: &'static str, after: Duration },
    #[error("{file}: cannot read: {source}")]
    ReadSaved {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{file}: {path}: {message} (a saved answer is {{\"list\": <List's answer>, \"allocatable\": <GetAllocatableResources' answer>}} in protobuf JSON)"
    )]
    ParseSaved {
        file: String,
        path: String,
        message: String,
    },
    /// An answer that breaks what the API guarantees (a pod without a name).
    #[error("{from}: {what}")]
    Invalid { from: String, what: String },
}

impl PodResourcesError {
    /// A short, fixed label for `gputopo_agent_pod_resources_failures_total{reason}`.
    pub fn reason(&self) -> &'static str {
        match self {
            PodResourcesError::SocketMissing { .. } => "socket_missing",
            PodResourcesError::Connect { .. } => "connect_failed",
            PodResourcesError::Call { .. } => "call_failed",
            PodResourcesError::Timeout { .. } => "timeout",
            PodResourcesError::ReadSaved { .. } => "saved_unreadable",
            PodResourcesError::ParseSaved { .. } | PodResourcesError::Invalid { .. } => {
                "answer_invalid"
            }
        }
    }
}

/// Every label [`PodResourcesError::reason`] gives, for tests and dashboards.
pub const FAILURE_REASONS: &[&str] = &[
    "socket_missing",
    "connect_failed",
    "call_failed",
    "timeout",
    "saved_unreadable",
    "answer_invalid",
];

/// The parts of the kubelet's answers gputopo reads, as plain data. Its
/// JSON is the protobuf JSON of the two answers (what `grpcurl` prints for
/// `v1.PodResourcesLister/List` and `/GetAllocatableResources`), so an
/// answer captured on a node can be saved and replayed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletAnswer {
    pub list: ListAnswer,
    /// Absent where the kubelet does not serve `GetAllocatableResources`.
    #[serde(default)]
    pub allocatable: Option<AllocatableAnswer>,
}

/// `ListPodResourcesResponse`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListAnswer {
    #[serde(default, alias = "pod_resources")]
    pub pod_resources: Vec<PodAnswer>,
}

/// `PodResources`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodAnswer {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub containers: Vec<ContainerAnswer>,
}

/// `ContainerResources`; CPUs, memory and DRA claims are not read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerAnswer {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub devices: Vec<DevicesAnswer>,
    #[serde(default, alias = "cpu_ids", skip_serializing)]
    pub cpu_ids: Option<IgnoredAny>,
    #[serde(default, skip_serializing)]
    pub memory: Option<IgnoredAny>,
    #[serde(default, alias = "dynamic_resources", skip_serializing)]
    pub dynamic_resources: Option<IgnoredAny>,
}

/// `ContainerDevices`: one resource's devices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevicesAnswer {
    #[serde(default, alias = "resource_name")]
    pub resource_name: String,
    #[serde(default, alias = "device_ids")]
    pub device_ids: Vec<String>,
    #[serde(default, skip_serializing)]
    pub topology: Option<IgnoredAny>,
}

/// `AllocatableResourcesResponse`; CPUs and memory are not read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllocatableAnswer {
    #[serde(default)]
    pub devices: Vec<DevicesAnswer>,
    #[serde(default, alias = "cpu_ids", skip_serializing)]
    pub cpu_ids: Option<IgnoredAny>,
    #[serde(default, skip_serializing)]
    pub memory: Option<IgnoredAny>,
}

impl KubeletAnswer {
    /// Refuses what the API guarantees never to send: a pod without a name
    /// or namespace, a container without a name, an empty device ID.
    /// `from` names the source in the error.
    pub fn check(&self, from: &str) -> Result<(), PodResourcesError> {
        let invalid = |what: String| PodResourcesError::Invalid {
            from: from.to_string(),
            what,
        };
        for (i, pod) in self.list.pod_resources.iter().enumerate() {
            if pod.name.is_empty() || pod.namespace.is_empty() {
                return Err(invalid(format!(
                    "list.podResources[{i}] has no name or namespace ({:?}/{:?}); every pod has both",
                    pod.namespace, pod.name
                )));
            }
            for (j, c) in pod.containers.iter().enumerate() {
                if c.name.is_empty() {
                    return Err(invalid(format!(
                        "list.podResources[{i}].containers[{j}] of pod {}/{} has no name",
                        pod.namespace, pod.name
                    )));
                }
                check_devices(
                    &c.devices,
                    &format!("list.podResources[{i}].containers[{j}]"),
                )
                .map_err(|e| invalid(e.to_string()))?;
            }
        }
        if let Some(a) = &self.allocatable {
            check_devices(&a.devices, "allocatable").map_err(|e| invalid(e.to_string()))?;
        }
        Ok(())
    }
}

/// A device entry the API never sends.
#[derive(Debug, thiserror::Error)]
enum DeviceFault {
    #[error("{at}.devices[{k}] has no resourceName")]
    NoResourceName { at: String, k: usize },
    #[error("{at}.devices[{k}].deviceIds[{n}] is empty")]
    EmptyId { at: String, k: usize, n: usize },
}

fn check_devices(devices: &[DevicesAnswer], at: &str) -> Result<(), DeviceFault> {
    for (k, d) in devices.iter().enumerate() {
        if d.resource_name.is_empty() {
            return Err(DeviceFault::NoResourceName { at: at.into(), k });
        }
        if let Some(n) = d.device_ids.iter().position(String::is_empty) {
            return Err(DeviceFault::EmptyId {
                at: at.into(),
                k,
                n,
            });
        }
    }
    Ok(())
}
