//! A node's `GpuTopology` spec as the snapshot's input holds it: shared
//! with the watched object it came from, so that a scheduler holds each
//! spec once (in its store), not once more per kept input (about 5 KB a
//! node for a DGX A100's).

use gputopo_api::{GpuTopology, GpuTopologySpec};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Reads as the spec; compares by spec only, so a new status of the same
/// object (a kubelet reading) is the same topology.
#[derive(Clone)]
pub struct TopologySpec(Arc<GpuTopology>);

impl TopologySpec {
    /// The spec of a watched object, shared with it.
    pub fn shared(topology: Arc<GpuTopology>) -> TopologySpec {
        TopologySpec(topology)
    }

    /// The spec to change, copied first if the object is shared.
    pub fn make_mut(&mut self) -> &mut GpuTopologySpec {
        &mut Arc::make_mut(&mut self.0).spec
    }
}

impl From<GpuTopologySpec> for TopologySpec {
    fn from(spec: GpuTopologySpec) -> TopologySpec {
        let name = spec.node_name.clone();
        TopologySpec(Arc::new(GpuTopology::new(&name, spec)))
    }
}

impl Deref for TopologySpec {
    type Target = GpuTopologySpec;

    fn deref(&self) -> &GpuTopologySpec {
        &self.0.spec
    }
}

impl PartialEq for TopologySpec {
    fn eq(&self, other: &TopologySpec) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.spec == other.0.spec
    }
}

impl fmt::Debug for TopologySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.spec.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputopo_api::GpuTopologyStatus;

    #[test]
    fn a_new_status_is_the_same_topology_and_a_new_spec_is_not() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/nvidia/dgx-a100-mlx5-names-12nic-topo-m.txt"
        );
        let text = std::fs::read_to_string(path).expect("the DGX A100 fixture");
        let facts = gputopo_topology::backend::nvidia_smi::facts_from_topo(&text).expect("parses");
        let spec = gputopo_topology::normalize::normalize("n1", &facts).expect("normalizes");
        let first = Arc::new(GpuTopology::new("n1", spec.clone()));
        let mut read_again = (*first).clone();
        read_again.status = Some(GpuTopologyStatus::default());
        let mut other = spec.clone();
        other.node_name = "n2".into();
        assert_eq!(
            TopologySpec::shared(first.clone()),
            TopologySpec::shared(Arc::new(read_again))
        );
        assert_eq!(
            TopologySpec::shared(first.clone()),
            TopologySpec::from(spec)
        );
        assert_ne!(TopologySpec::shared(first), TopologySpec::from(other));
    }
}
