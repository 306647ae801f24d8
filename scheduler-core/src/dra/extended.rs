//! Plain `nvidia.com/gpu` requests served through DRA (KEP-5004): where a
//! DeviceClass declares `extendedResourceName: nvidia.com/gpu`, a pod that
//! only says `nvidia.com/gpu: 4` may be placed on a node whose GPUs are
//! published in ResourceSlices (and not as the node's allocatable
//! resource). The scheduler then creates the pod's special ResourceClaim,
//! allocates it, and records in `status.extendedResourceClaimStatus` which
//! request serves which container, as kube-scheduler does:
//!
//! * the claim: `generateName: <pod>-extended-resources-`, annotation
//!   `resource.kubernetes.io/extended-resource-claim: "true"`, owned by the
//!   pod (controller, blocking its deletion);
//! * one request per container (init containers first) and extended
//!   resource, named `container-<i>-request-<j>`, `j` the resource's index
//!   among the container's sorted request names, `exactly` the count of the
//!   class;
//! * a claim from an earlier attempt (owned by the pod, with the
//!   annotation) is the pod's: allocated, its devices are fixed.

use super::claim::DraPod;
use super::error::ClaimError;
use gputopo_api::k8s_openapi::api::core::v1::{Container, ContainerExtendedResourceRequest, Pod};
use gputopo_api::k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceClass, DeviceRequest, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use gputopo_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The annotation on the special claim.
pub const EXTENDED_RESOURCE_CLAIM_ANNOTATION: &str =
    "resource.kubernetes.io/extended-resource-claim";

/// The pod's special claim, to create (or found from an earlier attempt).
#[derive(Clone, Debug)]
pub struct ExtendedClaim {
    /// The object to create (`metadata.generateName`), or the existing one.
    pub claim: ResourceClaim,
    /// Whether `claim` exists in the API already.
    pub exists: bool,
    /// For `status.extendedResourceClaimStatus.requestMappings`.
    pub mappings: Vec<ContainerExtendedResourceRequest>,
    /// The claim read, as any other: its plan, for the fit.
    pub dra: DraPod,
}

/// The DeviceClass serving `resource` (the first by name when several do).
pub fn extended_resource_class<'a>(
    classes: impl IntoIterator<Item = &'a DeviceClass>,
    resource: &str,
) -> Option<&'a DeviceClass> {
    classes
        .into_iter()
        .filter(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.extended_resource_name.as_deref())
                == Some(resource)
        })
        .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
}

fn count(container: &Container, resource: &str) -> Option<(usize, u32)> {
    let resources = container.resources.as_ref()?;
    // Requests default to limits for extended resources; read either.
    let list = resources
        .requests
        .as_ref()
        .filter(|r| r.contains_key(resource))
        .or(resources.limits.as_ref())?;
    let q = list.get(resource)?;
    let n: u32 = q.0.parse().ok().filter(|&n| n > 0)?;
    let index = list.keys().position(|k| k == resource)?;
    Some((index, n))
}

/// The pod's special claim for `resource` served by `class`: the one an
/// earlier attempt created (`existing`: claims in the pod's namespace), or
/// a new one. `None` when no container asks for `resource`.
pub fn extended_claim<'a>(
    pod: &Pod,
    resource: &str,
    class: &DeviceClass,
    classes: impl IntoIterator<Item = &'a DeviceClass>,
    existing: impl IntoIterator<Item = &'a ResourceClaim>,
) -> Option<Result<ExtendedClaim, ClaimError>> {
    let spec = pod.spec.as_ref()?;
    let class_name = class.metadata.name.clone().unwrap_or_default();
    let mut requests = Vec::new();
    let mut mappings = Vec::new();
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for (i, c) in containers.enumerate() {
        let Some((j, n)) = count(c, resource) else {
            continue;
        };
        let name = format!("container-{i}-request-{j}");
        requests.push(DeviceRequest {
            name: name.clone(),
            exactly: Some(ExactDeviceRequest {
                device_class_name: class_name.clone(),
                allocation_mode: Some("ExactCount".into()),
                count: Some(i64::from(n)),
                ..ExactDeviceRequest::default()
            }),
            ..DeviceRequest::default()
        });
        mappings.push(ContainerExtendedResourceRequest {
            container_name: c.name.clone(),
            resource_name: resource.to_string(),
            request_name: name,
        });
    }
    if requests.is_empty() {
        return None;
    }
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or("default".into());
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let earlier = existing.into_iter().find(|c| {
        c.metadata.annotations.as_ref().is_some_and(|a| {
            a.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION)
                .map(String::as_str)
                == Some("true")
        }) && c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Pod" && o.uid == uid)
    });
    let (claim, exists) = match earlier {
        Some(c) => (c.clone(), true),
        None => {
            let meta = ObjectMeta {
                generate_name: Some(format!("{pod_name}-extended-resources-")),
                // A stand-in for the name the API server generates.
                name: Some(format!("{pod_name}-extended-resources-")),
                namespace: Some(namespace),
                annotations: Some(
                    [(
                        EXTENDED_RESOURCE_CLAIM_ANNOTATION.to_string(),
                        "true".to_string(),
                    )]
                    .into(),
                ),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod_name,
                    uid,
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            };
            let claim = ResourceClaim {
                metadata: meta,
                spec: Some(ResourceClaimSpec {
                    devices: Some(DeviceClaim {
                        requests: Some(requests),
                        ..DeviceClaim::default()
                    }),
                }),
                status: None,
            };
            (claim, false)
        }
    };
    let key = crate::pod::pod_key(pod);
    Some(
        DraPod::new(&key, &[&claim], classes).map(|dra| ExtendedClaim {
            claim,
            exists,
            mappings,
            dra,
        }),
    )
}
