//! The snapshot as text, by name: each node's facts (labels, taints,
//! allocatable, GPU model, price), its GPUs, resources, pods and domains,
//! the domains' use, the PodGroups and the warnings, without the ids and
//! interned symbols that differ between two snapshots of the same cluster.
//! The tests of the snapshot kept up to date ([`super::LiveSnapshot`])
//! compare it with a fresh build's (and compare decisions besides: the
//! text leaves out the topology tables, which come from the same inputs).

use super::Snapshot;
use std::fmt::Write;

impl Snapshot {
    /// See the module docs.
    pub fn state_text(&self) -> String {
        let mut out = String::new();
        for n in self.nodes() {
            let mut pods: Vec<String> = n
                .pods()
                .map(|(_, p)| {
                    format!(
                        "{}/{} gpus {:b} shared {:?} requests {:?} request {:?} priority {} started {:?}",
                        p.namespace,
                        p.name,
                        p.gpus,
                        p.shared,
                        p.requests,
                        p.request,
                        p.priority,
                        p.start_time
                    )
                })
                .collect();
            pods.sort();
            let shared: Vec<_> = (0..n.gpus().count_ones())
                .map(|g| n.shared_use(g))
                .collect();
            let domains: Vec<&str> = n.domain_names().flatten().collect();
            // Sorted by key: the snapshot orders them by interned symbol.
            let mut labels: Vec<(&str, &str)> = n.labels().collect();
            labels.sort_unstable();
            let _ = writeln!(
                out,
                "node {} labels {labels:?} taints {:?} unschedulable {} allocatable {:?} model {:?} cost {:?} spot {}",
                n.name(),
                n.taints(),
                n.unschedulable(),
                n.allocatable(),
                n.gpu_model(),
                n.cost_per_hour(),
                n.is_spot(),
            );
            let _ = writeln!(
                out,
                "  requested {:?} held {:b} shared {:b} free {:b} shared use {:?} training {} inference {} domains {:?}",
                n.requested(),
                n.held_gpus(),
                n.shared_gpus(),
                n.free_gpus(),
                shared,
                n.training_pods(),
                n.inference_pods(),
                domains,
            );
            let _ = writeln!(out, "  images {:?}", self.images_by_name(n.id()));
            for p in pods {
                let _ = writeln!(out, "    {p}");
            }
        }
        for (_, d) in self.domains() {
            let nodes: Vec<&str> = d.nodes().iter().map(|id| self.node(*id).name()).collect();
            let _ = writeln!(
                out,
                "domain {} tier {} gpus {} used {} nodes {:?}",
                d.name(),
                d.tier(),
                d.gpu_count(),
                d.gpus_used(),
                nodes
            );
        }
        let _ = writeln!(out, "groups {:?}", self.pod_groups());
        // The label index by pod name, sorted: what selectors' candidates come from.
        let mut index: Vec<String> = self
            .pods_by_label
            .iter()
            .map(|((k, v), ids)| {
                let mut pods: Vec<String> = ids
                    .iter()
                    .filter_map(|id| self.pod(*id).map(|p| p.key()))
                    .collect();
                pods.sort();
                format!("{k}={v} {pods:?}")
            })
            .collect();
        index.sort();
        let _ = writeln!(out, "labels {index:?}");
        for w in self.warnings() {
            let _ = writeln!(out, "warning {w}");
        }
        out
    }
}
