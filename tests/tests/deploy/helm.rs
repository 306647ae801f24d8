//! Running the built helm: rendering the chart (`helm template`), and
//! against the test control plane (`helm_on`).

use super::root;
use gputopo_testenv::{TestEnv, binaries};
use serde::Deserialize;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

pub(super) fn chart_dir() -> PathBuf {
    root().join("helm/gputopo")
}

/// Why a `helm` run did not give manifests.
#[derive(Debug)]
pub(super) enum HelmError {
    Missing(String),
    Spawn(std::io::Error),
    Failed { args: String, stderr: String },
    Yaml(serde_yaml::Error),
}

impl std::fmt::Display for HelmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelmError::Missing(e) => write!(f, "no helm binary: {e}"),
            HelmError::Spawn(e) => write!(f, "running helm: {e}"),
            HelmError::Failed { args, stderr } => write!(f, "helm {args} failed:\n{stderr}"),
            HelmError::Yaml(e) => write!(f, "helm's output is not YAML: {e}"),
        }
    }
}

impl std::error::Error for HelmError {}

/// Runs the built helm with its cache, config and data kept out of `$HOME`.
pub(super) fn helm(args: &[&OsStr]) -> Result<String, HelmError> {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().expect("a temp dir for helm"));
    let bin = binaries::locate(binaries::HELM, "helm")
        .map_err(|e| HelmError::Missing(format!("{e:#}")))?;
    let out = Command::new(bin)
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .map_err(HelmError::Spawn)?;
    if !out.status.success() {
        return Err(HelmError::Failed {
            args: args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every non-empty document of a multi-document YAML text.
pub(super) fn documents(text: &str) -> Result<Vec<Value>, serde_yaml::Error> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// `helm template` of the chart (the CRD is one of its templates), for the
/// control plane's Kubernetes version; `values` is a values file's text.
pub(super) fn render(
    release: &str,
    namespace: &str,
    values: Option<&str>,
) -> Result<Vec<Value>, HelmError> {
    let file = tempfile::NamedTempFile::new().map_err(HelmError::Spawn)?;
    let mut args: Vec<&OsStr> = [
        "template",
        release,
        "--namespace",
        namespace,
        "--kube-version",
        gputopo_testenv::kubernetes_version(),
    ]
    .into_iter()
    .map(OsStr::new)
    .collect();
    let chart = chart_dir();
    args.push(chart.as_os_str());
    if let Some(values) = values {
        std::fs::write(file.path(), values).map_err(HelmError::Spawn)?;
        args.push(OsStr::new("--values"));
        args.push(file.path().as_os_str());
    }
    documents(&helm(&args)?).map_err(HelmError::Yaml)
}

pub(super) fn render_ok(release: &str, namespace: &str, values: Option<&str>) -> Vec<Value> {
    render(release, namespace, values).unwrap_or_else(|e| panic!("{e}"))
}

/// `helm` against the test control plane, as docs/deploy.md's commands run it.
pub(super) fn helm_on(env: &TestEnv, args: &[&str]) -> Result<String, HelmError> {
    let chart = chart_dir();
    let mut all: Vec<&OsStr> = args
        .iter()
        .map(|a| {
            if *a == "CHART" {
                chart.as_os_str()
            } else {
                OsStr::new(a)
            }
        })
        .collect();
    all.push(OsStr::new("--kubeconfig"));
    all.push(env.kubeconfig_path().as_os_str());
    helm(&all)
}
