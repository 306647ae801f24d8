//! A bound pod's GPU record, and where the scheduler keeps its own copy.
//!
//! The binding writes the record as annotations (`gputopo.dev/assigned-gpus`,
//! `gputopo.dev/assigned-gpu-uuids`, `scheduler.gputopo.dev/bottleneck`),
//! which anyone allowed to edit the pod may change. So the scheduler also
//! writes it, right after the binding, as a pod condition of its own type
//! ([`CONDITION_TYPE`]) through `pods/status`: the default `edit` and
//! `admin` roles cannot write that subresource, and the kubelet keeps
//! conditions of types it does not own. Reading a pod, the record kept is
//! the first one seen ([`keeper`]): the status record, else the
//! annotations; a later edit is ignored and reported.
//!
//! Pure: pods in, records and corrected pods out.

pub mod keeper;

use crate::annotations::BOTTLENECK_ANNOTATION;
use gputopo_api::keys::pod as pod_keys;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use std::collections::BTreeMap;
use std::fmt;

pub use keeper::{RecordFinding, RecordKeeper};

/// The pod condition type the scheduler's record is written under.
pub const CONDITION_TYPE: &str = "gputopo.dev/gpu-assignment";
/// The condition's reason.
pub const CONDITION_REASON: &str = "GPUsAssigned";

/// The record's keys, in the order the condition's message lists them.
const KEYS: [&str; 3] = [
    pod_keys::ASSIGNED_GPUS,
    pod_keys::ASSIGNED_GPU_UUIDS,
    BOTTLENECK_ANNOTATION,
];

/// The values of the record's keys (absent ones left out), as written: a
/// value that does not parse is still a value, kept as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AssignmentRecord(BTreeMap<&'static str, String>);

/// Why a condition's message is not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error(
        "condition {CONDITION_TYPE}: part {part:?} is not `key=value` with key one of {keys}",
        keys = KEYS.join(", ")
    )]
    BadPart { part: String },
    #[error("condition {CONDITION_TYPE}: key {key} given twice")]
    Repeated { key: String },
}

impl AssignmentRecord {
    /// The record the pod's annotations hold now.
    pub fn from_annotations(pod: &Pod) -> AssignmentRecord {
        pod.metadata
            .annotations
            .as_ref()
            .map(AssignmentRecord::from_binding)
            .unwrap_or_default()
    }

    /// The record a binding writes (its annotations).
    pub fn from_binding(annotations: &BTreeMap<String, String>) -> AssignmentRecord {
        AssignmentRecord(
            KEYS.iter()
                .filter_map(|k| Some((*k, annotations.get(*k)?.clone())))
                .collect(),
        )
    }

    /// The record in the pod's [`CONDITION_TYPE`] condition; `None` when the
    /// pod has none.
    pub fn from_status(pod: &Pod) -> Option<Result<AssignmentRecord, RecordError>> {
        let condition = pod
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == CONDITION_TYPE)?;
        Some(Self::parse(
            condition.message.as_deref().unwrap_or_default(),
        ))
    }

    /// `key=value; key=value`, as [`Self::message`] writes it.
    pub fn parse(message: &str) -> Result<AssignmentRecord, RecordError> {
        let mut values = BTreeMap::new();
        for part in message.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || RecordError::BadPart {
                part: part.to_string(),
            };
            let (key, value) = part.split_once('=').ok_or_else(bad)?;
            let key = KEYS.iter().find(|k| **k == key.trim()).ok_or_else(bad)?;
            if values.insert(*key, value.trim().to_string()).is_some() {
                return Err(RecordError::Repeated {
                    key: key.to_string(),
                });
            }
        }
        Ok(AssignmentRecord(values))
    }

    /// The condition's message: `key=value` per key the record has, `; `
    /// between.
    pub fn message(&self) -> String {
        KEYS.iter()
            .filter_map(|k| Some(format!("{k}={}", self.0.get(*k)?)))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The pod condition holding this record.
    pub fn condition(&self, now: k8s_openapi::jiff::Timestamp) -> PodCondition {
        PodCondition {
            type_: CONDITION_TYPE.into(),
            status: "True".into(),
            reason: Some(CONDITION_REASON.into()),
            message: Some(self.message()),
            last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
            ..PodCondition::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `pod` with its record annotations replaced by this record's (keys
    /// this record lacks removed); `None` when they already match.
    pub fn applied_to(&self, pod: &Pod) -> Option<Pod> {
        if AssignmentRecord::from_annotations(pod) == *self {
            return None;
        }
        let mut pod = pod.clone();
        let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for key in KEYS {
            match self.0.get(key) {
                Some(v) => annotations.insert(key.to_string(), v.clone()),
                None => annotations.remove(key),
            };
        }
        Some(pod)
    }
}

impl fmt::Display for AssignmentRecord {
    /// The message's form; `no GPU record` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("no GPU record")
        } else {
            f.write_str(&self.message())
        }
    }
}

#[cfg(test)]
mod tests;
