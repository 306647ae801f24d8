//! The extender process: kube-runtime reflectors of Pods, Nodes and
//! `GpuTopology` objects (kube-scheduler sends node names only, with
//! `nodeCacheCapable: true`), the cluster snapshot built from them (cached
//! until a watch or a bind changes something), and binds, one at a time.
//!
//! A bind chooses the GPUs on the node kube-scheduler picked and posts the
//! `pods/binding` subresource with the pod's uid and the GPU annotations
//! (`crate::binding`, the builder both modes use), which the API server
//! copies onto the pod as it binds it: one request, so a pod is never bound
//! without its GPUs. Then it *assumes* the pod (see
//! [`crate::cluster::AssumeCache`]): until the watch shows it bound, every
//! snapshot counts its GPUs, so the next bind never hands them out again.

use super::backend::{Backend, BindError, NotReady, SnapshotUnavailable};
use super::dra::ExtenderDra;
use super::http::{self, Limits};
use super::metrics::ExtenderMetrics;
use super::protocol::{BindingRequest, PlanError, PodClaims, binding, plan_binding};
use super::tls::{TlsListener, TlsServing};
use crate::assignment_record::{AssignmentRecord, RecordKeeper};
use crate::cluster::{AssumeCache, Assumed, Objects, ReadingTrust, build_snapshot, pod_key, usage};
use crate::config::Accounting;
use crate::gangs::GangObjects;
use crate::watch::{WatchError, Watches};
use crate::writer::FIELD_MANAGER;
use futures::future::BoxFuture;
use gputopo_ops::Readiness;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::dra::DraConfig;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::schedule::Placement;
use gputopo_scheduler_core::snapshot::Snapshot;
use k8s_openapi::api::core::v1::{Binding, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::{Instrument, debug, info, info_span, warn};

/// How long a bind waits for a pod kube-scheduler knows to reach this
/// extender's pod cache (the two watches are milliseconds apart).
const POD_CACHE_WAIT: Duration = Duration::from_secs(5);

/// Why the extender stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExtenderError {
    #[error("listening on {addr} for {what}: {source}")]
    Listen {
        addr: SocketAddr,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error("the HTTP server for {what} stopped: {message}")]
    Serve { what: &'static str, message: String },
    #[error(
        "--listen and --extender-listen are both {addr}: with TLS on the extender port they must differ (the kubelet's probes and Prometheus read /healthz, /readyz and /metrics over plain HTTP)"
    )]
    SharedPortWithTls { addr: SocketAddr },
    #[error("no --scheduler-name: /bind would refuse every pod")]
    NoSchedulerNames,
}

/// How the extender serves kube-scheduler.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub addresses: Addresses,
    /// TLS on the extender port (`--tls-cert-file`, `--tls-key-file`,
    /// `--client-ca-file`); `None` is plain HTTP (`--insecure-plain-http`).
    pub tls: Option<TlsServing>,
    pub limits: Limits,
    /// The `spec.schedulerName` values of the pods `/bind` takes
    /// (`--scheduler-name`): the profiles of the kube-scheduler calling it.
    pub scheduler_names: Vec<String>,
    /// How far nodes' readings of the kubelet are trusted (the config file).
    pub accounting: Accounting,
    /// The DRA drivers whose devices are GPUs (the config file's `dra`).
    pub dra: DraConfig,
}

/// Where the extender listens.
#[derive(Clone, Copy, Debug)]
pub struct Addresses {
    /// `/healthz`, `/readyz`, `/metrics`.
    pub listen: SocketAddr,
    /// `/filter`, `/prioritize`, `/bind`; the same address serves all six.
    pub extender_listen: SocketAddr,
}

