//! How a pod names the gang it belongs to (docs/contract/pod-requests.md, "Gangs").
//!
//! Declared, one of: the upstream `scheduling.k8s.io` PodGroup named by the
//! pod's `spec.schedulingGroup` (what the Job controller writes with
//! `WorkloadWithJob`), the scheduler-plugins PodGroup named by the
//! `scheduling.x-k8s.io/pod-group` label, or gputopo's `gputopo.dev/gang` +
//! `gputopo.dev/gang-size` annotations. Two of them on one pod is an error:
//! which one the pod meant cannot be guessed.
//!
//! Derived, when none is declared: a JobSet's pods (its controller's
//! `jobset.sigs.k8s.io/jobset-name` label) and a LeaderWorkerSet group (its
//! `leaderworkerset.sigs.k8s.io/name` and `group-index` labels, its `size`
//! annotation) are gangs, so that their users need no gputopo annotation.
//! `gputopo.dev/derive-gang: "false"` opts a pod out.

use super::RequestError;
use super::annotations::{ACCEPT_BOOL, bad, parse_u32};
use crate::keys::pod as key;
use std::collections::BTreeMap;

/// How a pod names the gang it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GangRef {
    /// The scheduler-plugins `PodGroup` named by the `scheduling.x-k8s.io/pod-group` label;
    /// its size is the PodGroup's `spec.minMember`.
    PodGroup { name: String },
    /// `gputopo.dev/gang` with `gputopo.dev/gang-size`, for clusters without the CRD.
    Annotation { name: String, size: u32 },
    /// The upstream `scheduling.k8s.io` `PodGroup` the pod's
    /// `spec.schedulingGroup.podGroupName` names: a gang of its gang
    /// policy's `minCount`, or independent pods under the basic policy.
    SchedulingGroup { name: String },
    /// Derived: the JobSet the pod's `jobset.sigs.k8s.io/jobset-name` label
    /// names, whose size the scheduler reads from the JobSet itself.
    JobSet {
        name: String,
        replicated_job: String,
    },
    /// Derived: one group (leader and workers) of a LeaderWorkerSet.
    LeaderWorkerSet {
        name: String,
        group: String,
        size: u32,
    },
}

impl GangRef {
    pub fn name(&self) -> &str {
        match self {
            GangRef::PodGroup { name }
            | GangRef::Annotation { name, .. }
            | GangRef::SchedulingGroup { name }
            | GangRef::JobSet { name, .. }
            | GangRef::LeaderWorkerSet { name, .. } => name,
        }
    }

    /// Whether the gang comes from a controller's labels rather than a
    /// declaration.
    pub fn is_derived(&self) -> bool {
        matches!(
            self,
            GangRef::JobSet { .. } | GangRef::LeaderWorkerSet { .. }
        )
    }
}

/// Where a pod may declare its gang: the pod's own fields, read by the caller.
pub(crate) struct GangFields<'a> {
    /// `spec.schedulingGroup.podGroupName`.
    pub scheduling_group: Option<&'a str>,
    /// `gputopo.dev/gang` and `gputopo.dev/gang-size`: (key used, value).
    pub gang: Option<(&'a str, &'a str)>,
    pub size: Option<(&'a str, &'a str)>,
    /// `gputopo.dev/derive-gang`.
    pub derive: Option<(&'a str, &'a str)>,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
}

const ACCEPT_GANG: &str = "a gang name: 1-253 characters of [a-z0-9.-]";
const ACCEPT_SIZE: &str = "a gang size 1..=10000";

/// The field `spec.schedulingGroup.podGroupName`, as errors name it.
pub const SCHEDULING_GROUP_FIELD: &str = "spec.schedulingGroup.podGroupName";

pub(crate) fn parse(f: &GangFields<'_>) -> Result<Option<GangRef>, RequestError> {
    let declared = declared(f)?;
    if declared.is_some() {
        return Ok(declared);
    }
    let derive = match f.derive {
        None => true,
        Some((_, "true")) => true,
        Some((_, "false")) => false,
        Some((k, v)) => return Err(bad(k, v, ACCEPT_BOOL)),
    };
    if !derive {
        return Ok(None);
    }
    derived(f)
}

