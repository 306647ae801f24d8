//! The `GpuTopology` object the agent publishes for a node.

use crate::health::{HealthFinding, degraded_condition};
use gputopo_api::{GpuTopology, GpuTopologySpec, GpuTopologyStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The object for `spec`, with its `Degraded` condition. `now` stamps the condition.
pub fn gpu_topology(spec: GpuTopologySpec, findings: &[HealthFinding], now: Time) -> GpuTopology {
    let mut object = GpuTopology::new(&spec.node_name.clone(), spec);
    object.status = Some(GpuTopologyStatus {
        conditions: vec![degraded_condition(findings, now)],
        allocations: vec![],
        pod_resources: None,
    });
    object
}
