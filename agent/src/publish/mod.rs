//! Publishing to the API server: read the Node and the `GpuTopology`, plan
//! (pure: [`plan`] for labels and the object, [`status`] for the status),
//! write only what changed. Every write is server-side apply under the
//! agent's own field manager, inside a short `tracing` span. With link
//! devices on, the node's ResourceSlice of gputopo's link devices too
//! ([`links`]). Against a CRD older than the agent, the fields it refuses
//! are left out ([`skew`]).

pub mod links;
pub mod plan;
pub mod skew;
pub mod status;

use gputopo_api::{GpuTopology, GpuTopologySpec, GpuTopologyStatus};
use gputopo_topology::dra_slice::{LINK_DRIVER, slice_name};
use gputopo_topology::labels::{LabelOptions, node_labels};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
pub use plan::Observed;
use plan::{
    FIELD_MANAGER, gfd_labels_held_by_others, labels_managed_by, plan_labels, plan_topology,
};
use serde_json::{Value, json};
use skew::RefusedFields;
use std::time::Duration;
use tracing::{Instrument, info, info_span, warn};

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("reading Node {node}: {source}")]
    ReadNode { node: String, source: kube::Error },
    #[error("Node {node} has no uid; cannot own its GpuTopology")]
    NoUid { node: String },
    #[error("applying labels to Node {node}: {source}")]
    ApplyLabels { node: String, source: kube::Error },
    #[error("reading GpuTopology {node}: {source}")]
    ReadTopology { node: String, source: kube::Error },
    #[error("applying GpuTopology {node}: {source}")]
    ApplyTopology { node: String, source: kube::Error },
    #[error("applying GpuTopology {node} status: {source}")]
    ApplyStatus { node: String, source: kube::Error },
    #[error("reading the ResourceSlice of link devices {name}: {source}")]
    ReadLinkSlice { name: String, source: kube::Error },
    #[error("applying the ResourceSlice of link devices {name}: {source}")]
    ApplyLinkSlice { name: String, source: kube::Error },
    #[error(
        "the API server serves no resource.k8s.io/v1 ResourceSlices (is DRA off?); --link-devices needs them, or turn it off"
    )]
    DraNotServed,
    #[error("serializing GpuTopology {node}: {source}")]
    Serialize {
        node: String,
        source: serde_json::Error,
    },
}

/// What one publish wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Writes {
    pub labels: bool,
    pub topology: bool,
    pub status: bool,
    pub link_slice: bool,
}

impl Writes {
    pub fn count(&self) -> u32 {
        u32::from(self.labels)
            + u32::from(self.topology)
            + u32::from(self.status)
            + u32::from(self.link_slice)
    }
}

/// How often `podResources.observedAt` is refreshed when nothing changed,
/// unless [`Publisher::with_heartbeat`] says otherwise.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(300);

pub struct Publisher {
    client: kube::Client,
    node: String,
    labels: LabelOptions,
    heartbeat: Duration,
    /// Publish the node's link devices (`--link-devices`).
    link_devices: bool,
    /// The labels last left to another writer: said once, when it changes.
    yielded: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// `GpuTopology` fields the API server's CRD does not declare.
    refused: std::sync::Mutex<RefusedFields>,
}

impl Publisher {
    pub fn new(client: kube::Client, node: String, labels: LabelOptions) -> Publisher {
        Publisher {
            client,
            node,
            labels,
            heartbeat: DEFAULT_HEARTBEAT,
            link_devices: false,
            yielded: std::sync::Mutex::default(),
            refused: std::sync::Mutex::default(),
        }
    }

    /// Refresh `podResources.observedAt` at least this often.
    pub fn with_heartbeat(mut self, heartbeat: Duration) -> Publisher {
        self.heartbeat = heartbeat;
        self
    }

    /// Publish the node's ResourceSlice of link devices too.
    pub fn with_link_devices(mut self, on: bool) -> Publisher {
        self.link_devices = on;
        self
    }

