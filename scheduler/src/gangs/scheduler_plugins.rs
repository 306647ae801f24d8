//! The scheduler-plugins `PodGroup` (`scheduling.x-k8s.io/v1alpha1`), the
//! few fields this scheduler reads. Pods name their group with the label
//! `scheduling.x-k8s.io/pod-group`; `spec.minMember` is the gang's size.
//!
//! The type is deliberately minimal: unknown fields of a real scheduler-plugins
//! object are ignored when read, so the CRD that scheduler-plugins installs
//! serves it unchanged. [`PodGroup::crd`] (from `kube::CustomResourceExt`)
//! generates a CRD for clusters (and tests) that have none.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A gang of pods that is scheduled all together or not at all.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "PodGroup",
    plural = "podgroups",
    singular = "podgroup",
    shortname = "pg",
    namespaced,
    status = "PodGroupStatus",
    derive = "PartialEq",
    doc = "A gang of pods scheduled together (scheduler-plugins coscheduling); gputopo-scheduler reads spec.minMember and spec.scheduleTimeoutSeconds and writes status."
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// How many pods must be placed together before any is bound.
    pub min_member: u32,
    /// How long the gang may wait for its members, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<u32>,
}

/// What the group's pods show, as scheduler-plugins' PodGroup controller
/// reports it; gputopo-scheduler writes it for the groups whose pods it
/// serves (`cycle/gang_status.rs`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `PreScheduling`, `Scheduled`, `Running`, `Finished` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<u32>,
}

impl PodGroup {
    /// The snapshot's view of this group; `None` without a name.
    pub fn to_core(&self) -> Option<gputopo_scheduler_core::snapshot::PodGroup> {
        Some(gputopo_scheduler_core::snapshot::PodGroup {
            namespace: self
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: self.metadata.name.clone()?,
            min_member: self.spec.min_member,
            schedule_timeout_seconds: self.spec.schedule_timeout_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn reads_a_scheduler_plugins_object_and_generates_a_crd() {
        let pg: PodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "job-a", "namespace": "ml"},
            "spec": {"minMember": 8, "scheduleTimeoutSeconds": 30, "minResources": {"cpu": "1"}},
            "status": {"phase": "Pending", "occupiedBy": "x"}
        }))
        .expect("a scheduler-plugins PodGroup reads");
        let core = pg.to_core().expect("named");
        assert_eq!(
            (core.min_member, core.schedule_timeout_seconds),
            (8, Some(30))
        );
        assert_eq!(core.namespace, "ml");
        let crd = PodGroup::crd();
        assert_eq!(crd.spec.group, "scheduling.x-k8s.io");
        assert_eq!(crd.spec.names.plural, "podgroups");
        assert_eq!(crd.spec.scope, "Namespaced");
    }
}
