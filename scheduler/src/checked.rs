//! Watched custom resources decoded one object at a time.
//!
//! The API server accepts custom objects that gputopo's types refuse (a
//! PodGroup `spec: {}`, a `GpuTopology` index beyond `u32`: the schema's
//! `format` is not enforced). A typed watch fails its whole list on one of
//! them, so after a restart nothing would be scheduled. [`Checked`]
//! deserializes every object: its metadata always (the API server
//! validates it), its body as `K` when it can, the reason otherwise. What
//! cannot be used is skipped and reported, never fatal.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::ObjectMeta;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tracing::warn;

/// An object of kind `K` as the API server holds it: decoded, or the
/// reason it could not be.
#[derive(Clone, Debug)]
pub struct Checked<K> {
    pub metadata: ObjectMeta,
    pub value: Result<Arc<K>, InvalidObject>,
}

/// Why an object could not be read as its type.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind} {name}: {reason}")]
pub struct InvalidObject {
    pub kind: String,
    /// `namespace/name`, or the name of a cluster-scoped object.
    pub name: String,
    /// The decoding error, with the field path that failed.
    pub reason: String,
    /// Where an event about it goes.
    pub reference: ObjectReference,
}

impl InvalidObject {
    /// A short, bounded label for metrics: the first field path named.
    pub fn metric_reason(&self) -> String {
        let path = self.reason.split(':').next().unwrap_or("").trim();
        let path: String = path.chars().take(64).collect();
        if path.is_empty() { "body".into() } else { path }
    }
}

impl<K: Resource<DynamicType = ()>> Checked<K> {
    /// The usable objects of `items`, and the unusable ones' reasons.
    pub fn split(items: &[Arc<Checked<K>>]) -> (Vec<Arc<K>>, Vec<InvalidObject>) {
        let mut ok = Vec::with_capacity(items.len());
        let mut bad = Vec::new();
        for item in items {
            match &item.value {
                Ok(v) => ok.push(v.clone()),
                Err(e) => bad.push(e.clone()),
            }
        }
        (ok, bad)
    }
}

/// The labels of `gputopo_invalid_objects`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct InvalidObjectLabels {
    /// `GpuTopology`, `PodGroup`.
    pub kind: String,
    /// The field path that failed ([`InvalidObject::metric_reason`]).
    pub reason: String,
}

/// `gputopo_invalid_objects{kind,reason}`: objects watched now that cannot be used.
pub type InvalidObjectsGauge = Family<InvalidObjectLabels, Gauge>;

/// Per kind: the label sets last set, and the objects (name and
/// resourceVersion) already logged.
#[derive(Default)]
struct Reported {
    labels: BTreeSet<InvalidObjectLabels>,
    logged: BTreeSet<(String, String)>,
}

/// Keeps the gauge current and says each bad object version once.
#[derive(Default)]
pub struct InvalidReport {
    gauge: InvalidObjectsGauge,
    state: Mutex<BTreeMap<String, Reported>>,
}

impl InvalidReport {
    pub fn new(gauge: InvalidObjectsGauge) -> InvalidReport {
        InvalidReport {
            gauge,
            state: Mutex::default(),
        }
    }

    /// Records the unusable objects of `kind` seen now; returns those not
    /// reported before (a new object, or a new version of one), which were
    /// logged at `warn`.
    pub fn observe(&self, kind: &str, bad: &[InvalidObject]) -> Vec<InvalidObject> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Reported { labels, logged } = state.entry(kind.to_string()).or_default();
        let mut counts: BTreeMap<InvalidObjectLabels, i64> = BTreeMap::new();
        let mut now = BTreeSet::new();
        let mut fresh = Vec::new();
        for b in bad {
            *counts
                .entry(InvalidObjectLabels {
                    kind: kind.to_string(),
                    reason: b.metric_reason(),
                })
                .or_default() += 1;
            let version = (
                b.name.clone(),
                b.reference.resource_version.clone().unwrap_or_default(),
            );
            if !logged.contains(&version) {
                warn!(kind, object = %b.name, reason = %b.reason, "skipping an object gputopo cannot use");
                fresh.push(b.clone());
            }
            now.insert(version);
        }
        *logged = now;
        for gone in labels.iter().filter(|l| !counts.contains_key(l)) {
            self.gauge.remove(gone);
        }
        for (l, n) in &counts {
            self.gauge.get_or_create(l).set(*n);
        }
        *labels = counts.into_keys().collect();
        fresh
    }
}