fn declared(f: &GangFields<'_>) -> Result<Option<GangRef>, RequestError> {
    let pod_group = f.labels.get(key::POD_GROUP_LABEL);
    let named: Vec<&str> = [
        f.scheduling_group.map(|_| SCHEDULING_GROUP_FIELD),
        pod_group.map(|_| key::POD_GROUP_LABEL),
        f.gang.or(f.size).map(|(k, _)| k),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let [first, second, ..] = named[..] {
        return Err(RequestError::Inconsistent {
            key: second.to_string(),
            detail: format!(
                "the pod already names its gang with {first}; one pod belongs to one gang, so keep one of {}",
                named.join(", ")
            ),
        });
    }
    if let Some(name) = f.scheduling_group {
        if !is_gang_name(name) {
            return Err(bad(SCHEDULING_GROUP_FIELD, name, ACCEPT_GANG));
        }
        return Ok(Some(GangRef::SchedulingGroup {
            name: name.to_string(),
        }));
    }
    if let Some(pg) = pod_group {
        if !is_gang_name(pg) {
            return Err(bad(key::POD_GROUP_LABEL, pg, ACCEPT_GANG));
        }
        return Ok(Some(GangRef::PodGroup { name: pg.clone() }));
    }
    match (f.gang, f.size) {
        (Some((k, name)), Some((sk, sv))) => {
            if !is_gang_name(name) {
                return Err(bad(k, name, ACCEPT_GANG));
            }
            let size = parse_size(sk, sv)?;
            Ok(Some(GangRef::Annotation {
                name: name.to_string(),
                size,
            }))
        }
        (Some((k, _)), None) => Err(RequestError::Inconsistent {
            key: k.to_string(),
            detail: format!("a gang needs its size: set {} too", key::GANG_SIZE),
        }),
        (None, Some((k, _))) => Err(RequestError::Inconsistent {
            key: k.to_string(),
            detail: format!("a gang size needs a gang name: set {} too", key::GANG),
        }),
        (None, None) => Ok(None),
    }
}

/// A gang from the labels JobSet's or LeaderWorkerSet's controller puts on
/// the pods it creates. Values that are not what those controllers write
/// are errors, not silently independent pods.
fn derived(f: &GangFields<'_>) -> Result<Option<GangRef>, RequestError> {
    if let Some(name) = f.labels.get(key::JOBSET_NAME_LABEL) {
        if !is_gang_name(name) {
            return Err(bad(key::JOBSET_NAME_LABEL, name, ACCEPT_GANG));
        }
        let replicated_job = f
            .labels
            .get(key::JOBSET_REPLICATED_JOB_LABEL)
            .cloned()
            .unwrap_or_default();
        return Ok(Some(GangRef::JobSet {
            name: name.clone(),
            replicated_job,
        }));
    }
    if let Some(name) = f.labels.get(key::LWS_NAME_LABEL) {
        if !is_gang_name(name) {
            return Err(bad(key::LWS_NAME_LABEL, name, ACCEPT_GANG));
        }
        let Some(group) = f.labels.get(key::LWS_GROUP_INDEX_LABEL) else {
            return Err(RequestError::Inconsistent {
                key: key::LWS_GROUP_INDEX_LABEL.to_string(),
                detail: format!(
                    "a LeaderWorkerSet pod (label {}) without its group index; set {}: \"false\" to schedule it alone",
                    key::LWS_NAME_LABEL,
                    key::DERIVE_GANG
                ),
            });
        };
        if group.is_empty() || !group.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(
                key::LWS_GROUP_INDEX_LABEL,
                group,
                "a group index: a whole number",
            ));
        }
        let size = match f.annotations.get(key::LWS_SIZE_ANNOTATION) {
            Some(v) => parse_size(key::LWS_SIZE_ANNOTATION, v)?,
            None => {
                return Err(RequestError::Inconsistent {
                    key: key::LWS_SIZE_ANNOTATION.to_string(),
                    detail: format!(
                        "a LeaderWorkerSet pod (label {}) without its group size; set {}: \"false\" to schedule it alone",
                        key::LWS_NAME_LABEL,
                        key::DERIVE_GANG
                    ),
                });
            }
        };
        return Ok(Some(GangRef::LeaderWorkerSet {
            name: name.clone(),
            group: group.clone(),
            size,
        }));
    }
    Ok(None)
}

fn parse_size(k: &str, v: &str) -> Result<u32, RequestError> {
    parse_u32(k, v.trim(), ACCEPT_SIZE, 1..=10_000)
}

