//! Reading the simulation's inputs: the cluster (an openb node CSV, its
//! topologies synthesised, or a cluster YAML) and the workload (an openb
//! pod CSV or a workload YAML). Above the types they fill (`cluster.rs`,
//! `workload.rs`) and the readers (`input.rs`), so none of those needs
//! the others back.

use super::cluster::{Models, NodeUse, SimCluster, SimNode};
use super::workload::Workload;
use super::{SimError, input, policy};
use gputopo_scheduler_core::config::SchedulerConfig;
use std::path::Path;

/// Loads the cluster: an openb node CSV (topologies synthesised) or a cluster YAML.
pub fn load_cluster(path: &Path) -> Result<SimCluster, SimError> {
    if input::is_csv(path) {
        let mut models = Models::default();
        let nodes = input::read_node_csv(path, &mut models)?;
        let config = SchedulerConfig::default();
        let snapshot = policy::snapshot_for(&nodes, &config)?;
        let initial = vec![NodeUse::default(); nodes.len()];
        return Ok(SimCluster {
            nodes,
            models,
            snapshot,
            config,
            initial,
            trace: true,
        });
    }
    let loaded = crate::cluster::load(path, &crate::cluster::Overrides::default())
        .map_err(|e| SimError::Cluster(e.to_string()))?;
    let mut models = Models::default();
    let mut nodes = Vec::new();
    let mut initial = Vec::new();
    let mib = 1024 * 1024;
    for node in loaded.snapshot.nodes() {
        let alloc = node.allocatable();
        let used = node.requested();
        let present = node.gpus();
        let gpus = 32 - present.leading_zeros();
        let model_name = node
            .label("nvidia.com/gpu.product")
            .unwrap_or(if gpus > 0 { "unknown" } else { "" })
            .to_string();
        let model = if model_name.is_empty() {
            None
        } else {
            Some(models.id(&model_name).ok_or_else(|| {
                SimError::Cluster(format!("more than 64 GPU models ({model_name})"))
            })?)
        };
        let held = node.held_gpus();
        let gpu_milli = (0..gpus)
            .map(|g| {
                if held & (1 << g) != 0 || present & (1 << g) == 0 {
                    1000
                } else {
                    node.shared_use(g).milli.min(1000)
                }
            })
            .collect();
        initial.push(NodeUse {
            cpu_milli: used.cpu_milli.max(0) as u64,
            memory_mib: (used.memory.max(0) as u64).div_ceil(mib),
            gpu_milli,
        });
        nodes.push(SimNode {
            name: node.name().to_string(),
            cpu_milli: alloc.cpu_milli.max(0) as u64,
            memory_mib: alloc.memory.max(0) as u64 / mib,
            gpus,
            model,
            model_name,
        });
    }
    Ok(SimCluster {
        nodes,
        models,
        snapshot: loaded.snapshot,
        config: loaded.config,
        initial,
        trace: false,
    })
}

/// Loads the workload: an openb pod CSV or a workload YAML.
pub fn load_workload(path: &Path, cluster: &mut SimCluster) -> Result<Workload, SimError> {
    if input::is_csv(path) {
        let pods = input::read_pod_csv(path, &mut cluster.models)?;
        return Ok(Workload {
            pods,
            gangs: Vec::new(),
        });
    }
    Ok(input::read_workload_yaml(path, &mut cluster.models)?)
}
