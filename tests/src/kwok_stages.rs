//! The pod stages kwok plays here: its own default ("fast") stages, read
//! from the kwok module in GOMODCACHE, less `pod-complete`.
//!
//! kwok's default marks a pod owned by a Job `Succeeded` within a second of
//! running. A finished pod holds no GPU, so a gang's first members would
//! free their GPUs before the last were placed, and Kueue would count a
//! Job finished and hand its quota to the next. Training runs until it is
//! stopped: here every pod stays Running until deleted.

use crate::binaries::{self, KWOK};
use anyhow::Context as _;
use std::path::Path;

/// The stages kwok's default pod set has, in its order, and whether we keep each.
const FAST_POD_STAGES: [(&str, bool); 3] = [
    ("pod-ready.yaml", true),
    ("pod-complete.yaml", false),
    ("pod-delete.yaml", true),
];

/// Writes a kwok configuration holding the pod stages to `path`.
pub(crate) fn write_pod_stages(path: &Path) -> anyhow::Result<()> {
    let module = binaries::locate_module(KWOK)?;
    let dir = module.join("kustomize/stage/pod/fast");
    let mut text = String::new();
    for (file, keep) in FAST_POD_STAGES {
        let file = dir.join(file);
        // Read even the one left out: a kwok whose stages moved fails here
        // rather than running with a different set.
        let stage = std::fs::read_to_string(&file)
            .with_context(|| format!("reading kwok's stage {}", file.display()))?;
        if keep {
            text.push_str("---\n");
            text.push_str(&stage);
        }
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
