//! What nodes report about who holds which GPU (the agent's reading of the
//! kubelet's PodResources API, in the `GpuTopology` status), whether that
//! reading is live, and where it disagrees with the GPUs gputopo chose.
//!
//! The device plugin, not the scheduler, decides which devices a container
//! gets; where the two differ, the node is right about what is held and the
//! pod runs on GPUs joined worse than the ones chosen. [`assignment_mismatches`]
//! finds those pods so they can be named in events and counted.

use crate::pod::parse_index_list;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_api::k8s_openapi::jiff::{SignedDuration, Timestamp};
use gputopo_api::keys::pod as pod_keys;
use gputopo_api::{
    DeviceForm, GpuAllocation, GpuRequest, GpuTopology, GpuTopologyStatus, LinkClass,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

/// The oldest reading of the kubelet trusted unless configured otherwise:
/// three of the agent's 5-minute heartbeats.
pub const DEFAULT_READING_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// How far nodes' readings of the kubelet are trusted, at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadingTrust {
    pub now: Timestamp,
    /// The oldest reading still believed.
    pub max_age: Duration,
}

impl ReadingTrust {
    /// Readings judged at `now` with [`DEFAULT_READING_MAX_AGE`].
    pub fn at(now: Timestamp) -> ReadingTrust {
        ReadingTrust {
            now,
            max_age: DEFAULT_READING_MAX_AGE,
        }
    }

    /// The state of the reading in `status` under this trust.
    pub fn state(self, status: Option<&GpuTopologyStatus>) -> ReadingState {
        ReadingState::of(status, self.now, self.max_age)
    }
}

/// Whether a node's reported allocations can stand in for the pods' annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadingState {
    /// The agent does not read the kubelet (absent `status.podResources`).
    NotReported,
    /// Read no longer ago than the allowed age.
    Fresh { observed_at: Timestamp },
    /// Read longer ago than the allowed age: the agent or the kubelet has
    /// stopped answering, and what it said may no longer hold.
    Stale {
        observed_at: Timestamp,
        age: SignedDuration,
    },
}

impl ReadingState {
    /// The state of `status`'s reading at `now`, given the oldest reading
    /// still trusted. A reading from the future (clock skew) is fresh.
    pub fn of(
        status: Option<&GpuTopologyStatus>,
        now: Timestamp,
        max_age: Duration,
    ) -> ReadingState {
        let Some(reading) = status.and_then(|s| s.pod_resources.as_ref()) else {
            return ReadingState::NotReported;
        };
        let observed_at = reading.observed_at.0;
        let age = now.duration_since(observed_at);
        let max = SignedDuration::try_from(max_age).unwrap_or(SignedDuration::MAX);
        if age > max {
            ReadingState::Stale { observed_at, age }
        } else {
            ReadingState::Fresh { observed_at }
        }
    }

    pub fn is_fresh(self) -> bool {
        matches!(self, ReadingState::Fresh { .. })
    }
}

/// The GPUs the kubelet reports one pod holding on one node, as bit masks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportedGpus {
    /// Held whole.
    pub whole: u32,
    /// Held in any form (whole, a MIG slice, a shared replica).
    pub any: u32,
}

/// Per pod (`namespace/name`), the GPUs a node's allocations say it holds.
/// Agents that publish no `holders` name only whole-GPU pods in `pods`.
/// GPU indices beyond a mask (the CRD allows at most 63) are left out.
pub fn reported_gpus(allocations: &[GpuAllocation]) -> HashMap<&str, ReportedGpus> {
    let mut by_pod: HashMap<&str, ReportedGpus> = HashMap::new();
    for a in allocations.iter().filter(|a| a.gpu < 32) {
        let bit = 1u32 << a.gpu;
        if a.holders.is_empty() {
            for pod in &a.pods {
                let r = by_pod.entry(pod.as_str()).or_default();
                r.whole |= bit;
                r.any |= bit;
            }
            continue;
        }
        for h in &a.holders {
            let r = by_pod.entry(h.pod.as_str()).or_default();
            r.any |= bit;
            if h.form == DeviceForm::Whole {
                r.whole |= bit;
            }
        }
    }
    by_pod
}

/// How well a set of GPUs is joined: its worst pair's link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetLinks {
    /// One GPU: no link between GPUs matters.
    Single,
    /// The slowest link between two GPUs of the set.
    Worst(LinkClass),
    /// Some pair has no link in the topology (or no topology).
    Unknown,
}

