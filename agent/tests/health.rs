//! `/healthz` and `/readyz` as the agent serves them: `/healthz` fails once
//! the scan loop has completed no round for longer than its limit and
//! recovers with the next round; `/readyz` says what the last round said.

use gputopo_agent::health::{Liveness, readiness, router};
use gputopo_agent::metrics::Metrics;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// GET `path` on 127.0.0.1:`port`: (status code, body).
fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("writes");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("reads");
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

/// Polls `path` until it answers `code` (the server runs on another task).
async fn until_code(port: u16, path: &str, code: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (got, body) = tokio::task::spawn_blocking({
            let path = path.to_string();
            move || get(port, &path)
        })
        .await
        .expect("probe");
        if got == code {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} still answers {got}, not {code}, after 20 s: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_when_no_round_completes_and_readyz_follows_the_last_round() {
    let liveness = Arc::new(Liveness::new(Duration::from_millis(400)));
    let ready = Arc::new(readiness());
    let app = router(Arc::new(Metrics::new()), ready.clone(), liveness.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("bound").port();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // Alive at start; rounds keep it alive.
    liveness.beat();
    until_code(port, "/healthz", 200).await;
    // No round for longer than the limit: wedged.
    let body = until_code(port, "/healthz", 503).await;
    assert!(body.contains("scan loop wedged"), "{body}");
    assert!(!liveness.is_alive());
    // The next completed round heals it.
    liveness.beat();
    until_code(port, "/healthz", 200).await;

    // Readiness is what the last round said, with the reason while not ready.
    let body = until_code(port, "/readyz", 503).await;
    assert!(body.contains("no discovery published yet"), "{body}");
    ready.set_ready();
    until_code(port, "/readyz", 200).await;
    ready.set_not_ready("applying GpuTopology n1 status: connection refused".into());
    let body = until_code(port, "/readyz", 503).await;
    assert!(body.contains("connection refused"), "{body}");
    // /metrics is still served beside them.
    let body = until_code(port, "/metrics", 200).await;
    assert!(
        body.contains("gputopo_agent_pod_resources_unknown_devices"),
        "{body}"
    );
    server.abort();
}

#[test]
fn the_limit_allows_three_missed_rounds_and_one_timeout() {
    let s = Duration::from_secs;
    assert_eq!(Liveness::limit_for(s(60), s(30), s(120)), s(300));
    // Backing off longer than the rescan interval is not being wedged.
    assert_eq!(Liveness::limit_for(s(1), s(30), s(10)), s(100));
}
