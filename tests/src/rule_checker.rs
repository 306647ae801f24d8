//! An independent checker of kube-scheduler's hard constraints: every hard
//! constraint of every bound pod (GPUs within the node's allocatable, host
//! ports, required pod affinity and anti-affinity, `DoNotSchedule` spread,
//! claims bound to volumes that reach the node), read from the pods, nodes,
//! volumes and claims as the API server holds them at the end of a run,
//! with its own selector matching (nothing from scheduler-core). Each
//! violation is one line naming the pod and rule. The scheduler's
//! differential test and the side-by-side benchmark both read their
//! clusters back through it; either scheduler's bindings must pass.
//!
//! Its reading of selectors covers what those workloads write:
//! `matchLabels` and `Exists` expressions, `namespaces` lists and the
//! empty `namespaceSelector`. Spread is judged where the end state can
//! tell (see `spread_violations`).

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::Value;
use std::collections::BTreeMap;

/// What the checker reads.
pub struct World<'a> {
    pub pods: &'a [Pod],
    pub nodes: &'a [Node],
    pub volumes: &'a [PersistentVolume],
    pub claims: &'a [PersistentVolumeClaim],
}

/// Every hard constraint the bound pods break, one line each.
pub fn violations(w: &World<'_>) -> Vec<String> {
    let labels_of: BTreeMap<&str, BTreeMap<String, String>> = w
        .nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.as_deref().unwrap_or_default(),
                n.metadata.labels.clone().unwrap_or_default(),
            )
        })
        .collect();
    let bound: Vec<(&Pod, &str)> = w
        .pods
        .iter()
        .filter_map(|p| Some((p, p.spec.as_ref()?.node_name.as_deref()?)))
        .collect();
    let run = Run {
        world: w,
        labels_of: &labels_of,
        bound: &bound,
    };
    let mut out = run.node_capacity();
    for (p, node) in &bound {
        out.extend(run.pod_affinity(p, node));
        out.extend(run.claims(p, node));
    }
    out.extend(spread_violations(&bound, &labels_of));
    out
}

/// One check's view of the cluster: the nodes' labels and the bound pods.
struct Run<'a> {
    world: &'a World<'a>,
    labels_of: &'a BTreeMap<&'a str, BTreeMap<String, String>>,
    bound: &'a [(&'a Pod, &'a str)],
}

