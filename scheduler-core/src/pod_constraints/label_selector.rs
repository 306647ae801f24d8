//! A `metav1.LabelSelector` as pod affinity terms, topology spread
//! constraints and namespace selectors use it: `matchLabels` and
//! `matchExpressions` (`In NotIn Exists DoesNotExist`), ANDed.
//!
//! As `metav1.LabelSelectorAsSelector` reads it, an absent selector matches
//! nothing and an empty one (`{}`) matches everything; callers hold an
//! `Option<LabelSelector>` and [`matches`] says so once.

use crate::selector::{LabelRequirement, SelectorError, SelectorOperator};
use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use std::collections::BTreeMap;

/// A label selector; no requirement matches every set of labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<LabelRequirement>,
}

/// Whether `selector` matches `labels`: `None` (the field absent) matches nothing.
pub fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    selector.is_some_and(|s| s.matches(labels))
}

impl LabelSelector {
    /// `key = value` for every pair.
    pub fn equal(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            requirements: pairs
                .iter()
                .map(|(k, v)| LabelRequirement {
                    key: (*k).to_string(),
                    operator: SelectorOperator::In(vec![(*v).to_string()]),
                })
                .collect(),
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_by(|key| labels.get(key).map(String::as_str))
    }

    /// [`LabelSelector::matches`] over labels `label` reads by key (a
    /// node's, without copying them into a map).
    pub fn matches_by<'l>(&self, label: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.requirements.iter().all(|r| r.matches(label(&r.key)))
    }

    /// Reads a selector; `field` names it in errors (`…labelSelector`).
    pub fn from_k8s(s: &meta::LabelSelector, field: &str) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in s.match_labels.iter().flatten() {
            requirements.push(LabelRequirement {
                key: k.clone(),
                operator: SelectorOperator::In(vec![v.clone()]),
            });
        }
        for (i, e) in s.match_expressions.iter().flatten().enumerate() {
            requirements.push(requirement(e, &format!("{field}.matchExpressions[{i}]"))?);
        }
        Ok(LabelSelector { requirements })
    }

    /// Adds `key In [value]` for each of `match_keys` and `key NotIn [value]`
    /// for each of `mismatch_keys` the pod has a label for, as the API server
    /// merges `matchLabelKeys` / `mismatchLabelKeys` into a term's selector
    /// when the pod is created (merging again changes nothing: the same
    /// requirement twice is the requirement once).
    pub fn merge_label_keys(
        &mut self,
        match_keys: &[String],
        mismatch_keys: &[String],
        pod_labels: &BTreeMap<String, String>,
    ) {
        for (keys, within) in [(match_keys, true), (mismatch_keys, false)] {
            for key in keys {
                let Some(value) = pod_labels.get(key) else {
                    continue;
                };
                let values = vec![value.clone()];
                let operator = if within {
                    SelectorOperator::In(values)
                } else {
                    SelectorOperator::NotIn(values)
                };
                let requirement = LabelRequirement {
                    key: key.clone(),
                    operator,
                };
                if !self.requirements.contains(&requirement) {
                    self.requirements.push(requirement);
                }
            }
        }
    }
}

fn requirement(
    e: &meta::LabelSelectorRequirement,
    field: &str,
) -> Result<LabelRequirement, SelectorError> {
    let err = |detail: String| SelectorError {
        field: field.to_string(),
        detail,
    };
    let values = e.values.clone().unwrap_or_default();
    let operator = match e.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => {
            return Err(err(format!("{} needs at least one value", e.operator)));
        }
        "In" => SelectorOperator::In(values),
        "NotIn" => SelectorOperator::NotIn(values),
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            return Err(err(format!("{} takes no values", e.operator)));
        }
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        other => {
            return Err(err(format!(
                "operator {other:?} is not valid in a label selector; accepted: In | NotIn | Exists | DoesNotExist"
            )));
        }
    };
    Ok(LabelRequirement {
        key: e.key.clone(),
        operator,
    })
}