pub(crate) fn is_gang_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn fields<'a>(
        labels: &'a BTreeMap<String, String>,
        annotations: &'a BTreeMap<String, String>,
    ) -> GangFields<'a> {
        GangFields {
            scheduling_group: None,
            gang: annotations
                .get_key_value(key::GANG)
                .map(|(k, v)| (k.as_str(), v.as_str())),
            size: annotations
                .get_key_value(key::GANG_SIZE)
                .map(|(k, v)| (k.as_str(), v.as_str())),
            derive: annotations
                .get_key_value(key::DERIVE_GANG)
                .map(|(k, v)| (k.as_str(), v.as_str())),
            labels,
            annotations,
        }
    }

    #[test]
    fn the_scheduling_group_names_an_upstream_pod_group() {
        let (l, a) = (map(&[]), map(&[]));
        let f = GangFields {
            scheduling_group: Some("train-0"),
            ..fields(&l, &a)
        };
        assert_eq!(
            parse(&f).unwrap(),
            Some(GangRef::SchedulingGroup {
                name: "train-0".into()
            })
        );
        let f = GangFields {
            scheduling_group: Some("Bad_Name"),
            ..fields(&l, &a)
        };
        assert_eq!(parse(&f).unwrap_err().key(), SCHEDULING_GROUP_FIELD);
    }

    #[test]
    fn two_declarations_on_one_pod_are_refused_naming_both() {
        let l = map(&[(key::POD_GROUP_LABEL, "pg")]);
        let a = map(&[(key::GANG, "g"), (key::GANG_SIZE, "2")]);
        let f = GangFields {
            scheduling_group: Some("up"),
            ..fields(&l, &a)
        };
        let e = parse(&f).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(SCHEDULING_GROUP_FIELD)
                && text.contains(key::POD_GROUP_LABEL)
                && text.contains(key::GANG),
            "{text}"
        );
        let e = parse(&fields(&l, &a)).unwrap_err();
        assert_eq!(e.key(), key::GANG, "{e}");
    }

    #[test]
    fn jobset_pods_form_a_gang_unless_opted_out() {
        let l = map(&[
            (key::JOBSET_NAME_LABEL, "llama"),
            (key::JOBSET_REPLICATED_JOB_LABEL, "workers"),
        ]);
        let a = map(&[]);
        assert_eq!(
            parse(&fields(&l, &a)).unwrap(),
            Some(GangRef::JobSet {
                name: "llama".into(),
                replicated_job: "workers".into()
            })
        );
        let a = map(&[(key::DERIVE_GANG, "false")]);
        assert_eq!(parse(&fields(&l, &a)).unwrap(), None);
        let a = map(&[(key::DERIVE_GANG, "no")]);
        assert_eq!(parse(&fields(&l, &a)).unwrap_err().key(), key::DERIVE_GANG);
        // A declaration wins over what the labels suggest.
        let a = map(&[(key::GANG, "mine"), (key::GANG_SIZE, "3")]);
        assert_eq!(
            parse(&fields(&l, &a)).unwrap(),
            Some(GangRef::Annotation {
                name: "mine".into(),
                size: 3
            })
        );
    }

    #[test]
    fn a_leader_worker_set_group_is_a_gang_of_its_size() {
        let l = map(&[
            (key::LWS_NAME_LABEL, "vllm"),
            (key::LWS_GROUP_INDEX_LABEL, "2"),
        ]);
        let a = map(&[(key::LWS_SIZE_ANNOTATION, "4")]);
        let g = parse(&fields(&l, &a)).unwrap().unwrap();
        assert_eq!(
            g,
            GangRef::LeaderWorkerSet {
                name: "vllm".into(),
                group: "2".into(),
                size: 4
            }
        );
        assert!(g.is_derived());
        for bad_size in ["0", "-1", "x", "100000"] {
            let a = map(&[(key::LWS_SIZE_ANNOTATION, bad_size)]);
            let e = parse(&fields(&l, &a)).unwrap_err();
            assert_eq!(e.key(), key::LWS_SIZE_ANNOTATION, "{bad_size}: {e}");
        }
        let e = parse(&fields(&l, &map(&[]))).unwrap_err();
        assert_eq!(e.key(), key::LWS_SIZE_ANNOTATION);
        let l = map(&[(key::LWS_NAME_LABEL, "vllm")]);
        let e = parse(&fields(&l, &a)).unwrap_err();
        assert_eq!(e.key(), key::LWS_GROUP_INDEX_LABEL);
    }
}
