//! NodeDeclaredFeatures (GA in Kubernetes 1.37): the features a pod's spec
//! needs its node's kubelet to declare in `status.declaredFeatures`,
//! inferred as kube-scheduler infers them (the registry of
//! `k8s.io/component-helpers/nodedeclaredfeatures`, 1.37). Of the
//! registry's nine features, three can be required by a pod being scheduled;
//! the other six are inferred only on updates (in-place resize) or never,
//! and none has a maximum version, so all three count at 1.37:
//!
//! - `RestartAllContainersOnContainerExits`: a container or init container
//!   with a `restartPolicyRules` action `RestartAllContainers` (ephemeral
//!   containers are not read, as upstream);
//! - `UserNamespacesHostNetworkSupport`: `hostNetwork: true` with
//!   `hostUsers: false` (an absent `hostUsers` requires nothing);
//! - `VolumeBindMountOptions`: a non-empty `bindMountOptions` on a volume
//!   mount of any container, init or ephemeral.
//!
//! A node declares a feature by name; names outside the registry are
//! nothing a pod can require, so they are not kept.

use gputopo_api::k8s_openapi::api::core::v1 as k8s;

/// The registry's features a pod can require when it is scheduled, sorted
/// by name as upstream sorts its registry.
pub const SCHEDULING_FEATURES: [&str; 3] = [
    "RestartAllContainersOnContainerExits",
    "UserNamespacesHostNetworkSupport",
    "VolumeBindMountOptions",
];

const RESTART_ALL: u8 = 1;
const USERNS_HOST_NETWORK: u8 = 1 << 1;
const BIND_MOUNT_OPTIONS: u8 = 1 << 2;

/// A set of [`SCHEDULING_FEATURES`] (bit i = feature i).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeFeatures(u8);

impl NodeFeatures {
    /// What a node declares (`status.declaredFeatures`).
    pub fn declared<'a>(names: impl IntoIterator<Item = &'a str>) -> NodeFeatures {
        let mut bits = 0;
        for name in names {
            if let Some(i) = SCHEDULING_FEATURES.iter().position(|f| *f == name) {
                bits |= 1 << i;
            }
        }
        NodeFeatures(bits)
    }

    /// What `spec` requires of its node (see the module docs).
    pub fn required_by(spec: &k8s::PodSpec) -> NodeFeatures {
        let restart_all = |rules: &Option<Vec<k8s::ContainerRestartRule>>| {
            rules
                .iter()
                .flatten()
                .any(|r| r.action == "RestartAllContainers")
        };
        let bind_options = |mounts: &Option<Vec<k8s::VolumeMount>>| {
            mounts
                .iter()
                .flatten()
                .any(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()))
        };
        let containers = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten());
        let mut bits = 0;
        if containers
            .clone()
            .any(|c| restart_all(&c.restart_policy_rules))
        {
            bits |= RESTART_ALL;
        }
        if spec.host_network == Some(true) && spec.host_users == Some(false) {
            bits |= USERNS_HOST_NETWORK;
        }
        let ephemeral = spec.ephemeral_containers.iter().flatten();
        if containers.clone().any(|c| bind_options(&c.volume_mounts))
            || ephemeral.clone().any(|c| bind_options(&c.volume_mounts))
        {
            bits |= BIND_MOUNT_OPTIONS;
        }
        NodeFeatures(bits)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The features of `self` that `node` does not declare.
    pub fn missing_on(self, node: NodeFeatures) -> NodeFeatures {
        NodeFeatures(self.0 & !node.0)
    }

    /// The features' names, in [`SCHEDULING_FEATURES`] order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        SCHEDULING_FEATURES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, name)| *name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> k8s::PodSpec {
        serde_json::from_value(value).expect("a pod spec")
    }

    fn required(value: serde_json::Value) -> Vec<&'static str> {
        NodeFeatures::required_by(&spec(value)).names().collect()
    }

    #[test]
    fn a_plain_pod_requires_nothing() {
        assert!(required(json!({"containers": [{"name": "c"}]})).is_empty());
    }

    #[test]
    fn restart_all_containers_is_read_from_containers_and_init_containers_only() {
        let rule = json!([{"action": "RestartAllContainers",
            "exitCodes": {"operator": "In", "values": [42]}}]);
        for field in ["containers", "initContainers"] {
            let mut s = json!({"containers": [{"name": "main"}]});
            s[field] = json!([{"name": "c", "restartPolicy": "Never", "restartPolicyRules": rule}]);
            assert_eq!(
                required(s),
                ["RestartAllContainersOnContainerExits"],
                "{field}"
            );
        }
        let ephemeral = json!({"containers": [{"name": "main"}],
            "ephemeralContainers": [{"name": "debug", "restartPolicyRules": rule}]});
        assert!(
            required(ephemeral).is_empty(),
            "upstream reads no ephemeral container"
        );
        let other = json!({"containers": [{"name": "c", "restartPolicyRules": [
            {"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}]}]});
        assert!(required(other).is_empty());
    }

    #[test]
    fn host_network_needs_user_namespaces_support_only_with_host_users_false() {
        let base = |extra: serde_json::Value| {
            let mut s = json!({"containers": [{"name": "c"}], "hostNetwork": true});
            for (k, v) in extra.as_object().expect("an object") {
                s[k] = v.clone();
            }
            required(s)
        };
        assert_eq!(
            base(json!({"hostUsers": false})),
            ["UserNamespacesHostNetworkSupport"]
        );
        assert!(base(json!({"hostUsers": true})).is_empty());
        assert!(
            base(json!({})).is_empty(),
            "absent hostUsers requires nothing"
        );
        assert!(
            required(json!({"containers": [{"name": "c"}], "hostUsers": false})).is_empty(),
            "user namespaces without host network"
        );
    }

    #[test]
    fn bind_mount_options_count_on_every_kind_of_container_when_not_empty() {
        let mount = |options: serde_json::Value| json!([{"name": "data", "mountPath": "/d", "bindMountOptions": options}]);
        for field in ["containers", "initContainers", "ephemeralContainers"] {
            let mut s = json!({"containers": [{"name": "main"}]});
            s[field] = json!([{"name": "c", "volumeMounts": mount(json!(["nosuid"]))}]);
            assert_eq!(required(s), ["VolumeBindMountOptions"], "{field}");
        }
        let empty = json!({"containers": [{"name": "c", "volumeMounts": mount(json!([]))}]});
        assert!(required(empty).is_empty());
    }

    #[test]
    fn a_node_declaring_a_feature_covers_it_and_unknown_names_are_dropped() {
        let pod =
            NodeFeatures::declared(["VolumeBindMountOptions", "UserNamespacesHostNetworkSupport"]);
        let node = NodeFeatures::declared(["VolumeBindMountOptions", "SomethingNewer"]);
        assert_eq!(
            pod.missing_on(node).names().collect::<Vec<_>>(),
            ["UserNamespacesHostNetworkSupport"]
        );
        assert!(pod.missing_on(pod).is_empty());
        assert!(
            NodeFeatures::default()
                .missing_on(NodeFeatures::default())
                .is_empty()
        );
    }
}
