//! The objects that make pods a gang, and what each says of its gang's
//! size: the scheduler-plugins PodGroup, the upstream `scheduling.k8s.io`
//! PodGroup, and the controllers whose gangs are derived (JobSet,
//! LeaderWorkerSet). Which one a pod names is `gputopo_api::GangRef`.
//! Pure: the cycle passes what the watches hold.

pub mod controllers;
pub mod scheduler_plugins;
pub mod topology;

pub use controllers::{JobSet, LeaderWorkerSet};
pub use scheduler_plugins::{PodGroup, PodGroupSpec, PodGroupStatus};

use gputopo_api::GangRef;
use std::sync::Arc;
use std::time::Duration;

/// The upstream gang object (KEP-4671), `scheduling.k8s.io/v1beta1`.
pub type UpstreamPodGroup = k8s_openapi::api::scheduling::v1beta1::PodGroup;

/// What the watches hold of each gang-defining kind (empty where the API
/// server does not serve it).
#[derive(Clone, Debug, Default)]
pub struct GangObjects {
    pub pod_groups: Vec<Arc<PodGroup>>,
    pub upstream_groups: Vec<Arc<UpstreamPodGroup>>,
    pub jobsets: Vec<Arc<JobSet>>,
    pub leader_worker_sets: Vec<Arc<LeaderWorkerSet>>,
    /// Which of their APIs the API server serves now: a pod naming an
    /// object of one it does not is told so, not just that it waits.
    pub served: GangApis,
}

/// Whether each gang kind's API is served (all, unless the watches found
/// otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GangApis {
    pub pod_groups: bool,
    pub upstream_groups: bool,
    pub jobsets: bool,
    pub leader_worker_sets: bool,
}

impl Default for GangApis {
    fn default() -> GangApis {
        GangApis {
            pod_groups: true,
            upstream_groups: true,
            jobsets: true,
            leader_worker_sets: true,
        }
    }
}

/// What a gang's defining object says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GangSize {
    /// All or nothing, with this many members.
    Gang {
        size: u32,
        /// The object's own wait limit, if it sets one.
        timeout: Option<Duration>,
    },
    /// The object says its pods are placed one by one (why, for the log).
    Independent(String),
}

/// Why a gang's size cannot be known (yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GangSizeError {
    /// The object the pods name is not (yet) there: they wait for it.
    #[error("{0} does not exist (yet); waiting for it")]
    Missing(String),
    /// The API of the object the pods name is not served: they wait for it.
    #[error(
        "{object}: the API server does not serve {api} (its CRD is not installed or its feature is off); waiting: gputopo starts watching it once it is served, no restart needed"
    )]
    NotServed { object: String, api: &'static str },
    /// The object says something unusable; its pods wait until it is fixed.
    #[error("{object}: {field} is {value}; accepted: {accepted}")]
    Invalid {
        object: String,
        field: &'static str,
        value: String,
        accepted: &'static str,
    },
}

/// The most members one gang may have (as `gputopo.dev/gang-size`).
const MAX_GANG: i64 = 10_000;

