//! Taints, tolerations and node selectors with Kubernetes' semantics, as
//! plain data read from `k8s-openapi` types (or built by hand).
//!
//! Matching here works on strings and is the reference; the filter compiles a
//! pod's selectors against a snapshot's interned labels and must agree with it.

use gputopo_api::k8s_openapi::api::core::v1 as k8s;
use std::collections::BTreeMap;
use std::fmt;

/// What a taint does to pods that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    /// New pods are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node if it can (scores only).
    PreferNoSchedule,
    /// New pods are not scheduled and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }

    /// Reads an effect as the API writes it.
    pub fn parse(s: &str) -> Option<TaintEffect> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }

    /// Whether an untolerated taint of this effect keeps new pods off the node.
    pub fn blocks_scheduling(self) -> bool {
        matches!(self, TaintEffect::NoSchedule | TaintEffect::NoExecute)
    }
}

const ACCEPT_EFFECT: &str = "NoSchedule | PreferNoSchedule | NoExecute";

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    pub key: String,
    /// Empty when the taint has no value.
    pub value: String,
    pub effect: TaintEffect,
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect,
        }
    }

    /// The taint the node lifecycle controller puts on a cordoned node; a pod
    /// tolerating it may be scheduled on an `unschedulable` node.
    pub fn unschedulable() -> Taint {
        Taint::new(
            "node.kubernetes.io/unschedulable",
            "",
            TaintEffect::NoSchedule,
        )
    }

    pub fn from_k8s(t: &k8s::Taint) -> Result<Taint, SelectorError> {
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| SelectorError {
            field: format!("taint {}", t.key),
            detail: format!(
                "effect {:?} is not valid; accepted: {ACCEPT_EFFECT}",
                t.effect
            ),
        })?;
        Ok(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }
}

impl fmt::Display for Taint {
    /// `{key: value}`, as kube-scheduler names an untolerated taint.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}: {}}}", self.key, self.value)
    }
}

/// How a toleration compares values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    /// The taint's value equals the toleration's (the default).
    Equal,
    /// Any value; with an empty key, any taint at all.
    Exists,
}

/// A pod's toleration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty matches every key (only with `Exists`).
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Tolerates every taint: empty key, `Exists`, any effect.
    pub fn everything() -> Toleration {
        Toleration {
            key: String::new(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        }
    }

    /// `key` with `Exists`, for `effect` (or every effect).
    pub fn exists(key: &str, effect: Option<TaintEffect>) -> Toleration {
        Toleration {
            key: key.to_string(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect,
        }
    }

    /// `key` `Equal` `value`, for `effect` (or every effect).
    pub fn equal(key: &str, value: &str, effect: Option<TaintEffect>) -> Toleration {
        Toleration {
            key: key.to_string(),
            operator: TolerationOperator::Equal,
            value: value.to_string(),
            effect,
        }
    }

    /// `v1.Toleration.ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }

    pub fn from_k8s(t: &k8s::Toleration, index: usize) -> Result<Toleration, SelectorError> {
        let field = format!("tolerations[{index}]");
        let operator = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(SelectorError {
                    field,
                    detail: format!("operator {other:?} is not valid; accepted: Equal | Exists"),
                });
            }
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| SelectorError {
                field: field.clone(),
                detail: format!("effect {e:?} is not valid; accepted: {ACCEPT_EFFECT} or empty"),
            })?),
        };
        let key = t.key.clone().unwrap_or_default();
        let value = t.value.clone().unwrap_or_default();
        if operator == TolerationOperator::Exists && !value.is_empty() {
            return Err(SelectorError {
                field,
                detail: "operator Exists takes no value".into(),
            });
        }
        if key.is_empty() && operator == TolerationOperator::Equal {
            return Err(SelectorError {
                field,
                detail: "an empty key needs operator Exists".into(),
            });
        }
        Ok(Toleration {
            key,
            operator,
            value,
            effect,
        })
    }
}

/// The first taint in `taints` that blocks scheduling and no toleration tolerates.
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| t.effect.blocks_scheduling() && !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// A selector requirement's operator with its values, already checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorOperator {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    /// The label's value, read as an integer, is greater.
    Gt(i64),
    /// The label's value, read as an integer, is less.
    Lt(i64),
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: SelectorOperator,
}

