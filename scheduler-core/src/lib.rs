//! The gputopo scheduling decision, pure and synchronous: no Kubernetes
//! client, no clock, no I/O. Callers (the `gputopo-scheduler` binary, the
//! extender, `gputopo explain` and the simulator) read the cluster and write
//! the outcome; this crate only decides.
//!
//! # Data flow
//!
//! ```text
//! GpuTopology specs, Node and Pod objects, PodGroups, SchedulerConfig
//!   │  snapshot::from_k8s (k8s-openapi objects → NodeInput, BoundPodInput)
//!   ▼
//! Snapshot (snapshot::SnapshotBuilder, or snapshot::LiveSnapshot kept up to date)
//!   │  one NodeShape per distinct topology (gpuset), nodes' GPUs as bit masks,
//!   │  what nodes report of held GPUs (reported)
//!   ▼
//! filter (typed FilterReason per rejected node) → score (ScoreParts, 0–100)
//!   → choose the GPU set (gpuset) / the claims' devices (dra)
//!   / the gang's domains (gang) / the evictions (preempt)
//!   ▼
//! typed decisions and explanations: schedule::Decision, gang_schedule::GangDecision,
//! preempt_schedule::PreemptionPlan, dra_schedule::DraDecision, node_fit::NodeVerdict,
//! explain::Explanation
//! ```
//!
//! A pending pod is read once into [`pod::PendingPod`]; the filter compiles it
//! against the snapshot once per decision (`filter::PodContext`), so per node
//! the filter and the score are integer compares and table lookups.
//!
//! # The ladder
//!
//! Modules form levels; a module uses modules of its own level or below,
//! never above, and no file imports a file that imports it back:
//!
//! | level | modules | what they are |
//! |---|---|---|
//! | 0 | [`config`], [`pod`], [`pod_constraints`], [`resources`], [`selector`] | what the operator configures, what a pod asks |
//! | 1 | [`gpuset`] | one node's topology ([`gpuset::NodeShape`]) and the exact GPU-set choice on it |
//! | 2 | [`snapshot`], [`reported`] | the cluster as one decision sees it; what nodes report of held GPUs |
//! | 3 | [`filter`], [`score`], [`fragmentation`], [`dra`], [`gang`], [`preempt`], [`inter_pod`], [`spread`], [`volumes`] | the choosers: one node judged, one node scored, devices, gangs, evictions, pods among pods |
//! | 4 | [`schedule`], [`node_fit`], [`gang_schedule`], [`preempt_schedule`], [`explain`], [`dra_schedule`] | whole decisions, typed, with their explanations |
//!
//! A module whose only reader sits below it is misplaced: move the shared
//! piece down (as `config::TargetWorkload` and `dra::hold_snapshot` were),
//! rather than import upwards.
//!
//! # Adding a filter predicate, end to end
//!
//! 1. `src/filter/reason.rs`: a variant of `Rejection` (what the hot path
//!    records, `Copy`) and of [`filter::FilterReason`] (the typed reason,
//!    public), its `Display` (the node's detail) and its phrase in
//!    `FilterReason::summary` (what the aggregated `FailedScheduling`
//!    message counts).
//! 2. `src/filter/mod.rs`: the check in `PodContext::filter`, at its place in
//!    the documented order (and in `PodContext::admits` when evictions cannot
//!    change it); anything the check needs per decision is compiled in
//!    `PodContext::new`. GPU checks live in `src/filter/gpu.rs`.
//! 3. `src/filter/resolve.rs`: the `Rejection` resolved into its
//!    `FilterReason` in `PodContext::reason`.
//! 4. Tests: `tests/filter/node_rules.rs` (node predicates) or
//!    `tests/filter/gpu_rules.rs` (GPU predicates), and the message in
//!    `tests/filter/message.rs`.
//!
//! # Adding a score part, end to end
//!
//! 1. `src/config/mod.rs`: a weight in [`config::ScoreWeights`] and its default.
//! 2. `src/score/mod.rs`: the part in [`score::ScoreParts`] (an `Option` when it
//!    applies to some pods only) and its name in `ScoreParts`'s `Display`;
//!    the weight normalised in `Scorer::new` (0 where the part does not
//!    apply to the pod: never per node), the value in `Scorer::score`; and
//!    its formula in the module docs.
//! 3. The scheduler's configuration file reads the weight
//!    (`scheduler/src/config/file.rs`, another crate).
//! 4. Tests: `tests/score.rs` (the part moves the choice the way its
//!    documentation says, everything else equal).

pub mod config;
pub mod dra;
pub mod dra_schedule;
pub mod explain;
pub mod filter;
pub mod fragmentation;
pub mod gang;
pub mod gang_schedule;
pub mod gpuset;
pub mod inter_pod;
pub mod node_fit;
pub mod pod;
pub mod pod_constraints;
pub mod preempt;
pub mod preempt_schedule;
pub mod reported;
pub mod resources;
pub mod schedule;
pub mod score;
pub mod selector;
pub mod snapshot;
pub mod spread;
pub mod volumes;
