//! The ecosystem's controllers against a [`TestEnv`]: JobSet, Kueue,
//! LeaderWorkerSet and the Kubeflow Trainer, each the upstream manager
//! binary built from its Go module by `scripts/control-plane-binaries`.
//!
//! Starting one ([`jobset::start`], [`kueue::start`], [`lws::start`],
//! [`trainer::start`]):
//!
//! 1. its own kustomize folder (`config/default`, or the Trainer's
//!    `manifests/base/...`) is rendered from the module in GOMODCACHE and
//!    its CRDs are installed (see [`manifests`]);
//! 2. the manager runs on the host with a configuration file of the test's:
//!    leader election off, its own certificate rotation off, its webhook
//!    server on 127.0.0.1 with the env's serving certificate (issued by the
//!    test CA for 127.0.0.1), metrics off, health probes on a loopback port;
//! 3. once `/readyz` answers, its Mutating/ValidatingWebhookConfigurations
//!    are registered, pointed at that server, and the start returns when
//!    the API server reaches it (a dry-run create the webhooks answer).
//!
//! It authenticates as a user of its own in `system:masters`, so its RBAC
//! manifests are not needed (nor installed). Dropping the [`Controller`]
//! kills it and deletes its webhook configurations (a webhook left pointing
//! at a dead port would refuse every matching request); its CRDs stay until
//! the env goes.

mod error;
mod fixed_paths;
pub mod jobset;
pub mod kueue;
pub mod lws;
pub mod manifests;
pub mod trainer;

use crate::binaries::{self, KUSTOMIZE, Tool};
use crate::process::{self, Process};
use crate::{TestEnv, free_ports};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource as _};
use manifests::Manifests;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use error::harness;
pub use error::{ControllerError, NotYet, Result};

/// How long a controller may take to serve `/readyz` and its webhooks; a
/// manager on a loaded 2-core machine needs 5 to 30 seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// What differs between controllers; the rest of starting one is shared.
pub(crate) struct Launch {
    /// Process and log name, e.g. `jobset-controller`.
    pub name: &'static str,
    pub tool: Tool,
    pub binary: &'static str,
    /// Kustomize folders inside the module whose CRDs and webhooks are installed.
    pub kustomize_dirs: &'static [&'static str],
    /// The manager's configuration file (JSON is YAML), from the ports and
    /// the folder holding `tls.crt` and `tls.key`.
    pub config: fn(&Ports) -> serde_json::Value,
    /// An object whose dry-run create passes through the webhooks, to tell
    /// when the API server reaches them.
    pub probe: serde_json::Value,
    /// CRDs from other modules the manager is built with, as (the module's
    /// link name, see `binaries::locate_dependency_module`; the file in it).
    pub dependency_crds: &'static [(&'static str, &'static str)],
    /// Folders outside the test's own where the manager insists on finding
    /// a certificate (see `fixed_paths`); usually none.
    pub fixed_cert_dirs: &'static [&'static str],
}

/// Where a controller serves.
pub struct Ports {
    pub webhook: u16,
    pub probe: u16,
    /// Another free port, for a server some controllers add (the Trainer's status server).
    pub extra: u16,
    pub cert_dir: PathBuf,
}

/// A running controller manager; killed, and its webhooks unregistered, on drop.
pub struct Controller {
    name: String,
    process: Process,
    ports: Ports,
    module: PathBuf,
    kubeconfig: PathBuf,
    mutating: Vec<String>,
    validating: Vec<String>,
}

