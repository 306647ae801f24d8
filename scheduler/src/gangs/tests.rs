use super::*;
use serde_json::json;

fn names() -> Vec<String> {
    vec!["gputopo-scheduler".to_string()]
}

fn upstream(name: &str, policy: serde_json::Value) -> Arc<UpstreamPodGroup> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"schedulingPolicy": policy}
        }))
        .expect("an upstream PodGroup"),
    )
}

fn jobset(spec: serde_json::Value) -> Arc<JobSet> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "llama", "namespace": "ml"},
            "spec": spec
        }))
        .expect("a JobSet"),
    )
}

fn replicated(name: &str, replicas: i64, parallelism: i64, scheduler: &str) -> serde_json::Value {
    json!({
        "name": name,
        "replicas": replicas,
        "template": {"spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": {"schedulerName": scheduler, "containers": [{"name": "c"}]}}
        }}
    })
}

fn group(name: &str) -> GangRef {
    GangRef::SchedulingGroup { name: name.into() }
}

#[test]
fn an_upstream_gang_policy_gives_min_count_and_basic_gives_independent_pods() {
    let objects = GangObjects {
        upstream_groups: vec![
            upstream("g", json!({"gang": {"minCount": 4}})),
            upstream("b", json!({"basic": {}})),
            upstream("neg", json!({"gang": {"minCount": -1}})),
            upstream("empty", json!({})),
        ],
        ..GangObjects::default()
    };
    assert_eq!(
        objects.size("ml", &group("g"), &names()),
        Ok(GangSize::Gang {
            size: 4,
            timeout: None
        })
    );
    assert!(matches!(
        objects.size("ml", &group("b"), &names()),
        Ok(GangSize::Independent(why)) if why.contains("basic")
    ));
    let e = objects.size("ml", &group("neg"), &names()).unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.schedulingPolicy.gang.minCount is -1"),
        "{e}"
    );
    let e = objects.size("ml", &group("empty"), &names()).unwrap_err();
    assert!(e.to_string().contains("spec.schedulingPolicy"), "{e}");
    // Another namespace's group of the same name is not this one.
    assert!(matches!(
        objects.size("other", &group("g"), &names()),
        Err(GangSizeError::Missing(_))
    ));
}

#[test]
fn a_jobset_gang_counts_the_pods_it_sends_to_this_scheduler() {
    let set = jobset(json!({"replicatedJobs": [
        replicated("workers", 2, 4, "gputopo-scheduler"),
        replicated("driver", 1, 1, "gputopo-scheduler"),
        replicated("cpu-side", 3, 1, "default-scheduler"),
    ]}));
    let objects = GangObjects {
        jobsets: vec![set],
        ..GangObjects::default()
    };
    let gang = GangRef::JobSet {
        name: "llama".into(),
        replicated_job: "workers".into(),
    };
    assert_eq!(
        objects.size("ml", &gang, &names()),
        Ok(GangSize::Gang {
            size: 9,
            timeout: None
        })
    );
    let mut with_initializer = serde_json::to_value(&*objects.jobsets[0]).expect("json");
    with_initializer["spec"]["replicatedJobs"][0]["dependsOn"] =
        json!([{"name": "driver", "status": "Complete"}]);
    let waits = GangObjects {
        jobsets: vec![Arc::new(
            serde_json::from_value(with_initializer).expect("a JobSet"),
        )],
        ..GangObjects::default()
    };
    assert_eq!(
        waits.size("ml", &gang, &names()),
        Ok(GangSize::Gang {
            size: 1,
            timeout: None
        }),
        "the workers come after the driver: the first wave is the driver"
    );
    let in_order = GangObjects {
        jobsets: vec![jobset(json!({
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "replicatedJobs": [replicated("workers", 2, 1, "gputopo-scheduler")]
        }))],
        ..GangObjects::default()
    };
    assert!(matches!(
        in_order.size("ml", &gang, &names()),
        Ok(GangSize::Independent(why)) if why.contains("InOrder")
    ));
    let huge = GangObjects {
        jobsets: vec![jobset(json!({"replicatedJobs": [
            replicated("workers", 5000, 4, "gputopo-scheduler")
        ]}))],
        ..GangObjects::default()
    };
    let e = huge.size("ml", &gang, &names()).unwrap_err();
    assert!(e.to_string().contains("JobSet ml/llama"), "{e}");
    assert!(matches!(
        GangObjects::default().size("ml", &gang, &names()),
        Err(GangSizeError::Missing(m)) if m == "JobSet ml/llama"
    ));
}

#[test]
fn a_leader_worker_set_group_is_a_gang_unless_workers_wait_for_the_leader() {
    let gang = GangRef::LeaderWorkerSet {
        name: "vllm".into(),
        group: "0".into(),
        size: 3,
    };
    // Without the object (CRD not served), the size on the pods decides.
    assert_eq!(
        GangObjects::default().size("ml", &gang, &names()),
        Ok(GangSize::Gang {
            size: 3,
            timeout: None
        })
    );
    let set: LeaderWorkerSet = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "ml"},
        "spec": {"startupPolicy": "LeaderReady", "leaderWorkerTemplate": {"size": 3}}
    }))
    .expect("a LeaderWorkerSet");
    let objects = GangObjects {
        leader_worker_sets: vec![Arc::new(set)],
        ..GangObjects::default()
    };
    assert!(matches!(
        objects.size("ml", &gang, &names()),
        Ok(GangSize::Independent(why)) if why.contains("LeaderReady")
    ));
}

#[test]
fn a_scheduler_plugins_group_of_zero_members_is_refused() {
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ml"},
        "spec": {"minMember": 0}
    }))
    .expect("a PodGroup");
    let objects = GangObjects {
        pod_groups: vec![Arc::new(pg)],
        ..GangObjects::default()
    };
    let e = objects
        .size("ml", &GangRef::PodGroup { name: "pg".into() }, &names())
        .unwrap_err();
    assert!(e.to_string().contains("spec.minMember is 0"), "{e}");
}

#[test]
fn a_gang_of_a_kind_not_served_says_which_api_and_that_no_restart_is_needed() {
    let objects = GangObjects {
        served: GangApis {
            pod_groups: false,
            ..GangApis::default()
        },
        ..GangObjects::default()
    };
    let names = vec!["gputopo-scheduler".to_string()];
    let err = objects
        .size(
            "ml",
            &GangRef::PodGroup {
                name: "ring".into(),
            },
            &names,
        )
        .unwrap_err();
    assert!(matches!(err, GangSizeError::NotServed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("PodGroup ml/ring") && text.contains("podgroups.scheduling.x-k8s.io"),
        "{text}"
    );
    // Served, the same group missing is only missing.
    let err = GangObjects::default()
        .size(
            "ml",
            &GangRef::PodGroup {
                name: "ring".into(),
            },
            &names,
        )
        .unwrap_err();
    assert!(matches!(err, GangSizeError::Missing(_)), "{err:?}");
}