impl LabelRequirement {
    /// Whether a node with `value` under the key (or none) meets it.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match (&self.operator, value) {
            (SelectorOperator::In(values), Some(v)) => values.iter().any(|x| x == v),
            (SelectorOperator::In(_), None) => false,
            (SelectorOperator::NotIn(values), Some(v)) => !values.iter().any(|x| x == v),
            (SelectorOperator::NotIn(_), None) => true,
            (SelectorOperator::Exists, v) => v.is_some(),
            (SelectorOperator::DoesNotExist, v) => v.is_none(),
            (SelectorOperator::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x > *n),
            (SelectorOperator::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x < *n),
            (SelectorOperator::Gt(_) | SelectorOperator::Lt(_), None) => false,
        }
    }
}

/// One `matchFields` entry: only `metadata.name` with `In` / `NotIn` exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameRequirement {
    /// `true` for `In`, `false` for `NotIn`.
    pub within: bool,
    pub names: Vec<String>,
}

impl NameRequirement {
    pub fn matches(&self, node: &str) -> bool {
        self.names.iter().any(|n| n == node) == self.within
    }
}

/// A `nodeSelectorTerm`: every requirement must hold. A term with no
/// requirement matches no node, as in Kubernetes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelectorTerm {
    pub labels: Vec<LabelRequirement>,
    pub fields: Vec<NameRequirement>,
}

impl SelectorTerm {
    pub fn matches(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        (!self.labels.is_empty() || !self.fields.is_empty())
            && self
                .labels
                .iter()
                .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self.fields.iter().all(|r| r.matches(node))
    }
}

/// Required node affinity: the terms are ORed. No term matches no node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAffinity {
    pub terms: Vec<SelectorTerm>,
}

impl NodeAffinity {
    /// `affinity` (none: any node) and also one of `names`.
    pub fn restricted_to(affinity: Option<&NodeAffinity>, names: Vec<String>) -> NodeAffinity {
        let within = NameRequirement {
            within: true,
            names,
        };
        let terms = match affinity {
            Some(a) => a
                .terms
                .iter()
                .map(|t| {
                    let mut t = t.clone();
                    t.fields.push(within.clone());
                    t
                })
                .collect(),
            None => vec![SelectorTerm {
                labels: Vec::new(),
                fields: vec![within],
            }],
        };
        NodeAffinity { terms }
    }

    pub fn matches(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().any(|t| t.matches(node, labels))
    }

    /// `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub fn from_k8s(selector: &k8s::NodeSelector) -> Result<NodeAffinity, SelectorError> {
        let terms = selector
            .node_selector_terms
            .iter()
            .enumerate()
            .map(|(t, term)| {
                selector_term(
                    term,
                    &format!(
                        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{t}]"
                    ),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NodeAffinity { terms })
    }
}

/// One `preferredDuringSchedulingIgnoredDuringExecution` entry of node
/// affinity: nodes its term matches gain `weight` (1–100).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreferredNodeTerm {
    pub weight: i32,
    pub term: SelectorTerm,
}

