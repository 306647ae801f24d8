//! NVLink health: a GPU with fewer active NVLinks than its peers or than its
//! product should have, links reported down, or links running slow, sets the
//! `Degraded` condition with the GPU and links named. A GPU lost or reporting
//! critical XID errors (found by the NVML backend's dynamic state, see
//! `backend::nvml::dynamic`) sets it too.

use crate::facts::NodeFacts;
use gputopo_api::{CONDITION_DEGRADED, GpuTopologySpec, LinkType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One thing wrong with one GPU's NVLinks.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthFinding {
    pub gpu: u32,
    pub kind: FindingKind,
    /// Plain-English detail naming the links, e.g. `links 2,3 down`.
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// Links reported inactive while others on the same GPU are up.
    LinksDown,
    /// Fewer active links than the product has.
    FewerLinksThanProduct,
    /// Fewer active links than the other GPUs of the same product on this node.
    FewerLinksThanPeers,
    /// Active links running below the product's (or the node's usual) line rate.
    SlowLinks,
    /// In the topology matrix, the GPU's NVLinks to its peers fall short of the
    /// all-to-all level every other GPU shares (one GPU fell off the NVSwitch).
    WeakerThanPeersInMatrix,
    /// The GPU stopped answering NVML (fell off the bus, GPU_IS_LOST, the
    /// driver gone); seen only by an agent that reads NVML while it runs.
    GpuLost,
    /// The driver reported a critical XID error for the GPU.
    CriticalXid,
}

/// NVLink ports and the line rate nvidia-smi reports for SXM parts, whose links
/// are always wired. PCIe cards (bridges optional) have no expectation.
/// Sources: docs/references.md (NVIDIA health-validation docs, nccl-tests#149/#212).
fn product_expectation(product: &str) -> Option<(u32, f64)> {
    let tokens: Vec<String> = product
        .split([' ', '-'])
        .map(|t| t.to_ascii_uppercase())
        .collect();
    let has = |t: &str| tokens.iter().any(|x| x == t);
    let pcie = has("PCIE") || has("NVL");
    if pcie {
        return None;
    }
    if has("V100") && (has("SXM2") || has("SXM3")) {
        Some((6, 25.781))
    } else if has("A800") && has("SXM4") {
        Some((8, 25.0))
    } else if has("A100") && has("SXM4") {
        Some((12, 25.0))
    } else if has("H800") {
        Some((8, 26.562))
    } else if (has("H100") && has("HBM3")) || has("H200") || has("H20") {
        Some((18, 26.562))
    } else if has("B200") || has("GB200") || has("B300") || has("GB300") {
        Some((18, 53.125))
    } else {
        None
    }
}

