//! The real PodResources backend (`KubeletSocket`) against a stand-in
//! server generated from the kubelet's own `.proto` on a temporary unix
//! socket (no kubelet runs here): each way a reading fails is its own typed
//! error and metric reason, and a kubelet without `GetAllocatableResources`
//! is still read.

mod common;

use common::kubelet::{Behaviour, Kubelet, container, devices, pod, uuid};
use gputopo_agent::podres::kubelet::KubeletSocket;
use gputopo_agent::podres::{KubeletAnswer, PodResourcesError, PodResourcesSource};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn socket(path: &Path, timeout_ms: u64) -> KubeletSocket {
    KubeletSocket {
        path: path.to_path_buf(),
        timeout: Duration::from_millis(timeout_ms),
    }
}

/// Reads until the stand-in answers (it binds on its own task).
async fn first_answer(source: &KubeletSocket) -> Result<KubeletAnswer, PodResourcesError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match source.read().await {
            Err(PodResourcesError::SocketMissing { .. } | PodResourcesError::Connect { .. })
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

#[tokio::test]
async fn a_kubelet_without_get_allocatable_resources_is_still_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubelet.sock");
    let pods = vec![pod(
        "trainer",
        vec![container(
            "main",
            vec![devices("nvidia.com/gpu", vec![uuid(2)])],
        )],
    )];
    let behaviour = Behaviour {
        no_allocatable: true,
        ..Behaviour::default()
    };
    let kubelet = Kubelet::serve_as(&path, Arc::new(Mutex::new(pods)), behaviour).await;
    let answer = first_answer(&socket(&path, 2000)).await.expect("read");
    assert_eq!(answer.allocatable, None);
    let pod = &answer.list.pod_resources[0];
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str()),
        ("ml", "trainer")
    );
    assert_eq!(pod.containers[0].devices[0].device_ids, [uuid(2)]);
    kubelet.stop().await;
}

#[tokio::test]
async fn a_kubelet_that_does_not_answer_in_time_is_a_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubelet.sock");
    let behaviour = Behaviour {
        list_delay: Some(Duration::from_secs(30)),
        ..Behaviour::default()
    };
    let kubelet = Kubelet::serve_as(&path, Arc::default(), behaviour).await;
    let e = first_answer(&socket(&path, 300))
        .await
        .expect_err("too slow");
    assert!(
        matches!(e, PodResourcesError::Timeout { call: "List", .. }),
        "{e:?}"
    );
    assert_eq!(e.reason(), "timeout");
    assert!(e.to_string().contains("--pod-resources-timeout"), "{e}");
    kubelet.stop().await;
}

#[tokio::test]
async fn a_missing_socket_and_a_refusing_one_are_told_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubelet.sock");
    let e = socket(&path, 500).read().await.expect_err("no socket");
    assert!(
        matches!(e, PodResourcesError::SocketMissing { .. }),
        "{e:?}"
    );
    assert_eq!(e.reason(), "socket_missing");
    assert!(e.to_string().contains("kubelet.sock"), "{e}");

    // A socket file nobody listens on: what a stopped kubelet leaves.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bound"));
    let e = socket(&path, 500).read().await.expect_err("refused");
    assert!(matches!(e, PodResourcesError::Connect { .. }), "{e:?}");
    assert_eq!(e.reason(), "connect_failed");
}

#[test]
fn every_failure_reason_is_a_listed_metric_label() {
    use gputopo_agent::podres::FAILURE_REASONS;
    use gputopo_agent::podres::saved::parse;
    let errors = [
        PodResourcesError::SocketMissing { path: "/s".into() },
        PodResourcesError::Call {
            call: "List",
            code: tonic::Code::PermissionDenied,
            message: "no".into(),
        },
        PodResourcesError::Timeout {
            call: "List",
            after: Duration::from_secs(1),
        },
        PodResourcesError::ReadSaved {
            file: "a.json".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        },
        parse("[]", "a.json").expect_err("not an answer"),
    ];
    for e in &errors {
        assert!(FAILURE_REASONS.contains(&e.reason()), "{e:?}");
    }
}