/// A watch callback that bumps `generation` on every event that counts.
fn bump(generation: &Arc<AtomicU64>) -> impl Fn(bool) + Clone + Send + 'static {
    let generation = generation.clone();
    move |changed| {
        if changed {
            generation.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// See the module documentation.
pub struct Extender {
    client: kube::Client,
    config: SchedulerConfig,
    accounting: Accounting,
    scheduler_names: Vec<String>,
    watches: Watches,
    /// Bumped by every watch event that can change a snapshot, and by every bind.
    generation: Arc<AtomicU64>,
    cached: Mutex<Option<(u64, Arc<Snapshot>)>>,
    assumed: Mutex<AssumeCache>,
    binding: tokio::sync::Mutex<()>,
    readiness: Arc<Readiness>,
    metrics: Arc<ExtenderMetrics>,
    dra: ExtenderDra,
    /// Each bound pod's GPU record as first seen or written
    /// (`assignment_record`): the snapshot reads the pods with it.
    records: Mutex<RecordKeeper>,
}

impl Extender {
    /// Starts the watches (the `GpuTopology` one only when its CRD is
    /// served: without it every node is treated as having no topology).
    pub async fn start(
        client: kube::Client,
        config: SchedulerConfig,
        accounting: Accounting,
        scheduler_names: Vec<String>,
        dra: DraConfig,
        metrics: Arc<ExtenderMetrics>,
        readiness: Arc<Readiness>,
    ) -> Result<Arc<Extender>, ExtenderError> {
        let generation = Arc::new(AtomicU64::new(0));
        let watches = Watches::start(
            &client,
            false,
            bump(&generation),
            metrics.invalid_objects.clone(),
            &readiness,
        )
        .await;
        Ok(Arc::new(Extender {
            dra: ExtenderDra::new(client.clone(), dra),
            records: Mutex::new(RecordKeeper::default()),
            client,
            config,
            accounting,
            scheduler_names,
            watches,
            generation,
            cached: Mutex::new(None),
            assumed: Mutex::new(AssumeCache::default()),
            binding: tokio::sync::Mutex::new(()),
            readiness,
            metrics,
        }))
    }

    /// Waits until every watch has listed, then turns ready.
    pub async fn wait_synced(&self) -> Result<(), ExtenderError> {
        Ok(self.watches.synced(&self.readiness).await?)
    }

    fn build(&self) -> Result<Arc<Snapshot>, SnapshotUnavailable> {
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some((g, s)) = lock(&self.cached).as_ref()
            && *g == generation
        {
            return Ok(s.clone());
        }
        let pods = self.kept_records(self.watches.pods.state());
        let nodes = self.watches.nodes.state();
        let (topologies, _) = self.watches.topologies();
        let by_key: HashMap<String, Arc<Pod>> =
            pods.iter().map(|p| (pod_key(p), p.clone())).collect();
        let objects = Objects {
            nodes: &nodes,
            topologies: &topologies,
            pods: &pods,
            namespaces: &self.watches.namespaces.state(),
            workloads: &crate::workload_objects::NO_WORKLOADS,
            storage: &crate::storage_objects::NO_STORAGE,
            gangs: &GangObjects::default(),
            // kube-scheduler allocates claims in extender mode.
            dra: &crate::claims::DraObjects::default(),
            changed: None,
        };
        let (snapshot, warnings) = {
            let mut assumed = lock(&self.assumed);
            assumed.reconcile(&by_key);
            let trust = ReadingTrust {
                now: Timestamp::now(),
                max_age: self.accounting.reported_allocations_max_age,
            };
            build_snapshot(&objects, &assumed, &self.config, trust)
        }?;
        for w in &warnings {
            debug!(warning = %w, "snapshot");
        }
        let snapshot = Arc::new(snapshot);
        *lock(&self.cached) = Some((generation, snapshot.clone()));
        Ok(snapshot)
    }

    /// The watched pods with the GPU record kept for each: an edit after
    /// binding is not believed, but logged and counted once.
    fn kept_records(&self, pods: Vec<Arc<Pod>>) -> Vec<Arc<Pod>> {
        let mut keeper = lock(&self.records);
        let mut keys = std::collections::HashSet::with_capacity(pods.len());
        let pods = pods
            .iter()
            .map(|p| {
                let key = pod_key(p);
                let observed = keeper.observe(&key, p);
                for f in &observed.findings {
                    warn!(pod = %f.pod(), finding = f.metric_label(), message = %f.message(), "GPU record not believed");
                    self.metrics
                        .record_findings
                        .get_or_create(&crate::metrics::FindingLabel {
                            finding: f.metric_label(),
                        })
                        .inc();
                    self.report_finding(p, f);
                }
                keys.insert(key);
                observed.pod
            })
            .collect();
        keeper.retain(|k| keys.contains(k));
        pods
    }

    /// The finding's event on the pod, sent in the background (a snapshot
    /// is built synchronously).
    fn report_finding(&self, pod: &Pod, f: &crate::assignment_record::RecordFinding) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let recorder = self.dra.recorder();
        let reference = kube::Resource::object_ref(pod, &());
        let event = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: f.event_reason().into(),
            note: Some(f.message()),
            action: "Verifying".into(),
            secondary: None,
        };
        let pod = f.pod().to_string();
        runtime.spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                warn!(%pod, error = %e, "event not written");
            }
        });
    }

    fn pod_claims(&self, pod: &Pod, snapshot: &Snapshot) -> PodClaims {
        let generation = self.generation.load(Ordering::SeqCst);
        self.dra
            .pod_claims(&self.watches, generation, pod, snapshot)
    }

    /// The pod as the watch has it, waiting a little for a pod kube-scheduler
    /// has just seen (or for the uid the binding names).
    async fn cached_pod(&self, request: &BindingRequest) -> Result<Arc<Pod>, BindError> {
        let reference = ObjectRef::<Pod>::new(&request.name).within(&request.namespace);
        let started = Instant::now();
        loop {
            let pod = self.watches.pods.get(&reference);
            let current = pod
                .as_ref()
                .is_some_and(|p| p.metadata.uid.as_deref() == Some(request.uid.as_str()));
            // The uid it names, or (after the wait) whatever pod has the
            // name: plan_binding then says the uids differ.
            if (current || started.elapsed() >= POD_CACHE_WAIT)
                && let Some(pod) = pod
            {
                return Ok(pod);
            }
            if started.elapsed() >= POD_CACHE_WAIT {
                return Err(BindError::NotCached {
                    pod: request.pod_key(),
                    waited: POD_CACHE_WAIT,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn bind_pod(&self, request: BindingRequest) -> Result<Placement, BindError> {
        // Waiting for the pod to reach the cache holds no other bind up.
        let waited = self.cached_pod(&request).await?;
        let _one_at_a_time = self.binding.lock().await;
        let key = request.pod_key();
        if lock(&self.assumed).contains(&key) {
            // A retry of a bind that went through (kube-scheduler's call
            // timed out): the pod is not ours to place twice.
            let _ = self.build();
            if lock(&self.assumed).contains(&key) {
                return Err(BindError::AlreadyAssumed { pod: key });
            }
        }
        // The pod as it is now, after the binds this one waited behind.
        let pod = self
            .watches
            .pods
            .get(&ObjectRef::<Pod>::new(&request.name).within(&request.namespace))
            .unwrap_or(waited);
        let snapshot = self.build()?;
        let claims = self.pod_claims(&pod, &snapshot);
        let placement = plan_binding(
            &snapshot,
            &self.config,
            &self.scheduler_names,
            &pod,
            &request,
            &claims,
        )?;
        let pending = PendingPod::from_k8s(&pod).map_err(PlanError::InvalidPod)?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), &request.namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        // One request: the binding's annotations (the GPUs) are copied onto
        // the pod as it is bound, so neither happens without the other.
        pods.create_subresource::<Binding, serde_json::Value>(
            "binding",
            &request.name,
            &params,
            &binding(&request, &placement),
        )
        .instrument(info_span!("bind_pod", pod = %key, node = %placement.node, gpus = %placement.assigned_gpus()))
        .await
        .map_err(|source| BindError::Bind {
            pod: key.clone(),
            node: placement.node.clone(),
            source,
        })?;
        let written = crate::binding::binding_annotations(&placement).unwrap_or_default();
        lock(&self.records).wrote(
            &key,
            pod.metadata.uid.as_deref(),
            AssignmentRecord::from_binding(&written),
        );
        crate::kube_writes::record_in_status(&pods, &pod, &placement).await;
        lock(&self.assumed).assume(
            key,
            Assumed {
                uid: pod.metadata.uid.clone(),
                input: placement.bound_pod(&pending),
                since: Instant::now(),
            },
        );
        if !matches!(claims, PodClaims::Unjudged) && placement.gpus.is_empty() {
            let reviewed = self
                .dra
                .review(
                    &self.client,
                    &self.watches,
                    &snapshot,
                    &self.config,
                    &pod,
                    &pending,
                )
                .await;
            if reviewed.is_some() {
                self.metrics.suboptimal_dra_allocations.inc();
            }
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        if let Ok(after) = self.build() {
            let u = usage(&after);
            self.metrics.allocation.set(u.allocation_ratio);
            self.metrics.fragmentation.set(u.fragmentation_ratio);
        }
        Ok(placement)
    }
}

impl Backend for Extender {
    fn ready(&self) -> Result<(), NotReady> {
        if self.readiness.is_ready() {
            Ok(())
        } else {
            Err(NotReady {
                reason: self.readiness.reason(),
            })
        }
    }

    fn snapshot(&self) -> Result<Arc<Snapshot>, SnapshotUnavailable> {
        self.build()
    }

    fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    fn claims(&self, pod: &Pod, snapshot: &Snapshot) -> PodClaims {
        self.pod_claims(pod, snapshot)
    }

    fn bind(&self, request: BindingRequest) -> BoxFuture<'_, Result<Placement, BindError>> {
        Box::pin(self.bind_pod(request))
    }
}

async fn listen(
    addr: SocketAddr,
    what: &'static str,
) -> Result<tokio::net::TcpListener, ExtenderError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ExtenderError::Listen { addr, what, source })
}

/// Runs the extender until `shutdown` completes: `/healthz`, `/readyz`
/// (503 until the watches have listed) and `/metrics` on `listen`, the
/// extender verbs on `extender_listen`, over TLS unless `options.tls` is
/// `None` (one plain HTTP server when the two addresses are equal).
pub async fn run(
    client: kube::Client,
    config: SchedulerConfig,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ExtenderError> {
    let addresses = options.addresses;
    let shared_port = addresses.listen == addresses.extender_listen;
    if shared_port && options.tls.is_some() {
        return Err(ExtenderError::SharedPortWithTls {
            addr: addresses.listen,
        });
    }
    if options.scheduler_names.is_empty() {
        return Err(ExtenderError::NoSchedulerNames);
    }
    let metrics = Arc::new(ExtenderMetrics::new());
    let readiness = Arc::new(crate::metrics::readiness());
    let ops = gputopo_ops::router(metrics.clone(), readiness.clone());
    const ALL: &str = "/healthz, /readyz, /metrics and the extender verbs";
    const OPS: &str = "/healthz, /readyz, /metrics";
    const VERBS: &str = "the extender verbs";
    let (ops_listener, verbs_listener) = if shared_port {
        (listen(addresses.listen, ALL).await?, None)
    } else {
        (
            listen(addresses.listen, OPS).await?,
            Some(listen(addresses.extender_listen, VERBS).await?),
        )
    };
    let extender = Extender::start(
        client,
        config,
        options.accounting,
        options.scheduler_names.clone(),
        options.dra.clone(),
        metrics.clone(),
        readiness.clone(),
    )
    .await?;
    let verbs = http::router(extender.clone(), metrics.clone(), options.limits);
    let address = |l: &tokio::net::TcpListener| {
        l.local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string())
    };
    let mut servers = tokio::task::JoinSet::new();
    match verbs_listener {
        None => {
            info!(address = %address(&ops_listener), "serving {ALL} over plain HTTP");
            let app = ops.merge(verbs);
            servers.spawn(async move { (ALL, axum::serve(ops_listener, app).await) });
        }
        Some(verbs_listener) => {
            info!(address = %address(&ops_listener), "serving {OPS}");
            servers.spawn(async move { (OPS, axum::serve(ops_listener, ops).await) });
            let at = address(&verbs_listener);
            match &options.tls {
                Some(tls) => {
                    let client_auth = if tls.client_certificates {
                        "client certificates required"
                    } else {
                        "no client certificates asked: anyone who reaches the port can bind pods"
                    };
                    info!(address = %at, "serving {VERBS} over TLS, {client_auth}");
                    let tls = TlsListener::new(verbs_listener, tls.config.clone(), metrics)
                        .map_err(|source| ExtenderError::Listen {
                            addr: addresses.extender_listen,
                            what: VERBS,
                            source,
                        })?;
                    servers.spawn(async move { (VERBS, axum::serve(tls, verbs).await) });
                }
                None => {
                    warn!(address = %at, "serving {VERBS} over plain HTTP (--insecure-plain-http): anyone who reaches the port can bind pods");
                    servers.spawn(async move { (VERBS, axum::serve(verbs_listener, verbs).await) });
                }
            }
        }
    }
    let stopped =
        |r: Option<Result<(&'static str, std::io::Result<()>), tokio::task::JoinError>>| {
            let (what, message) = match r {
                Some(Ok((what, Ok(())))) => (what, "it returned".to_string()),
                Some(Ok((what, Err(e)))) => (what, e.to_string()),
                Some(Err(e)) => ("a listener", e.to_string()),
                None => ("every listener", "no server left".to_string()),
            };
            ExtenderError::Serve { what, message }
        };
    let mut shutdown = std::pin::pin!(shutdown);
    tokio::select! {
        r = extender.wait_synced() => r?,
        () = &mut shutdown => return Ok(()),
        r = servers.join_next() => return Err(stopped(r)),
    }
    info!("watches synced; answering kube-scheduler's filter, prioritize and bind");
    tokio::select! {
        () = &mut shutdown => {
            info!("stopping");
            Ok(())
        }
        r = servers.join_next() => Err(stopped(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_errors_say_what_failed() {
        let e = BindError::NotCached {
            pod: "ml/p".into(),
            waited: POD_CACHE_WAIT,
        };
        assert_eq!(
            e.to_string(),
            "pod ml/p is not in gputopo's pod cache after 5s; kube-scheduler will retry it"
        );
        let e = BindError::from(PlanError::AlreadyBound {
            pod: "ml/p".into(),
            node: "n1".into(),
        });
        assert_eq!(e.to_string(), "pod ml/p is already bound to node n1");
    }
}
