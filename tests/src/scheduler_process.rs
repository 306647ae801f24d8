//! More kube-schedulers, each with a KubeSchedulerConfiguration of the
//! test's own, and the handle that owns one.

use crate::process::{self, Process};
use crate::{START_TIMEOUT, TestEnv, binaries, free_ports};
use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl TestEnv {
    /// Starts one more stock `kube-scheduler`, configured by `config` (a
    /// `KubeSchedulerConfiguration` as JSON: its profiles, extenders,
    /// backoff), and waits for its `/healthz`. Unlike
    /// [`TestEnv::with_scheduler`], each call starts a process of its own,
    /// owned by the returned handle (killed when it is dropped), so several
    /// can run side by side: give each profile a `schedulerName` no other
    /// scheduler serves.
    ///
    /// The harness fills in what only it knows: `apiVersion` and `kind` when
    /// absent, `clientConnection.kubeconfig` (the `system:kube-scheduler`
    /// identity, as [`TestEnv::with_scheduler`] uses) and
    /// `leaderElection.leaderElect: false` (a shared lease would let only one
    /// of several schedulers run). The file and the log are
    /// `<name>-config.yaml` and `<name>.log` in [`TestEnv::dir`].
    pub async fn start_scheduler_with_config(
        &self,
        name: &str,
        config: serde_json::Value,
    ) -> anyhow::Result<SchedulerProcess> {
        let bin = binaries::locate(binaries::KUBERNETES, "kube-scheduler")?;
        let kubeconfig = self.kubeconfig_for_user("system:kube-scheduler", &[])?;
        let mut config = config;
        let object = config
            .as_object_mut()
            .context("the KubeSchedulerConfiguration must be a JSON object")?;
        object
            .entry("apiVersion")
            .or_insert_with(|| "kubescheduler.config.k8s.io/v1".into());
        object
            .entry("kind")
            .or_insert_with(|| "KubeSchedulerConfiguration".into());
        object.insert(
            "clientConnection".into(),
            serde_json::json!({"kubeconfig": kubeconfig}),
        );
        object.insert(
            "leaderElection".into(),
            serde_json::json!({"leaderElect": false}),
        );
        let config_file = self.dir.join(format!("{name}-config.yaml"));
        // JSON is YAML.
        std::fs::write(&config_file, serde_json::to_string_pretty(&config)?)?;
        let [port] = free_ports()?;
        let mut args = vec![format!("--config={}", config_file.display())];
        args.extend(self.serving_args(&kubeconfig, port));
        args.extend(["--profiling=false".to_owned(), "--v=2".to_owned()]);
        let log = self.dir.join(format!("{name}.log"));
        std::fs::write(&log, format!("# {} {}\n", bin.display(), args.join(" ")))?;
        let mut process = Process::spawn(name, &bin, &args, &[], log.clone())?;
        let client = self.loopback_client(port).await?;
        let start = Instant::now();
        loop {
            let last = match tokio::time::timeout(Duration::from_secs(15), async {
                let req = http::Request::get("/healthz").body(Vec::new())?;
                let body = client.request_text(req).await?;
                anyhow::ensure!(body.trim() == "ok", "/healthz: {body}");
                Ok(())
            })
            .await
            {
                Ok(Ok(())) => break,
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "the check itself took over 15 s".to_owned(),
            };
            if let Err(e) = process.check_running() {
                process::PANICKED.store(true, Ordering::SeqCst);
                return Err(e);
            }
            if start.elapsed() > START_TIMEOUT {
                process::PANICKED.store(true, Ordering::SeqCst);
                bail!(
                    "{name} not healthy after {START_TIMEOUT:?} (last check: {last}); last lines of {}:\n{}",
                    log.display(),
                    process::tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(SchedulerProcess {
            process,
            port,
            config_file,
        })
    }
}

/// A `kube-scheduler` started by [`TestEnv::start_scheduler_with_config`];
/// killed when dropped.
pub struct SchedulerProcess {
    process: Process,
    port: u16,
    config_file: PathBuf,
}

impl SchedulerProcess {
    /// Its secure port (`/healthz`, `/metrics`), on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The configuration file it was started with, as the harness completed it.
    pub fn config_file(&self) -> &Path {
        &self.config_file
    }

    pub fn log_path(&self) -> &Path {
        &self.process.log
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        process::tail(&self.process.log, lines)
    }

    /// `Err` with the exit status and the log's tail when it has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.process.check_running()
    }
}
