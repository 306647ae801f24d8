//! Link types between two GPUs (or a GPU and a NIC) and their order of quality.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How two devices are connected, in `nvidia-smi topo -m` vocabulary plus
/// AMD's `XGMI` (Infinity Fabric between GPUs, as `rocm-smi`/`amd-smi` name it).
///
/// An old driver's `SOC` reads as [`LinkType::Sys`].
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum LinkType {
    /// Traverses PCIe and the SMP interconnect between NUMA nodes (QPI/UPI/xGMI).
    #[serde(rename = "SYS")]
    Sys,
    /// Traverses PCIe and the interconnect between host bridges within one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Traverses PCIe and a PCIe host bridge (typically the CPU).
    #[serde(rename = "PHB")]
    Phb,
    /// Traverses several PCIe switches, not the host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Traverses at most one PCIe switch.
    #[serde(rename = "PIX")]
    Pix,
    /// AMD Infinity Fabric (xGMI) between GPUs of one hive; the link's `hops`
    /// say whether it is direct (1) or routed through other GPUs (2 or more).
    #[serde(rename = "XGMI")]
    Xgmi,
    /// A bonded set of NVLinks (directly or through NVSwitch).
    #[serde(rename = "NV")]
    Nv,
}

impl LinkType {
    pub const ALL: [LinkType; 7] = [
        LinkType::Nv,
        LinkType::Xgmi,
        LinkType::Pix,
        LinkType::Pxb,
        LinkType::Phb,
        LinkType::Node,
        LinkType::Sys,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LinkType::Nv => "NV",
            LinkType::Xgmi => "XGMI",
            LinkType::Pix => "PIX",
            LinkType::Pxb => "PXB",
            LinkType::Phb => "PHB",
            LinkType::Node => "NODE",
            LinkType::Sys => "SYS",
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most NVLinks one GPU has (H100, H200, B200: 18 ports): no pair of
/// GPUs can be joined by more, directly or through NVSwitch. A topology
/// claiming more is not trusted.
pub const MAX_BONDED_NVLINKS: u32 = 18;

/// The quality of one GPU-to-GPU connection: a link type and, for `NV`, how many
/// NVLinks are bonded. Ordered from worst to best, so `max`/`min` pick the
/// strongest/weakest link:
/// `SYS < NODE < PHB < PXB < PIX < XGMI-ROUTED < XGMI < NV1 < NV2 < … < NV18`.
///
/// # Where XGMI sits, and why
///
/// Peer bandwidth per GPU pair, one direction, from the vendors' data sheets
/// (docs/references.md, "Interconnect bandwidth"):
///
/// | link | GB/s |
/// | --- | --- |
/// | PCIe 4.0 x16 / 5.0 x16, shared by every transfer of the GPU | 32 / 64 |
/// | MI100 Infinity Fabric bridge, per peer link | 46 (276 GB/s bidirectional over 3 links) |
/// | MI210 Infinity Fabric bridge, per peer link | 50 (300 GB/s bidirectional over 3 links) |
/// | MI250X between the two GCDs of one package (4 links) | 200 |
/// | MI300X, one XGMI link to each of 7 peers | 64 |
/// | one NVLink (V100 / A100 / H100) | 25 / 25 / 25 |
///
/// A direct XGMI link is a dedicated point-to-point path to that peer, while
/// a PCIe path is the GPU's one host link shared with everything it moves, so
/// XGMI ranks above every PCIe class. XGMI routed through another GPU (hops ≥
/// 2) shares that GPU's links and ranks below a direct one. XGMI ranks below
/// `NV1` although one MI300X link carries more than one NVLink: no node mixes
/// the two (a pod asks `nvidia.com/gpu` or `amd.com/gpu`, never both), so the
/// two families are never compared for one pod's GPU set, and placing XGMI
/// below NVLink keeps every NVIDIA class's order unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkClass {
    Sys,
    Node,
    Phb,
    Pxb,
    Pix,
    /// XGMI between GPUs not wired to each other: the traffic crosses another
    /// GPU of the hive (2 or more hops).
    XgmiRouted,
    /// A direct XGMI link (1 hop).
    Xgmi,
    /// `NV<k>`, k ≥ 1.
    Nv(u32),
}

impl LinkClass {
    /// The class of a link type; `XGMI` reads as a direct link (see [`LinkClass::of`]).
    pub fn new(link_type: LinkType, nvlinks: u32) -> LinkClass {
        LinkClass::of(link_type, nvlinks, None)
    }

    /// The class of a link with its hop count where the source gives one:
    /// `XGMI` over 2 or more hops is [`LinkClass::XgmiRouted`].
    pub fn of(link_type: LinkType, nvlinks: u32, hops: Option<u32>) -> LinkClass {
        match link_type {
            LinkType::Nv => LinkClass::Nv(nvlinks.max(1)),
            LinkType::Xgmi if hops.is_some_and(|h| h >= 2) => LinkClass::XgmiRouted,
            LinkType::Xgmi => LinkClass::Xgmi,
            LinkType::Pix => LinkClass::Pix,
            LinkType::Pxb => LinkClass::Pxb,
            LinkType::Phb => LinkClass::Phb,
            LinkType::Node => LinkClass::Node,
            LinkType::Sys => LinkClass::Sys,
        }
    }

