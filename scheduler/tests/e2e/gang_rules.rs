//! A gang's members judged against each other in the one gang decision, on
//! the real API server: members spread over zones go two and two (the gang
//! search alone would keep them on one leaf, in one zone), and a gang whose
//! members' rules cannot all hold binds none and says which rule refused.
//! The check of each placement is this test's own (members per zone), not
//! scheduler-core's.

use super::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// A member of `gang` (name, size) asking `gpus` GPUs, labelled with the
/// gang's name as `job`, with `rules` merged into its spec.
fn member(
    name: &str,
    sched: &str,
    group: &str,
    gang: (&str, usize),
    gpus: u32,
    rules: &serde_json::Value,
) -> Pod {
    let size = gang.1.to_string();
    let mut pod = gpu_pod(
        name,
        sched,
        group,
        gpus,
        &[
            ("gputopo.dev/gang", gang.0),
            ("gputopo.dev/gang-size", &size),
        ],
    );
    pod.metadata.labels = Some(BTreeMap::from([("job".to_string(), gang.0.to_string())]));
    let mut spec = serde_json::to_value(pod.spec.take()).expect("a spec");
    merge_json(&mut spec, rules);
    pod.spec = Some(serde_json::from_value(spec).expect("a pod spec"));
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn gang_members_spread_over_zones_go_two_and_two_and_impossible_rules_bind_none() {
    let env = env().await;
    let client = env.client().await;
    let group = env.unique_name("gang-rules");
    // Two zones, each one leaf of four DGX A100 under its own spine.
    let mut zone_of = BTreeMap::new();
    for (zone, spine, leaf) in [
        ("zone-a", "spine-a", "leaf-1"),
        ("zone-b", "spine-b", "leaf-3"),
    ] {
        for i in 0..4 {
            let name = env.unique_name(&format!("a100-{zone}-{i}"));
            fixture_node(
                env,
                &name,
                DGX_A100,
                &[
                    ("e2e-group", &group),
                    ("topology.kubernetes.io/zone", zone),
                    ("gputopo.dev/spine", spine),
                    ("gputopo.dev/leaf", leaf),
                ],
            )
            .await;
            zone_of.insert(name, zone);
        }
    }
    let sched = env.unique_name("sched-gang-rules");
    let s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("gang-rules").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"job": "spread"}}}]});
    for i in 0..4 {
        let name = format!("spread-{i}");
        create(
            &pods,
            &member(&name, &sched, &group, ("spread", 4), 8, &spread),
        )
        .await;
    }
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..4 {
        let pod = bound(&pods, &format!("spread-{i}"), &s).await;
        assert_eq!(gpus_of(&pod).len(), 8);
        *per_zone
            .entry(zone_of[&node_of(&pod).expect("bound")])
            .or_default() += 1;
    }
    assert_eq!(
        per_zone,
        BTreeMap::from([("zone-a", 2), ("zone-b", 2)]),
        "maxSkew 1 over two zones\n{}",
        s.log()
    );

    // Three members, one per zone by anti-affinity, two zones: none binds.
    let apart = json!({"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "topology.kubernetes.io/zone",
            "labelSelector": {"matchLabels": {"job": "apart"}}}]}}});
    for i in 0..3 {
        let name = format!("apart-{i}");
        create(
            &pods,
            &member(&name, &sched, &group, ("apart", 3), 1, &apart),
        )
        .await;
    }
    let e = wait_for(
        "a FailedScheduling event naming the anti-affinity rule",
        Duration::from_secs(60),
        || async {
            events(&client, &ns, "apart-0", "FailedScheduling")
                .await
                .into_iter()
                .find(|e| note(e).contains("didn't match pod anti-affinity rules"))
        },
        || s.log(),
    )
    .await;
    assert!(note(&e).contains("nothing bound"), "{}", note(&e));
    let bound_apart = bound_named(&pods, "apart-").await.len();
    assert_eq!(bound_apart, 0, "a gang whose rules cannot hold binds none");
}
