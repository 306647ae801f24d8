//! The first record wins: per bound pod, the GPU record the scheduler
//! wrote (or first read: its status record, else its annotations) is the
//! one every reader of the pod sees from then on. A later change of the
//! annotations is not believed: the pod is handed on with the kept record,
//! and the change is reported once per new value (an event on the pod, a
//! log line, a metric), from one [`RecordFinding`].

use super::{AssignmentRecord, RecordError};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::Arc;

/// Where a kept record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// This scheduler's binding wrote it.
    Written,
    /// The pod's status condition: written by a scheduler.
    Status,
    /// The annotations as first read (a pod bound before this scheduler
    /// started, with no status record).
    Annotations,
}

#[derive(Debug)]
struct Kept {
    uid: Option<String>,
    record: AssignmentRecord,
    source: Source,
    /// The differing annotations last reported, so each is reported once.
    reported: Option<AssignmentRecord>,
}

/// What reading a pod's records found that someone should hear of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordFinding {
    /// The annotations changed after the record was kept: ignored.
    Edited {
        pod: String,
        kept: AssignmentRecord,
        seen: AssignmentRecord,
    },
    /// The status record and the annotations disagree: the status record
    /// is kept (the annotations were edited, perhaps while no scheduler
    /// was watching).
    Disagrees {
        pod: String,
        status: AssignmentRecord,
        annotations: AssignmentRecord,
    },
    /// The status condition is not a record: the annotations are read.
    UnreadableStatus {
        pod: String,
        error: RecordError,
        annotations: AssignmentRecord,
    },
}

impl RecordFinding {
    /// Every [`Self::metric_label`], for the metric's help text and docs.
    pub const METRIC_LABELS: [&'static str; 3] = ["edited", "disagrees", "unreadable_status"];

    pub fn pod(&self) -> &str {
        match self {
            RecordFinding::Edited { pod, .. }
            | RecordFinding::Disagrees { pod, .. }
            | RecordFinding::UnreadableStatus { pod, .. } => pod,
        }
    }

    pub fn metric_label(&self) -> &'static str {
        match self {
            RecordFinding::Edited { .. } => "edited",
            RecordFinding::Disagrees { .. } => "disagrees",
            RecordFinding::UnreadableStatus { .. } => "unreadable_status",
        }
    }

    /// The event's reason.
    pub fn event_reason(&self) -> &'static str {
        match self {
            RecordFinding::Edited { .. } => "GPURecordEdited",
            RecordFinding::Disagrees { .. } => "GPURecordDisagrees",
            RecordFinding::UnreadableStatus { .. } => "GPURecordUnreadable",
        }
    }

    /// The event's note, naming the old and new values.
    pub fn message(&self) -> String {
        match self {
            RecordFinding::Edited { kept, seen, .. } => format!(
                "the pod's GPU record was changed after it was bound, from [{kept}] to [{seen}]; the scheduler keeps [{kept}], the GPUs it assigned"
            ),
            RecordFinding::Disagrees {
                status,
                annotations,
                ..
            } => format!(
                "the pod's annotations [{annotations}] differ from the scheduler's record in condition {} [{status}]; the scheduler keeps [{status}]",
                super::CONDITION_TYPE
            ),
            RecordFinding::UnreadableStatus {
                error, annotations, ..
            } => format!("{error}; the annotations [{annotations}] are read instead"),
        }
    }
}

/// A pod as the scheduler reads it: with the kept record, and what was
/// found on the way.
#[derive(Debug)]
pub struct Observed {
    pub pod: Arc<Pod>,
    pub findings: Vec<RecordFinding>,
}

/// See the module documentation. Keyed by `namespace/name`; a pod created
/// anew under the same name (another uid) starts afresh.
#[derive(Debug, Default)]
pub struct RecordKeeper {
    kept: HashMap<String, Kept>,
}

/// Whether the pod holds resources on a node (bound, not finished): only
/// such a pod's record counts.
fn holds_node(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded" | "Failed"))
}

impl RecordKeeper {
    /// How many pods' records are kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// `pod` (under `key`) as the scheduler reads it: the same `Arc` when
    /// its annotations hold the kept record, else a copy holding it.
    pub fn observe(&mut self, key: &str, pod: &Arc<Pod>) -> Observed {
        let mut findings = Vec::new();
        if !holds_node(pod) {
            self.kept.remove(key);
            return Observed {
                pod: pod.clone(),
                findings,
            };
        }
        let uid = pod.metadata.uid.clone();
        let seen = AssignmentRecord::from_annotations(pod);
        let status = AssignmentRecord::from_status(pod);
        let kept = match self.kept.get_mut(key).filter(|k| k.uid == uid) {
            Some(kept) => {
                // The status record is a scheduler's: it outranks what was
                // read from the annotations before it arrived.
                if kept.source == Source::Annotations
                    && let Some(Ok(s)) = &status
                    && *s != kept.record
                {
                    kept.record = s.clone();
                    kept.source = Source::Status;
                }
                kept
            }
            None => {
                let (record, source) = match status {
                    Some(Ok(s)) => (s, Source::Status),
                    Some(Err(error)) => {
                        findings.push(RecordFinding::UnreadableStatus {
                            pod: key.to_string(),
                            error,
                            annotations: seen.clone(),
                        });
                        (seen.clone(), Source::Annotations)
                    }
                    None => (seen.clone(), Source::Annotations),
                };
                self.kept.entry(key.to_string()).insert_entry(Kept {
                    uid,
                    record,
                    source,
                    reported: None,
                });
                self.kept.get_mut(key).expect("just kept")
            }
        };
        if seen == kept.record {
            kept.reported = None;
        } else if kept.reported.as_ref() != Some(&seen) {
            kept.reported = Some(seen.clone());
            findings.push(match kept.source {
                Source::Status => RecordFinding::Disagrees {
                    pod: key.to_string(),
                    status: kept.record.clone(),
                    annotations: seen,
                },
                Source::Written | Source::Annotations => RecordFinding::Edited {
                    pod: key.to_string(),
                    kept: kept.record.clone(),
                    seen,
                },
            });
        }
        let pod = kept
            .record
            .applied_to(pod)
            .map_or_else(|| pod.clone(), Arc::new);
        Observed { pod, findings }
    }

    /// This scheduler bound the pod under `key` (uid `uid`) with `record`:
    /// that is its record, whatever is read later.
    pub fn wrote(&mut self, key: &str, uid: Option<&str>, record: AssignmentRecord) {
        self.kept.insert(
            key.to_string(),
            Kept {
                uid: uid.map(str::to_string),
                record,
                source: Source::Written,
                reported: None,
            },
        );
    }

    /// Keeps the records of the pods `keep` says are still there.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.kept.retain(|k, _| keep(k));
    }

    /// The pod under `key` is gone.
    pub fn forget(&mut self, key: &str) {
        self.kept.remove(key);
    }
}
