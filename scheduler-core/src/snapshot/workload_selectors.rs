//! The selectors of the objects that own pods as kube-scheduler's
//! PodTopologySpread reads them for its default constraints: Services (a
//! pod is "in" every Service of its namespace whose selector matches it),
//! and the pod's controlling ReplicaSet, StatefulSet or
//! ReplicationController. A pod that states no spread constraint of its
//! own is spread over the pods these select (`DefaultSelector` upstream).

use crate::pod::Controller;
use crate::pod_constraints::LabelSelector;
use crate::selector::{LabelRequirement, SelectorOperator};
use std::collections::BTreeMap;

/// `namespace/name` of an owner.
type Key = (String, String);

/// The Services' and controllers' selectors, by namespace and name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadSelectors {
    /// `spec.selector` of each Service that has one (a Service without a
    /// selector selects no pod).
    pub services: BTreeMap<Key, BTreeMap<String, String>>,
    pub replica_sets: BTreeMap<Key, LabelSelector>,
    pub stateful_sets: BTreeMap<Key, LabelSelector>,
    /// `spec.selector` of each ReplicationController.
    pub replication_controllers: BTreeMap<Key, BTreeMap<String, String>>,
}

impl WorkloadSelectors {
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.replica_sets.is_empty()
            && self.stateful_sets.is_empty()
            && self.replication_controllers.is_empty()
    }

    /// The selector of the pods a pod in `namespace` with `labels` is spread
    /// against by default: the selectors of the Services that select it,
    /// merged, and its controller's; `None` when that is empty (upstream
    /// then applies no default constraint).
    pub fn default_selector(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        controller: Option<&Controller>,
    ) -> Option<LabelSelector> {
        let mut set: BTreeMap<String, String> = BTreeMap::new();
        for ((ns, _), selector) in self.services.range(range(namespace)) {
            debug_assert_eq!(ns, namespace);
            if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut extra: Vec<LabelRequirement> = Vec::new();
        if let Some(c) = controller {
            let key = (namespace.to_string(), c.name.clone());
            match (c.api_version.as_str(), c.kind.as_str()) {
                ("v1", "ReplicationController") => {
                    if let Some(s) = self.replication_controllers.get(&key) {
                        set.extend(s.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                }
                ("apps/v1", "ReplicaSet") => {
                    if let Some(s) = self.replica_sets.get(&key) {
                        extra.extend(s.requirements.iter().cloned());
                    }
                }
                ("apps/v1", "StatefulSet") => {
                    if let Some(s) = self.stateful_sets.get(&key) {
                        extra.extend(s.requirements.iter().cloned());
                    }
                }
                _ => {}
            }
        }
        let mut requirements: Vec<LabelRequirement> = set
            .into_iter()
            .map(|(key, value)| LabelRequirement {
                key,
                operator: SelectorOperator::In(vec![value]),
            })
            .collect();
        for r in extra {
            if !requirements.contains(&r) {
                requirements.push(r);
            }
        }
        (!requirements.is_empty()).then_some(LabelSelector { requirements })
    }
}

/// The keys of one namespace in a map keyed by `(namespace, name)`.
fn range(namespace: &str) -> std::ops::RangeInclusive<Key> {
    // No name sorts after "\u{10FFFF}" repeated: names are DNS labels.
    (namespace.to_string(), String::new())..=(namespace.to_string(), "\u{10FFFF}".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn owners() -> WorkloadSelectors {
        let mut w = WorkloadSelectors::default();
        w.services
            .insert(("ml".into(), "web".into()), map(&[("app", "web")]));
        w.services
            .insert(("ml".into(), "tier".into()), map(&[("tier", "front")]));
        w.services.insert(
            ("other".into(), "web".into()),
            map(&[("app", "web"), ("x", "y")]),
        );
        w.replica_sets.insert(
            ("ml".into(), "web-abc".into()),
            LabelSelector::equal(&[("app", "web"), ("pod-template-hash", "abc")]),
        );
        w
    }

    #[test]
    fn services_in_the_pods_namespace_that_select_it_merge() {
        let pod = map(&[("app", "web"), ("tier", "front")]);
        let s = owners().default_selector("ml", &pod, None).unwrap();
        assert!(s.matches(&pod));
        assert!(
            !s.matches(&map(&[("app", "web")])),
            "both services' labels: {s:?}"
        );
        assert_eq!(s.requirements.len(), 2);
    }

    #[test]
    fn the_controllers_selector_joins_and_an_unknown_controller_adds_nothing() {
        let pod = map(&[("app", "web"), ("pod-template-hash", "abc")]);
        let rs = Controller {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-abc".into(),
        };
        let s = owners().default_selector("ml", &pod, Some(&rs)).unwrap();
        assert!(!s.matches(&map(&[("app", "web"), ("pod-template-hash", "def")])));
        let job = Controller {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "j".into(),
        };
        let only_service = owners().default_selector("ml", &pod, Some(&job)).unwrap();
        assert!(only_service.matches(&map(&[("app", "web"), ("pod-template-hash", "def")])));
    }

    #[test]
    fn a_pod_nothing_selects_has_no_default_selector() {
        assert_eq!(
            owners().default_selector("ml", &map(&[("app", "db")]), None),
            None
        );
        assert_eq!(
            owners().default_selector("empty", &map(&[("app", "web")]), None),
            None
        );
    }
}
