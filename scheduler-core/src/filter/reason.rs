//! Why a node was rejected: the typed [`FilterReason`] with its messages, and
//! the `Copy` [`Rejection`] the hot path records until a message is wanted.

use crate::gpuset::{NoFitReason, ShapeError};
use crate::inter_pod::AffinityRefusal;
use crate::pod_constraints::{HostPort, NodeFeatures};
use crate::resources::{self, format_amount};
use crate::selector::Taint;
use crate::spread::SpreadRefusal;
use crate::volumes::VolumeRefusal;
use gputopo_api::{GpuShare, GpuVendor};
use std::fmt;

/// Why a node cannot take the pod. `Display` gives the node's detail;
/// [`FilterReason::summaries`] the phrases the aggregated message counts.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterReason {
    Unschedulable,
    NodeName {
        requested: String,
    },
    UntoleratedTaint(Taint),
    NodeAffinity,
    /// Node features the pod needs that the node does not declare
    /// (NodeDeclaredFeatures).
    NodeFeatures(NodeFeatures),
    /// Host ports the pod asks that a bound pod takes.
    HostPorts(Vec<HostPort>),
    /// Topology spread constraints.
    TopologySpread(SpreadRefusal),
    /// Inter-pod affinity or anti-affinity.
    InterPodAffinity(AffinityRefusal),
    /// The volume plugins; `claim` names the claim of a refusal that
    /// holds on every node (empty for per-node ones).
    Volume {
        refusal: VolumeRefusal,
        claim: String,
    },
    /// Resources short: each with what was asked and what is free.
    Insufficient(Vec<Shortfall>),
    /// The pod wants GPUs; the node has none.
    NoGpus,
    /// The pod asks one vendor's GPUs (`amd.com/gpu`), the node has the other's.
    GpuVendor {
        pod: GpuVendor,
        node: GpuVendor,
    },
    /// The node's `GpuTopology` could not be used.
    InvalidTopology(ShapeError),
    /// The pod asks something (`min-nvlink-level`, `gpu-memory`,
    /// single-numa-node) that only a `GpuTopology` could vouch for.
    UnknownTopology {
        needs: &'static str,
    },
    /// The pod asks something a known GPU set must vouch for, and pods on
    /// the node (`holders`) hold GPUs that neither their record nor the
    /// node's report names, so which GPUs are free is not known.
    UncertainGpus {
        needs: &'static str,
        holders: Vec<String>,
    },
    /// No whole-GPU set fits.
    GpuSet(NoFitReason),
    /// No GPU has room for the pod's share.
    NoSharedGpu {
        share: GpuShare,
        /// Per-GPU memory floor the pod asks (`gpu-memory`).
        min_memory_mib: Option<u64>,
        /// The most any eligible GPU could still give, in ‰ of a GPU.
        best_free_milli: u32,
        /// The most memory any eligible GPU has unshared, in MiB; `None`
        /// when no eligible GPU's memory is known.
        best_free_mib: Option<u64>,
    },
}

/// One resource a node is short of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// `cpu`, `memory`, `nvidia.com/gpu`, …; `pods` for the pod count.
    pub resource: String,
    pub requested: i64,
    pub free: i64,
}

impl FilterReason {
    /// The node-independent phrases for a `FailedScheduling` message: one per
    /// short resource, else one. Equal phrases count together.
    pub fn summaries(&self) -> Vec<String> {
        match self {
            FilterReason::Insufficient(short) => short
                .iter()
                .map(|s| {
                    if s.resource == resources::PODS {
                        "Too many pods".to_string()
                    } else {
                        format!("Insufficient {}", s.resource)
                    }
                })
                .collect(),
            other => vec![other.summary()],
        }
    }

