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

use super::amd_text_error::{AmdTextError, at, words};
use crate::backend::amd_smi::{AmdDeviceAnswers, AmdLinkType, AmdPairAnswer, AmdSmiAnswers};
use crate::pci::canonical_pci_bus_id;
use std::collections::BTreeMap;

mod json;

pub use json::parse_json;

const TABLES: &str =
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

fn parse_tables(text: &str) -> Result<AmdSmiAnswers, AmdTextError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut bdfs: Option<(usize, Vec<String>)> = None;
    let mut pairs: BTreeMap<(u32, u32), PairCells> = BTreeMap::new();
    let mut seen_tables = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (n, line) = (i + 1, lines[i]);
        i += 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed == "Legend:" {
            break;
        }
        let Some(title) = trimmed.strip_suffix(" TABLE:") else {
            return Err(at(
                n,
                1,
                format!(
                    "expected a table title (`WEIGHT TABLE:`; tables: {TABLES}) but found {trimmed:?}"
                ),
            ));
        };
        if seen_tables.contains(&title.to_string()) {
            return Err(at(n, 1, format!("table {title} appears twice")));
        }
        seen_tables.push(title.to_string());
        let header_no = i + 1;
        let header = words(lines.get(i).copied().unwrap_or(""));
        i += 1;
        let names: Vec<String> = header.iter().map(|(_, w)| w.to_string()).collect();
        for (col, w) in &header {
            if canonical_pci_bus_id(w).is_none() {
                return Err(at(
                    header_no,
                    *col,
                    format!("expected a PCI BDF such as 0000:0c:00.0 but found {w:?}"),
                ));
            }
        }
        if names.is_empty() {
            return Err(at(
                header_no,
                1,
                format!("table {title} has no header of BDFs"),
            ));
        }
        match &bdfs {
            None => bdfs = Some((header_no, names.clone())),
            Some((_, first)) if *first != names => {
                return Err(at(
                    header_no,
                    1,
                    format!("table {title} lists other GPUs than the first table"),
                ));
            }
            Some(_) => {}
        }
        let count = names.len();
        for (r, bdf) in names.iter().enumerate() {
            let row_no = i + 1;
            let row = lines.get(i).copied().unwrap_or("");
            i += 1;
            let ws = words(row);
            match ws.first() {
                Some((_, w)) if w == bdf => {}
                Some((col, w)) => {
                    return Err(at(
                        row_no,
                        *col,
                        format!("expected the row of {bdf} but found {w:?}"),
                    ));
                }
                None => {
                    return Err(at(
                        row_no,
                        1,
                        format!(
                            "expected the row of {bdf}: table {title} stops after {r} of {count} rows"
                        ),
                    ));
                }
            }
            if ws.len() != count + 1 {
                let col = ws
                    .get(count + 1)
                    .map_or(row.trim_end().chars().count() + 1, |w| w.0);
                return Err(at(
                    row_no,
                    col,
                    format!(
                        "row {bdf} has {} cells but the header has {count} GPUs (a missing or merged cell)",
                        ws.len() - 1
                    ),
                ));
            }
            for (c, &(col, w)) in ws[1..].iter().enumerate() {
                let bad = |what: &str| {
                    at(
                        row_no,
                        col,
                        format!("expected {what} in table {title} but found {w:?}"),
                    )
                };
                if c == r {
                    let ok = match title {
                        "WEIGHT" | "HOPS" => w == "0",
                        "NUMA BW" => w == "N/A",
                        "ACCESS" => w == "ENABLED",
                        _ => w == "SELF",
                    };
                    if !ok {
                        return Err(bad("the diagonal's self value (0, SELF, N/A or ENABLED)"));
                    }
                    continue;
                }
                let key = ((r.min(c)) as u32, (r.max(c)) as u32);
                let e = pairs.entry(key).or_default();
                // Both directions must agree; the second read checks the first.
                match title {
                    "WEIGHT" => agree(
                        &mut e.weight,
                        w.parse().map_err(|_| bad("a weight"))?,
                        || bad("the same weight both ways"),
                    )?,
                    "HOPS" => agree(
                        &mut e.hops,
                        w.parse().map_err(|_| bad("a hop count"))?,
                        || bad("the same hops both ways"),
                    )?,
                    "LINK TYPE" => agree(
                        &mut e.link_type,
                        link_type(w).ok_or_else(|| bad("XGMI or PCIE"))?,
                        || bad("the same link type both ways"),
                    )?,
                    "NUMA BW" => {
                        if let Some(b) = bandwidth(w) {
                            agree(
                                &mut e.bandwidth,
                                b.map_err(|_| bad("<min>-<max> MB/s or N/A"))?,
                                || bad("the same bandwidth both ways"),
                            )?;
                        }
                    }
                    "ACCESS" => {
                        if w != "ENABLED" && w != "DISABLED" {
                            return Err(bad("ENABLED or DISABLED"));
                        }
                    }
                    "CACHE COHERANCY" | "ATOMICS" | "DMA" | "BI-DIRECTIONAL" => {}
                    other => {
                        return Err(at(
                            n,
                            1,
                            format!("unknown table {other:?}; tables: {TABLES}"),
                        ));
                    }
                }
            }
        }
    }
    let Some((_, names)) = bdfs else {
        return Err(at(
            1,
            1,
            format!(
                "no table found; expected `amd-smi topology` output (tables: {TABLES}) or its --json"
            ),
        ));
    };
    let gpus: Vec<(u32, Option<String>)> = names
        .into_iter()
        .enumerate()
        .map(|(i, b)| (i as u32, Some(b)))
        .collect();
    Ok(answers(&gpus, &pairs))
}

/// Keeps the first value and checks a second against it.
fn agree<T: PartialEq>(
    slot: &mut Option<T>,
    value: T,
    differ: impl Fn() -> AmdTextError,
) -> Result<(), AmdTextError> {
    match slot {
        Some(old) if *old != value => Err(differ()),
        Some(_) => Ok(()),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}
