//! Optional APIs installed and removed while the scheduler runs, on the
//! real API server: the scheduler-plugins PodGroup CRD is installed only
//! after `gputopo-scheduler` is ready. Until then a gang's pods are told
//! which API is not served; once it is, the gang is placed by the same
//! process, with no restart; when the CRD is deleted, the scheduler stops
//! watching it and says so again. Its own control plane: the shared one of
//! the other test binaries installs the CRD up front.

mod common;

use common::*;
use gputopo_scheduler::gangs::{PodGroup, PodGroupSpec};
use gputopo_testenv::TestEnv;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use std::time::Duration;

const NOT_SERVED: &str = "does not serve podgroups.scheduling.x-k8s.io";

fn member(name: &str, scheduler: &str, group: &str, gang: &str) -> Pod {
    let mut p = gpu_pod(name, scheduler, group, 4, &[]);
    p.metadata.labels = Some(
        [(
            "scheduling.x-k8s.io/pod-group".to_string(),
            gang.to_string(),
        )]
        .into(),
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn a_crd_installed_after_the_scheduler_is_watched_without_a_restart() {
    let env = TestEnv::shared().await;
    env.with_controller_manager().await;
    env.with_kwok().await;
    let client = env.client().await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(
        crds.get_opt(&PodGroup::crd().metadata.name.unwrap_or_default())
            .await
            .expect("reading CRDs")
            .is_none(),
        "this control plane must start without the PodGroup CRD"
    );
    let group = env.unique_name("late");
    let node = env.unique_name("h100-late");
    fixture_node(env, &node, HGX_H100, &[("e2e-group", &group)]).await;
    let sched = env.unique_name("sched-late");
    let mut s = SchedulerProcess::start(env, &sched).await;
    let ns = env.create_namespace("late").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    // Before the CRD: the pods are told which API is missing.
    create(&pods, &member("ring-0", &sched, &group, "ring")).await;
    create(&pods, &member("ring-1", &sched, &group, "ring")).await;
    let e = event_where(
        &client,
        &ns,
        "ring-0",
        "FailedScheduling",
        |n| n.contains(NOT_SERVED),
        &s,
    )
    .await;
    assert!(note(&e).contains("no restart needed"), "{}", note(&e));

    // The CRD and the group, while the same process runs.
    gputopo_testenv::install_crd(&client, PodGroup::crd())
        .await
        .expect("installing the PodGroup CRD");
    Api::<PodGroup>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &PodGroup::new(
                "ring",
                PodGroupSpec {
                    min_member: 2,
                    schedule_timeout_seconds: None,
                },
            ),
        )
        .await
        .expect("creating the PodGroup");
    for name in ["ring-0", "ring-1"] {
        let p = bound(&pods, name, &s).await;
        assert_eq!(gpus_of(&p).len(), 4, "{name}");
    }
    s.process
        .check_running()
        .unwrap_or_else(|e| panic!("the scheduler restarted or died: {e}"));

    // The CRD deleted: watched no more, and said so to the next gang.
    crds.delete(
        &PodGroup::crd().metadata.name.unwrap_or_default(),
        &DeleteParams::default(),
    )
    .await
    .expect("deleting the CRD");
    create(&pods, &member("after-0", &sched, &group, "after")).await;
    wait_for(
        "the API named missing again",
        Duration::from_secs(120),
        || async {
            events(&client, &ns, "after-0", "FailedScheduling")
                .await
                .into_iter()
                .find(|e| note(e).contains(NOT_SERVED))
        },
        || s.log(),
    )
    .await;
    s.process
        .check_running()
        .unwrap_or_else(|e| panic!("the scheduler restarted or died: {e}"));
}
