//! `gputopo-agent run`: discover, publish when something changed, rescan on a
//! timer and on SIGHUP, back off while the API server is unreachable, stop
//! cleanly on SIGTERM.

use crate::discover::{Discovered, Source, build, gather};
use crate::nvml::RealNvml;
use crate::publish::{Publisher, Writes};
use crate::serve::{Metrics, Readiness, ResultLabel, WriteLabel};
use backon::{BackoffBuilder, ExponentialBuilder};
use gputopo_topology::backend::nvml::facts_from_nvml;
use gputopo_topology::backend::sysfs::RealSysfs;
use gputopo_topology::labels::LabelOptions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

pub struct DaemonConfig {
    pub node: String,
    pub source: Source,
    pub labels: LabelOptions,
    pub rescan_interval: Duration,
    /// Longest wait between retries while discovery or the API server fails.
    pub max_backoff: Duration,
}

/// Keeps one NVML handle so the static topology is queried once (NVML's NVLink
/// queries are slow: ~600 ms per GPU pair in the device plugin); SIGHUP drops it.
struct Scanner {
    source: Source,
    nvml: Option<RealNvml>,
}

impl Scanner {
    fn scan(&mut self, node: &str) -> anyhow::Result<Discovered> {
        let facts = match &self.source {
            Source::Nvml {
                library,
                sysfs_root,
            } => {
                if self.nvml.is_none() {
                    self.nvml = Some(match library {
                        Some(path) => RealNvml::init_with_library(path)?,
                        None => RealNvml::init()?,
                    });
                }
                let nvml = self.nvml.as_ref().expect("set just above");
                facts_from_nvml(nvml, &RealSysfs::new(sysfs_root))?
            }
            other => gather(other)?.0,
        };
        Ok(build(node, facts)?)
    }

    fn forget(&mut self) {
        self.nvml = None;
    }
}

fn record_writes(metrics: &Metrics, w: Writes) {
    for (done, object) in [
        (w.labels, "node_labels"),
        (w.topology, "gpu_topology"),
        (w.status, "gpu_topology_status"),
    ] {
        if done {
            metrics.writes.get_or_create(&WriteLabel { object }).inc();
        }
    }
}

/// Runs until SIGTERM or Ctrl-C.
pub async fn run(
    config: DaemonConfig,
    client: kube::Client,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> anyhow::Result<()> {
    let publisher = Publisher::new(client, config.node.clone(), config.labels);
    let mut scanner = Scanner {
        source: config.source,
        nvml: None,
    };
    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(config.max_backoff)
        .with_jitter()
        .without_max_times();
    let mut delays = backoff.build();

    loop {
        let outcome = match scanner.scan(&config.node) {
            Err(e) => Err(("discovery_error", format!("{e:#}"))),
            Ok(found) => {
                metrics.gpus.set(found.spec.gpus.len() as i64);
                metrics.degraded.set(i64::from(!found.findings.is_empty()));
                publisher
                    .publish(&found, Time(Timestamp::now()))
                    .await
                    .map_err(|e| ("publish_error", e.to_string()))
            }
        };
        let wait = match outcome {
            Ok(writes) => {
                record_writes(&metrics, writes);
                metrics
                    .scans
                    .get_or_create(&ResultLabel { result: "ok" })
                    .inc();
                metrics.last_success.set(Timestamp::now().as_second());
                readiness.set_ready();
                delays = backoff.build();
                config.rescan_interval
            }
            Err((result, message)) => {
                metrics.scans.get_or_create(&ResultLabel { result }).inc();
                readiness.set_not_ready(message.clone());
                let delay = delays.next().unwrap_or(config.max_backoff);
                warn!(%message, retry_in = ?delay, "{result}");
                delay
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = hangup.recv() => {
                info!("SIGHUP: rescanning from scratch");
                scanner.forget();
            }
            _ = terminate.recv() => {
                info!("SIGTERM: stopping");
                return Ok(());
            }
            r = tokio::signal::ctrl_c() => {
                if let Err(e) = r {
                    error!("waiting for Ctrl-C: {e}");
                }
                info!("interrupted: stopping");
                return Ok(());
            }
        }
    }
}
