//! The workload controllers whose pods form gangs without a gputopo
//! annotation: JobSet and LeaderWorkerSet. Only the fields that decide a
//! gang's size are read; unknown fields are ignored, so the CRDs those
//! projects install serve these types unchanged.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A JobSet (`jobset.x-k8s.io/v1alpha2`): its pods are one gang whose size
/// is the pods its replicated jobs run at once.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "jobset.x-k8s.io",
    version = "v1alpha2",
    kind = "JobSet",
    plural = "jobsets",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    #[serde(default)]
    pub replicated_jobs: Vec<ReplicatedJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_policy: Option<JobSetStartupPolicy>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    pub name: String,
    /// JobSet's default is 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    pub template: JobTemplateSpec,
    /// Replicated jobs this one starts after (ready or complete): its pods
    /// come later, so they are not counted in the gang's first wave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<serde_json::Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobSetStartupPolicy {
    /// `AnyOrder` (the default) or `InOrder`: each replicated job starts
    /// only once the one before it is ready, so they cannot be one gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_policy_order: Option<String>,
}

/// A LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`): each group (leader
/// and workers) is a gang; its size is on every pod, so only the startup
/// policy is read here.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "leaderworkerset.x-k8s.io",
    version = "v1",
    kind = "LeaderWorkerSet",
    plural = "leaderworkersets",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// `LeaderCreated` (the default) or `LeaderReady`: with `LeaderReady`
    /// the workers are created only once the leader runs, so the group
    /// cannot be one gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_policy: Option<String>,
}
