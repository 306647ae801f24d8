//! A scheduler started while the API server is down waits for it (saying
//! so in `/readyz`) instead of exiting and crash-looping, and becomes ready
//! once it is back. A control plane of its own: the outage must not touch
//! the other tests.

mod common;

use common::wait_for;
use gputopo_testenv::TestEnv;
use gputopo_testenv::loopback;
use gputopo_testenv::process::{Process, tail};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_scheduler_waits_out_an_api_outage_at_startup() {
    let env = TestEnv::start().await.expect("a control plane of its own");
    env.stop_apiserver();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let args: Vec<String> = [
        "run",
        "--scheduler-name",
        "outage",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--leader-elect=false",
    ]
    .map(String::from)
    .to_vec();
    let log = env.dir().join("outage-scheduler.log");
    let mut process = Process::spawn(
        "gputopo-scheduler",
        std::path::Path::new(env!("CARGO_BIN_EXE_gputopo-scheduler")),
        &args,
        &[("KUBECONFIG", env.kubeconfig_path().as_os_str())],
        log.clone(),
    )
    .expect("starting gputopo-scheduler");

    let waiting = wait_for(
        "/readyz saying it waits for the API server",
        Duration::from_secs(60),
        || async {
            let (code, body) = loopback::get(port, "/readyz").await?;
            (code == 503 && body.contains("cannot reach the API server")).then_some(body)
        },
        || tail(&log, 40),
    )
    .await;
    assert!(waiting.contains("GpuTopology"), "{waiting}");
    let (code, _) = loopback::get(port, "/healthz").await.expect("healthz");
    assert_eq!(code, 200, "alive while it waits");
    process
        .check_running()
        .expect("still running, not crash-looping");

    env.start_apiserver_again()
        .await
        .expect("the API server is back");
    wait_for(
        "ready once the API server is back",
        Duration::from_secs(90),
        || async {
            let (code, _) = loopback::get(port, "/readyz").await?;
            (code == 200).then_some(())
        },
        || tail(&log, 40),
    )
    .await;
    process.check_running().expect("still running");
}
