//! The upstream PodGroup's topology constraint (KEP-5732,
//! `spec.schedulingConstraints.topology[0].key`, Kubernetes 1.37 with the
//! `TopologyAwareWorkloadScheduling` feature): every member inside one
//! domain of that node label, put on each member as a required domain so
//! that the gang decision reads it like the members' own annotations.

use super::{GangObjects, UpstreamPodGroup};
use gputopo_api::{GangRef, TierKey};
use gputopo_scheduler_core::pod::PendingPod;

/// Where the requirement comes from, in messages.
pub const FROM: &str = "PodGroup spec.schedulingConstraints.topology";

/// The members and the PodGroup state different domains.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "PodGroup {namespace}/{name} (scheduling.k8s.io) requires one domain of {key} ({FROM}), but member {member} states {stated}; state the gang's domain once"
)]
pub struct TopologyConflict {
    pub namespace: String,
    pub name: String,
    pub key: String,
    pub member: String,
    pub stated: String,
}

impl GangObjects {
    /// The node label key the gang's PodGroup requires one domain of, if
    /// the gang is an upstream PodGroup that states one.
    pub fn required_topology(&self, namespace: &str, gang: &GangRef) -> Option<String> {
        let GangRef::SchedulingGroup { name } = gang else {
            return None;
        };
        let group = self.upstream_groups.iter().find(|g| {
            g.metadata.namespace.as_deref() == Some(namespace)
                && g.metadata.name.as_deref() == Some(name)
        })?;
        group_topology(group)
    }
}

fn group_topology(group: &UpstreamPodGroup) -> Option<String> {
    let constraints = group.spec.scheduling_constraints.as_ref()?;
    constraints
        .topology
        .as_ref()?
        .first()
        .map(|t| t.key.clone())
}

/// Puts `key` on every member as its required domain. A member that states
/// another domain, required or preferred, is a conflict.
pub fn require_on_members<'a>(
    namespace: &str,
    name: &str,
    key: &str,
    members: impl Iterator<Item = &'a mut PendingPod>,
) -> Result<(), TopologyConflict> {
    for member in members {
        let s = &mut member.request.gang_structure;
        let stated = match (&s.required, &s.preferred) {
            (Some(r), _) if r.key == key => None,
            (Some(r), _) => Some(format!("required {} ({})", r.key, r.from)),
            (None, Some(p)) => Some(format!("preferred {} ({})", p.key, p.from)),
            (None, None) => None,
        };
        if let Some(stated) = stated {
            return Err(TopologyConflict {
                namespace: namespace.to_string(),
                name: name.to_string(),
                key: key.to_string(),
                member: member.key(),
                stated,
            });
        }
        s.required = Some(TierKey {
            key: key.to_string(),
            from: FROM,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_api::GpuRequest;
    use std::collections::BTreeMap;

    fn member(name: &str, annotations: &[(&str, &str)]) -> PendingPod {
        let a: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let request = GpuRequest::parse(Some(4), &a, &BTreeMap::new()).unwrap();
        PendingPod::new("ml", name, request)
    }

    fn group(key: Option<&str>) -> UpstreamPodGroup {
        let mut spec = serde_json::json!({
            "schedulingPolicy": {"gang": {"minCount": 2}}
        });
        if let Some(key) = key {
            spec["schedulingConstraints"] = serde_json::json!({"topology": [{"key": key}]});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn the_groups_key_becomes_every_members_required_domain() {
        let objects = GangObjects {
            upstream_groups: vec![std::sync::Arc::new(group(Some("example.com/rack")))],
            ..GangObjects::default()
        };
        let gang = GangRef::SchedulingGroup {
            name: "train".into(),
        };
        let key = objects.required_topology("ml", &gang).unwrap();
        assert_eq!(key, "example.com/rack");
        assert_eq!(objects.required_topology("other", &gang), None);
        let mut members = vec![
            member("a", &[]),
            member(
                "b",
                &[("gputopo.dev/gang-required-topology", "example.com/rack")],
            ),
        ];
        require_on_members("ml", "train", &key, members.iter_mut()).unwrap();
        for m in &members {
            assert_eq!(
                m.request
                    .gang_structure
                    .required
                    .as_ref()
                    .map(|t| t.key.as_str()),
                Some("example.com/rack")
            );
        }
        let plain = GangObjects {
            upstream_groups: vec![std::sync::Arc::new(group(None))],
            ..GangObjects::default()
        };
        assert_eq!(plain.required_topology("ml", &gang), None);
    }

    #[test]
    fn a_member_stating_another_domain_is_a_conflict_naming_both() {
        let mut members = [member(
            "a",
            &[(
                "kueue.x-k8s.io/podset-preferred-topology",
                "example.com/block",
            )],
        )];
        let e =
            require_on_members("ml", "train", "example.com/rack", members.iter_mut()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("example.com/rack"), "{text}");
        assert!(text.contains("preferred example.com/block"), "{text}");
        assert!(text.contains("ml/a"), "{text}");
    }
}
