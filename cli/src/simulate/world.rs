//! The free resources per node ([`State`]) and what a policy reads ([`World`]):
//! feasibility, and applying or releasing a placement.

use super::frag::{FragModel, NodeFree};
use super::{Models, SimError, SimNode, SimPod};
use gputopo_scheduler_core::snapshot::PodId;

/// Where a pod went: the node (index into the cluster's nodes), the GPUs it
/// uses (its share's GPU, or the whole ones), and for `gputopo` its id in
/// the policy's snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub node: usize,
    pub gpus: Vec<u32>,
    pub handle: Option<PodId>,
}

/// Free resources per node, kept by the engine for every policy.
pub struct State {
    pub cpu_left: Vec<u64>,
    pub mem_left: Vec<u64>,
    /// Free milli per GPU, per node.
    pub gpu_left: Vec<Vec<u32>>,
    /// GPU pods per node by (GPU count, milli): GPU clustering reads it.
    pub classes: Vec<Vec<(u32, u32, u32)>>,
    /// FGD measure per node, kept current.
    pub frag: Vec<f64>,
}

impl State {
    pub fn free(&self, node: usize, model: Option<u8>) -> NodeFree<'_> {
        NodeFree {
            cpu_left: self.cpu_left[node],
            model,
            gpu_left: &self.gpu_left[node],
        }
    }
}

/// The cluster, the workload's fragmentation model and the state: what a policy reads.
pub struct World<'a> {
    pub nodes: &'a [SimNode],
    pub models: &'a Models,
    pub frag: &'a FragModel,
    pub state: State,
    /// Per node, its place in a seeded random order of the nodes (0 first):
    /// the FGD simulator's baselines give a tie to the node that comes first
    /// (see [`policy`](super::policy)).
    pub node_order: Vec<u32>,
}

impl World<'_> {
    /// Whether the node can take the pod at all (CPU, memory, models, GPUs).
    pub fn feasible(&self, node: usize, pod: &SimPod) -> bool {
        let n = &self.nodes[node];
        let s = &self.state;
        if s.cpu_left[node] < pod.cpu_milli || s.mem_left[node] < pod.memory_mib {
            return false;
        }
        if pod.num_gpu == 0 {
            return true;
        }
        if !allows(pod.models, n.model) {
            return false;
        }
        let fit = s.gpu_left[node]
            .iter()
            .filter(|&&l| l >= pod.gpu_milli)
            .count();
        fit >= pod.num_gpu as usize
    }

    pub(super) fn apply(
        &mut self,
        a: &Assignment,
        pod: &SimPod,
        policy: &str,
    ) -> Result<(), SimError> {
        let node = a.node;
        let over = |what: String| SimError::Overallocated {
            policy: policy.to_string(),
            pod: pod.name.clone(),
            node: self.nodes[node].name.clone(),
            what,
        };
        let s = &mut self.state;
        if s.cpu_left[node] < pod.cpu_milli || s.mem_left[node] < pod.memory_mib {
            return Err(over("CPU or memory".into()));
        }
        if a.gpus.len() != pod.num_gpu as usize {
            return Err(over(format!(
                "{} GPUs given for {} asked",
                a.gpus.len(),
                pod.num_gpu
            )));
        }
        if pod.num_gpu > 0 && !allows(pod.models, self.nodes[node].model) {
            return Err(over("a GPU model the pod does not allow".into()));
        }
        let mut seen = 0u64;
        for &g in &a.gpus {
            let left = s.gpu_left[node].get(g as usize).copied();
            if left.is_none_or(|l| l < pod.gpu_milli) || seen & (1 << g) != 0 {
                return Err(over(format!("GPU {g}")));
            }
            seen |= 1 << g;
        }
        s.cpu_left[node] -= pod.cpu_milli;
        s.mem_left[node] -= pod.memory_mib;
        for &g in &a.gpus {
            s.gpu_left[node][g as usize] -= pod.gpu_milli;
        }
        if pod.num_gpu > 0 {
            let classes = &mut s.classes[node];
            match classes
                .iter_mut()
                .find(|c| c.0 == pod.num_gpu && c.1 == pod.gpu_milli)
            {
                Some(c) => c.2 += 1,
                None => classes.push((pod.num_gpu, pod.gpu_milli, 1)),
            }
        }
        s.frag[node] = self.frag.node(&s.free(node, self.nodes[node].model));
        Ok(())
    }

    pub(super) fn release(&mut self, a: &Assignment, pod: &SimPod) {
        let node = a.node;
        let s = &mut self.state;
        s.cpu_left[node] += pod.cpu_milli;
        s.mem_left[node] += pod.memory_mib;
        for &g in &a.gpus {
            if let Some(l) = s.gpu_left[node].get_mut(g as usize) {
                *l += pod.gpu_milli;
            }
        }
        if let Some(c) = s.classes[node]
            .iter_mut()
            .find(|c| c.0 == pod.num_gpu && c.1 == pod.gpu_milli)
        {
            c.2 = c.2.saturating_sub(1);
        }
        s.frag[node] = self.frag.node(&s.free(node, self.nodes[node].model));
    }
}

/// Whether a pod allowing `models` (0: any) may use a node of `model`.
fn allows(models: u64, model: Option<u8>) -> bool {
    models == 0 || model.is_some_and(|m| models & (1u64 << m) != 0)
}
