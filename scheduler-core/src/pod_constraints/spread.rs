//! `topologySpreadConstraints`, read as kube-scheduler's PodTopologySpread
//! reads them: `minDomains` absent is 1, `nodeAffinityPolicy` absent is
//! `Honor`, `nodeTaintsPolicy` absent is `Ignore`, and `matchLabelKeys` are
//! merged into the selector as `key In [the pod's value]`.

use super::label_selector::LabelSelector;
use crate::selector::SelectorError;
use gputopo_api::k8s_openapi::api::core::v1 as k8s;
use std::collections::BTreeMap;

/// `whenUnsatisfiable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    /// A filter: nodes that would break the skew are refused.
    DoNotSchedule,
    /// A score: nodes that keep the skew low are preferred.
    ScheduleAnyway,
}

/// `nodeAffinityPolicy` / `nodeTaintsPolicy`: whether nodes the pod could
/// not go to (by its node affinity, by its tolerations) count as domains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InclusionPolicy {
    Honor,
    Ignore,
}

/// One spread constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `labelSelector` with `matchLabelKeys` merged; `None` selects no pod.
    pub selector: Option<LabelSelector>,
    /// At least 1.
    pub min_domains: i32,
    pub node_affinity_policy: InclusionPolicy,
    pub node_taints_policy: InclusionPolicy,
}

impl SpreadConstraint {
    /// `maxSkew` over `topology_key` for pods matching `selector`, with
    /// every other field at its default.
    pub fn new(
        max_skew: i32,
        topology_key: &str,
        when_unsatisfiable: WhenUnsatisfiable,
        selector: LabelSelector,
    ) -> SpreadConstraint {
        SpreadConstraint {
            max_skew,
            topology_key: topology_key.to_string(),
            when_unsatisfiable,
            selector: Some(selector),
            min_domains: 1,
            node_affinity_policy: InclusionPolicy::Honor,
            node_taints_policy: InclusionPolicy::Ignore,
        }
    }

    /// Reads one constraint; `field` names it in errors.
    pub fn from_k8s(
        c: &k8s::TopologySpreadConstraint,
        pod_labels: &BTreeMap<String, String>,
        field: &str,
    ) -> Result<SpreadConstraint, SelectorError> {
        let err = |name: &str, detail: String| SelectorError {
            field: format!("{field}.{name}"),
            detail,
        };
        if c.max_skew < 1 {
            return Err(err(
                "maxSkew",
                format!("{} is out of range; accepted: 1 or more", c.max_skew),
            ));
        }
        if c.topology_key.is_empty() {
            return Err(err(
                "topologyKey",
                "must be a node label key, not empty".into(),
            ));
        }
        let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(err(
                    "whenUnsatisfiable",
                    format!("{other:?} is not valid; accepted: DoNotSchedule | ScheduleAnyway"),
                ));
            }
        };
        let min_domains = match c.min_domains {
            None => 1,
            Some(n) if n >= 1 && when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule => n,
            Some(n) if n >= 1 => {
                return Err(err(
                    "minDomains",
                    format!(
                        "{n} is set with whenUnsatisfiable ScheduleAnyway; accepted only with DoNotSchedule"
                    ),
                ));
            }
            Some(n) => {
                return Err(err(
                    "minDomains",
                    format!("{n} is out of range; accepted: 1 or more"),
                ));
            }
        };
        let policy = |name: &str, value: Option<&String>, default| match value.map(String::as_str) {
            None => Ok(default),
            Some("Honor") => Ok(InclusionPolicy::Honor),
            Some("Ignore") => Ok(InclusionPolicy::Ignore),
            Some(other) => Err(err(
                name,
                format!("{other:?} is not valid; accepted: Honor | Ignore"),
            )),
        };
        let mut selector = c
            .label_selector
            .as_ref()
            .map(|s| LabelSelector::from_k8s(s, &format!("{field}.labelSelector")))
            .transpose()?;
        // `matchLabelKeys` the pod has make a selector even where none was
        // stated (upstream merges them into "no selector" as a fresh one).
        let match_keys = c.match_label_keys.as_deref().unwrap_or_default();
        if selector.is_none() && match_keys.iter().any(|k| pod_labels.contains_key(k)) {
            selector = Some(LabelSelector::default());
        }
        if let Some(s) = selector.as_mut() {
            s.merge_label_keys(match_keys, &[], pod_labels);
        }
        Ok(SpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable,
            selector,
            min_domains,
            node_affinity_policy: policy(
                "nodeAffinityPolicy",
                c.node_affinity_policy.as_ref(),
                InclusionPolicy::Honor,
            )?,
            node_taints_policy: policy(
                "nodeTaintsPolicy",
                c.node_taints_policy.as_ref(),
                InclusionPolicy::Ignore,
            )?,
        })
    }
}