impl SetLinks {
    /// The worst link among `gpus` on `topology`'s node.
    pub fn of(topology: Option<&GpuTopology>, gpus: &[u32]) -> SetLinks {
        if gpus.len() < 2 {
            return SetLinks::Single;
        }
        let Some(t) = topology else {
            return SetLinks::Unknown;
        };
        let mut worst: Option<LinkClass> = None;
        for (i, &a) in gpus.iter().enumerate() {
            for &b in &gpus[i + 1..] {
                let Some(link) = t.spec.link(a, b) else {
                    return SetLinks::Unknown;
                };
                let class = LinkClass::of(link.link_type, link.nvlinks, link.hops);
                worst = Some(worst.map_or(class, |w| w.min(class)));
            }
        }
        worst.map_or(SetLinks::Unknown, SetLinks::Worst)
    }
}

impl fmt::Display for SetLinks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetLinks::Single => f.write_str("one GPU"),
            SetLinks::Worst(class) => write!(f, "{class} ring"),
            SetLinks::Unknown => f.write_str("links unknown"),
        }
    }
}

/// A pod running on other GPUs than the ones gputopo chose for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignmentMismatch {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    /// `gputopo.dev/assigned-gpus`.
    pub chosen: Vec<u32>,
    /// What the node reports the pod holds.
    pub got: Vec<u32>,
    pub chosen_links: SetLinks,
    pub got_links: SetLinks,
}

impl AssignmentMismatch {
    /// The event message: both sets and the link quality lost or kept.
    pub fn message(&self) -> String {
        let list = |g: &[u32]| {
            g.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let (a, b) = (self.chosen_links, self.got_links);
        let quality = if a == b {
            format!("same links ({a})")
        } else {
            format!("{a} chosen, got {b}")
        };
        format!(
            "gputopo chose GPUs {} on {} but the node reports {}: {quality}",
            list(&self.chosen),
            self.node,
            list(&self.got),
        )
    }
}

/// A fresh reading's time and what it says each pod holds.
type FreshReport<'a> = (Timestamp, HashMap<&'a str, ReportedGpus>);

/// Pods bound to a node whose fresh report names GPUs other than their
/// `gputopo.dev/assigned-gpus`, sorted by pod. Pods the node does not
/// report yet (not admitted), readings from before the pod started, stale
/// or absent readings and unreadable records are not mismatches: nothing
/// is known to differ. A `gpu-share` pod is compared on the GPU it shares.
pub fn assignment_mismatches<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    topologies: &HashMap<&str, &GpuTopology>,
    trust: ReadingTrust,
) -> Vec<AssignmentMismatch> {
    // Per node: its fresh reading, by pod; `None` when not fresh.
    let mut reports: HashMap<&str, Option<FreshReport<'_>>> = HashMap::new();
    let mut found = BTreeMap::new();
    for pod in pods {
        let Some(spec) = &pod.spec else { continue };
        let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        let status = pod.status.as_ref();
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        let Some(started) = status.and_then(|s| s.start_time.as_ref()).map(|t| t.0) else {
            continue;
        };
        let Some(chosen) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(pod_keys::ASSIGNED_GPUS))
            .and_then(|v| parse_index_list(v))
            .filter(|l| !l.is_empty())
        else {
            continue;
        };
        let topology = topologies.get(node).copied();
        let report = reports.entry(node).or_insert_with(|| {
            let status = topology.and_then(|t| t.status.as_ref());
            match trust.state(status) {
                ReadingState::Fresh { observed_at } => Some((
                    observed_at,
                    reported_gpus(status.map_or(&[][..], |s| &s.allocations)),
                )),
                _ => None,
            }
        });
        let Some((observed_at, by_pod)) = report else {
            continue;
        };
        if started > *observed_at {
            continue;
        }
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        let Some(reported) = by_pod.get(key.as_str()) else {
            continue;
        };
        let shared = GpuRequest::from_pod(pod).is_ok_and(|r| r.gpu_share.is_some());
        let mask = if shared { reported.any } else { reported.whole };
        if mask == 0 {
            continue;
        }
        let got = bits(mask);
        let mut chosen = chosen;
        chosen.sort_unstable();
        chosen.dedup();
        if got == chosen {
            continue;
        }
        found.insert(
            key.clone(),
            AssignmentMismatch {
                pod: key,
                node: node.to_string(),
                chosen_links: SetLinks::of(topology, &chosen),
                got_links: SetLinks::of(topology, &got),
                chosen,
                got,
            },
        );
    }
    found.into_values().collect()
}

fn bits(mask: u32) -> Vec<u32> {
    (0..32).filter(|i| mask & (1 << i) != 0).collect()
}
