//! What an operator configures: the network tiers, the score weights, the
//! kubelet Topology Manager policy nodes run when they do not say, and the cost
//! signals. Plain data with documented defaults; `SchedulerConfig::default()`
//! is what the scheduler runs without a configuration file.

use crate::pod_constraints::{SpreadConstraint, WhenUnsatisfiable};
use gputopo_api::keys::node as node_keys;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

pub(crate) mod balanced;
mod target_workload;
pub use balanced::{BalancedResources, MAX_RESOURCES as MAX_BALANCED_RESOURCES};
pub use target_workload::{DEFAULT_MODEL_LABEL, DEFAULT_POPULARITY_PCT, PodType, TargetWorkload};

/// The most network tiers a configuration may name.
pub const MAX_TIERS: usize = 8;

/// GPU Feature Discovery's label for a multi-node NVLink domain (GB200/GB300
/// NVL72): the innermost tier when present.
pub const GPU_CLIQUE_LABEL: &str = "nvidia.com/gpu.clique";

/// A configuration value that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("network tiers: {detail}")]
    Tiers { detail: String },
    #[error("unknown network tier preset {name:?}; accepted: {accepted}")]
    UnknownPreset {
        name: String,
        accepted: &'static str,
    },
    #[error("unknown Topology Manager policy {value:?}; accepted: {accepted}")]
    UnknownPolicy {
        value: String,
        accepted: &'static str,
    },
    #[error("memory target {low}..{high} is not a range inside 0..1")]
    MemoryTarget { low: f64, high: f64 },
    #[error("target workload: {detail}")]
    TargetWorkload { detail: String },
    #[error("balanced allocation: {detail}")]
    BalancedResources { detail: String },
    #[error("unknown GPU generation preference {value:?}; accepted: {accepted}")]
    UnknownGenerationPreference {
        value: String,
        accepted: &'static str,
    },
}

/// The network tiers, as node label keys, outermost first (the convention of
/// Kueue's and KAI's `Topology` levels). A node's value under a key names its
/// domain at that tier; a domain is identified by the values of every tier
/// down to it, so two leaves both called `leaf-1` under different spines are
/// different domains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkTiers {
    keys: Vec<String>,
}

const PRESETS: &str = "gputopo (gputopo.dev/spine, gputopo.dev/leaf), topograph (fabric.topograph.run/tier-2..0, accelerator.topograph.run/domain), aws (topology.k8s.aws/network-node-layer-1..3), each optionally followed by +gpu-clique; or gpu-clique alone";