    pub fn link_type(self) -> LinkType {
        match self {
            LinkClass::Nv(_) => LinkType::Nv,
            LinkClass::Xgmi | LinkClass::XgmiRouted => LinkType::Xgmi,
            LinkClass::Pix => LinkType::Pix,
            LinkClass::Pxb => LinkType::Pxb,
            LinkClass::Phb => LinkType::Phb,
            LinkClass::Node => LinkType::Node,
            LinkClass::Sys => LinkType::Sys,
        }
    }

    /// Bonded NVLinks; 0 for every PCIe class.
    pub fn nvlinks(self) -> u32 {
        match self {
            LinkClass::Nv(k) => k,
            _ => 0,
        }
    }

    /// A dense rank for arithmetic (scores, tables): SYS=1 … PIX=5,
    /// XGMI-ROUTED=6, XGMI=7, `NV<k>`=7+k (saturating: an absurd `k` from an
    /// untrusted object cannot wrap).
    pub fn rank(self) -> u32 {
        match self {
            LinkClass::Sys => 1,
            LinkClass::Node => 2,
            LinkClass::Phb => 3,
            LinkClass::Pxb => 4,
            LinkClass::Pix => 5,
            LinkClass::XgmiRouted => 6,
            LinkClass::Xgmi => 7,
            LinkClass::Nv(k) => k.saturating_add(7),
        }
    }
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkClass::Nv(k) => write!(f, "NV{k}"),
            LinkClass::XgmiRouted => f.write_str("XGMI-ROUTED"),
            other => f.write_str(other.link_type().as_str()),
        }
    }
}

/// A cell of `nvidia-smi topo -m` could not be read as a link class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a link class; accepted: NV<k> (k ≥ 1), PIX, PXB, PHB, NODE, SYS, SOC")]
pub struct LinkClassParseError {
    pub value: String,
}

impl FromStr for LinkClass {
    type Err = LinkClassParseError;

    /// Reads a `nvidia-smi topo -m` cell: `NV12`, `PIX`, …; `SOC` (drivers
    /// before ~384) is `SYS`. `XGMI` is not nvidia-smi vocabulary: the AMD
    /// parsers read it themselves, so an XGMI cell in a topo -m matrix is an error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || LinkClassParseError {
            value: s.to_string(),
        };
        match s {
            "SYS" | "SOC" => Ok(LinkClass::Sys),
            "NODE" => Ok(LinkClass::Node),
            "PHB" => Ok(LinkClass::Phb),
            "PXB" => Ok(LinkClass::Pxb),
            "PIX" => Ok(LinkClass::Pix),
            _ => {
                let k = s.strip_prefix("NV").ok_or_else(err)?;
                if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) || k.len() > 3 {
                    return Err(err());
                }
                match k.parse::<u32>() {
                    Ok(k) if k >= 1 => Ok(LinkClass::Nv(k)),
                    _ => Err(err()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_worst_to_best() {
        let mut v: Vec<LinkClass> = ["NV2", "SYS", "PIX", "NV18", "NODE", "PHB", "PXB", "NV1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        v.sort();
        let names: Vec<String> = v.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            names,
            ["SYS", "NODE", "PHB", "PXB", "PIX", "NV1", "NV2", "NV18"]
        );
    }

    #[test]
    fn soc_is_sys_and_garbage_is_an_error() {
        assert_eq!("SOC".parse::<LinkClass>().unwrap(), LinkClass::Sys);
        for bad in [
            "NV", "NV0", "NVX", "PIXNODE", "NODENODE", "", " X ", "nv2", "NV-1",
        ] {
            let e = bad.parse::<LinkClass>().unwrap_err();
            assert!(e.to_string().contains("accepted"), "{e}");
        }
    }

    #[test]
    fn xgmi_sits_between_pcie_and_nvlink_and_hops_decide_routed() {
        assert_eq!(LinkClass::of(LinkType::Xgmi, 0, Some(1)), LinkClass::Xgmi);
        assert_eq!(LinkClass::of(LinkType::Xgmi, 0, None), LinkClass::Xgmi);
        assert_eq!(
            LinkClass::of(LinkType::Xgmi, 0, Some(3)),
            LinkClass::XgmiRouted
        );
        assert!(LinkClass::Pix < LinkClass::XgmiRouted);
        assert!(LinkClass::Xgmi < LinkClass::Nv(1));
        assert_eq!(LinkClass::Xgmi.to_string(), "XGMI");
        assert_eq!(LinkClass::XgmiRouted.to_string(), "XGMI-ROUTED");
        assert_eq!(LinkClass::XgmiRouted.link_type(), LinkType::Xgmi);
        assert!("XGMI".parse::<LinkClass>().is_err(), "not a topo -m cell");
    }

    #[test]
    fn rank_never_wraps() {
        assert_eq!(LinkClass::Nv(u32::MAX).rank(), u32::MAX);
        assert!(LinkClass::Nv(u32::MAX) > LinkClass::Nv(MAX_BONDED_NVLINKS));
    }

    #[test]
    fn rank_is_monotone_with_order() {
        let all = [
            LinkClass::Sys,
            LinkClass::Node,
            LinkClass::Phb,
            LinkClass::Pxb,
            LinkClass::Pix,
            LinkClass::XgmiRouted,
            LinkClass::Xgmi,
            LinkClass::Nv(1),
            LinkClass::Nv(4),
            LinkClass::Nv(18),
        ];
        for w in all.windows(2) {
            assert!(w[0] < w[1] && w[0].rank() < w[1].rank());
        }
    }
}