fn key(meta: &ObjectMeta) -> String {
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) => n.clone(),
        _ => "<unnamed>".into(),
    }
}

impl<'de, K> Deserialize<'de> for Checked<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Meta {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        let mut raw = serde_json::Value::deserialize(d)?;
        strip_managed_fields(&mut raw);
        let Meta { metadata } = Meta::deserialize(&raw).map_err(de::Error::custom)?;
        let value = serde_path_to_error::deserialize::<_, K>(raw)
            .map(Arc::new)
            .map_err(|e| InvalidObject {
                kind: K::kind(&()).into_owned(),
                name: key(&metadata),
                reason: format!("{}: {}", e.path(), e.inner()),
                reference: ObjectReference {
                    api_version: Some(K::api_version(&()).into_owned()),
                    kind: Some(K::kind(&()).into_owned()),
                    name: metadata.name.clone(),
                    namespace: metadata.namespace.clone(),
                    uid: metadata.uid.clone(),
                    resource_version: metadata.resource_version.clone(),
                    ..ObjectReference::default()
                },
            });
        Ok(Checked { metadata, value })
    }
}

/// Drops `metadata.managedFields` before the object is decoded: the
/// scheduler never reads it, and it is most of a watched object's memory
/// (kube-scheduler's informers strip it too).
fn strip_managed_fields(raw: &mut serde_json::Value) {
    if let Some(meta) = raw
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
}

impl<K> Resource for Checked<K>
where
    K: Resource<DynamicType = ()>,
{
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gangs::PodGroup;
    use gputopo_api::GpuTopology;
    use serde_json::json;

    #[test]
    fn managed_fields_are_not_kept() {
        let ok: Checked<PodGroup> = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "a", "namespace": "ml", "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:minMember": {}}}
            }]},
            "spec": {"minMember": 2}
        }))
        .expect("never fails");
        assert_eq!(ok.metadata.managed_fields, None);
        let value = ok.value.expect("valid");
        assert_eq!(value.metadata.managed_fields, None);
        assert_eq!(value.spec.min_member, 2);
    }

    #[test]
    fn a_valid_object_decodes_and_a_bad_one_names_its_field() {
        let ok: Checked<PodGroup> = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "a", "namespace": "ml"},
            "spec": {"minMember": 2}
        }))
        .expect("never fails");
        assert_eq!(ok.value.expect("valid").spec.min_member, 2);

        for (spec, field) in [
            (json!({}), "spec"),
            (json!({"minMember": -1}), "spec.minMember"),
        ] {
            let bad: Checked<PodGroup> = serde_json::from_value(json!({
                "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "b", "namespace": "ml"}, "spec": spec
            }))
            .expect("never fails");
            let e = bad.value.expect_err("invalid");
            assert_eq!((e.kind.as_str(), e.name.as_str()), ("PodGroup", "ml/b"));
            assert!(e.reason.starts_with(field), "{e}");
            assert_eq!(bad.metadata.name.as_deref(), Some("b"));
        }

        let report = InvalidReport::new(InvalidObjectsGauge::default());
        let bad = [topology_error()];
        assert_eq!(
            report.observe("GpuTopology", &bad).len(),
            1,
            "new: reported"
        );
        assert!(report.observe("GpuTopology", &bad).is_empty(), "said once");
        assert_eq!(
            report
                .gauge
                .get_or_create(&InvalidObjectLabels {
                    kind: "GpuTopology".into(),
                    reason: "spec.gpus[0].index".into()
                })
                .get(),
            1
        );
        assert!(report.observe("GpuTopology", &[]).is_empty());
        let text = {
            let mut r = prometheus_client::registry::Registry::default();
            r.register("invalid_objects", "h", report.gauge.clone());
            gputopo_ops::encode(&r)
        };
        assert!(
            !text.contains("spec.gpus"),
            "a fixed object leaves the gauge: {text}"
        );
    }

    fn topology_error() -> InvalidObject {
        let topology: Checked<GpuTopology> = serde_json::from_value(json!({
            "apiVersion": "gputopo.dev/v1alpha1", "kind": "GpuTopology",
            "metadata": {"name": "n1"},
            "spec": {"nodeName": "n1", "gpus": [{"index": 5_000_000_000u64}], "links": []}
        }))
        .expect("never fails");
        let e = topology.value.expect_err("an index beyond u32");
        assert!(e.reason.starts_with("spec.gpus[0].index"), "{e}");
        assert_eq!(e.metric_reason(), "spec.gpus[0].index");
        assert_eq!(e.reference.kind.as_deref(), Some("GpuTopology"));
        e
    }
}
