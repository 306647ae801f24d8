//! A `gputopo-scheduler` process on the shared control plane (its own
//! scheduler name and lease), and waiting for what it writes.

use super::{events, node_of, note, wait_for};
use gputopo_scheduler::gangs::PodGroup;
use gputopo_testenv::TestEnv;
use gputopo_testenv::process::{Process, tail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use kube::{Client, CustomResourceExt};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// The shared control plane with the controller manager, kwok and the PodGroup CRD.
pub async fn env() -> &'static TestEnv {
    static CRD: OnceCell<()> = OnceCell::const_new();
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    CRD.get_or_init(|| async {
        gputopo_testenv::install_crd(&env.client().await, PodGroup::crd())
            .await
            .expect("installing the PodGroup CRD");
    })
    .await;
    env
}

/// The namespace of the schedulers' leader leases (one per test run).
pub async fn lease_namespace(env: &TestEnv) -> &'static str {
    static NS: OnceCell<String> = OnceCell::const_new();
    NS.get_or_init(|| env.create_namespace("leases")).await
}

/// A running `gputopo-scheduler`; killed on drop.
pub struct SchedulerProcess {
    pub process: Process,
    pub port: u16,
}

impl SchedulerProcess {
    /// A scheduler with its own lease (named after it and its port, in the
    /// shared lease namespace), so that parallel tests never wait on one.
    pub async fn start(env: &TestEnv, name: &str) -> SchedulerProcess {
        SchedulerProcess::start_with(env, name, |port| {
            (
                vec!["--leader-elect-lease-name".into(), format!("{name}-{port}")],
                vec![],
            )
        })
        .await
    }

    /// `extra(port)` gives the arguments and environment added to the usual.
    pub async fn start_with(
        env: &TestEnv,
        name: &str,
        extra: impl FnOnce(u16) -> (Vec<String>, Vec<(&'static str, String)>),
    ) -> SchedulerProcess {
        SchedulerProcess::start_configured(env, name, "", extra).await
    }

    /// A scheduler whose configuration file has `config` after the usual
    /// short backoff.
    pub async fn start_with_config(env: &TestEnv, name: &str, config: &str) -> SchedulerProcess {
        SchedulerProcess::start_configured(env, name, config, |port| {
            (
                vec!["--leader-elect-lease-name".into(), format!("{name}-{port}")],
                vec![],
            )
        })
        .await
    }

    pub async fn start_configured(
        env: &TestEnv,
        name: &str,
        config_extra: &str,
        extra: impl FnOnce(u16) -> (Vec<String>, Vec<(&'static str, String)>),
    ) -> SchedulerProcess {
        let mut s = SchedulerProcess::spawn(env, name, config_extra, extra).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Err(e) = s.process.check_running() {
                panic!("{e}");
            }
            if let Some((200, _)) = s.get("/readyz").await {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gputopo-scheduler not ready after 60 s:\n{}",
                tail(&s.process.log, 40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        s
    }

    /// The process, started and not waited for: for a test that expects it
    /// to exit (a failpoint) before anyone could ask whether it is ready.
    pub async fn spawn(
        env: &TestEnv,
        name: &str,
        config_extra: &str,
        extra: impl FnOnce(u16) -> (Vec<String>, Vec<(&'static str, String)>),
    ) -> SchedulerProcess {
        let lease_namespace = lease_namespace(env).await;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = env.dir().join(format!("{name}-{port}"));
        std::fs::create_dir_all(&dir).expect("scheduler dir");
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "backoff: {{initial: 200ms, max: 2s, unschedulableTimeout: 10s}}\n{config_extra}"
            ),
        )
        .expect("writing the config");
        let (extra_args, extra_env) = extra(port);
        let mut args = vec![
            "run".to_string(),
            "--scheduler-name".into(),
            name.into(),
            "--config".into(),
            config.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--leader-elect-namespace".into(),
            lease_namespace.to_string(),
        ];
        args.extend(extra_args);
        let mut vars: Vec<(&str, &std::ffi::OsStr)> = vec![
            ("KUBECONFIG", env.kubeconfig_path().as_os_str()),
            (
                "RUST_LOG",
                std::ffi::OsStr::new("info,gputopo_scheduler=debug"),
            ),
        ];
        vars.extend(extra_env.iter().map(|(k, v)| (*k, std::ffi::OsStr::new(v))));
        let process = Process::spawn(
            name,
            std::path::Path::new(env!("CARGO_BIN_EXE_gputopo-scheduler")),
            &args,
            &vars,
            dir.join("scheduler.log"),
        )
        .expect("starting gputopo-scheduler");
        SchedulerProcess { process, port }
    }

    /// A plain HTTP GET on the scheduler's port: (status, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        gputopo_testenv::loopback::get(self.port, path).await
    }

    pub fn log(&self) -> String {
        tail(&self.process.log, 60)
    }

    /// Waits (up to a minute) for the process to exit on its own: a
    /// failpoint's abort. `what` names the wait in a timeout's message.
    pub async fn wait_exit(&mut self, what: &str) {
        wait_for(
            what,
            Duration::from_secs(60),
            || {
                let exited = self.process.check_running().is_err();
                async move { exited.then_some(()) }
            },
            String::new,
        )
        .await;
    }
}

pub async fn bound(pods: &Api<Pod>, name: &str, s: &SchedulerProcess) -> Pod {
    wait_for(
        &format!("pod {name} bound"),
        Duration::from_secs(90),
        || async { pods.get(name).await.ok().filter(|p| node_of(p).is_some()) },
        || s.log(),
    )
    .await
}

pub async fn one_event(
    client: &Client,
    ns: &str,
    pod: &str,
    reason: &str,
    s: &SchedulerProcess,
) -> Event {
    wait_for(
        &format!("a {reason} event for {pod}"),
        Duration::from_secs(90),
        || async { events(client, ns, pod, reason).await.into_iter().next() },
        || s.log(),
    )
    .await
}

/// Waits for an event of `reason` on `pod` whose note satisfies `matches`:
/// events are published in the background, after the write they report.
pub async fn event_where(
    client: &Client,
    ns: &str,
    pod: &str,
    reason: &str,
    matches: impl Fn(&str) -> bool,
    s: &SchedulerProcess,
) -> Event {
    wait_for(
        &format!("a {reason} event for {pod} as expected"),
        Duration::from_secs(90),
        || async {
            events(client, ns, pod, reason)
                .await
                .into_iter()
                .find(|e| matches(&note(e)))
        },
        || s.log(),
    )
    .await
}
