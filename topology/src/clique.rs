//! The node's multi-node NVLink clique (GB200/GB300 NVL72): whether every
//! GPU registered in one clique of one NVLink cluster, and so whether the node
//! carries `nvidia.com/gpu.clique` (the scheduler's `gpu-clique` network
//! tier) and what its `GpuFabricReady` condition says.
//!
//! The label's value is GPU Feature Discovery's: `<cluster UUID>.<clique id>`,
//! the UUID in its lowercase hyphenated form and the clique id in decimal
//! (NVIDIA/k8s-device-plugin, `internal/lm/imex.go` and
//! `internal/resource/nvml-device.go` `GetFabricIDs`; GFD's README gives
//! `7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1`). A GPU counts as in a clique as
//! go-nvlib's `IsFabricAttached` has it: registration completed, status
//! success, a cluster UUID that is not nil (a single-node NVSwitch system such
//! as HGX H100 registers with the nil UUID). GFD labels a node from the GPUs
//! that are attached and skips the others; gputopo is stricter: the label
//! only when *every* GPU is in the same clique, since a gang spread over a
//! clique trusts each member's GPUs to reach the others over NVLink.
//!
//! Pure: readings in, a [`CliqueVerdict`] out; `now` is passed in.

use crate::backend::nvml::{FABRIC_STATUS_SUCCESS, FabricAnswer, FabricState, NvmlAnswers};
use gputopo_api::GpuTopologySpec;
use gputopo_api::topology::CONDITION_GPU_FABRIC_READY;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::BTreeMap;

/// The cluster UUID of a GPU that registered outside any multi-node fabric.
pub const NIL_CLUSTER_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// `GpuFabricReady` reasons.
pub const REASON_ONE_CLIQUE: &str = "OneClique";
pub const REASON_CLIQUES_DISAGREE: &str = "CliquesDisagree";
pub const REASON_REGISTRATION_INCOMPLETE: &str = "FabricRegistrationIncomplete";

/// What one GPU says of its NVLink fabric.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum FabricReading {
    /// No multi-node fabric: NVML gives no fabric answer or says the GPU
    /// does not support one, or it registered with the nil cluster UUID.
    NoFabric,
    /// Registration with the fabric is not done: what NVML says of it
    /// (`not started`, `in progress`, `failed: <NVML's error>`).
    Unregistered(String),
    /// Registered in clique `clique_id` of cluster `cluster_uuid`.
    Member {
        cluster_uuid: String,
        clique_id: u32,
    },
}

impl FabricReading {
    /// The reading of one NVML fabric answer (`None`: NVML gave none).
    pub fn from_answer(answer: Option<&FabricAnswer>) -> FabricReading {
        let Some(f) = answer else {
            return FabricReading::NoFabric;
        };
        match f.state {
            FabricState::NotSupported => FabricReading::NoFabric,
            FabricState::NotStarted => FabricReading::Unregistered("not started".into()),
            FabricState::InProgress => FabricReading::Unregistered("in progress".into()),
            FabricState::Completed if f.status != FABRIC_STATUS_SUCCESS => {
                FabricReading::Unregistered(format!("failed: {}", f.status))
            }
            FabricState::Completed => member(f.cluster_uuid.as_deref(), f.clique_id),
        }
    }

    /// The label value this reading stands for, when in a clique.
    fn clique(&self) -> Option<String> {
        match self {
            FabricReading::Member {
                cluster_uuid,
                clique_id,
            } => Some(format!("{cluster_uuid}.{clique_id}")),
            _ => None,
        }
    }

    fn says(&self) -> String {
        match self {
            FabricReading::NoFabric => "in no clique".to_string(),
            FabricReading::Unregistered(how) => format!("fabric registration {how}"),
            FabricReading::Member { .. } => {
                format!("in clique {}", self.clique().unwrap_or_default())
            }
        }
    }
}

fn member(cluster_uuid: Option<&str>, clique_id: Option<u32>) -> FabricReading {
    match (cluster_uuid, clique_id) {
        (Some(uuid), Some(clique_id)) if uuid != NIL_CLUSTER_UUID => FabricReading::Member {
            cluster_uuid: uuid.to_ascii_lowercase(),
            clique_id,
        },
        _ => FabricReading::NoFabric,
    }
}