    /// Applies the node's slice of link devices unless it already says `spec`.
    async fn publish_link_slice(
        &self,
        spec: &gputopo_api::GpuTopologySpec,
        uid: &str,
    ) -> Result<bool, PublishError> {
        let slices: Api<ResourceSlice> = Api::all(self.client.clone());
        let name = slice_name(&self.node, LINK_DRIVER);
        let current =
            slices
                .get_opt(&name)
                .await
                .map_err(|source| PublishError::ReadLinkSlice {
                    name: name.clone(),
                    source,
                })?;
        let Some(desired) = links::plan_link_slice(current.as_ref(), &self.node, uid, spec) else {
            return Ok(false);
        };
        slices
            .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&desired))
            .instrument(info_span!("apply_link_slice", node = %self.node, devices = desired["spec"]["devices"].as_array().map_or(0, Vec::len)))
            .await
            .map_err(|source| match source {
                // The object is applied (created if missing): a 404 says the resource is not served.
                kube::Error::Api(ref s) if s.code == 404 => PublishError::DraNotServed,
                source => PublishError::ApplyLinkSlice { name, source },
            })?;
        Ok(true)
    }

    /// Logs, once per change, which GFD-compatible labels another writer
    /// holds and the agent therefore leaves alone.
    fn say_yielded(&self, now: &std::collections::BTreeSet<String>) {
        let mut last = self
            .yielded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *last != *now {
            if !now.is_empty() {
                info!(
                    node = %self.node,
                    labels = ?now,
                    "another writer (GPU Feature Discovery?) manages these labels; leaving them to it"
                );
            }
            *last = now.clone();
        }
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, RefusedFields> {
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Server-side applies `object` (its status with `status`), less the
    /// fields the CRD refuses; a refusal naming fields not known before
    /// is learnt and the apply made again without them (see [`skew`]).
    async fn apply_known(
        &self,
        api: &Api<GpuTopology>,
        mut object: Value,
        status: bool,
        now: &Time,
    ) -> Result<(), kube::Error> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let name = self.node.as_str();
        self.refused().strip(&mut object);
        let first = if status {
            api.patch_status(name, &params, &Patch::Apply(&object))
                .await
        } else {
            api.patch(name, &params, &Patch::Apply(&object)).await
        };
        let refusal = match first {
            Err(kube::Error::Api(e)) if e.code == 500 => e,
            other => return other.map(drop),
        };
        let learnt = self.refused().learn(&refusal.message, now.0);
        if learnt.is_empty() {
            return Err(kube::Error::Api(refusal));
        }
        warn!(
            node = %self.node,
            fields = ?learnt,
            "the GpuTopology CRD is older than this agent and refuses these fields; publishing without them until the CRD is upgraded (docs/upgrades.md)"
        );
        self.refused().strip(&mut object);
        if status {
            api.patch_status(name, &params, &Patch::Apply(&object))
                .await
                .map(drop)
        } else {
            api.patch(name, &params, &Patch::Apply(&object))
                .await
                .map(drop)
        }
    }

    /// Brings the `GpuTopology` (object, then status) in line with
    /// `observed`; says which of the two it wrote.
    async fn publish_topology(
        &self,
        observed: &Observed<'_>,
        uid: &str,
        now: &Time,
    ) -> Result<(bool, bool), PublishError> {
        let node_name = &self.node;
        let topologies: Api<GpuTopology> = Api::all(self.client.clone());
        let (mut topology, mut status_written) = (false, false);
        let current =
            topologies
                .get_opt(node_name)
                .await
                .map_err(|source| PublishError::ReadTopology {
                    node: node_name.clone(),
                    source,
                })?;
        // Compared and written without what the CRD refuses, so that a
        // quiet node writes nothing against an older CRD too.
        let refused = {
            let mut refused = self.refused();
            refused.expire(now.0);
            refused.clone()
        };
        let known_spec: GpuTopologySpec = refused.without("spec", observed.spec);
        let known = Observed {
            spec: &known_spec,
            ..*observed
        };
        let plan = plan_topology(current.as_ref(), &known, uid, now, self.heartbeat);
        if let Some(object) = plan.object {
            let mut value =
                serde_json::to_value(&object).map_err(|source| PublishError::Serialize {
                    node: node_name.clone(),
                    source,
                })?;
            // Status goes through its own subresource; apply only metadata and spec here.
            if let Some(map) = value.as_object_mut() {
                map.remove("status");
            }
            self.apply_known(&topologies, value, false, now)
                .instrument(info_span!("apply_gpu_topology", node = %node_name, gpus = observed.spec.gpus.len()))
                .await
                .map_err(|source| PublishError::ApplyTopology {
                    node: node_name.clone(),
                    source,
                })?;
            topology = true;
        }
        let stored_status = current.as_ref().and_then(|c| c.status.as_ref());
        if let Some(status) = plan
            .status
            .filter(|s| Some(&refused.without::<GpuTopologyStatus>("status", s)) != stored_status)
        {
            let patch = json!({
                "apiVersion": "gputopo.dev/v1alpha1",
                "kind": "GpuTopology",
                "status": status,
            });
            self.apply_known(&topologies, patch, true, now)
                .instrument(info_span!(
                    "apply_gpu_topology_status",
                    node = %node_name,
                    allocations = status.allocations.len()
                ))
                .await
                .map_err(|source| PublishError::ApplyStatus {
                    node: node_name.clone(),
                    source,
                })?;
            status_written = true;
        }
        Ok((topology, status_written))
    }

    /// Brings the Node's labels and its `GpuTopology` in line with `observed`.
    pub async fn publish(
        &self,
        observed: &Observed<'_>,
        now: Time,
    ) -> Result<Writes, PublishError> {
        let node_name = &self.node;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let mut writes = Writes::default();

        let node = nodes
            .get(node_name)
            .await
            .map_err(|source| PublishError::ReadNode {
                node: node_name.clone(),
                source,
            })?;
        let uid = node
            .metadata
            .uid
            .clone()
            .ok_or_else(|| PublishError::NoUid {
                node: node_name.clone(),
            })?;
        let entries = node.metadata.managed_fields.as_deref().unwrap_or_default();
        let managed = labels_managed_by(entries, FIELD_MANAGER);
        let yielded = gfd_labels_held_by_others(entries);
        self.say_yielded(&yielded);
        let current = node.metadata.labels.unwrap_or_default();
        let desired = node_labels(observed.spec, self.labels);
        if let Some(labels) = plan_labels(&current, &managed, &desired, &yielded) {
            let patch = json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node_name, "labels": labels},
            });
            nodes
                .patch(node_name, &apply, &Patch::Apply(&patch))
                .instrument(
                    info_span!("apply_node_labels", node = %node_name, labels = labels.len()),
                )
                .await
                .map_err(|source| PublishError::ApplyLabels {
                    node: node_name.clone(),
                    source,
                })?;
            writes.labels = true;
        }

        (writes.topology, writes.status) = self.publish_topology(observed, &uid, &now).await?;
        if self.link_devices {
            writes.link_slice = self.publish_link_slice(observed.spec, &uid).await?;
        }
        if writes.count() > 0 {
            info!(node = %node_name, ?writes, "published");
        }
        Ok(writes)
    }
}