fn name(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Run<'_> {
    /// The node's value of `key`.
    fn domain(&self, node: &str, key: &str) -> Option<String> {
        self.labels_of.get(node).and_then(|l| l.get(key)).cloned()
    }

    /// GPUs within each node's allocatable; each host port taken once.
    fn node_capacity(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut gpus: BTreeMap<&str, i64> = BTreeMap::new();
        let mut ports: BTreeMap<(&str, i32), Vec<String>> = BTreeMap::new();
        for (p, node) in self.bound {
            let spec = p.spec.as_ref().expect("bound");
            for c in &spec.containers {
                let g = c
                    .resources
                    .as_ref()
                    .and_then(|r| r.limits.as_ref())
                    .and_then(|l| l.get("nvidia.com/gpu"))
                    .and_then(|q| q.0.parse::<i64>().ok())
                    .unwrap_or(0);
                *gpus.entry(node).or_default() += g;
                for port in c.ports.iter().flatten() {
                    if let Some(h) = port.host_port {
                        ports.entry((node, h)).or_default().push(name(p));
                    }
                }
            }
        }
        for (node, used) in &gpus {
            let allocatable = self
                .world
                .nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(*node))
                .and_then(|n| {
                    n.status
                        .as_ref()?
                        .allocatable
                        .as_ref()?
                        .get("nvidia.com/gpu")
                })
                .and_then(|q| q.0.parse::<i64>().ok())
                .unwrap_or(0);
            if *used > allocatable {
                out.push(format!("node {node}: {used} GPUs bound on {allocatable}"));
            }
        }
        for ((node, port), pods) in &ports {
            if pods.len() > 1 {
                out.push(format!("node {node}: host port {port} taken by {pods:?}"));
            }
        }
        out
    }

    /// Required pod anti-affinity (no other matching pod in the domain)
    /// and affinity (a matching pod in the domain) of the pod on `node`.
    fn pod_affinity(&self, p: &Pod, node: &str) -> Vec<String> {
        let mut out = Vec::new();
        let spec = p.spec.as_ref().expect("bound");
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        let bound = self.bound;
        let domain = |node: &str, key: &str| self.domain(node, key);
        let pod_affinity = spec.affinity.as_ref();
        // Required anti-affinity: no other matching pod in the domain.
        let anti = pod_affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        for term in anti.into_iter().flatten() {
            let term = serde_json::to_value(term).expect("a term");
            let key = term["topologyKey"].as_str().unwrap_or_default();
            let here = domain(node, key);
            for (q, other) in bound {
                if std::ptr::eq(p, *q) || here.is_none() || domain(other, key) != here {
                    continue;
                }
                if term_selects(&term, ns, q) {
                    out.push(format!(
                        "{}: anti-affinity broken by {} on {other}",
                        name(p),
                        name(q)
                    ));
                }
            }
        }
        // Required affinity: a matching pod in the domain.
        let affinity = pod_affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        for term in affinity.into_iter().flatten() {
            let term = serde_json::to_value(term).expect("a term");
            let key = term["topologyKey"].as_str().unwrap_or_default();
            let here = domain(node, key);
            let met = here.is_some()
                && bound
                    .iter()
                    .any(|(q, other)| domain(other, key) == here && term_selects(&term, ns, q));
            if !met {
                out.push(format!(
                    "{}: no pod its affinity needs in its {key} domain",
                    name(p)
                ));
            }
        }
        out
    }

    /// Each claim of the pod on `node` bound to a volume reaching it.
    fn claims(&self, p: &Pod, node: &str) -> Vec<String> {
        let mut out = Vec::new();
        let spec = p.spec.as_ref().expect("bound");
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        let w = self.world;
        // Claims: bound to a volume reaching the node.
        for v in spec.volumes.iter().flatten() {
            let Some(claim) = &v.persistent_volume_claim else {
                continue;
            };
            let pvc = w.claims.iter().find(|c| {
                c.metadata.namespace.as_deref() == Some(ns)
                    && c.metadata.name.as_deref() == Some(claim.claim_name.as_str())
            });
            let volume = pvc
                .and_then(|c| c.spec.as_ref()?.volume_name.clone())
                .and_then(|v| {
                    w.volumes
                        .iter()
                        .find(|pv| pv.metadata.name.as_deref() == Some(&v))
                });
            match volume {
                None => out.push(format!(
                    "{}: claim {} not bound to a volume",
                    name(p),
                    claim.claim_name
                )),
                Some(pv) => {
                    let text = serde_json::to_string(&pv.spec.as_ref().map(|s| &s.node_affinity))
                        .unwrap_or_default();
                    if !text.contains(&format!("\"{node}\"")) {
                        out.push(format!(
                            "{}: on {node}, its volume is elsewhere: {text}",
                            name(p)
                        ));
                    }
                }
            }
        }
        out
    }
}