impl NetworkTiers {
    /// Tiers from label keys, outermost first: at least one, at most
    /// [`MAX_TIERS`], each a non-empty key, no repeats.
    pub fn new<I, S>(keys: I) -> Result<NetworkTiers, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        if keys.is_empty() {
            return Err(ConfigError::Tiers {
                detail: "no label key given; name at least one, outermost first".into(),
            });
        }
        if keys.len() > MAX_TIERS {
            return Err(ConfigError::Tiers {
                detail: format!("{} keys given; at most {MAX_TIERS}", keys.len()),
            });
        }
        for (i, key) in keys.iter().enumerate() {
            if key.trim().is_empty() || key.contains(char::is_whitespace) {
                return Err(ConfigError::Tiers {
                    detail: format!("key {} ({key:?}) is not a label key", i + 1),
                });
            }
            if keys[..i].contains(key) {
                return Err(ConfigError::Tiers {
                    detail: format!("{key} is named twice"),
                });
            }
        }
        Ok(NetworkTiers { keys })
    }

    /// `gputopo.dev/spine`, `gputopo.dev/leaf`: the default.
    pub fn gputopo() -> NetworkTiers {
        NetworkTiers {
            keys: vec![node_keys::SPINE.into(), node_keys::LEAF.into()],
        }
    }

    /// NVIDIA Topograph 1.x: `fabric.topograph.run/tier-N` (tier 0 is the switch
    /// nearest the node, so outermost first is tier-2, tier-1, tier-0), then the
    /// accelerator (NVLink) domain `accelerator.topograph.run/domain`.
    pub fn topograph() -> NetworkTiers {
        NetworkTiers {
            keys: vec![
                "fabric.topograph.run/tier-2".into(),
                "fabric.topograph.run/tier-1".into(),
                "fabric.topograph.run/tier-0".into(),
                "accelerator.topograph.run/domain".into(),
            ],
        }
    }

    /// AWS EC2 instance topology: `topology.k8s.aws/network-node-layer-1`
    /// (outermost) to `-3` (the switch nearest the instance).
    pub fn aws() -> NetworkTiers {
        NetworkTiers {
            keys: (1..=3)
                .map(|i| format!("topology.k8s.aws/network-node-layer-{i}"))
                .collect(),
        }
    }

    /// These tiers with GFD's `nvidia.com/gpu.clique` as the innermost.
    pub fn with_gpu_clique(mut self) -> NetworkTiers {
        if !self.keys.iter().any(|k| k == GPU_CLIQUE_LABEL) && self.keys.len() < MAX_TIERS {
            self.keys.push(GPU_CLIQUE_LABEL.into());
        }
        self
    }

    /// A preset by name: `gputopo` (or `default`), `topograph`, `aws`, each
    /// optionally `+gpu-clique`; or `gpu-clique` alone.
    pub fn preset(name: &str) -> Result<NetworkTiers, ConfigError> {
        let (base, clique) = match name.strip_suffix("+gpu-clique") {
            Some(base) => (base, true),
            None => (name, false),
        };
        let tiers = match base {
            "gputopo" | "default" => NetworkTiers::gputopo(),
            "topograph" => NetworkTiers::topograph(),
            "aws" => NetworkTiers::aws(),
            "gpu-clique" if !clique => {
                return Ok(NetworkTiers {
                    keys: vec![GPU_CLIQUE_LABEL.into()],
                });
            }
            _ => {
                return Err(ConfigError::UnknownPreset {
                    name: name.to_string(),
                    accepted: PRESETS,
                });
            }
        };
        Ok(if clique {
            tiers.with_gpu_clique()
        } else {
            tiers
        })
    }

    /// The label keys, outermost first.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl Default for NetworkTiers {
    fn default() -> NetworkTiers {
        NetworkTiers::gputopo()
    }
}

/// The kubelet's Topology Manager policy on a node
/// (`--topology-manager-policy`). Only `single-numa-node` constrains the GPU
/// set here: the kubelet rejects a pod whose devices span NUMA nodes, and a
/// scheduler that ignored it would loop on admission errors (kubernetes#84869).
/// `restricted` is read but treated as `best-effort`: the set already prefers
/// fewer NUMA nodes right after link quality.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TopologyManagerPolicy {
    #[default]
    None = 0,
    BestEffort = 1,
    Restricted = 2,
    SingleNumaNode = 3,
}

const ACCEPT_POLICY: &str = "none | best-effort | restricted | single-numa-node";

impl FromStr for TopologyManagerPolicy {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(TopologyManagerPolicy::None),
            "best-effort" => Ok(TopologyManagerPolicy::BestEffort),
            "restricted" => Ok(TopologyManagerPolicy::Restricted),
            "single-numa-node" => Ok(TopologyManagerPolicy::SingleNumaNode),
            _ => Err(ConfigError::UnknownPolicy {
                value: s.to_string(),
                accepted: ACCEPT_POLICY,
            }),
        }
    }
}

impl fmt::Display for TopologyManagerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TopologyManagerPolicy::None => "none",
            TopologyManagerPolicy::BestEffort => "best-effort",
            TopologyManagerPolicy::Restricted => "restricted",
            TopologyManagerPolicy::SingleNumaNode => "single-numa-node",
        })
    }
}

