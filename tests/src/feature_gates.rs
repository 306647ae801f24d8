//! The feature gates the components start with, where the release has
//! them: the upstream gang API, and the API server's keeping of a
//! PodGroup's topology constraint.

use anyhow::Context as _;
use std::path::Path;

/// The upstream gang API (KEP-4671: `scheduling.k8s.io/v1beta1` Workload
/// and PodGroup, the pod's `spec.schedulingGroup`; beta and off by default
/// in 1.37) and the Job controller's use of it (KEP-5547, alpha), so that
/// the tests run gangs the way a 1.37 cluster that enables them does.
pub const WORKLOAD_FEATURES: &str = "GenericWorkload=true,WorkloadWithJob=true";

/// The PodGroup's topology constraint (KEP-5732,
/// `spec.schedulingConstraints.topology`; alpha and off by default in
/// 1.37): kube-apiserver drops the field on create and update unless this
/// is on (`pkg/registry/scheduling/podgroup/strategy.go`,
/// `dropDisabledSchedulingConstraintsFields`). Only the API server gets
/// it, so that the field survives for gputopo to read; kube-scheduler and
/// the controller manager keep their defaults, and no test compares
/// against kube-scheduler's own (alpha) topology-aware placement.
pub const API_SERVER_TOPOLOGY_FEATURE: &str = "TopologyAwareWorkloadScheduling=true";

/// The flags that turn [`WORKLOAD_FEATURES`] on for the component `bin`,
/// on releases where the API is `scheduling.k8s.io/v1beta1` (1.37 and
/// later; older releases run without it: `scripts/test-oldest-kubernetes`).
/// `api_server` adds the API group's `--runtime-config` and
/// [`API_SERVER_TOPOLOGY_FEATURE`].
pub(crate) fn workload_flags(bin: &Path, api_server: bool) -> anyhow::Result<Vec<String>> {
    let out = std::process::Command::new(bin).arg("--version").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let minor = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v1."))
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok())
        .with_context(|| format!("{} --version printed {text:?}", bin.display()))?;
    if minor < 37 {
        return Ok(Vec::new());
    }
    let mut flags = Vec::new();
    if api_server {
        flags.push(format!(
            "--feature-gates={WORKLOAD_FEATURES},{API_SERVER_TOPOLOGY_FEATURE}"
        ));
        flags.push("--runtime-config=scheduling.k8s.io/v1beta1=true".into());
    } else {
        flags.push(format!("--feature-gates={WORKLOAD_FEATURES}"));
    }
    Ok(flags)
}