impl PreferredNodeTerm {
    /// The pod's preferred node affinity. As kube-scheduler's NodeAffinity
    /// score, a term without requirements counts for no node.
    pub fn from_k8s(
        terms: &[k8s::PreferredSchedulingTerm],
    ) -> Result<Vec<PreferredNodeTerm>, SelectorError> {
        let mut out = Vec::with_capacity(terms.len());
        for (i, t) in terms.iter().enumerate() {
            let base = format!(
                "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            );
            if !(1..=100).contains(&t.weight) {
                return Err(SelectorError {
                    field: format!("{base}.weight"),
                    detail: format!("{} is out of range; accepted: 1 to 100", t.weight),
                });
            }
            let term = selector_term(&t.preference, &format!("{base}.preference"))?;
            out.push(PreferredNodeTerm {
                weight: t.weight,
                term,
            });
        }
        Ok(out)
    }
}

fn selector_term(term: &k8s::NodeSelectorTerm, base: &str) -> Result<SelectorTerm, SelectorError> {
    let mut out = SelectorTerm::default();
    for (i, r) in term.match_expressions.iter().flatten().enumerate() {
        out.labels.push(label_requirement(
            r,
            &format!("{base}.matchExpressions[{i}]"),
        )?);
    }
    for (i, r) in term.match_fields.iter().flatten().enumerate() {
        let field = format!("{base}.matchFields[{i}]");
        if r.key != "metadata.name" {
            return Err(SelectorError {
                field,
                detail: format!(
                    "field {:?} is not supported; accepted: metadata.name",
                    r.key
                ),
            });
        }
        let names = r.values.clone().unwrap_or_default();
        let within = match r.operator.as_str() {
            "In" => true,
            "NotIn" => false,
            other => {
                return Err(SelectorError {
                    field,
                    detail: format!(
                        "operator {other:?} is not valid for a field; accepted: In | NotIn"
                    ),
                });
            }
        };
        if names.len() != 1 {
            return Err(SelectorError {
                field,
                detail: format!("metadata.name takes exactly one value, got {}", names.len()),
            });
        }
        out.fields.push(NameRequirement { within, names });
    }
    Ok(out)
}

fn label_requirement(
    r: &k8s::NodeSelectorRequirement,
    field: &str,
) -> Result<LabelRequirement, SelectorError> {
    let err = |detail: String| SelectorError {
        field: field.to_string(),
        detail,
    };
    let values = r.values.clone().unwrap_or_default();
    let one_integer = |op: &str| -> Result<i64, SelectorError> {
        match values.as_slice() {
            [v] => v
                .parse::<i64>()
                .map_err(|_| err(format!("{op} needs an integer value, got {v:?}"))),
            _ => Err(err(format!(
                "{op} takes exactly one value, got {}",
                values.len()
            ))),
        }
    };
    let operator = match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => {
            return Err(err(format!("{} needs at least one value", r.operator)));
        }
        "In" => SelectorOperator::In(values.clone()),
        "NotIn" => SelectorOperator::NotIn(values.clone()),
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            return Err(err(format!("{} takes no values", r.operator)));
        }
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        "Gt" => SelectorOperator::Gt(one_integer("Gt")?),
        "Lt" => SelectorOperator::Lt(one_integer("Lt")?),
        other => {
            return Err(err(format!(
                "operator {other:?} is not valid; accepted: In | NotIn | Exists | DoesNotExist | Gt | Lt"
            )));
        }
    };
    Ok(LabelRequirement {
        key: r.key.clone(),
        operator,
    })
}

/// A taint, toleration or selector that does not follow the API's rules.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {detail}")]
pub struct SelectorError {
    /// Where: `tolerations[2]`, `affinity.nodeAffinity…matchExpressions[0]`.
    pub field: String,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toleration_semantics() {
        let t = Taint::new("gpu", "true", TaintEffect::NoSchedule);
        assert!(Toleration::everything().tolerates(&t));
        assert!(Toleration::exists("gpu", None).tolerates(&t));
        assert!(Toleration::equal("gpu", "true", Some(TaintEffect::NoSchedule)).tolerates(&t));
        assert!(!Toleration::equal("gpu", "false", None).tolerates(&t));
        assert!(!Toleration::exists("gpu", Some(TaintEffect::NoExecute)).tolerates(&t));
        assert!(!Toleration::exists("other", None).tolerates(&t));
        let soft = Taint::new("x", "", TaintEffect::PreferNoSchedule);
        assert!(untolerated(std::slice::from_ref(&soft), &[]).is_none());
        assert_eq!(
            untolerated(&[soft, t.clone()], &[]).map(ToString::to_string),
            Some("{gpu: true}".to_string())
        );
    }

    #[test]
    fn requirement_operators() {
        let req = |operator| LabelRequirement {
            key: "k".into(),
            operator,
        };
        assert!(req(SelectorOperator::In(vec!["a".into()])).matches(Some("a")));
        assert!(!req(SelectorOperator::In(vec!["a".into()])).matches(None));
        assert!(req(SelectorOperator::NotIn(vec!["a".into()])).matches(None));
        assert!(req(SelectorOperator::Gt(4)).matches(Some("8")));
        assert!(!req(SelectorOperator::Gt(4)).matches(Some("x")));
        assert!(req(SelectorOperator::Lt(4)).matches(Some("-1")));
        assert!(req(SelectorOperator::DoesNotExist).matches(None));
        assert!(!SelectorTerm::default().matches("n", &BTreeMap::new()));
    }
}