/// Everything wrong with the node's NVLinks; empty when healthy.
pub fn assess(spec: &GpuTopologySpec, facts: &NodeFacts) -> Vec<HealthFinding> {
    let mut findings = Vec::new();
    link_state_findings(facts, &mut findings);
    matrix_findings(spec, &mut findings);
    findings.sort_by_key(|f| f.gpu);
    findings
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn link_state_findings(facts: &NodeFacts, out: &mut Vec<HealthFinding>) {
    // Active link counts per product, to compare each GPU with its peers.
    let mut peers_best: BTreeMap<&str, u32> = BTreeMap::new();
    // The node's usual line rate, for products without a table entry.
    let mut speeds: Vec<f64> = Vec::new();
    for g in &facts.gpus {
        let Some(links) = &g.nvlinks else { continue };
        let active = links.iter().filter(|l| l.active).count() as u32;
        let product = g.product.as_deref().unwrap_or("");
        let best = peers_best.entry(product).or_default();
        *best = (*best).max(active);
        speeds.extend(
            links
                .iter()
                .filter(|l| l.active)
                .filter_map(|l| l.speed_gbps),
        );
    }
    speeds.sort_by(f64::total_cmp);
    let node_usual_speed = speeds.last().copied();

    for g in &facts.gpus {
        let Some(links) = &g.nvlinks else { continue };
        let product = g.product.as_deref().unwrap_or("");
        let expectation = product_expectation(product);
        let active: Vec<u32> = links.iter().filter(|l| l.active).map(|l| l.link).collect();
        let down: Vec<u32> = links.iter().filter(|l| !l.active).map(|l| l.link).collect();
        if !down.is_empty() && !active.is_empty() {
            out.push(HealthFinding {
                gpu: g.index,
                kind: FindingKind::LinksDown,
                detail: format!(
                    "NVLink {} {} down ({} of {} up)",
                    if down.len() == 1 { "link" } else { "links" },
                    join(&down),
                    active.len(),
                    links.len()
                ),
            });
        }
        if let Some((ports, _)) = expectation
            && (active.len() as u32) < ports
        {
            out.push(HealthFinding {
                gpu: g.index,
                kind: FindingKind::FewerLinksThanProduct,
                detail: format!("{} active NVLinks, a {product} has {ports}", active.len()),
            });
        }
        let peers = peers_best.get(product).copied().unwrap_or(0);
        if expectation.is_none() && (active.len() as u32) < peers && !active.is_empty() {
            out.push(HealthFinding {
                gpu: g.index,
                kind: FindingKind::FewerLinksThanPeers,
                detail: format!(
                    "{} active NVLinks, other {product} GPUs here have {peers}",
                    active.len()
                ),
            });
        }
        let expected_speed = expectation.map(|(_, s)| s).or(node_usual_speed);
        if let Some(expected) = expected_speed {
            let slow: Vec<(u32, f64)> = links
                .iter()
                .filter(|l| l.active)
                .filter_map(|l| l.speed_gbps.map(|s| (l.link, s)))
                .filter(|(_, s)| *s < expected * 0.9)
                .collect();
            if !slow.is_empty() {
                let ids: Vec<u32> = slow.iter().map(|(l, _)| *l).collect();
                let lo = slow.iter().map(|(_, s)| *s).fold(f64::INFINITY, f64::min);
                let hi = slow.iter().map(|(_, s)| *s).fold(0.0, f64::max);
                let range = if lo == hi {
                    format!("{lo}")
                } else {
                    format!("{lo}-{hi}")
                };
                out.push(HealthFinding {
                    gpu: g.index,
                    kind: FindingKind::SlowLinks,
                    detail: format!(
                        "NVLink {} {} at {range} GB/s, expected {expected} GB/s",
                        if ids.len() == 1 { "link" } else { "links" },
                        join(&ids),
                    ),
                });
            }
        }
    }
}

/// A GPU that fell off an all-to-all NVLink fabric: every other GPU pair shares
/// one NV level, this GPU reaches some peers below it. Needs at least 3 other
/// GPUs, so that an unbridged third PCIe card is not mistaken for a fault.
fn matrix_findings(spec: &GpuTopologySpec, out: &mut Vec<HealthFinding>) {
    let n = spec.gpus.len();
    if n < 4 {
        return;
    }
    for g in &spec.gpus {
        let others: Vec<_> = spec
            .links
            .iter()
            .filter(|l| l.a != g.index && l.b != g.index)
            .collect();
        let Some(k) = others.first().map(|l| l.nvlinks) else {
            continue;
        };
        let uniform = k > 0
            && others
                .iter()
                .all(|l| l.link_type == LinkType::Nv && l.nvlinks == k);
        if !uniform {
            continue;
        }
        let weak: Vec<_> = spec
            .links
            .iter()
            .filter(|l| (l.a == g.index || l.b == g.index) && l.nvlinks < k)
            .collect();
        if weak.is_empty() {
            continue;
        }
        let peers: Vec<u32> = weak
            .iter()
            .map(|l| if l.a == g.index { l.b } else { l.a })
            .collect();
        let best = weak.iter().map(|l| l.class()).max();
        let what = match best {
            Some(c) if c.nvlinks() > 0 => format!("only NV{} or less", c.nvlinks()),
            _ => "no NVLink".to_string(),
        };
        out.push(HealthFinding {
            gpu: g.index,
            kind: FindingKind::WeakerThanPeersInMatrix,
            detail: format!(
                "{what} to GPU {} while the other {} GPUs are joined all-to-all by NV{k}",
                join(&peers),
                n - 1
            ),
        });
    }
}

/// The `Degraded` condition for these findings. `now` is when the agent looked:
/// the caller reads the clock, this stays pure.
pub fn degraded_condition(findings: &[HealthFinding], now: Time) -> Condition {
    if findings.is_empty() {
        return Condition {
            type_: CONDITION_DEGRADED.to_string(),
            status: "False".to_string(),
            reason: "NvLinksHealthy".to_string(),
            message: "no missing, down or slow NVLinks found".to_string(),
            last_transition_time: now,
            observed_generation: None,
        };
    }
    let mut message = String::new();
    for (i, f) in findings.iter().enumerate() {
        if i > 0 {
            message.push_str("; ");
        }
        let _ = write!(message, "GPU{}: {}", f.gpu, f.detail);
    }
    // The reason names the worst kind found: a GPU gone outranks its links.
    let reason = if findings.iter().any(|f| f.kind == FindingKind::GpuLost) {
        "GpuLost"
    } else if findings.iter().any(|f| f.kind == FindingKind::CriticalXid) {
        "GpuXidError"
    } else {
        "NvLinkDegraded"
    };
    Condition {
        type_: CONDITION_DEGRADED.to_string(),
        status: "True".to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: now,
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn the_reason_names_the_worst_kind_found() {
        let f = |gpu, kind| HealthFinding {
            gpu,
            kind,
            detail: "x".into(),
        };
        let now = Time(Timestamp::UNIX_EPOCH);
        let reason = |findings: &[HealthFinding]| degraded_condition(findings, now.clone()).reason;
        assert_eq!(reason(&[f(1, FindingKind::LinksDown)]), "NvLinkDegraded");
        assert_eq!(
            reason(&[f(1, FindingKind::LinksDown), f(2, FindingKind::CriticalXid)]),
            "GpuXidError"
        );
        assert_eq!(
            reason(&[f(2, FindingKind::CriticalXid), f(5, FindingKind::GpuLost)]),
            "GpuLost"
        );
        let c = degraded_condition(&[f(5, FindingKind::GpuLost)], now.clone());
        assert_eq!((c.status.as_str(), c.message.as_str()), ("True", "GPU5: x"));
    }

    #[test]
    fn product_table_reads_real_names() {
        assert_eq!(
            product_expectation("NVIDIA H100 80GB HBM3"),
            Some((18, 26.562))
        );
        assert_eq!(product_expectation("NVIDIA H200"), Some((18, 26.562)));
        assert_eq!(product_expectation("NVIDIA H20-3e"), Some((18, 26.562)));
        assert_eq!(
            product_expectation("Tesla V100-SXM2-32GB"),
            Some((6, 25.781))
        );
        assert_eq!(
            product_expectation("NVIDIA A100-SXM4-80GB"),
            Some((12, 25.0))
        );
        assert_eq!(product_expectation("NVIDIA GB200"), Some((18, 53.125)));
        assert_eq!(product_expectation("NVIDIA A100 80GB PCIe"), None);
        assert_eq!(product_expectation("NVIDIA H100 NVL"), None);
        assert_eq!(product_expectation("NVIDIA RTX A6000"), None);
        assert_eq!(product_expectation("Tesla V100-PCIE-32GB"), None);
    }
}
