//! Clients of the test control plane: the admin's, a user's of the test's
//! choosing (each with its own kubeconfig), and one for a component's
//! loopback port.

use crate::pki::CertFiles;
use crate::{NAMES, TestEnv};
use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

impl TestEnv {
    /// An admin client (`system:masters`). Build one per test: a client is
    /// bound to the tokio runtime that created it, and each test has its own.
    pub async fn client(&self) -> Client {
        self.client_result()
            .await
            .expect("building a client for the test control plane")
    }

    pub(crate) async fn client_result(&self) -> anyhow::Result<Client> {
        client_from_kubeconfig(&self.kubeconfig, None, None).await
    }

    pub(crate) async fn client_with_timeouts(
        &self,
        connect: Duration,
        read: Duration,
    ) -> anyhow::Result<Client> {
        client_from_kubeconfig(&self.kubeconfig, Some(connect), Some(read)).await
    }

    /// A client authenticated by a fresh client certificate for `user` in
    /// `groups` (at most two), with no permissions beyond what RBAC grants
    /// them (`system:authenticated` gets discovery and little else).
    pub async fn client_for_user(&self, user: &str, groups: &[&str]) -> Client {
        let path = self
            .kubeconfig_for_user(user, groups)
            .expect("writing a kubeconfig for a test user");
        client_from_kubeconfig(&path, None, None)
            .await
            .expect("building a client for a test user")
    }

    /// Writes a kubeconfig for `user` in `groups` and returns its path.
    pub fn kubeconfig_for_user(&self, user: &str, groups: &[&str]) -> anyhow::Result<PathBuf> {
        let stem = format!("user-{}", NAMES.fetch_add(1, Ordering::Relaxed));
        let cert = self.pki.client(&stem, user, groups)?;
        let path = self.dir.join(format!("{stem}.kubeconfig"));
        write_kubeconfig(&path, &self.apiserver_url, &self.pki.ca_files.cert, &cert)?;
        Ok(path)
    }

    /// A client for `https://127.0.0.1:<port>`, which the env's serving certificate serves.
    pub(crate) async fn loopback_client(&self, port: u16) -> anyhow::Result<Client> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)?;
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        config.cluster_url = format!("https://127.0.0.1:{port}").parse()?;
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(10));
        Ok(Client::try_from(config)?)
    }
}

pub(crate) fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    cert: &CertFiles,
) -> anyhow::Result<()> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gputopo-test", "cluster": {
            "server": server,
            "certificate-authority": ca,
        }}],
        "users": [{"name": "user", "user": {
            "client-certificate": cert.cert,
            "client-key": cert.key,
        }}],
        "contexts": [{"name": "gputopo-test", "context": {"cluster": "gputopo-test", "user": "user"}}],
        "current-context": "gputopo-test",
    });
    // JSON is YAML: kubectl, helm and kube all read it.
    std::fs::write(path, serde_json::to_string_pretty(&config)?)?;
    Ok(())
}

pub(crate) async fn client_from_kubeconfig(
    path: &Path,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    if connect_timeout.is_some() {
        config.connect_timeout = connect_timeout;
    }
    if read_timeout.is_some() {
        config.read_timeout = read_timeout;
    }
    Ok(Client::try_from(config)?)
}