impl GangObjects {
    /// What `gang`'s object, in `namespace`, says of its size. `names` are
    /// this scheduler's names: a JobSet counts only the pods it sends here.
    pub fn size(
        &self,
        namespace: &str,
        gang: &GangRef,
        names: &[String],
    ) -> Result<GangSize, GangSizeError> {
        let in_ns = |meta: &kube::api::ObjectMeta, name: &str| {
            meta.namespace.as_deref() == Some(namespace) && meta.name.as_deref() == Some(name)
        };
        match gang {
            GangRef::Annotation { size, .. } => Ok(GangSize::Gang {
                size: *size,
                timeout: None,
            }),
            GangRef::LeaderWorkerSet { name, size, .. } => {
                let set = self
                    .leader_worker_sets
                    .iter()
                    .find(|s| in_ns(&s.metadata, name));
                match set.and_then(|s| s.spec.startup_policy.as_deref()) {
                    Some("LeaderReady") => Ok(GangSize::Independent(format!(
                        "LeaderWorkerSet {namespace}/{name} starts its workers only once the leader is ready (spec.startupPolicy: LeaderReady)"
                    ))),
                    _ => Ok(GangSize::Gang {
                        size: *size,
                        timeout: None,
                    }),
                }
            }
            GangRef::PodGroup { name } => {
                let object = format!("PodGroup {namespace}/{name} (scheduling.x-k8s.io)");
                if !self.served.pod_groups {
                    return Err(GangSizeError::NotServed {
                        object,
                        api: "podgroups.scheduling.x-k8s.io",
                    });
                }
                let g = self
                    .pod_groups
                    .iter()
                    .find(|g| in_ns(&g.metadata, name))
                    .ok_or_else(|| GangSizeError::Missing(object.clone()))?;
                if g.spec.min_member == 0 || i64::from(g.spec.min_member) > MAX_GANG {
                    return Err(GangSizeError::Invalid {
                        object,
                        field: "spec.minMember",
                        value: g.spec.min_member.to_string(),
                        accepted: "1..=10000 members",
                    });
                }
                Ok(GangSize::Gang {
                    size: g.spec.min_member,
                    timeout: g
                        .spec
                        .schedule_timeout_seconds
                        .map(|s| Duration::from_secs(u64::from(s))),
                })
            }
            GangRef::SchedulingGroup { name } => {
                let object = format!("PodGroup {namespace}/{name} (scheduling.k8s.io)");
                if !self.served.upstream_groups {
                    return Err(GangSizeError::NotServed {
                        object,
                        api: "podgroups.scheduling.k8s.io/v1beta1",
                    });
                }
                let g = self
                    .upstream_groups
                    .iter()
                    .find(|g| in_ns(&g.metadata, name))
                    .ok_or_else(|| GangSizeError::Missing(object.clone()))?;
                let policy = &g.spec.scheduling_policy;
                match (&policy.gang, &policy.basic) {
                    (Some(gang), _) => {
                        let n = i64::from(gang.min_count);
                        if !(1..=MAX_GANG).contains(&n) {
                            return Err(GangSizeError::Invalid {
                                object,
                                field: "spec.schedulingPolicy.gang.minCount",
                                value: n.to_string(),
                                accepted: "1..=10000 members",
                            });
                        }
                        Ok(GangSize::Gang {
                            size: n as u32,
                            timeout: None,
                        })
                    }
                    (None, Some(_)) => Ok(GangSize::Independent(format!(
                        "{object} has the basic scheduling policy"
                    ))),
                    (None, None) => Err(GangSizeError::Invalid {
                        object,
                        field: "spec.schedulingPolicy",
                        value: "empty".into(),
                        accepted: "gang (with minCount) or basic",
                    }),
                }
            }
            GangRef::JobSet { name, .. } => {
                let object = format!("JobSet {namespace}/{name}");
                if !self.served.jobsets {
                    return Err(GangSizeError::NotServed {
                        object,
                        api: "jobsets.jobset.x-k8s.io",
                    });
                }
                let set = self
                    .jobsets
                    .iter()
                    .find(|s| in_ns(&s.metadata, name))
                    .ok_or_else(|| GangSizeError::Missing(object.clone()))?;
                jobset_size(&object, set, names)
            }
        }
    }
}

/// The pods a JobSet runs at once for this scheduler: over its replicated
/// jobs whose pods name one of `names` and that wait for no other
/// (`dependsOn`: their pods come once those are ready or done, so counting
/// them would make a gang that can never assemble), replicas × parallelism.
/// The later jobs' pods join the gang's bound members and go near them.
fn jobset_size(object: &str, set: &JobSet, names: &[String]) -> Result<GangSize, GangSizeError> {
    let order = set
        .spec
        .startup_policy
        .as_ref()
        .and_then(|p| p.startup_policy_order.as_deref());
    if order == Some("InOrder") {
        return Ok(GangSize::Independent(format!(
            "{object} starts its replicated jobs one after another (spec.startupPolicy.startupPolicyOrder: InOrder)"
        )));
    }
    let invalid = |field, value: i64| GangSizeError::Invalid {
        object: object.to_string(),
        field,
        value: value.to_string(),
        accepted: "a JobSet of 1..=10000 pods for this scheduler in all",
    };
    let mut total: i64 = 0;
    for rj in &set.spec.replicated_jobs {
        let job = rj.template.spec.as_ref();
        let scheduler = job
            .and_then(|j| j.template.spec.as_ref())
            .and_then(|p| p.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        if !names.iter().any(|n| n == scheduler) || !rj.depends_on.is_empty() {
            continue;
        }
        let replicas = rj.replicas.unwrap_or(1);
        let parallelism = i64::from(job.and_then(|j| j.parallelism).unwrap_or(1));
        if !(0..=MAX_GANG).contains(&replicas) {
            return Err(invalid("spec.replicatedJobs[].replicas", replicas));
        }
        if !(0..=MAX_GANG).contains(&parallelism) {
            return Err(invalid(
                "spec.replicatedJobs[].template.spec.parallelism",
                parallelism,
            ));
        }
        total += replicas * parallelism;
        if total > MAX_GANG {
            return Err(invalid("spec.replicatedJobs", total));
        }
    }
    if total == 0 {
        return Err(invalid("spec.replicatedJobs", 0));
    }
    Ok(GangSize::Gang {
        size: total as u32,
        timeout: None,
    })
}

#[cfg(test)]
mod tests;
