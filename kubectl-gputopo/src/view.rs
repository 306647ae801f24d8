//! Everything a command reads, gathered once: the listed cluster, the
//! scheduler's settings, the snapshot it would build and the verdicts of
//! one dry-run cycle.

use crate::dry_run::{self, Verdicts};
use crate::listing::{Cluster, ListError};
use crate::settings::{self, ConfigSource, Loaded, SettingsError};
use gputopo_scheduler_core::snapshot::{Snapshot, SnapshotError};
use k8s_openapi::jiff::Timestamp;

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    List(#[from] ListError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("building the scheduler's snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
}

/// See the module documentation.
pub struct View {
    pub cluster: Cluster,
    pub settings: Loaded,
    pub snapshot: Snapshot,
    pub verdicts: Verdicts,
    /// Objects left out, kinds not served, the snapshot's warnings.
    pub warnings: Vec<String>,
    /// When it was read (nodes' kubelet readings are judged at this time).
    pub now: Timestamp,
}

impl View {
    /// Lists the cluster, reads the settings from `source` (`names`
    /// replacing their scheduler names when given) and decides.
    pub async fn load(
        client: &kube::Client,
        source: &ConfigSource,
        names: &[String],
    ) -> Result<View, ViewError> {
        let settings = settings::load(client, source, names).await?;
        let cluster = Cluster::list(client).await?;
        Ok(View::of(cluster, settings, Timestamp::now()).await?)
    }

    /// The view of objects already listed.
    pub async fn of(
        cluster: Cluster,
        settings: Loaded,
        now: Timestamp,
    ) -> Result<View, SnapshotError> {
        let (snapshot, snapshot_warnings) = cluster.snapshot(&settings.settings, now)?;
        let verdicts = dry_run::decide(&cluster.objects(), &settings.settings).await;
        let mut warnings = cluster.warnings.clone();
        warnings.extend(snapshot_warnings);
        warnings.sort();
        warnings.dedup();
        Ok(View {
            cluster,
            settings,
            snapshot,
            verdicts,
            warnings,
            now,
        })
    }

    /// Every `spec.schedulerName` the scheduler serves.
    pub fn names(&self) -> Vec<String> {
        self.settings.settings.all_scheduler_names()
    }
}
