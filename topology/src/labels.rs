//! The node labels the agent owns (docs/contract/labels.md, "Node labels the agent writes").

use crate::clique::{readings_from_spec, verdict};
use gputopo_api::keys::node as key;
use gputopo_api::{GpuTopologySpec, GpuVendor, LinkClass};
use std::collections::BTreeMap;

/// Which labels to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelOptions {
    /// Write `nvidia.com/gpu.count`, `.product`, `.memory`, `.clique`. Off where
    /// GPU Feature Discovery already writes them, so two writers never fight
    /// over a label.
    pub gfd_compatible: bool,
}

impl Default for LabelOptions {
    fn default() -> Self {
        LabelOptions {
            gfd_compatible: true,
        }
    }
}

/// The labels for a node with this topology. A node without GPUs gets none,
/// so the publisher removes every label it owns there. AMD nodes get no
/// `nvidia.com/` label and no `amd.com/` one either: AMD's node labeller owns
/// `amd.com/gpu.*`, so gputopo's AMD labels stay under `gputopo.dev/`.
pub fn node_labels(spec: &GpuTopologySpec, opts: LabelOptions) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let s = &spec.summary;
    if s.gpu_count == 0 {
        return labels;
    }
    let mut put = |k: &str, v: String| {
        labels.insert(k.to_string(), v);
    };
    if let Some(vendor) = spec.vendor {
        put(key::GPU_VENDOR, vendor.as_str().to_string());
    }
    if spec.vendor == Some(GpuVendor::Amd) {
        put(key::XGMI_LARGEST_HIVE, s.largest_island.to_string());
        let direct = spec.links.iter().all(|l| l.class() == LinkClass::Xgmi);
        put(
            key::XGMI_ALL_TO_ALL,
            (s.gpu_count >= 2 && direct).to_string(),
        );
        if let Some(n) = s.numa_nodes {
            put(key::NUMA_NODES, n.to_string());
        }
        put(key::INTERCONNECT, s.interconnect.as_str().to_string());
        return labels;
    }
    if opts.gfd_compatible {
        put(key::GPU_COUNT, s.gpu_count.to_string());
        if let Some(p) = s.product.as_deref().and_then(label_value) {
            put(key::GPU_PRODUCT, p);
        }
        // GFD reports one memory figure per node; the smallest GPU is what a pod can count on.
        let memories: Option<Vec<u64>> = spec.gpus.iter().map(|g| g.memory_mib).collect();
        if let Some(min) = memories.and_then(|m| m.into_iter().min()) {
            put(key::GPU_MEMORY, min.to_string());
        }
        // GFD writes it too: only when every GPU is in one clique (crate::clique).
        if let Some(clique) = verdict(&readings_from_spec(spec)).label() {
            put(key::GPU_CLIQUE, clique.to_string());
        }
    }
    if let Some(level) = &s.p2p_level {
        put(key::NVLINK_P2P_LEVEL, level.clone());
    }
    put(key::NVLINK_LARGEST_ISLAND, s.largest_island.to_string());
    put(key::NVLINK_ALL_TO_ALL, s.all_to_all_nvlink.to_string());
    if let Some(n) = s.numa_nodes {
        put(key::NUMA_NODES, n.to_string());
    }
    put(key::INTERCONNECT, s.interconnect.as_str().to_string());
    labels
}

/// A product name as a label value, the way GFD writes it: spaces become `-`,
/// anything else a label value cannot hold is dropped, at most 63 characters,
/// alphanumeric at both ends. None when nothing is left.
pub fn label_value(raw: &str) -> Option<String> {
    let mut v: String = raw
        .trim()
        .chars()
        .map(|c| if c == ' ' { '-' } else { c })
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    v.truncate(63);
    let v = v.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!v.is_empty()).then(|| v.to_string())
}

/// `key=value` lines, sorted, as `discover -o labels` prints them.
pub fn to_lines(labels: &BTreeMap<String, String>) -> String {
    labels.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_names_become_gfd_style_values() {
        assert_eq!(
            label_value("NVIDIA A100-SXM4-80GB").as_deref(),
            Some("NVIDIA-A100-SXM4-80GB")
        );
        assert_eq!(
            label_value("NVIDIA H100 80GB HBM3").as_deref(),
            Some("NVIDIA-H100-80GB-HBM3")
        );
        assert_eq!(label_value("GPU-略略(x)").as_deref(), Some("GPU-x"));
        assert_eq!(label_value("  ***  "), None);
        assert_eq!(label_value(&"A".repeat(80)).map(|v| v.len()), Some(63));
    }
}