/// How much each part of a node's score counts (see `score` for the parts).
///
/// A node's score is the weighted mean of the parts that apply to the pod,
/// times 100: a part that does not apply (no `preferred-domain`, no cost
/// labels anywhere in the cluster) drops out of the mean for every node
/// alike, so it neither helps nor hurts. Weights are relative; 0 turns a
/// part off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreWeights {
    /// The GPU set's own score (link quality, what it leaves connected, NUMA
    /// span; the `gpuset` formula). Default 40: the reason this scheduler exists.
    pub gpu_set: u32,
    /// Packing or spreading by how busy the node and its innermost network
    /// domain are, per `placement-strategy`. Default 20.
    pub allocation: u32,
    /// Inference and shared pods: per-GPU memory use after placement near the
    /// [`MemoryTarget`]. Default 15.
    pub memory_fit: u32,
    /// Training away from inference pods; latency-sensitive inference away
    /// from training pods. Default 15.
    pub interference: u32,
    /// The node lies in the pod's `preferred-domain` at some tier. Default 10.
    pub preferred_domain: u32,
    /// Cheaper nodes (`gputopo.dev/cost-per-hour`); spot nodes avoided by
    /// training and gang pods. Default 10.
    pub cost: u32,
    /// Fewer untolerated `PreferNoSchedule` taints. Default 5.
    pub node_preference: u32,
    /// GPU fragmentation against the configured target workload (FGD's
    /// measure, [`crate::fragmentation`]): the node where placement leaves
    /// the least free GPU that the expected pods could not use. Applies only
    /// when [`SchedulerConfig::target_workload`] is set. Default 1000: one
    /// point of the part (it moves in whole points) weighs 10, a quarter of
    /// the GPU-set part's whole range, so what the cluster can still take
    /// comes first and the other parts decide among nodes it rates alike.
    pub fragmentation: u32,
    /// The GPUs' generation, per [`SchedulerConfig::gpu_generation`]: newest
    /// or oldest first. Applies only when that is not `Off` and the
    /// cluster's nodes differ in generation. Default 10.
    pub generation: u32,
    /// kube-scheduler's NodeResourcesBalancedAllocation: placement that
    /// brings the node's cpu and memory use closer. Applies to pods that
    /// request cpu or memory. Default 5.
    pub balanced_allocation: u32,
    /// kube-scheduler's ImageLocality: the pod's images already on the
    /// node. Applies when some node holds one of them. Default 10.
    pub image_locality: u32,
    /// The pod's own preferences, as kube-scheduler scores them: preferred
    /// node affinity, preferred inter-pod affinity and anti-affinity (and
    /// other pods' terms that reach this pod), `ScheduleAnyway` topology
    /// spread; blended by [`PreferenceWeights`]. Applies only to pods that
    /// state such a preference or that other pods' terms can reach. Default
    /// 1000: what the pod asks comes first, as it would under kube-scheduler,
    /// and the GPU parts decide among nodes its preferences rank alike.
    pub pod_preferences: u32,
    /// Best fit at the level of network domains: a GPU pod goes to a
    /// domain already partly in use, the fullest that holds it, before an
    /// untouched one, at every tier (the innermost counting most), so
    /// that whole racks, leaves, spines and GPU cliques stay free for the
    /// gangs that need them. Applies to GPU pods other than `distributed`
    /// ones on clusters where some tier has two domains with GPUs.
    /// Default 15; 0 turns it off.
    pub domain_fit: u32,
    /// Pods asking no GPU (a Ray head, an MPI launcher, a JobSet driver)
    /// to nodes without GPUs when one fits, else to the GPU node with the
    /// fewest GPUs free, so that GPU nodes keep their cpu, memory and pod
    /// slots for the pods that need their GPUs. Applies to pods asking no
    /// GPU, no share, no MIG slice and no ResourceClaim, naming no
    /// `preferred-domain`, on clusters with nodes both with and without
    /// GPUs. Default 40: more than the allocation (at most 20 apart
    /// between two nodes), balanced-allocation (5) and image-locality (10)
    /// parts together, so a node without GPUs wins when the pod fits
    /// there; far below the pod's own preferences (1000). 0 turns it off.
    pub keep_gpus_free: u32,
}