    fn summary(&self) -> String {
        match self {
            FilterReason::Unschedulable => "node(s) were unschedulable".into(),
            FilterReason::NodeName { .. } => "node(s) didn't match the requested node name".into(),
            FilterReason::UntoleratedTaint(t) => format!("node(s) had untolerated taint {t}"),
            FilterReason::NodeAffinity => {
                "node(s) didn't match Pod's node affinity/selector".into()
            }
            FilterReason::NodeFeatures(_) => "node(s) didn't match Pod's required features".into(),
            FilterReason::HostPorts(_) => {
                "node(s) didn't have free ports for the requested pod ports".into()
            }
            FilterReason::TopologySpread(r) => r.summary().into(),
            FilterReason::InterPodAffinity(r) => r.summary().into(),
            FilterReason::Volume { refusal, claim } => refusal.summary(claim),
            FilterReason::Insufficient(_) => "Insufficient resources".into(),
            FilterReason::NoGpus => "node(s) had no GPUs".into(),
            FilterReason::GpuVendor { pod, .. } => {
                format!("node(s) had no {} GPUs", pod.resource())
            }
            FilterReason::InvalidTopology(_) => "node(s) had an unusable GpuTopology".into(),
            FilterReason::UnknownTopology { needs } => {
                format!("node(s) had no GpuTopology to check {needs}")
            }
            FilterReason::UncertainGpus { needs, .. } => {
                format!("node(s) had GPUs held by unknown index, so nothing could check {needs}")
            }
            FilterReason::GpuSet(r) => r.summary(),
            FilterReason::NoSharedGpu {
                share,
                min_memory_mib,
                ..
            } => {
                let what = match share {
                    GpuShare::Milli(m) => format!("room for a {} share", milli_text(*m)),
                    GpuShare::MemoryMiB(mib) => format!("{mib} MiB free to share"),
                };
                match min_memory_mib {
                    Some(min) => format!("no GPU of {min} MiB with {what}"),
                    None => format!("no GPU with {what}"),
                }
            }
        }
    }
}

/// A volume refusal as one node's detail.
fn volume_detail(refusal: VolumeRefusal, claim: &str) -> String {
    match refusal {
        VolumeRefusal::NodeConflict => {
            "a PersistentVolume the pod's claims are bound to has nodeAffinity that excludes the node".into()
        }
        VolumeRefusal::BindConflict => "a WaitForFirstConsumer claim of the pod finds no available PersistentVolume reaching the node, and its class cannot provision one there".into(),
        VolumeRefusal::ZoneConflict => {
            "a PersistentVolume the pod's claims are bound to is in another zone or region".into()
        }
        VolumeRefusal::TooManyVolumes => "the node's CSINode allows no more volumes of a CSI driver the pod's claims use".into(),
        VolumeRefusal::DiskConflict => "a pod on the node mounts one of the pod's GCE PD, EBS, iSCSI or RBD disks, and not both read-only".into(),
        other => other.summary(claim),
    }
}

