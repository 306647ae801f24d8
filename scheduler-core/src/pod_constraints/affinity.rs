//! Inter-pod affinity and anti-affinity terms, read as kube-scheduler reads
//! them (`framework.AffinityTerm`): the namespaces a term looks in are its
//! `namespaces`, or the pod's own when it names neither `namespaces` nor a
//! `namespaceSelector`; an absent `labelSelector` matches no pod and an
//! absent `namespaceSelector` no namespace.

use super::label_selector::{self, LabelSelector};
use crate::selector::SelectorError;
use gputopo_api::k8s_openapi::api::core::v1 as k8s;
use std::collections::BTreeMap;

/// One `podAffinityTerm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AffinityTerm {
    /// Namespaces named outright (the pod's own when the term names none).
    pub namespaces: Vec<String>,
    /// `namespaceSelector`: `None` selects no namespace, `{}` every one.
    pub namespace_selector: Option<LabelSelector>,
    /// `labelSelector` with `matchLabelKeys` / `mismatchLabelKeys` merged;
    /// `None` selects no pod.
    pub selector: Option<LabelSelector>,
    pub topology_key: String,
}

impl AffinityTerm {
    /// A term selecting pods of `namespace` with `selector`, over `topology_key`.
    pub fn new(namespace: &str, selector: LabelSelector, topology_key: &str) -> AffinityTerm {
        AffinityTerm {
            namespaces: vec![namespace.to_string()],
            namespace_selector: None,
            selector: Some(selector),
            topology_key: topology_key.to_string(),
        }
    }

    /// Whether a pod in `namespace` with `labels` is one the term selects;
    /// `namespace_labels` are that namespace's labels (`None`: unknown, read
    /// as none, which only an empty `namespaceSelector` matches).
    pub fn matches(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let empty = BTreeMap::new();
        let in_namespace = self.namespaces.iter().any(|n| n == namespace)
            || label_selector::matches(
                self.namespace_selector.as_ref(),
                namespace_labels.unwrap_or(&empty),
            );
        in_namespace && label_selector::matches(self.selector.as_ref(), labels)
    }

    pub(crate) fn from_k8s(
        t: &k8s::PodAffinityTerm,
        namespace: &str,
        pod_labels: &BTreeMap<String, String>,
        field: &str,
    ) -> Result<AffinityTerm, SelectorError> {
        let mut selector = t
            .label_selector
            .as_ref()
            .map(|s| LabelSelector::from_k8s(s, &format!("{field}.labelSelector")))
            .transpose()?;
        if let Some(s) = selector.as_mut() {
            s.merge_label_keys(
                t.match_label_keys.as_deref().unwrap_or_default(),
                t.mismatch_label_keys.as_deref().unwrap_or_default(),
                pod_labels,
            );
        }
        let namespace_selector = t
            .namespace_selector
            .as_ref()
            .map(|s| LabelSelector::from_k8s(s, &format!("{field}.namespaceSelector")))
            .transpose()?;
        let named = t.namespaces.clone().unwrap_or_default();
        let namespaces = if named.is_empty() && namespace_selector.is_none() {
            vec![namespace.to_string()]
        } else {
            named
        };
        if t.topology_key.is_empty() {
            return Err(SelectorError {
                field: format!("{field}.topologyKey"),
                detail: "must be a node label key, not empty".into(),
            });
        }
        Ok(AffinityTerm {
            namespaces,
            namespace_selector,
            selector,
            topology_key: t.topology_key.clone(),
        })
    }
}

/// A preferred term with its weight (1–100).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightedTerm {
    pub weight: i32,
    pub term: AffinityTerm,
}

/// A pod's `podAffinity` and `podAntiAffinity`, required and preferred.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAffinity {
    pub required: Vec<AffinityTerm>,
    pub required_anti: Vec<AffinityTerm>,
    pub preferred: Vec<WeightedTerm>,
    pub preferred_anti: Vec<WeightedTerm>,
}

impl PodAffinity {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty()
            && self.required_anti.is_empty()
            && self.preferred.is_empty()
            && self.preferred_anti.is_empty()
    }

    pub(crate) fn from_k8s(
        affinity: Option<&k8s::Affinity>,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<PodAffinity, SelectorError> {
        let mut out = PodAffinity::default();
        let Some(affinity) = affinity else {
            return Ok(out);
        };
        let required = |terms: Option<&Vec<k8s::PodAffinityTerm>>, base: &str| {
            terms
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, t)| {
                    let field =
                        format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
                    AffinityTerm::from_k8s(t, namespace, labels, &field)
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let preferred = |terms: Option<&Vec<k8s::WeightedPodAffinityTerm>>, base: &str| {
            terms
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, t)| {
                    let field =
                        format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                    if !(1..=100).contains(&t.weight) {
                        return Err(SelectorError {
                            field: format!("{field}.weight"),
                            detail: format!("{} is out of range; accepted: 1 to 100", t.weight),
                        });
                    }
                    let term = AffinityTerm::from_k8s(
                        &t.pod_affinity_term,
                        namespace,
                        labels,
                        &format!("{field}.podAffinityTerm"),
                    )?;
                    Ok(WeightedTerm {
                        weight: t.weight,
                        term,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        if let Some(a) = &affinity.pod_affinity {
            let base = "affinity.podAffinity";
            out.required = required(
                a.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                base,
            )?;
            out.preferred = preferred(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
                base,
            )?;
        }
        if let Some(a) = &affinity.pod_anti_affinity {
            let base = "affinity.podAntiAffinity";
            out.required_anti = required(
                a.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                base,
            )?;
            out.preferred_anti = preferred(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
                base,
            )?;
        }
        Ok(out)
    }
}