/// PodTopologySpread's default constraints: what a pod that states none is
/// spread by, over the pods of its Services and controller
/// ([`crate::snapshot::WorkloadSelectors`]), as KubeSchedulerConfiguration's
/// `PodTopologySpreadArgs` says.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum SpreadDefaults {
    /// `defaultingType: System` (the default): `kubernetes.io/hostname`
    /// maxSkew 3 and `topology.kubernetes.io/zone` maxSkew 5, both
    /// `ScheduleAnyway`; a node lacking a key still scores.
    #[default]
    System,
    /// `defaultingType: List`: these (no selector: the owners' is used);
    /// none at all turns defaults off.
    List(Vec<SpreadConstraint>),
}

impl SpreadDefaults {
    /// The constraints, each without a selector (the caller sets the
    /// owners'), and whether they are the system's.
    pub fn constraints(&self) -> (Vec<SpreadConstraint>, bool) {
        match self {
            SpreadDefaults::System => {
                let soft = |skew, key: &str| SpreadConstraint {
                    selector: None,
                    ..SpreadConstraint::new(
                        skew,
                        key,
                        WhenUnsatisfiable::ScheduleAnyway,
                        Default::default(),
                    )
                };
                (
                    vec![
                        soft(3, "kubernetes.io/hostname"),
                        soft(5, "topology.kubernetes.io/zone"),
                    ],
                    true,
                )
            }
            SpreadDefaults::List(list) => (list.clone(), false),
        }
    }
}

/// How the pod-preferences part blends kube-scheduler's scores, with
/// kube-scheduler's default plugin weights and `hardPodAffinityWeight`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreferenceWeights {
    /// NodeAffinity's score (preferred node affinity). Default 2.
    pub node_affinity: u32,
    /// InterPodAffinity's score. Default 2.
    pub inter_pod_affinity: u32,
    /// PodTopologySpread's score (`ScheduleAnyway`). Default 2.
    pub topology_spread: u32,
    /// What a bound pod's *required* affinity term matching this pod
    /// weighs in InterPodAffinity's score (0–100). Default 1.
    pub hard_pod_affinity: i32,
}

impl Default for PreferenceWeights {
    fn default() -> PreferenceWeights {
        PreferenceWeights {
            node_affinity: 2,
            inter_pod_affinity: 2,
            topology_spread: 2,
            hard_pod_affinity: 1,
        }
    }
}

impl Default for ScoreWeights {
    fn default() -> ScoreWeights {
        ScoreWeights {
            gpu_set: 40,
            allocation: 20,
            memory_fit: 15,
            interference: 15,
            preferred_domain: 10,
            cost: 10,
            node_preference: 5,
            fragmentation: 1000,
            generation: 10,
            balanced_allocation: 5,
            image_locality: 10,
            pod_preferences: 1000,
            domain_fit: 15,
            keep_gpus_free: 40,
        }
    }
}

/// The share of a GPU's memory that shared and inference pods are packed to:
/// full enough not to waste the GPU, with headroom for KV-cache growth and
/// fragmentation. Default 70 % to 80 %.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryTarget {
    pub low: f64,
    pub high: f64,
}

impl MemoryTarget {
    pub fn new(low: f64, high: f64) -> Result<MemoryTarget, ConfigError> {
        if !(0.0 < low && low <= high && high < 1.0) {
            return Err(ConfigError::MemoryTarget { low, high });
        }
        Ok(MemoryTarget { low, high })
    }

    /// 1 inside the target; falling linearly to 0 at an empty GPU below it
    /// and at a full GPU above it.
    pub fn fit(&self, fill: f64) -> f64 {
        let value = if fill < self.low {
            fill / self.low
        } else if fill <= self.high {
            1.0
        } else {
            (1.0 - fill) / (1.0 - self.high)
        };
        value.clamp(0.0, 1.0)
    }
}

impl Default for MemoryTarget {
    fn default() -> MemoryTarget {
        MemoryTarget {
            low: 0.70,
            high: 0.80,
        }
    }
}

