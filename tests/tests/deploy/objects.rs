//! Reading the objects the chart renders and `daemonset/` holds: by kind
//! and name, a container and its environment, a role's permissions.

use super::helm::documents;
use super::root;
use serde_json::Value;
use std::path::PathBuf;

/// The documents of every manifest in `daemonset/`.
pub(super) fn plain_manifests() -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("daemonset"))
        .expect("daemonset/ readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("manifest readable");
            documents(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .collect()
}

pub(super) fn kind_name(doc: &Value) -> (String, String) {
    (
        doc["kind"].as_str().unwrap_or_default().to_owned(),
        doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

pub(super) fn find<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind)
}

pub(super) fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().filter_map(|d| d["kind"].as_str()).collect()
}

pub(super) fn container(daemonset: &Value) -> &Value {
    &daemonset["spec"]["template"]["spec"]["containers"][0]
}

pub(super) fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// Drops the labels only Helm sets, so a chart object compares to its
/// plain twin.
pub(super) fn without_helm_labels(mut doc: Value) -> Value {
    for pointer in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(labels) = doc.pointer_mut(pointer).and_then(Value::as_object_mut) {
            labels.remove("helm.sh/chart");
            labels.remove("app.kubernetes.io/managed-by");
        }
    }
    doc
}

/// The rendered object of `kind` that belongs to the scheduler.
pub(super) fn scheduler_object<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter().find(|d| {
        d["kind"] == kind && d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler"
    })
}

/// Every (apiGroup, resource, verb) a Role or ClusterRole grants; panics on
/// anything but apiGroups/resources/verbs (resourceNames, nonResourceURLs),
/// which these roles do not use.
pub(super) fn permissions(role: &Value) -> std::collections::BTreeSet<(String, String, String)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("a list")
            .iter()
            .map(|s| s.as_str().expect("a string").to_owned())
            .collect()
    };
    let mut all = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        let keys: Vec<&String> = rule.as_object().expect("a rule").keys().collect();
        assert_eq!(keys, ["apiGroups", "resources", "verbs"], "{rule}");
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    all.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    all
}

pub(super) fn triples(
    list: &[(&str, &str, &[&str])],
) -> std::collections::BTreeSet<(String, String, String)> {
    list.iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(move |v| (group.to_string(), resource.to_string(), v.to_string()))
        })
        .collect()
}
