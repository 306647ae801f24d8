//! Label and annotation keys of the contract (`docs/contract/labels.md`,
//! `docs/contract/pod-requests.md`).

/// API group and version of [`crate::GpuTopology`].
pub const GROUP: &str = "gputopo.dev";
pub const VERSION: &str = "v1alpha1";
/// The prefix of every annotation a pod may carry, and of the labels the agent owns.
pub const PREFIX: &str = "gputopo.dev/";

/// The extended resource a pod's GPU count is read from on NVIDIA nodes (and
/// on nodes whose vendor is not known).
pub const RESOURCE_GPU: &str = "nvidia.com/gpu";
/// The extended resource AMD's device plugin advertises.
pub const RESOURCE_GPU_AMD: &str = "amd.com/gpu";
/// Every GPU resource a pod may ask for.
pub const GPU_RESOURCES: [&str; 2] = [RESOURCE_GPU, RESOURCE_GPU_AMD];

/// Node labels the agent writes.
pub mod node {
    /// Same meaning as NVIDIA GPU Feature Discovery.
    pub const GPU_COUNT: &str = "nvidia.com/gpu.count";
    pub const GPU_PRODUCT: &str = "nvidia.com/gpu.product";
    /// Per-GPU memory in MiB, as GFD writes it.
    pub const GPU_MEMORY: &str = "nvidia.com/gpu.memory";
    /// `NV<k>`: every GPU pair joined by at least k NVLinks; absent otherwise.
    pub const NVLINK_P2P_LEVEL: &str = "nvidia.com/nvlink.p2p.level";
    pub const NVLINK_LARGEST_ISLAND: &str = "gputopo.dev/nvlink.largest-island";
    pub const NVLINK_ALL_TO_ALL: &str = "gputopo.dev/nvlink.all-to-all";
    pub const NUMA_NODES: &str = "gputopo.dev/numa-nodes";
    /// `nvswitch` | `nvlink-mesh` | `nvlink-bridge` | `pcie` | `xgmi`.
    pub const INTERCONNECT: &str = "gputopo.dev/interconnect";
    /// `nvidia` | `amd`.
    pub const GPU_VENDOR: &str = "gputopo.dev/gpu-vendor";
    /// AMD: GPUs in the largest XGMI hive. gputopo's own domain: AMD's node
    /// labeller owns `amd.com/gpu.{device-id,product-name,driver-version,
    /// driver-src-version,vram,simd-count,cu-count,firmware,family}`.
    pub const XGMI_LARGEST_HIVE: &str = "gputopo.dev/xgmi.largest-hive";
    /// AMD: `true` when every GPU pair has a direct XGMI link.
    pub const XGMI_ALL_TO_ALL: &str = "gputopo.dev/xgmi.all-to-all";
    /// The multi-node NVLink domain (GB200/GB300 NVL72) every GPU of the node
    /// registered in, as GFD writes it: `<cluster UUID>.<clique id>`. Absent
    /// unless all the node's GPUs are in one clique. The `gpu-clique` network tier.
    pub const GPU_CLIQUE: &str = "nvidia.com/gpu.clique";

    /// The labels that carry GFD's meaning; an operator running GFD turns these off.
    pub const GFD_COMPATIBLE: [&str; 4] = [GPU_COUNT, GPU_PRODUCT, GPU_MEMORY, GPU_CLIQUE];
    /// Every label the agent may write, and so the only ones it ever removes.
    pub const OWNED: [&str; 12] = [
        GPU_COUNT,
        GPU_PRODUCT,
        GPU_MEMORY,
        GPU_CLIQUE,
        NVLINK_P2P_LEVEL,
        NVLINK_LARGEST_ISLAND,
        NVLINK_ALL_TO_ALL,
        NUMA_NODES,
        INTERCONNECT,
        GPU_VENDOR,
        XGMI_LARGEST_HIVE,
        XGMI_ALL_TO_ALL,
    ];

