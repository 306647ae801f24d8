//! Two replicas with leader election: only the leader binds, and the
//! standby takes over when the leader is killed.

use super::common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The lease's holder, if any.
async fn lease_holder(client: &Client, ns: &str, name: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Whether the replica's /metrics says `gputopo_leader 1`.
async fn leads(s: &SchedulerProcess) -> Option<bool> {
    let (status, body) = s.get("/metrics").await?;
    if status != 200 {
        return None;
    }
    let line = body.lines().find(|l| l.starts_with("gputopo_leader "))?;
    Some(line.trim_end().ends_with(" 1"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn two_replicas_bind_each_pod_once_from_the_leader_and_fail_over() {
    const LEASE: Duration = Duration::from_secs(4);
    const RENEW: Duration = Duration::from_secs(3);
    const RETRY: Duration = Duration::from_secs(1);
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("leader");
    let node_name = env.unique_name("dgx1");
    fixture_node(env, &node_name, DGX1, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-leader");
    let lease = env.unique_name("lease");
    let lease_ns = lease_namespace(env).await;
    let ns = env.create_namespace("leader").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let replica = |pod_name: &'static str| {
        let lease = lease.clone();
        move |_port: u16| {
            (
                vec![
                    "--leader-elect-lease-name".to_string(),
                    lease,
                    "--leader-elect-lease-duration".into(),
                    "4s".into(),
                    "--leader-elect-renew-deadline".into(),
                    "3s".into(),
                    "--leader-elect-retry-period".into(),
                    "1s".into(),
                ],
                vec![("POD_NAME", pod_name.to_string())],
            )
        }
    };
    let mut a = SchedulerProcess::start_with(env, &sched, replica("replica-a")).await;
    let holder_a = wait_for(
        "replica-a holds the lease",
        Duration::from_secs(30),
        || async {
            lease_holder(&client, lease_ns, &lease)
                .await
                .filter(|h| h.starts_with("replica-a_"))
        },
        || a.log(),
    )
    .await;
    let b = SchedulerProcess::start_with(env, &sched, replica("replica-b")).await;

    let names: Vec<String> = (0..4).map(|i| format!("p{i}")).collect();
    for n in &names {
        create(&pods, &gpu_pod(n, &sched, &group, 1, &[])).await;
    }
    let mut used = BTreeSet::new();
    for n in &names {
        let pod = bound(&pods, n, &a).await;
        for g in gpus_of(&pod) {
            assert!(used.insert(g), "GPU {g} given twice");
        }
        // Wait for the (background) event, then check there is one only.
        one_event(&client, &ns, n, "Scheduled", &a).await;
        let scheduled = events(&client, &ns, n, "Scheduled").await;
        assert_eq!(
            scheduled.len(),
            1,
            "{n}: one Scheduled event: {scheduled:?}"
        );
        assert_eq!(
            scheduled[0].reporting_instance.as_deref(),
            Some("replica-a"),
            "{n} bound by the leader"
        );
    }
    assert_eq!(
        lease_holder(&client, lease_ns, &lease).await.as_deref(),
        Some(holder_a.as_str())
    );
    assert_eq!(leads(&a).await, Some(true), "{}", a.log());
    assert_eq!(leads(&b).await, Some(false), "{}", b.log());
    assert!(
        !std::fs::read_to_string(&b.process.log)
            .unwrap_or_default()
            .contains("leading: scheduling"),
        "the standby scheduled:\n{}",
        b.log()
    );

    // Fail over: SIGKILL the leader (no release), then a new pod.
    a.process.kill();
    let killed = Instant::now();
    create(&pods, &gpu_pod("after", &sched, &group, 1, &[])).await;
    let deadline = killed + Duration::from_secs(60);
    let (took_lease, bound_after) = loop {
        let holder = lease_holder(&client, lease_ns, &lease).await;
        let pod = pods.get("after").await.ok();
        if let Some(pod) = pod.filter(|p| node_of(p).is_some()) {
            let took = holder.filter(|h| h.starts_with("replica-b_"));
            assert!(
                took.is_some(),
                "bound while replica-b does not hold the lease"
            );
            break (killed.elapsed(), pod);
        }
        assert!(
            Instant::now() < deadline,
            "no failover within 60 s:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for g in gpus_of(&bound_after) {
        assert!(used.insert(g), "GPU {g} given twice after the failover");
    }
    let scheduled = one_event(&client, &ns, "after", "Scheduled", &b).await;
    assert_eq!(scheduled.reporting_instance.as_deref(), Some("replica-b"));
    assert_eq!(leads(&b).await, Some(true), "{}", b.log());
    let transitions = Api::<Lease>::namespaced(client.clone(), lease_ns)
        .get(&lease)
        .await
        .expect("the lease")
        .spec
        .and_then(|s| s.lease_transitions);
    assert_eq!(transitions, Some(1));
    println!(
        "scheduler failover (lease {LEASE:?}, renew deadline {RENEW:?}, retry {RETRY:?}): {:.2} s from SIGKILL of the leader to the next pod bound by the standby",
        took_lease.as_secs_f64()
    );
    assert!(
        took_lease < LEASE + RETRY + Duration::from_secs(3),
        "failover took {took_lease:?}"
    );
}