/// DoNotSchedule spread: per group (pods sharing the constraint), matching
/// pods per domain of the nodes the group may use differ by at most
/// maxSkew.
///
/// That holds after the fact only where every bound pod the selector
/// matches carries the same constraint and the same `nodeSelector` (and no
/// required node affinity): each placement then kept its domain within
/// maxSkew of the least loaded one, and later ones only raise the least.
/// A group whose selector also matches pods placed without the constraint
/// (another rule's pods of the same service), or whose pods may use
/// different nodes, cannot be judged from the end state and is left out.
fn spread_violations(
    bound: &[(&Pod, &str)],
    labels_of: &BTreeMap<&str, BTreeMap<String, String>>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let hard = |p: &Pod| -> Vec<Value> {
        let spec = p.spec.as_ref().expect("bound");
        spec.topology_spread_constraints
            .iter()
            .flatten()
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .map(|c| serde_json::to_value(c).expect("a constraint"))
            .collect()
    };
    let eligibility = |p: &Pod| {
        let spec = p.spec.as_ref().expect("bound");
        let requires_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .is_some_and(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .is_some()
            });
        (!requires_affinity).then(|| spec.node_selector.clone().unwrap_or_default())
    };
    for (p, _) in bound {
        for c in hard(p) {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            if !seen.insert((ns.clone(), c.to_string())) {
                continue;
            }
            let members: Vec<&(&Pod, &str)> = bound
                .iter()
                .filter(|(q, _)| {
                    q.metadata.namespace.as_deref() == Some(ns.as_str())
                        && selector_matches(&c["labelSelector"], q)
                })
                .collect();
            let Some(selector) = eligibility(p) else {
                continue;
            };
            let judgeable = members
                .iter()
                .all(|(q, _)| hard(q).contains(&c) && eligibility(q).as_ref() == Some(&selector));
            if !judgeable {
                continue;
            }
            let key = c["topologyKey"].as_str().unwrap_or_default();
            let mut counts: BTreeMap<String, i64> = labels_of
                .values()
                .filter(|l| selector.iter().all(|(k, v)| l.get(k) == Some(v)))
                .filter_map(|l| l.get(key).map(|v| (v.clone(), 0)))
                .collect();
            for (_, node) in &members {
                if let Some(v) = labels_of.get(node).and_then(|l| l.get(key)) {
                    *counts.entry(v.clone()).or_default() += 1;
                }
            }
            let max = counts.values().max().copied().unwrap_or(0);
            let min = counts.values().min().copied().unwrap_or(0);
            let skew = c["maxSkew"].as_i64().unwrap_or(1);
            if max - min > skew {
                out.push(format!(
                    "spread over {key} in {ns}: {max} - {min} > {skew} ({c})"
                ));
            }
        }
    }
    out
}

/// Whether an affinity term (as JSON) selects `q` for a pod in `ns`.
fn term_selects(term: &Value, ns: &str, q: &Pod) -> bool {
    let q_ns = q.metadata.namespace.as_deref().unwrap_or_default();
    let in_namespace = match (&term["namespaces"], &term["namespaceSelector"]) {
        (Value::Array(list), _) if list.iter().any(|n| n == q_ns) => true,
        // An empty namespaceSelector: every namespace (the workload sets no other).
        (_, Value::Object(s)) if s.is_empty() => true,
        (Value::Array(list), _) if !list.is_empty() => false,
        _ => q_ns == ns,
    };
    in_namespace && selector_matches(&term["labelSelector"], q)
}

/// `matchLabels` (and `Exists` expressions) against a pod's labels; an
/// absent selector matches nothing.
fn selector_matches(selector: &Value, q: &Pod) -> bool {
    let Some(s) = selector.as_object() else {
        return false;
    };
    let labels = q.metadata.labels.clone().unwrap_or_default();
    let labels_ok = s
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| {
            m.iter()
                .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
        });
    let exprs_ok = s
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|e| {
            e.iter().all(|e| match e["operator"].as_str() {
                Some("Exists") => labels.contains_key(e["key"].as_str().unwrap_or_default()),
                _ => false,
            })
        });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"zone": zone}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}))
        .expect("a node")
    }

    fn pod(name: &str, node: &str, spread: bool) -> Pod {
        let mut spec = json!({"nodeName": node, "containers": [{"name": "c"}]});
        if spread {
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"svc": "s"}}}]);
        }
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
            "labels": {"svc": "s"}}, "spec": spec}))
        .expect("a pod")
    }

    fn check(pods: &[Pod]) -> Vec<String> {
        let nodes = [node("a", "z1"), node("b", "z2")];
        violations(&World {
            pods,
            nodes: &nodes,
            volumes: &[],
            claims: &[],
        })
    }

    #[test]
    fn a_spread_group_two_ahead_in_one_zone_is_a_violation() {
        let v = check(&[pod("p1", "a", true), pod("p2", "a", true)]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("2 - 0 > 1"), "{v:?}");
        assert!(check(&[pod("p1", "a", true), pod("p2", "b", true)]).is_empty());
    }

    /// A pod of the same service placed without the constraint raises a
    /// zone's count without being bound by it: the end state cannot tell a
    /// broken spread from a kept one, so the group is not judged.
    #[test]
    fn a_group_sharing_its_selector_with_unconstrained_pods_is_not_judged() {
        let v = check(&[pod("free", "a", false), pod("p1", "a", true)]);
        assert!(v.is_empty(), "{v:?}");
    }
}