/// `0.25` for 250 ‰.
fn milli_text(milli: u32) -> String {
    let text = format!("{}.{:03}", milli / 1000, milli % 1000);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl fmt::Display for FilterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterReason::Unschedulable => {
                f.write_str("node is cordoned (spec.unschedulable) and the pod does not tolerate node.kubernetes.io/unschedulable:NoSchedule")
            }
            FilterReason::NodeName { requested } => {
                write!(f, "the pod's spec.nodeName is {requested}")
            }
            FilterReason::UntoleratedTaint(t) => write!(
                f,
                "taint {}={}:{} is not tolerated",
                t.key,
                t.value,
                t.effect.as_str()
            ),
            FilterReason::NodeAffinity => {
                f.write_str("the node's labels do not match the pod's nodeSelector or required node affinity")
            }
            FilterReason::NodeFeatures(missing) => {
                let names: Vec<&str> = missing.names().collect();
                write!(
                    f,
                    "the node's kubelet does not declare {} (status.declaredFeatures), which the pod's spec needs",
                    names.join(", ")
                )
            }
            FilterReason::HostPorts(ports) => {
                f.write_str("host port")?;
                if ports.len() > 1 {
                    f.write_str("s")?;
                }
                for (i, p) in ports.iter().enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(f, "{sep}{}/{}", p.port, p.protocol)?;
                    if let Some(ip) = &p.ip {
                        write!(f, " on {ip}")?;
                    }
                }
                f.write_str(" already taken by a pod on the node")
            }
            FilterReason::TopologySpread(SpreadRefusal::MissingLabel) => f.write_str(
                "the node lacks the topology key of one of the pod's DoNotSchedule topologySpreadConstraints",
            ),
            FilterReason::TopologySpread(SpreadRefusal::Skew) => f.write_str(
                "placing the pod here would exceed maxSkew of one of its DoNotSchedule topologySpreadConstraints",
            ),
            FilterReason::InterPodAffinity(AffinityRefusal::AffinityRules) => f.write_str(
                "no pod the pod's required podAffinity selects is in the node's topology domain (or the node lacks a term's topologyKey)",
            ),
            FilterReason::InterPodAffinity(AffinityRefusal::AntiAffinityRules) => f.write_str(
                "a pod the pod's required podAntiAffinity selects is in the node's topology domain",
            ),
            FilterReason::InterPodAffinity(AffinityRefusal::ExistingAntiAffinity) => f.write_str(
                "a pod in the node's topology domain has required podAntiAffinity that selects this pod",
            ),
            FilterReason::Volume { refusal, claim } => f.write_str(&volume_detail(*refusal, claim)),
            FilterReason::Insufficient(short) => {
                f.write_str("insufficient ")?;
                for (i, s) in short.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if s.resource == resources::PODS {
                        write!(f, "pods (no room for one more)")?;
                    } else {
                        write!(
                            f,
                            "{}: requested {}, free {}",
                            s.resource,
                            format_amount(&s.resource, s.requested),
                            format_amount(&s.resource, s.free.max(0))
                        )?;
                    }
                }
                Ok(())
            }
            FilterReason::NoGpus => f.write_str("the pod requests GPUs and the node has none"),
            FilterReason::GpuVendor { pod, node } => write!(
                f,
                "the pod asks {} but the node's GPUs are {} ({})",
                pod.resource(),
                node.as_str(),
                node.resource()
            ),
            FilterReason::InvalidTopology(e) => write!(f, "the node's GpuTopology cannot be used: {e}"),
            FilterReason::UnknownTopology { needs } => write!(
                f,
                "the node has GPUs but no GpuTopology, so nothing can check the pod's {needs}"
            ),
            FilterReason::UncertainGpus { needs, holders } => write!(
                f,
                "which of the node's GPUs are free is not known ({} hold GPUs that neither their gputopo record nor the node's report names; GPUs there are handed out by count), so nothing can check the pod's {needs}",
                holders.join(", ")
            ),
            FilterReason::GpuSet(r) => write!(f, "{r}"),
            FilterReason::NoSharedGpu {
                share,
                best_free_milli,
                best_free_mib,
                ..
            } => {
                write!(f, "{}; ", self.summary())?;
                match (share, best_free_mib) {
                    (GpuShare::MemoryMiB(_), None) => f.write_str(
                        "no eligible GPU's memory is known (the node's GpuTopology gives none), so a memory share cannot be checked",
                    ),
                    (GpuShare::MemoryMiB(_), Some(mib)) => write!(
                        f,
                        "the most any GPU not held whole has unshared is {mib} MiB"
                    ),
                    (GpuShare::Milli(_), _) => write!(
                        f,
                        "the most any GPU not held whole has unshared is {}",
                        milli_text(*best_free_milli)
                    ),
                }
            }
        }
    }
}

/// A rejection as the hot path records it: `Copy`, resolved to a
/// [`FilterReason`] only when a message is wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Rejection {
    Unschedulable,
    NodeName,
    Taint {
        set: u32,
        index: u32,
    },
    NodeAffinity,
    /// The features the pod needs that the node lacks.
    NodeFeatures(NodeFeatures),
    HostPorts,
    Spread(SpreadRefusal),
    InterPod(AffinityRefusal),
    Volume(VolumeRefusal),
    /// Bits 0–4: cpu, memory, ephemeral-storage, pods, nvidia.com/gpu; bit
    /// 5 + i: the pod's i-th extended resource.
    Resources(u64),
    NoGpus,
    GpuVendor(GpuVendor),
    InvalidTopology,
    UnknownTopology(&'static str),
    /// What the pod asks that only known free GPUs could vouch for, on a
    /// node whose free GPUs are not known.
    UncertainGpus(&'static str),
    GpuSet(NoFitReason),
    NoSharedGpu {
        best_free_milli: u32,
        best_free_mib: Option<u64>,
    },
}