/// Each GPU's reading from NVML's answers, by index.
pub fn readings_from_answers(answers: &NvmlAnswers) -> Vec<(u32, FabricReading)> {
    answers
        .devices
        .iter()
        .map(|d| (d.index, FabricReading::from_answer(d.fabric.as_ref())))
        .collect()
}

/// Each GPU's reading from a published topology, by index. The spec keeps a
/// GPU's fabric only when it registered in a real cluster, so it tells a
/// member from a GPU that is not one, never why not.
pub fn readings_from_spec(spec: &GpuTopologySpec) -> Vec<(u32, FabricReading)> {
    spec.gpus
        .iter()
        .map(|g| {
            let reading = g.fabric.as_ref().map_or(FabricReading::NoFabric, |f| {
                member(f.cluster_uuid.as_deref(), f.clique_id)
            });
            (g.index, reading)
        })
        .collect()
}

/// What the GPUs' readings say about the node's clique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliqueVerdict {
    /// No GPU reports a multi-node fabric (PCIe, HGX H100, AMD, no GPUs):
    /// no label, no condition.
    NoFabric,
    /// Every GPU in one clique: the label's value, and how many GPUs.
    OneClique { clique: String, gpus: usize },
    /// Some GPU has not finished registering with the fabric (the others
    /// said in the message): no label until it has.
    RegistrationIncomplete { message: String },
    /// GPUs in different cliques, or some in one and some in none: no label.
    CliquesDisagree { message: String },
}

/// The verdict on a node's GPUs.
pub fn verdict(readings: &[(u32, FabricReading)]) -> CliqueVerdict {
    if readings
        .iter()
        .all(|(_, r)| matches!(r, FabricReading::NoFabric))
    {
        return CliqueVerdict::NoFabric;
    }
    // GPUs grouped by what they say, groups in order of their first GPU.
    let mut groups: BTreeMap<&FabricReading, Vec<u32>> = BTreeMap::new();
    for (gpu, reading) in readings {
        groups.entry(reading).or_default().push(*gpu);
    }
    if groups.len() == 1
        && let Some((reading, gpus)) = groups.iter().next()
        && let Some(clique) = reading.clique()
    {
        return CliqueVerdict::OneClique {
            clique,
            gpus: gpus.len(),
        };
    }
    let mut ordered: Vec<(&FabricReading, Vec<u32>)> = groups.into_iter().collect();
    for (_, gpus) in &mut ordered {
        gpus.sort_unstable();
    }
    ordered.sort_by_key(|(_, gpus)| gpus[0]);
    let said: Vec<String> = ordered
        .iter()
        .map(|(reading, gpus)| format!("{} {}", gpu_list(gpus), reading.says()))
        .collect();
    let said = said.join("; ");
    if ordered
        .iter()
        .any(|(r, _)| matches!(r, FabricReading::Unregistered(_)))
    {
        CliqueVerdict::RegistrationIncomplete {
            message: format!(
                "NVLink fabric registration is not complete: {said}; no {} label until every GPU is registered in one clique",
                gputopo_api::keys::node::GPU_CLIQUE
            ),
        }
    } else {
        CliqueVerdict::CliquesDisagree {
            message: format!(
                "the GPUs are not in one NVLink clique: {said}; the node is in no clique ({} not written)",
                gputopo_api::keys::node::GPU_CLIQUE
            ),
        }
    }
}

impl CliqueVerdict {
    /// The value of `nvidia.com/gpu.clique`, when the node has one.
    pub fn label(&self) -> Option<&str> {
        match self {
            CliqueVerdict::OneClique { clique, .. } => Some(clique),
            _ => None,
        }
    }

    /// The `GpuFabricReady` condition, none on a node without a fabric.
    /// `now` is its transition time; the caller keeps an older one while the
    /// status stays.
    pub fn condition(&self, now: Time) -> Option<Condition> {
        let (status, reason, message) = match self {
            CliqueVerdict::NoFabric => return None,
            CliqueVerdict::OneClique { clique, gpus } => (
                "True",
                REASON_ONE_CLIQUE,
                format!("all {gpus} GPUs are in NVLink clique {clique}"),
            ),
            CliqueVerdict::RegistrationIncomplete { message } => {
                ("False", REASON_REGISTRATION_INCOMPLETE, message.clone())
            }
            CliqueVerdict::CliquesDisagree { message } => {
                ("False", REASON_CLIQUES_DISAGREE, message.clone())
            }
        };
        Some(Condition {
            type_: CONDITION_GPU_FABRIC_READY.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message,
            last_transition_time: now,
            observed_generation: None,
        })
    }
}

