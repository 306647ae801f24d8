//! The deployment artifacts: the Helm chart (`helm/gputopo`), the plain
//! manifests (`daemonset/`) and the Dockerfiles.
//!
//! - `helm lint` passes, and values that cannot work fail the render;
//! - the chart, rendered with default and with non-default values, is
//!   accepted by the real API server (server-side apply, dry run, strict
//!   field validation, so a misspelt field fails);
//! - the chart and the plain manifests describe the same objects;
//! - the agent, given exactly the identity and authority the chart renders
//!   (not cluster-admin), publishes its node, and the chart's admission
//!   policy still binds it to that node;
//! - the scheduler's RBAC is exactly the listed rules, and the scheduler,
//!   given exactly the chart's identity and configuration, binds and
//!   annotates a pod that names the chart's scheduler;
//! - with `scheduler.extender.enabled`, the chart runs the extender (one
//!   replica, its Service, the smaller RBAC it uses, TLS from the named
//!   Secrets, the NetworkPolicy, the KubeSchedulerConfiguration snippet in
//!   NOTES), and the extender, given exactly that identity and those
//!   files, filters and binds over TLS a pod as kube-scheduler asks;
//! - `helm install`, `upgrade` and `uninstall` work on the real API server,
//!   and the uninstall leaves the CRD;
//! - the CRD is a template kept on uninstall, and a release of the previous
//!   chart upgrades to this one with its CRD brought up to date and its
//!   `GpuTopology` objects kept: `deploy/upgrade.rs` (docs/upgrades.md);
//! - the Dockerfiles build what `scripts/static-build` checks in CI;
//! - the optional device plugin (`devicePlugin.enabled`): `deploy/device_plugin.rs`.
//! - AMD GPUs (`agent.amd.enabled`, `agent.backend`): the AMD pool renders
//!   and is accepted, and its agent publishes recorded AMD machines: `deploy/amd*.rs`.
//! - the optional PrometheusRule and Grafana dashboard (`metrics.prometheusRule`,
//!   `metrics.grafanaDashboard`) render, and every metric they query is one the
//!   real daemons export: `deploy/observability*.rs`.
//!
//! Helm is the one `scripts/control-plane-binaries` builds (v3.19).
//!
//! One module per thing deployed or checked (`chart`, `plain_manifests`,
//! `agent_*`, `scheduler_*`, `extender_*`, `device_plugin*`, `dry_run`,
//! `helm_lifecycle`, `upgrade`, `observability*`); the helpers they share: `helm` (running helm,
//! rendering the chart), `values` (the releases and values files), `objects`
//! (reading rendered objects), `cluster` (applying them to the test control
//! plane) and `chart_process` (running a binary as the chart's container).

mod agent_e2e;
mod agent_policy;
mod agent_security;
mod amd;
mod amd_e2e;
mod chart;
mod chart_process;
mod cluster;
mod device_plugin;
mod device_plugin_metrics;
mod dry_run;
mod extender_e2e;
mod extender_security;
mod helm;
mod helm_lifecycle;
mod identity;
mod install_commands;
mod log_format;
mod objects;
mod observability;
mod observability_daemons;
mod plain_manifests;
mod scheduler_e2e;
mod scheduler_rbac;
mod scheduler_render;
mod upgrade;
mod values;

// The helpers at the root, as they were before the split: `agent_e2e`,
// `agent_security`, `device_plugin*` and `extender_security` import them
// with `use super::...` (`agent_e2e` with a glob, which also takes the
// crates' names below).
use chart_process::{free_port, http_get};
use cluster::{apply_kinds, ensure_namespace};
use dry_run::{dry_run_apply, ensure_service_monitor_crd};
use helm::{HelmError, documents, render, render_ok};
use objects::{
    container, env_value, find, kind_name, permissions, plain_manifests, scheduler_object, triples,
    without_helm_labels,
};
use values::{EXTENDER_VALUES, NAMESPACE, RELEASE};

use gputopo_testenv::binaries::workspace_binary;
use gputopo_testenv::{TestEnv, fake_gpu_node, process::Process};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The workspace's root: the chart, the plain manifests, the fixtures.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}
