//! The agent's admission policy, in the chart and in `daemonset/`: the
//! labels it guards are the agent's, and it follows the release.

use super::helm::render_ok;
use super::objects::{find, plain_manifests};
use super::values::{NAMESPACE, RELEASE};
use serde_json::{Value, json};

/// The quoted strings of the admission policy's `ownedLabels` variable.
fn owned_labels(policy: &Value) -> Vec<String> {
    let expression = policy["spec"]["variables"]
        .as_array()
        .expect("policy variables")
        .iter()
        .find(|v| v["name"] == "ownedLabels")
        .expect("an ownedLabels variable")["expression"]
        .as_str()
        .expect("an expression");
    expression
        .split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_policys_owned_labels_are_the_agents() {
    let expected: Vec<String> = gputopo_api::keys::node::OWNED
        .iter()
        .map(|s| s.to_string())
        .collect();
    let chart = render_ok(RELEASE, NAMESPACE, None);
    let policy = find(&chart, "ValidatingAdmissionPolicy").expect("the chart's policy");
    assert_eq!(owned_labels(policy), expected, "chart policy");
    let plain = plain_manifests();
    let policy = find(&plain, "ValidatingAdmissionPolicy").expect("daemonset/'s policy");
    assert_eq!(owned_labels(policy), expected, "daemonset/ policy");
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_policy_follows_the_release_namespace_and_service_account() {
    let docs = render_ok(
        "team-a",
        "gpu-infra",
        Some("agent:\n  serviceAccount:\n    name: topo\n"),
    );
    let policy = find(&docs, "ValidatingAdmissionPolicy").expect("policy");
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:gpu-infra:topo'"
    );
    let binding = find(&docs, "ClusterRoleBinding").expect("binding");
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "topo", "namespace": "gpu-infra"})
    );
    let ds = find(&docs, "DaemonSet").expect("daemonset");
    assert_eq!(ds["metadata"]["namespace"], "gpu-infra");
    assert_eq!(ds["metadata"]["name"], "team-a-gputopo-agent");
    assert_eq!(ds["spec"]["template"]["spec"]["serviceAccountName"], "topo");
    assert_eq!(
        find(&docs, "ValidatingAdmissionPolicyBinding").expect("binding")["spec"]["policyName"],
        policy["metadata"]["name"]
    );
}
