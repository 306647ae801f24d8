//! NodePorts: a pod's host ports against the ports of the pods bound to the
//! node, by port, protocol and host IP, as kube-scheduler judges them.

use crate::common::*;
use crate::verdicts;
use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_scheduler_core::config::SchedulerConfig;
use gputopo_scheduler_core::filter::FilterReason;
use gputopo_scheduler_core::pod::PendingPod;
use gputopo_scheduler_core::pod_constraints::{HostPort, PodConstraints};
use gputopo_scheduler_core::schedule::{Decision, schedule};
use gputopo_scheduler_core::snapshot::BoundPodInput;
use serde_json::json;
use std::sync::Arc;

fn bound_with(name: &str, node: &str, ports: Vec<HostPort>) -> BoundPodInput {
    let mut p = BoundPodInput::new("default", name, node);
    p.constraints = Arc::new(PodConstraints {
        host_ports: ports,
        ..PodConstraints::default()
    });
    p
}

fn wanting(ports: serde_json::Value) -> PendingPod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "ports": ports}]}
    }))
    .unwrap();
    PendingPod::from_k8s(&pod).unwrap()
}

fn at(ip: &str, port: u16) -> HostPort {
    HostPort {
        ip: Some(ip.into()),
        ..HostPort::tcp(port)
    }
}

#[test]
fn a_taken_host_port_refuses_the_node_and_names_the_port() {
    let snap = snapshot(
        vec![gpu_node("a", a100()), gpu_node("b", a100())],
        vec![bound_with("old", "a", vec![HostPort::tcp(18080)])],
    );
    let pod = wanting(json!([{"containerPort": 80, "hostPort": 18080}]));
    let v = verdicts(&snap, &pod);
    let Some(FilterReason::HostPorts(ports)) = &v[0].1 else {
        panic!("node a refused for its port: {v:?}");
    };
    assert_eq!(ports, &[HostPort::tcp(18080)]);
    assert!(
        v[0].1.as_ref().unwrap().to_string().contains("18080/TCP"),
        "{v:?}"
    );
    assert_eq!(v[1].1, None, "node b takes it");
}

#[test]
fn the_message_is_kube_schedulers() {
    let snap = snapshot(
        vec![gpu_node("a", a100())],
        vec![bound_with("old", "a", vec![HostPort::tcp(18080)])],
    );
    let pod = wanting(json!([{"containerPort": 80, "hostPort": 18080}]));
    let Decision::Unschedulable(u) = schedule(&snap, &pod, &SchedulerConfig::default()) else {
        panic!("no node has the port free");
    };
    assert_eq!(
        u.message,
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    );
}

#[test]
fn protocol_and_host_ip_decide_a_conflict() {
    // (bound pod's port, pod's port, conflict?)
    let cases = [
        (
            HostPort::tcp(8080),
            json!({"containerPort": 1, "hostPort": 8080, "protocol": "UDP"}),
            false,
        ),
        (
            HostPort::tcp(8080),
            json!({"containerPort": 1, "hostPort": 8081}),
            false,
        ),
        (
            at("127.0.0.1", 8080),
            json!({"containerPort": 1, "hostPort": 8080, "hostIP": "127.0.0.2"}),
            false,
        ),
        (
            at("127.0.0.1", 8080),
            json!({"containerPort": 1, "hostPort": 8080, "hostIP": "127.0.0.1"}),
            true,
        ),
        (
            at("127.0.0.1", 8080),
            json!({"containerPort": 1, "hostPort": 8080}),
            true,
        ),
        (
            HostPort::tcp(8080),
            json!({"containerPort": 1, "hostPort": 8080, "hostIP": "127.0.0.1"}),
            true,
        ),
        (
            at("127.0.0.1", 8080),
            json!({"containerPort": 1, "hostPort": 8080, "hostIP": "0.0.0.0"}),
            true,
        ),
        // A port without hostPort takes nothing on the host.
        (HostPort::tcp(8080), json!({"containerPort": 8080}), false),
    ];
    for (taken, wanted, conflict) in cases {
        let snap = snapshot(
            vec![gpu_node("a", a100())],
            vec![bound_with("old", "a", vec![taken.clone()])],
        );
        let pod = wanting(json!([wanted]));
        let refused = matches!(
            schedule(&snap, &pod, &SchedulerConfig::default()),
            Decision::Unschedulable(_)
        );
        assert_eq!(refused, conflict, "{taken:?} against {wanted}");
    }
}

#[test]
fn a_sidecars_host_port_counts_and_a_plain_init_containers_does_not() {
    let pod = |restart: Option<&str>| {
        let mut init = json!({"name": "i", "ports": [{"containerPort": 1, "hostPort": 9000}]});
        if let Some(r) = restart {
            init["restartPolicy"] = json!(r);
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"initContainers": [init], "containers": [{"name": "c"}]}
        }))
        .unwrap();
        PendingPod::from_k8s(&pod).unwrap()
    };
    let snap = snapshot(
        vec![gpu_node("a", a100())],
        vec![bound_with("old", "a", vec![HostPort::tcp(9000)])],
    );
    let config = SchedulerConfig::default();
    assert!(matches!(
        schedule(&snap, &pod(None), &config),
        Decision::Placed(_)
    ));
    assert!(matches!(
        schedule(&snap, &pod(Some("Always")), &config),
        Decision::Unschedulable(_)
    ));
}

#[test]
fn two_pods_placed_one_after_another_never_share_a_host_port() {
    let mut snap = snapshot(vec![gpu_node("a", a100()), gpu_node("b", a100())], vec![]);
    let config = SchedulerConfig::default();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let mut pod = wanting(json!([{"containerPort": 80, "hostPort": 18080}]));
        pod.name = format!("web-{i}");
        match schedule(&snap, &pod, &config) {
            Decision::Placed(p) => {
                nodes.push(p.node.clone());
                snap.add_pod(p.bound_pod(&pod)).unwrap();
            }
            Decision::Unschedulable(u) => {
                assert_eq!(i, 2, "only the third finds no node: {}", u.message);
            }
        }
    }
    nodes.sort();
    assert_eq!(nodes, ["a", "b"]);
}