    /// The kubelet Topology Manager policy, where an operator labels nodes with it.
    pub const TOPOLOGY_MANAGER_POLICY: &str = "gputopo.dev/topology-manager-policy";
    /// Default network tiers, outermost first.
    pub const SPINE: &str = "gputopo.dev/spine";
    pub const LEAF: &str = "gputopo.dev/leaf";
    /// Optional cost signal for scoring.
    pub const COST_PER_HOUR: &str = "gputopo.dev/cost-per-hour";
    /// The GPUs' generation (`1..=99`), for products the scheduler's table
    /// does not know (`gputopo_api::generation`); set by the operator.
    pub const GPU_GENERATION: &str = "gputopo.dev/gpu-generation";
}

/// Pod annotations (all under `gputopo.dev/`) and the seed design's aliases.
pub mod pod {
    pub const MIN_NVLINK_LEVEL: &str = "gputopo.dev/min-nvlink-level";
    pub const COLLECTIVE: &str = "gputopo.dev/collective";
    pub const WORKLOAD: &str = "gputopo.dev/workload";
    pub const PLACEMENT_STRATEGY: &str = "gputopo.dev/placement-strategy";
    pub const PREFERRED_DOMAIN: &str = "gputopo.dev/preferred-domain";
    pub const GPU_MEMORY: &str = "gputopo.dev/gpu-memory";
    pub const LATENCY_SENSITIVE: &str = "gputopo.dev/latency-sensitive";
    pub const GPU_SHARE: &str = "gputopo.dev/gpu-share";
    pub const CHECKPOINT_TIME: &str = "gputopo.dev/checkpoint-time";
    pub const EXPECTED_COMPLETION: &str = "gputopo.dev/expected-completion";
    pub const NETWORK_BANDWIDTH: &str = "gputopo.dev/network-bandwidth";
    pub const GPU_COUNT: &str = "gputopo.dev/gpu-count";
    /// `"true"`: the pod's gang may span GPU models (by default it keeps to
    /// one, so that no member runs the data-parallel step at a slower
    /// model's speed).
    pub const GANG_MIXED_MODELS: &str = "gputopo.dev/gang-mixed-models";
    /// Gangs for users without the PodGroup CRD.
    pub const GANG: &str = "gputopo.dev/gang";
    pub const GANG_SIZE: &str = "gputopo.dev/gang-size";
    /// `"false"`: the pod is not made part of a gang derived from its
    /// controller's labels (JobSet, LeaderWorkerSet).
    pub const DERIVE_GANG: &str = "gputopo.dev/derive-gang";
    /// A gang's structure (docs/contract/gang-structure.md): its domain,
    /// required or preferred, and its slices, each value a node label key.
    pub const GANG_REQUIRED_TOPOLOGY: &str = "gputopo.dev/gang-required-topology";
    pub const GANG_PREFERRED_TOPOLOGY: &str = "gputopo.dev/gang-preferred-topology";
    pub const GANG_SLICE_SIZE: &str = "gputopo.dev/gang-slice-size";
    pub const GANG_SLICE_REQUIRED_TOPOLOGY: &str = "gputopo.dev/gang-slice-required-topology";
    pub const GANG_SLICE_PREFERRED_TOPOLOGY: &str = "gputopo.dev/gang-slice-preferred-topology";

    /// Written by the scheduler on a pod it binds.
    pub const ASSIGNED_GPUS: &str = "gputopo.dev/assigned-gpus";
    pub const ASSIGNED_GPU_UUIDS: &str = "gputopo.dev/assigned-gpu-uuids";

    /// The scheduler-plugins PodGroup label (Kubeflow, JobSet, LeaderWorkerSet).
    pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

    /// What JobSet's controller puts on the pods it creates (a derived gang).
    pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
    pub const JOBSET_REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
    /// What LeaderWorkerSet's controller puts on the pods it creates.
    pub const LWS_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
    pub const LWS_GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
    pub const LWS_SIZE_ANNOTATION: &str = "leaderworkerset.sigs.k8s.io/size";

    /// The seed design's keys, accepted as aliases: (alias, canonical key).
    pub const ALIASES: [(&str, &str); 5] = [
        ("topology.scheduler/gpu-count", GPU_COUNT),
        ("topology.scheduler/preferred-domain", PREFERRED_DOMAIN),
        ("topology.scheduler/placement-strategy", PLACEMENT_STRATEGY),
        ("topology.scheduler/latency-sensitive", LATENCY_SENSITIVE),
        ("topology.scheduler/network-bandwidth", NETWORK_BANDWIDTH),
    ];
}
