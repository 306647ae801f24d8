//! The picture's colours and line widths. Colours from Paul Tol's
//! colour-blind-safe schemes ("bright" for lines, "light" for pods), so
//! no two meanings differ by red against green alone.

use super::model::Fabric;
use plotters::style::RGBColor;

pub const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub const MUTED: RGBColor = RGBColor(0x55, 0x55, 0x55);
pub const WHITE: RGBColor = RGBColor(0xFF, 0xFF, 0xFF);
pub const NVLINK: RGBColor = RGBColor(0x22, 0x88, 0x33);
pub const XGMI: RGBColor = RGBColor(0xAA, 0x33, 0x77);
pub const HUB_NVLINK: RGBColor = RGBColor(0xDC, 0xEF, 0xDF);
pub const HUB_XGMI: RGBColor = RGBColor(0xF3, 0xDE, 0xEA);
pub const PCIE: RGBColor = RGBColor(0x80, 0x80, 0x80);
pub const SWITCH_FILL: RGBColor = RGBColor(0xE2, 0xE2, 0xE2);
pub const BRIDGE_FILL: RGBColor = RGBColor(0xF2, 0xF2, 0xF2);
pub const NIC: RGBColor = RGBColor(0x44, 0x77, 0xAA);
pub const NIC_FILL: RGBColor = RGBColor(0xDD, 0xE9, 0xF5);
/// NUMA groups' bands, pale enough for pods' colours to stand out on them.
pub const BANDS: [RGBColor; 4] = [
    RGBColor(0xEC, 0xF2, 0xFA),
    RGBColor(0xFB, 0xF0, 0xE4),
    RGBColor(0xEC, 0xF6, 0xEE),
    RGBColor(0xF5, 0xEC, 0xF5),
];
/// Pods' colours (Tol "light"), in the legend's order.
pub const PODS: [RGBColor; 8] = [
    RGBColor(0x77, 0xAA, 0xDD),
    RGBColor(0xEE, 0x88, 0x66),
    RGBColor(0xEE, 0xDD, 0x88),
    RGBColor(0xFF, 0xAA, 0xBB),
    RGBColor(0x99, 0xDD, 0xFF),
    RGBColor(0x44, 0xBB, 0x99),
    RGBColor(0xBB, 0xCC, 0x33),
    RGBColor(0xAA, 0xAA, 0x00),
];

pub fn pod(i: usize) -> RGBColor {
    PODS[i % PODS.len()]
}

pub fn band(i: usize) -> RGBColor {
    BANDS[i % BANDS.len()]
}

pub fn fabric(f: Fabric) -> RGBColor {
    match f {
        Fabric::Nv(_) => NVLINK,
        Fabric::Xgmi | Fabric::XgmiRouted(_) => XGMI,
    }
}

/// Line width in pixels: grows with the NVLink count (NV1 2, NV2 4, NV4
/// 7, NV6 10, NV8 and more 12), so a DGX-1's double links stand out.
pub fn width(f: Fabric) -> u32 {
    match f {
        Fabric::Nv(k) => (2.0 + f64::from(k.saturating_sub(1)) * 1.5)
            .min(12.0)
            .round() as u32,
        Fabric::Xgmi => 5,
        Fabric::XgmiRouted(_) => 3,
    }
}
