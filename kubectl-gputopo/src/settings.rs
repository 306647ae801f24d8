//! The scheduler's configuration, read where the scheduler reads it: its
//! ConfigMap (`gputopo-scheduler-config` in `gputopo-system`, key
//! `config.yaml`, as the chart and the plain manifests mount it), or a file
//! (`--config`), parsed by the scheduler's own parser so that every
//! profile, weight and name is the scheduler's.

use gputopo_scheduler::Settings;
use gputopo_scheduler::config::{ConfigFileError, NameClash};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use std::path::{Path, PathBuf};

/// The ConfigMap's key the scheduler reads (`--config /etc/gputopo/config.yaml`).
pub const CONFIG_KEY: &str = "config.yaml";
/// Where the chart (release `gputopo`) and the plain manifests put it.
pub const DEFAULT_NAMESPACE: &str = "gputopo-system";
pub const DEFAULT_CONFIG_MAP: &str = "gputopo-scheduler-config";

/// Where the configuration comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    ConfigMap { namespace: String, name: String },
    File(PathBuf),
}

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "reading ConfigMap {namespace}/{name} (the scheduler's configuration; --config FILE reads a file instead): {source}"
    )]
    Get {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("ConfigMap {namespace}/{name} has no key {CONFIG_KEY}")]
    NoKey { namespace: String, name: String },
    #[error(transparent)]
    File(#[from] ConfigFileError),
    #[error(transparent)]
    Names(#[from] NameClash),
}

/// The settings, and where they came from (for the reader).
#[derive(Clone, Debug)]
pub struct Loaded {
    pub settings: Settings,
    /// `ConfigMap gputopo-system/gputopo-scheduler-config`, a file, or the
    /// defaults when the ConfigMap does not exist.
    pub from: String,
}

/// Reads the configuration from `source`; `names`, when not empty,
/// replace its `schedulerNames` (the daemon's `--scheduler-name`). A
/// ConfigMap that does not exist gives the scheduler's defaults, which is
/// what a scheduler started without `--config` runs with.
pub async fn load(
    client: &kube::Client,
    source: &ConfigSource,
    names: &[String],
) -> Result<Loaded, SettingsError> {
    let mut loaded = match source {
        ConfigSource::File(file) => Loaded {
            settings: Settings::from_file(file)?,
            from: file.display().to_string(),
        },
        ConfigSource::ConfigMap { namespace, name } => {
            from_config_map(client, namespace, name).await?
        }
    };
    if !names.is_empty() {
        loaded.settings.set_scheduler_names(names.to_vec())?;
    }
    Ok(loaded)
}

async fn from_config_map(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Loaded, SettingsError> {
    let what = format!("ConfigMap {namespace}/{name}");
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| SettingsError::Get {
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
    let Some(map) = map else {
        return Ok(Loaded {
            settings: Settings::default(),
            from: format!("the scheduler's defaults ({what} not found)"),
        });
    };
    let text = map
        .data
        .as_ref()
        .and_then(|d| d.get(CONFIG_KEY))
        .ok_or_else(|| SettingsError::NoKey {
            namespace: namespace.into(),
            name: name.into(),
        })?;
    let settings = Settings::from_yaml(text, Path::new(&format!("{what} {CONFIG_KEY}")))?;
    Ok(Loaded {
        settings,
        from: what,
    })
}