/// `GPU 3`, `GPUs 0-3`, `GPUs 0-2,5`.
fn gpu_list(gpus: &[u32]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < gpus.len() {
        let start = gpus[i];
        let mut end = start;
        while i + 1 < gpus.len() && gpus[i + 1] == end + 1 {
            i += 1;
            end = gpus[i];
        }
        runs.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    let noun = if gpus.len() == 1 { "GPU" } else { "GPUs" };
    format!("{noun} {}", runs.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    /// The format of GFD's README example (NVIDIA/k8s-device-plugin,
    /// docs/gpu-feature-discovery/README.md): a lowercase UUID, a decimal id.
    const CLUSTER_A: &str = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31";
    const CLUSTER_B: &str = "5b1e7c1a-0000-4000-8000-000000000001";

    fn member(cluster: &str, clique: u32) -> FabricReading {
        FabricReading::Member {
            cluster_uuid: cluster.into(),
            clique_id: clique,
        }
    }

    fn node(readings: &[FabricReading]) -> Vec<(u32, FabricReading)> {
        readings
            .iter()
            .enumerate()
            .map(|(i, r)| (i as u32, r.clone()))
            .collect()
    }

    fn answer(state: FabricState, status: &str, cluster: Option<&str>) -> FabricAnswer {
        FabricAnswer {
            state,
            status: status.into(),
            cluster_uuid: cluster.map(str::to_string),
            clique_id: cluster.map(|_| 1),
            health_mask: Some(0),
        }
    }

    fn now() -> Time {
        Time(Timestamp::from_second(100).unwrap())
    }

    #[test]
    fn gpus_of_one_clique_label_the_node_as_gfd_does() {
        let v = verdict(&node(&[member(CLUSTER_A, 1), member(CLUSTER_A, 1)]));
        assert_eq!(v.label(), Some("7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"));
        let c = v.condition(now()).expect("a condition");
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("GpuFabricReady", "True", "OneClique")
        );
        assert_eq!(
            c.message,
            "all 2 GPUs are in NVLink clique 7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"
        );
        assert_eq!(c.last_transition_time, now());
    }

    #[test]
    fn gpus_in_different_cliques_or_clusters_are_named_and_get_no_label() {
        let mut gpus = vec![member(CLUSTER_A, 1); 4];
        gpus.extend(vec![member(CLUSTER_A, 2); 4]);
        let v = verdict(&node(&gpus));
        assert_eq!(v.label(), None);
        let c = v.condition(now()).expect("a condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "CliquesDisagree")
        );
        assert!(
            c.message
                .contains(&format!("GPUs 0-3 in clique {CLUSTER_A}.1"))
                && c.message
                    .contains(&format!("GPUs 4-7 in clique {CLUSTER_A}.2")),
            "{}",
            c.message
        );
        // Same clique id, another cluster.
        let v = verdict(&node(&[member(CLUSTER_A, 1), member(CLUSTER_B, 1)]));
        let c = v.condition(now()).unwrap();
        assert_eq!(c.reason, "CliquesDisagree");
        assert!(
            c.message
                .contains(&format!("GPU 0 in clique {CLUSTER_A}.1"))
                && c.message
                    .contains(&format!("GPU 1 in clique {CLUSTER_B}.1")),
            "{}",
            c.message
        );
    }

    #[test]
    fn some_gpus_in_a_clique_and_some_in_none_disagree() {
        let v = verdict(&node(&[
            member(CLUSTER_A, 1),
            FabricReading::NoFabric,
            member(CLUSTER_A, 1),
            FabricReading::NoFabric,
        ]));
        assert_eq!(v.label(), None);
        let c = v.condition(now()).unwrap();
        assert_eq!(c.reason, "CliquesDisagree");
        assert!(
            c.message
                .starts_with(&format!("the GPUs are not in one NVLink clique: GPUs 0,2 in clique {CLUSTER_A}.1; GPUs 1,3 in no clique")),
            "{}",
            c.message
        );
    }

    #[test]
    fn an_unfinished_registration_outranks_a_disagreement() {
        let v = verdict(&node(&[
            member(CLUSTER_A, 1),
            FabricReading::Unregistered("in progress".into()),
            member(CLUSTER_A, 2),
        ]));
        assert_eq!(v.label(), None);
        let c = v.condition(now()).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "FabricRegistrationIncomplete")
        );
        assert!(
            c.message.contains("GPU 1 fabric registration in progress"),
            "{}",
            c.message
        );
        assert!(
            c.message
                .contains(&format!("GPU 2 in clique {CLUSTER_A}.2")),
            "{}",
            c.message
        );
    }

    #[test]
    fn nodes_without_a_multi_node_fabric_get_neither_label_nor_condition() {
        for gpus in [
            vec![],
            vec![FabricReading::NoFabric; 8],
            // HGX H100: registered, nil cluster UUID.
            vec![
                FabricReading::from_answer(Some(&answer(
                    FabricState::Completed,
                    "Success",
                    Some(NIL_CLUSTER_UUID)
                )));
                8
            ],
            // PCIe: NVML says not supported, or gives no answer.
            vec![
                FabricReading::from_answer(Some(&answer(
                    FabricState::NotSupported,
                    "Success",
                    None,
                ))),
                FabricReading::from_answer(None),
            ],
        ] {
            let v = verdict(&node(&gpus));
            assert_eq!(v, CliqueVerdict::NoFabric);
            assert_eq!((v.label(), v.condition(now())), (None, None));
        }
    }

    #[test]
    fn nvml_answers_are_read_as_go_nvlib_reads_them() {
        use FabricState::*;
        let read = |a: FabricAnswer| FabricReading::from_answer(Some(&a));
        assert_eq!(
            read(answer(Completed, "Success", Some(CLUSTER_A))),
            member(CLUSTER_A, 1)
        );
        assert_eq!(
            read(answer(
                Completed,
                "Success",
                Some(&CLUSTER_A.to_uppercase())
            )),
            member(CLUSTER_A, 1),
            "the label's UUID is lowercase"
        );
        assert_eq!(
            read(answer(InProgress, "Success", None)),
            FabricReading::Unregistered("in progress".into())
        );
        assert_eq!(
            read(answer(NotStarted, "Success", None)),
            FabricReading::Unregistered("not started".into())
        );
        assert_eq!(
            read(answer(Completed, "Unknown Error", None)),
            FabricReading::Unregistered("failed: Unknown Error".into())
        );
    }

    #[test]
    fn the_spec_and_the_answers_agree_on_the_label() {
        use crate::backend::nvml::{DeviceAnswers, NvmlAnswers};
        use gputopo_api::{GpuFabric, GpuInfo, Interconnect, TopologySource, TopologySummary};
        let gpu = |index, fabric| DeviceAnswers {
            index,
            fabric,
            ..DeviceAnswers::default()
        };
        let answers = NvmlAnswers {
            devices: vec![
                gpu(
                    0,
                    Some(answer(FabricState::Completed, "Success", Some(CLUSTER_A))),
                ),
                gpu(
                    1,
                    Some(answer(FabricState::Completed, "Success", Some(CLUSTER_A))),
                ),
            ],
            ..NvmlAnswers::default()
        };
        let from_answers = verdict(&readings_from_answers(&answers));
        let info = |index| GpuInfo {
            index,
            uuid: None,
            product: None,
            memory_mib: None,
            pci_bus_id: None,
            numa_node: None,
            cpu_affinity: None,
            mig_enabled: None,
            fabric: Some(GpuFabric {
                cluster_uuid: Some(CLUSTER_A.into()),
                clique_id: Some(1),
            }),
        };
        let spec = GpuTopologySpec {
            node_name: "n".into(),
            source: TopologySource::Fixture,
            vendor: None,
            driver_version: None,
            cuda_version: None,
            gpus: vec![info(0), info(1)],
            links: vec![],
            nics: vec![],
            islands: vec![],
            summary: TopologySummary {
                gpu_count: 2,
                product: None,
                p2p_level: None,
                p2p_bottleneck: None,
                all_to_all_nvlink: false,
                largest_island: 0,
                numa_nodes: None,
                interconnect: Interconnect::Pcie,
            },
        };
        assert_eq!(verdict(&readings_from_spec(&spec)), from_answers);
        assert_eq!(from_answers.label(), Some(&*format!("{CLUSTER_A}.1")));
    }

    #[test]
    fn gpu_lists_are_runs() {
        assert_eq!(gpu_list(&[3]), "GPU 3");
        assert_eq!(gpu_list(&[0, 1, 2, 3]), "GPUs 0-3");
        assert_eq!(gpu_list(&[0, 1, 2, 5, 7, 8]), "GPUs 0-2,5,7-8");
    }
}
