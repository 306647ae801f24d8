//! The snapshot as text, by name: what every decision can read (each node's
//! GPUs, resources, pods and domains, the domains' use, the PodGroups, the
//! warnings), without the ids and interned symbols that differ between two
//! snapshots of the same cluster. Two snapshots give the same text exactly
//! when no decision can tell them apart, which is what the tests of the
//! snapshot kept up to date ([`super::LiveSnapshot`]) compare.

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
            let domains: Vec<&str> = n
                .domain_path()
                .iter()
                .flatten()
                .map(|d| self.domain(*d).name())
                .collect();
            let _ = writeln!(
                out,
                "node {} requested {:?} held {:b} shared {:b} free {:b} shared use {:?} training {} inference {} domains {:?}",
                n.name(),
                n.requested(),
                n.held_gpus(),
                n.shared_gpus(),
                n.free_gpus(),
                shared,
                n.training_pods(),
                n.inference_pods(),
                domains,
            );
            for p in pods {
                let _ = writeln!(out, "  {p}");
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
        for w in self.warnings() {
            let _ = writeln!(out, "warning {w}");
        }
        out
    }
}
