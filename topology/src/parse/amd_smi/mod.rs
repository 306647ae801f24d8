//! Parser of `amd-smi topology` (its tables) and `amd-smi topology --json`.
//!
//! The formats come from the tool's source (`amdsmi_cli/amdsmi_commands.py`,
//! `topology`, and `amdsmi_logger.py`) and the sample its CHANGELOG prints
//! (fixtures/INDEX.md). Tables: a title (`WEIGHT TABLE:`), a header of BDFs, a
//! row per GPU starting with its BDF; GPU IDs are the rows' order. Tables read:
//! ACCESS (checked), WEIGHT, HOPS, LINK TYPE, NUMA BW (`min-max` MB/s or
//! `N/A`); the capability tables (CACHE COHERANCY, ATOMICS, DMA,
//! BI-DIRECTIONAL) and the legend are skipped. JSON: the list of
//! `{gpu, bdf, links: [{gpu, bdf, weight, link_type, num_hops, bandwidth, …}]}`
//! (ROCm 6.1+) or the older `{gpu, weight: {gpu_N: …}, hops, link_type,
//! numa_bandwidth}`.

use super::amd_text_error::AmdTextError;
use crate::backend::amd_smi::{AmdDeviceAnswers, AmdLinkType, AmdPairAnswer, AmdSmiAnswers};
use crate::pci::canonical_pci_bus_id;
use std::collections::BTreeMap;

mod json;
mod tables;

pub use json::parse_json;
use tables::parse_tables;

pub(super) const TABLES: &str =
    "ACCESS, WEIGHT, HOPS, LINK TYPE, NUMA BW, CACHE COHERANCY, ATOMICS, DMA, BI-DIRECTIONAL";

/// Reads `amd-smi topology` output: JSON when it starts with `[`, else tables.
pub fn parse(text: &str) -> Result<AmdSmiAnswers, AmdTextError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('[') {
        parse_json(text)
    } else {
        parse_tables(text)
    }
}

/// One GPU pair's values, as cells of the tables that were printed.
#[derive(Default, Clone)]
pub(super) struct PairCells {
    pub(super) weight: Option<u64>,
    pub(super) hops: Option<u32>,
    pub(super) link_type: Option<AmdLinkType>,
    pub(super) bandwidth: Option<(u64, u64)>,
}

/// `50000-100000` → (50000, 100000); `N/A` → None.
pub(super) fn bandwidth(s: &str) -> Option<Result<(u64, u64), ()>> {
    if s == "N/A" {
        return None;
    }
    Some(
        s.split_once('-')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .ok_or(()),
    )
}

pub(super) fn link_type(s: &str) -> Option<AmdLinkType> {
    match s {
        "XGMI" => Some(AmdLinkType::Xgmi),
        "PCIE" => Some(AmdLinkType::Pcie),
        _ => None,
    }
}

/// Answers from GPUs (index, BDF) and the pair cells keyed by (a, b), a < b.
pub(super) fn answers(
    gpus: &[(u32, Option<String>)],
    pairs: &BTreeMap<(u32, u32), PairCells>,
) -> AmdSmiAnswers {
    AmdSmiAnswers {
        devices: gpus
            .iter()
            .map(|(index, bdf)| AmdDeviceAnswers {
                index: *index,
                pci_bus_id: bdf.as_deref().and_then(canonical_pci_bus_id),
                ..AmdDeviceAnswers::default()
            })
            .collect(),
        pairs: pairs
            .iter()
            .map(|(&(a, b), c)| AmdPairAnswer {
                a,
                b,
                link_type: c.link_type,
                hops: c.hops,
                weight: c.weight,
                min_bandwidth_mbps: c.bandwidth.map(|b| b.0),
                max_bandwidth_mbps: c.bandwidth.map(|b| b.1),
            })
            .collect(),
        ..AmdSmiAnswers::default()
    }
}
