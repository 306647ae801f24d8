//! `gputopo-agent run`: every round, discover ([`crate::scan`]), read what
//! the kubelet allocated ([`crate::podres`]) and publish what changed;
//! rescan on a timer and on SIGHUP, back off while a round fails, stop
//! cleanly on SIGTERM. Each round is bounded by the scan timeout; each
//! completed round is a heartbeat for `/healthz`.

use crate::discover::Source;
use crate::health::{Liveness, Readiness};
use crate::link_plugin::{self, LinkPluginError, LinkPluginPaths};
use crate::metrics::{Metrics, ReasonLabel, ResultLabel, WriteLabel};
use crate::podres::PodResourcesSource;
use crate::podres::map::{Mapped, NodeGpus, map_answer};
use crate::publish::status::PodResourcesRound;
use crate::publish::{Observed, PublishError, Publisher, Writes};
use crate::scan::{ScanError, Scanned, Scanner};
use backon::{BackoffBuilder, ExponentialBuilder};
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
    /// The longest one round may take.
    pub scan_timeout: Duration,
    /// Where the kubelet's PodResources answer comes from; `None`: not read.
    pub pod_resources: Option<Box<dyn PodResourcesSource>>,
    /// Refresh `podResources.observedAt` at least this often.
    pub allocations_heartbeat: Duration,
    /// Publish the node's ResourceSlice of gputopo's link devices and
    /// serve their kubelet plugin at these paths.
    pub link_devices: Option<LinkPluginPaths>,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot watch for {signal}: {source}")]
    Signal {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    LinkPlugin(#[from] LinkPluginError),
}

/// Why a round failed.
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error(transparent)]
    Discovery(#[from] ScanError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error("the round did not finish within {0:?} (--scan-timeout)")]
    Timeout(Duration),
}

impl RoundError {
    fn result(&self) -> &'static str {
        match self {
            RoundError::Discovery(_) => "discovery_error",
            RoundError::Publish(_) => "publish_error",
            RoundError::Timeout(_) => "timeout",
        }
    }
}

fn record_writes(metrics: &Metrics, w: Writes) {
    for (done, object) in [
        (w.labels, "node_labels"),
        (w.topology, "gpu_topology"),
        (w.status, "gpu_topology_status"),
        (w.link_slice, "link_slice"),
    ] {
        if done {
            metrics.writes.get_or_create(&WriteLabel { object }).inc();
        }
    }
}

/// What was last said in the log about the kubelet's answer, so that a
/// node stuck in one state logs it once, not every scan.
#[derive(Default)]
struct Said {
    error: Option<String>,
    unknown: Vec<String>,
    left_out: Vec<String>,
}

impl Said {
    fn failed(&mut self, message: &str) {
        if self.error.as_deref() != Some(message) {
            warn!(error = %message, "reading the kubelet's PodResources failed; the last good allocations stay published");
            self.error = Some(message.to_string());
        }
    }

    fn read(&mut self, mapped: &Mapped) {
        if self.error.take().is_some() {
            info!("the kubelet's PodResources answer again");
        }
        let unknown = mapped.unknown_ids();
        if unknown != self.unknown {
            for u in &mapped.unknown {
                warn!(
                    device = %u.device,
                    resource = %u.resource,
                    reason = u.reason.says(),
                    "the kubelet names a GPU device this node does not have; it is left out of allocations"
                );
            }
            self.unknown = unknown;
        }
        if mapped.left_out != self.left_out {
            for l in &mapped.left_out {
                warn!("{l}: the GpuTopology holds no more");
            }
            self.left_out = mapped.left_out.clone();
        }
    }
}

struct Round<'a> {
    config: &'a DaemonConfig,
    scanner: &'a mut Scanner,
    publisher: &'a Publisher,
    metrics: &'a Metrics,
    said: &'a mut Said,
}

impl Round<'_> {
    async fn run(mut self) -> Result<Writes, RoundError> {
        let scanned = self.scanner.scan().await?;
        self.metrics.gpus.set(scanned.found.spec.gpus.len() as i64);
        self.metrics
            .degraded
            .set(i64::from(!scanned.found.findings.is_empty()));
        let pod_resources = self.pod_resources(&scanned).await;
        let observed = Observed {
            spec: &scanned.found.spec,
            findings: &scanned.found.findings,
            pod_resources: &pod_resources,
            fabric: &scanned.fabric,
        };
        Ok(self
            .publisher
            .publish(&observed, Time(Timestamp::now()))
            .await?)
    }

    async fn pod_resources(&mut self, scanned: &Scanned) -> PodResourcesRound {
        let Some(source) = self.config.pod_resources.as_deref() else {
            return PodResourcesRound::NotRead;
        };
        match source.read().await {
            Ok(answer) => {
                let gpus = NodeGpus::new(&scanned.found.spec, &scanned.mig);
                let mapped = map_answer(&answer, &gpus);
                self.metrics
                    .unknown_devices
                    .set(mapped.unknown.len() as i64);
                self.said.read(&mapped);
                PodResourcesRound::Read {
                    unknown_devices: mapped.unknown_ids(),
                    allocations: mapped.allocations,
                }
            }
            Err(e) => {
                self.metrics
                    .pod_resources_failures
                    .get_or_create(&ReasonLabel { reason: e.reason() })
                    .inc();
                let error = e.to_string();
                self.said.failed(&error);
                PodResourcesRound::Failed { error }
            }
        }
    }
}

/// Runs until SIGTERM or Ctrl-C.
pub async fn run(
    config: DaemonConfig,
    client: kube::Client,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    liveness: Arc<Liveness>,
) -> Result<(), DaemonError> {
    let publisher = Publisher::new(client, config.node.clone(), config.labels)
        .with_heartbeat(config.allocations_heartbeat)
        .with_link_devices(config.link_devices.is_some());
    if let Some(paths) = &config.link_devices {
        tokio::spawn(link_plugin::bind(paths)?);
        info!(socket = %paths.registration_socket().display(), "serving the link devices' kubelet plugin");
    }
    let mut scanner = Scanner::new(config.node.clone(), config.source.clone());
    let mut said = Said::default();
    let watch = |kind, name| {
        signal(kind).map_err(|source| DaemonError::Signal {
            signal: name,
            source,
        })
    };
    let mut hangup = watch(SignalKind::hangup(), "SIGHUP")?;
    let mut terminate = watch(SignalKind::terminate(), "SIGTERM")?;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(config.max_backoff)
        .with_jitter()
        .without_max_times();
    let mut delays = backoff.build();

    loop {
        let round = Round {
            config: &config,
            scanner: &mut scanner,
            publisher: &publisher,
            metrics: &metrics,
            said: &mut said,
        };
        // A round cut short leaves its blocking scan to the next round (see crate::scan).
        let outcome = tokio::time::timeout(config.scan_timeout, round.run())
            .await
            .unwrap_or(Err(RoundError::Timeout(config.scan_timeout)));
        liveness.beat();
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
            Err(e) => {
                let result = e.result();
                let message = e.to_string();
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