impl Controller {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module's source directory (in GOMODCACHE): its manifests and samples.
    pub fn module_dir(&self) -> &Path {
        &self.module
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The Mutating- and ValidatingWebhookConfigurations it registered.
    pub fn webhook_configurations(&self) -> (&[String], &[String]) {
        (&self.mutating, &self.validating)
    }

    pub fn webhook_port(&self) -> u16 {
        self.ports.webhook
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

    pub(crate) async fn launch(env: &TestEnv, launch: Launch) -> Result<Controller> {
        let bin =
            binaries::locate(launch.tool, launch.binary).map_err(ControllerError::NotBuilt)?;
        let module = binaries::locate_module(launch.tool).map_err(ControllerError::NotBuilt)?;
        let kustomize =
            binaries::locate(KUSTOMIZE, "kustomize").map_err(ControllerError::NotBuilt)?;
        let mut manifests = Manifests::default();
        for dir in launch.kustomize_dirs {
            let dir = module.join(dir);
            let docs = manifests::kustomize_build(&kustomize, &dir)?;
            manifests.extend(Manifests::select(&dir, docs)?);
        }
        for (link, file) in launch.dependency_crds {
            let module = binaries::locate_dependency_module(launch.tool, link)
                .map_err(ControllerError::NotBuilt)?;
            let path = module.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(harness(format!("reading {}", path.display())))?;
            let docs = manifests::yaml_documents(&text, &path)?;
            manifests.extend(Manifests::select(&path, docs)?);
        }
        manifests.require_crds(&module.join(launch.kustomize_dirs.join(" + ")))?;

        let dir = env.dir().join(launch.name);
        let [webhook, probe, extra] = free_ports().map_err(harness("finding free ports"))?;
        let ports = Ports {
            webhook,
            probe,
            extra,
            cert_dir: dir.join("certs"),
        };
        std::fs::create_dir_all(&ports.cert_dir).map_err(harness("creating the cert dir"))?;
        // The env's serving certificate is for 127.0.0.1, signed by the test
        // CA: what the API server will dial. controller-runtime reads these names.
        let serving = &env.pki().serving;
        for (from, to) in [(&serving.cert, "tls.crt"), (&serving.key, "tls.key")] {
            std::fs::copy(from, ports.cert_dir.join(to))
                .map_err(harness(format!("copying {}", from.display())))?;
        }
        let ca_pem = std::fs::read(env.ca_cert_path()).map_err(harness("reading the test CA"))?;
        manifests.point_webhooks_at(webhook, &ca_pem);

        let client = env.client().await;
        for crd in &manifests.crds {
            crate::install_crd(&client, crd.clone())
                .await
                .map_err(harness(format!("installing {} CRDs", launch.name)))?;
        }

        let config = dir.join("config.yaml");
        let text = serde_json::to_string_pretty(&(launch.config)(&ports))
            .map_err(harness("writing the configuration"))?;
        std::fs::write(&config, text).map_err(harness("writing the configuration"))?;
        let kubeconfig = env
            .kubeconfig_for_user(launch.name, &["system:masters"])
            .map_err(harness("writing the controller's kubeconfig"))?;
        let args = vec![format!("--config={}", config.display())];
        let (program, args) = if launch.fixed_cert_dirs.is_empty() {
            (bin.clone(), args)
        } else {
            fixed_paths::wrap(&dir, launch.fixed_cert_dirs, &ports.cert_dir, &bin, &args)?
        };
        let log = env.dir().join(format!("{}.log", launch.name));
        std::fs::write(
            &log,
            format!("# {} {}\n", program.display(), args.join(" ")),
        )
        .map_err(harness("writing the log header"))?;
        // KUBECONFIG for controller-runtime; TMPDIR because a manager
        // without a certDir setting reads <TMPDIR>/k8s-webhook-server/serving-certs.
        let tmp = dir.join("tmp");
        let default_certs = tmp.join("k8s-webhook-server");
        std::fs::create_dir_all(&default_certs).map_err(harness("creating TMPDIR"))?;
        let _ = std::os::unix::fs::symlink(&ports.cert_dir, default_certs.join("serving-certs"));
        let process = Process::spawn(
            launch.name,
            &program,
            &args,
            &[
                ("KUBECONFIG", kubeconfig.as_os_str()),
                ("TMPDIR", tmp.as_os_str()),
            ],
            log,
        )
        .map_err(harness(format!("starting {}", bin.display())))?;
        let (mutating, validating) = manifests.webhook_names();
        let mut controller = Controller {
            name: launch.name.to_owned(),
            process,
            ports,
            module,
            kubeconfig,
            mutating,
            validating,
        };
        let result = controller
            .become_ready(&client, &manifests, &launch.probe)
            .await;
        if result.is_err() {
            process::PANICKED.store(true, Ordering::SeqCst);
        }
        result.map(|()| controller)
    }

    async fn become_ready(
        &mut self,
        client: &Client,
        manifests: &Manifests,
        probe: &serde_json::Value,
    ) -> Result<()> {
        let port = self.ports.probe;
        self.wait_until("/readyz", || async move {
            match crate::loopback::get(port, "/readyz").await {
                Some((200, _)) => Ok(()),
                Some((code, body)) => Err(NotYet::Readyz { code, body }),
                None => Err(NotYet::NoReadyz),
            }
        })
        .await?;
        let pp = PostParams::default();
        for c in &manifests.mutating {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .create(&pp, c)
                .await
                .map_err(harness(format!("registering {:?}", c.meta().name)))?;
        }
        for c in &manifests.validating {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .create(&pp, c)
                .await
                .map_err(harness(format!("registering {:?}", c.meta().name)))?;
        }
        let (api, object) = probe_api(client, probe)?;
        self.wait_until("the API server reaching its webhooks", || {
            let (api, object) = (api.clone(), object.clone());
            async move {
                let dry_run = PostParams {
                    dry_run: true,
                    ..Default::default()
                };
                match api.create(&dry_run, &object).await {
                    Err(kube::Error::Api(e)) if e.message.contains("failed calling webhook") => {
                        Err(NotYet::WebhookUnreachable(e.message))
                    }
                    // Accepted, or refused by the webhooks themselves: they answer.
                    Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                    Err(e) => Err(NotYet::DryRun(Box::new(e))),
                }
            }
        })
        .await
    }

    /// Polls `check` every 250 ms until it passes, the process exits, or
    /// [`READY_TIMEOUT`] passes.
    async fn wait_until<F, Fut>(&mut self, what: &str, mut check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<(), NotYet>>,
    {
        let start = Instant::now();
        loop {
            let last = match check().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            self.process
                .check_running()
                .map_err(harness(format!("{} waiting for {what}", self.name)))?;
            if start.elapsed() > READY_TIMEOUT {
                return Err(ControllerError::NotReady {
                    name: format!("{} ({what})", self.name),
                    timeout: READY_TIMEOUT,
                    last,
                    log: self.process.log.clone(),
                    tail: process::tail(&self.process.log, 40),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The API of `probe`'s kind: in its namespace, or cluster-wide when it names none.
fn probe_api(
    client: &Client,
    probe: &serde_json::Value,
) -> Result<(Api<DynamicObject>, DynamicObject)> {
    let object: DynamicObject =
        serde_json::from_value(probe.clone()).map_err(harness("the probe object"))?;
    let types = object
        .types
        .clone()
        .ok_or_else(|| harness("the probe object")("it has no apiVersion and kind"))?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", types.api_version.as_str()),
    };
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
    let api = match object.metadata.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    Ok((api, object))
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.process.kill();
        let (kubeconfig, mutating, validating) = (
            self.kubeconfig.clone(),
            std::mem::take(&mut self.mutating),
            std::mem::take(&mut self.validating),
        );
        // Drop may run inside a runtime: a thread of its own blocks on the deletes.
        let deleted = std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = crate::client_from_kubeconfig(&kubeconfig, None, None).await?;
                let dp = DeleteParams::default();
                for name in &mutating {
                    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
                        .delete(name, &dp)
                        .await;
                }
                for name in &validating {
                    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
                        .delete(name, &dp)
                        .await;
                }
                Ok(())
            })
        })
        .join();
        if !matches!(deleted, Ok(Ok(()))) {
            eprintln!(
                "gputopo-testenv: {}: its webhook configurations may be left behind",
                self.name
            );
        }
    }
}