/// Everything configurable about one scheduler.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SchedulerConfig {
    /// Read when a snapshot is built: which labels name network domains.
    pub tiers: NetworkTiers,
    pub weights: ScoreWeights,
    /// How the pod-preferences part blends its scores.
    pub preferences: PreferenceWeights,
    /// Topology spread for pods that state none.
    pub spread_defaults: SpreadDefaults,
    /// The policy of nodes without the `gputopo.dev/topology-manager-policy` label.
    pub default_topology_manager_policy: TopologyManagerPolicy,
    /// `node.kubernetes.io/instance-type` values that are spot capacity, for
    /// providers without a capacity-type label. Read when a snapshot is built.
    pub spot_instance_types: Vec<String>,
    pub memory_target: MemoryTarget,
    /// The pods the cluster is expected to run, for the fragmentation part of
    /// the score; `None` (the default) leaves that part out. Shared so that
    /// cloning a configuration stays cheap.
    pub target_workload: Option<Arc<TargetWorkload>>,
    /// Whether a gang may span GPU models when its pods do not say
    /// (`gputopo.dev/gang-mixed-models`). Off: a data-parallel step runs at
    /// its slowest member's speed, so a gang keeps to one model.
    pub gang_mixed_models: bool,
    /// Which GPU generation the score prefers (`gputopo_api::generation`).
    pub gpu_generation: GenerationPreference,
    /// Whose use the balanced-allocation part compares.
    pub balanced_resources: BalancedResources,
}

/// Whether pods lean to the newest GPUs (training finishes sooner) or the
/// oldest (the newest stay free for the pods that require them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GenerationPreference {
    /// The generation does not count (the default).
    #[default]
    Off,
    Newest,
    Oldest,
}

impl std::str::FromStr for GenerationPreference {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<GenerationPreference, ConfigError> {
        match s {
            "off" => Ok(GenerationPreference::Off),
            "newest" => Ok(GenerationPreference::Newest),
            "oldest" => Ok(GenerationPreference::Oldest),
            other => Err(ConfigError::UnknownGenerationPreference {
                value: other.to_string(),
                accepted: "off | newest | oldest",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_outermost_first() {
        assert_eq!(
            NetworkTiers::default().keys(),
            ["gputopo.dev/spine", "gputopo.dev/leaf"]
        );
        let aws = NetworkTiers::preset("aws+gpu-clique").unwrap();
        assert_eq!(aws.keys()[0], "topology.k8s.aws/network-node-layer-1");
        assert_eq!(aws.keys()[3], GPU_CLIQUE_LABEL);
        let t = NetworkTiers::preset("topograph").unwrap();
        assert_eq!(t.keys()[2], "fabric.topograph.run/tier-0");
        assert_eq!(t.keys()[3], "accelerator.topograph.run/domain");
        let e = NetworkTiers::preset("slurm").unwrap_err();
        assert!(e.to_string().contains("topograph"), "{e}");
        assert!(NetworkTiers::new(["a", "a"]).is_err());
        assert!(NetworkTiers::new(Vec::<String>::new()).is_err());
    }

    #[test]
    fn memory_target_peaks_inside_the_band() {
        let t = MemoryTarget::default();
        assert_eq!(t.fit(0.75), 1.0);
        assert!(t.fit(0.35) < t.fit(0.6) && t.fit(0.6) < 1.0);
        assert!(t.fit(0.95) < t.fit(0.85) && t.fit(1.0) == 0.0);
        assert!(MemoryTarget::new(0.9, 0.8).is_err());
    }

    #[test]
    fn policies_parse_kubelet_names() {
        assert_eq!(
            "single-numa-node".parse::<TopologyManagerPolicy>(),
            Ok(TopologyManagerPolicy::SingleNumaNode)
        );
        let e = "strict".parse::<TopologyManagerPolicy>().unwrap_err();
        assert!(e.to_string().contains("single-numa-node"));
    }
}
