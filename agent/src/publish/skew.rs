//! An agent newer than the cluster's `GpuTopology` CRD (docs/upgrades.md,
//! version skew). Server-side apply refuses a field the CRD does not declare
//! (500, "field not declared in schema"), whatever `fieldValidation` says,
//! so without this the agent would publish nothing until the CRD is
//! upgraded. Instead it learns the refused fields from the error, leaves
//! them out of its writes and out of its comparisons (so a quiet node still
//! writes nothing), and tries them again after [`RETRY_REFUSED`], in case
//! the CRD was upgraded meanwhile. Fields added to the CRD are optional
//! (docs/upgrades.md), so an object without them is still whole to every
//! reader of that CRD's version.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

/// How long refused fields stay left out before the agent sends them again.
pub const RETRY_REFUSED: Duration = Duration::from_secs(3600);

const UNDECLARED: &str = ": field not declared in schema";

/// The fields the API server refused, as it names them (`.spec.summary.p2pBottleneck`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefusedFields {
    paths: BTreeSet<String>,
    since: Option<Timestamp>,
}

impl RefusedFields {
    /// Forgets the refused fields once they are [`RETRY_REFUSED`] old.
    pub fn expire(&mut self, now: Timestamp) {
        let retry = SignedDuration::try_from(RETRY_REFUSED).unwrap_or(SignedDuration::MAX);
        if self
            .since
            .is_some_and(|since| now.duration_since(since) >= retry)
        {
            *self = RefusedFields::default();
        }
    }

    /// Reads the fields a server-side apply refusal names; returns those
    /// not known before (none: the error is about something else).
    pub fn learn(&mut self, message: &str, now: Timestamp) -> Vec<String> {
        let new: Vec<String> = undeclared_fields(message)
            .into_iter()
            .filter(|p| !self.paths.contains(p))
            .collect();
        if !new.is_empty() {
            self.paths.extend(new.iter().cloned());
            self.since.get_or_insert(now);
        }
        new
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Removes the refused fields from an object's JSON (paths from its root).
    pub fn strip(&self, object: &mut Value) {
        for path in &self.paths {
            remove(object, &segments(path));
        }
    }

    /// `part` (the object's `spec` or `status`, named by `field`) without
    /// the refused fields; `part` itself when none apply or the rest does
    /// not read back (a refused field the types require).
    pub fn without<T: Serialize + DeserializeOwned + Clone>(&self, field: &str, part: &T) -> T {
        if self.is_empty() {
            return part.clone();
        }
        let Ok(value) = serde_json::to_value(part) else {
            return part.clone();
        };
        let mut object = serde_json::json!({ field: value });
        self.strip(&mut object);
        serde_json::from_value(object[field].take()).unwrap_or_else(|_| part.clone())
    }
}

/// The paths an apply refusal names: `.spec.summary.p2pBottleneck` in
/// "…: .spec.summary.p2pBottleneck: field not declared in schema", one per
/// field when several are. Only `spec` and `status` paths: the agent never
/// leaves out anything else.
pub fn undeclared_fields(message: &str) -> BTreeSet<String> {
    message
        .match_indices(UNDECLARED)
        .filter_map(|(at, _)| message[..at].split_whitespace().last())
        .filter(|p| p.starts_with(".spec.") || p.starts_with(".status."))
        .map(str::to_string)
        .collect()
}

#[derive(Debug, PartialEq)]
enum Segment {
    Field(String),
    /// `[0]`, `[a=0,b=1]`: an element of a list. A field the schema lacks
    /// is lacking in every element, so every element loses it.
    Element,
}

fn segments(path: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            out.push(Segment::Element);
            rest = after.split_once(']').map_or("", |(_, r)| r);
        } else {
            let body = rest.strip_prefix('.').unwrap_or(rest);
            let end = body.find(['.', '[']).unwrap_or(body.len());
            out.push(Segment::Field(body[..end].to_string()));
            rest = &body[end..];
        }
    }
    out
}

fn remove(value: &mut Value, path: &[Segment]) {
    match path {
        [Segment::Field(name)] => {
            if let Some(map) = value.as_object_mut() {
                map.remove(name);
            }
        }
        [Segment::Field(name), rest @ ..] => {
            if let Some(inner) = value.get_mut(name) {
                remove(inner, rest);
            }
        }
        [Segment::Element, rest @ ..] if !rest.is_empty() => {
            for item in value.as_array_mut().into_iter().flatten() {
                remove(item, rest);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    // As kube-apiserver 1.34 words it (agent/tests/older_crd.rs meets it).
    const ONE: &str = "failed to create typed patch object (/n1; gputopo.dev/v1alpha1, Kind=GpuTopology): .spec.summary.p2pBottleneck: field not declared in schema";

    #[test]
    fn the_refused_fields_are_read_from_the_error() {
        assert_eq!(
            undeclared_fields(ONE).into_iter().collect::<Vec<_>>(),
            [".spec.summary.p2pBottleneck"]
        );
        let two = "failed to create typed patch object (/n1; …): errors:\n  .spec.links[0].hops: field not declared in schema\n  .status.podResources.x: field not declared in schema";
        assert_eq!(
            undeclared_fields(two).into_iter().collect::<Vec<_>>(),
            [".spec.links[0].hops", ".status.podResources.x"]
        );
        // Another 500 names nothing; metadata is never left out.
        assert!(undeclared_fields("etcdserver: request timed out").is_empty());
        assert!(undeclared_fields(".metadata.foo: field not declared in schema").is_empty());
    }

    #[test]
    fn refused_fields_are_left_out_of_every_list_element_and_nothing_else() {
        let mut refused = RefusedFields::default();
        let message = format!("{ONE}\n  .spec.links[a=0,b=1].hops: field not declared in schema");
        assert_eq!(refused.learn(&message, at(0)).len(), 2);
        assert!(refused.learn(ONE, at(5)).is_empty(), "known already");
        let mut object = json!({
            "metadata": {"name": "n1"},
            "spec": {
                "summary": {"gpuCount": 2, "p2pBottleneck": "NV12"},
                "links": [{"a": 0, "b": 1, "hops": 1}, {"a": 0, "b": 2, "hops": 2}]
            }
        });
        refused.strip(&mut object);
        assert_eq!(
            object,
            json!({
                "metadata": {"name": "n1"},
                "spec": {
                    "summary": {"gpuCount": 2},
                    "links": [{"a": 0, "b": 1}, {"a": 0, "b": 2}]
                }
            })
        );
    }

    #[test]
    fn refused_fields_are_tried_again_after_an_hour() {
        let mut refused = RefusedFields::default();
        refused.learn(ONE, at(1000));
        refused.expire(at(1000 + 3599));
        assert!(!refused.is_empty());
        refused.expire(at(1000 + 3600));
        assert!(refused.is_empty());
        // Learnt again: the hour starts again.
        refused.learn(ONE, at(9000));
        refused.expire(at(9000 + 60));
        assert!(!refused.is_empty());
    }
}
