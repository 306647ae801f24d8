//! The legend: what each line, box and colour of this picture means (only
//! what the picture shows), and who holds which GPU.

use super::model::{Fabric, Picture};
use super::palette;
use super::pcie::PcieKind;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub const WIDTH: f64 = 400.0;
const ROW: f64 = 26.0;
const HEADING: f64 = 34.0;
/// Characters a legend line keeps.
const CHARS: usize = 44;

/// How an entry is shown beside its text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Swatch {
    Line {
        colour: RGBColor,
        width: u32,
        dashed: bool,
    },
    Box {
        fill: RGBColor,
        border: RGBColor,
    },
    Disc {
        fill: RGBColor,
        border: RGBColor,
    },
    Heading,
    Text,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub swatch: Swatch,
    pub text: String,
}

fn entry(swatch: Swatch, text: impl Into<String>) -> Entry {
    let text: String = text.into();
    let text = if text.chars().count() > CHARS {
        format!("{}…", text.chars().take(CHARS - 1).collect::<String>())
    } else {
        text
    };
    Entry { swatch, text }
}

/// The fabrics drawn, strongest first.
fn fabrics(pic: &Picture) -> Vec<Fabric> {
    let mut all: Vec<Fabric> = pic.pairs.iter().map(|p| p.fabric).collect();
    all.extend(pic.hubs.iter().flat_map(|h| h.spokes.iter().map(|s| s.1)));
    let rank = |f: &Fabric| match f {
        Fabric::Nv(k) => 100 + k,
        Fabric::Xgmi => 50,
        Fabric::XgmiRouted(h) => 40 - h.unwrap_or(0).min(30),
    };
    all.sort_by_key(|f| std::cmp::Reverse(rank(f)));
    all.dedup();
    all
}

/// Every entry of `pic`'s legend, top to bottom.
pub fn entries(pic: &Picture) -> Vec<Entry> {
    let mut out = vec![entry(Swatch::Heading, "Links between GPUs")];
    let fabrics = fabrics(pic);
    for f in &fabrics {
        let (colour, width) = (palette::fabric(*f), palette::width(*f));
        let text = match f {
            Fabric::Nv(1) => "1 NVLink".to_string(),
            Fabric::Nv(k) => format!("{k} NVLinks bonded"),
            Fabric::Xgmi => "XGMI, direct".into(),
            Fabric::XgmiRouted(_) => "XGMI, routed through other GPUs".into(),
        };
        let dashed = matches!(f, Fabric::XgmiRouted(_));
        out.push(entry(
            Swatch::Line {
                colour,
                width,
                dashed,
            },
            text,
        ));
    }
    if fabrics.is_empty() {
        out.push(entry(Swatch::Text, "none: GPUs talk over PCIe only"));
    }
    if let Some(hub) = pic.hubs.first() {
        let xgmi = hub.spokes.iter().any(|s| !matches!(s.1, Fabric::Nv(_)));
        let (fill, border) = if xgmi {
            (palette::HUB_XGMI, palette::XGMI)
        } else {
            (palette::HUB_NVLINK, palette::NVLINK)
        };
        let text = match hub.label.as_str() {
            "NVSwitch" => "NVSwitch: each GPU to all, its links' width",
            "XGMI mesh" => "XGMI mesh: a direct link for every pair",
            _ => "every pair joined directly, alike",
        };
        out.push(entry(Swatch::Disc { fill, border }, text));
    }
    if pic.groups.len() > 1 {
        out.push(entry(Swatch::Heading, "NUMA nodes"));
        out.push(entry(
            Swatch::Box {
                fill: palette::band(0),
                border: palette::band(0),
            },
            "a band per node: NODE inside, SYS across",
        ));
    }
    pcie_entries(pic, &mut out);
    out.push(entry(Swatch::Heading, "Allocation"));
    out.push(entry(Swatch::Text, pic.allocation.clone()));
    for (i, (pod, gpus)) in pic.pods.iter().enumerate() {
        let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
        let fill = palette::pod(i);
        out.push(entry(
            Swatch::Box {
                fill,
                border: palette::INK,
            },
            format!("{pod}: GPU {}", list.join(", ")),
        ));
    }
    if !pic.pods.is_empty() {
        out.push(entry(
            Swatch::Box {
                fill: palette::WHITE,
                border: palette::INK,
            },
            "free",
        ));
    }
    out
}

fn pcie_entries(pic: &Picture, out: &mut Vec<Entry>) {
    let nodes = pic.pcie_nodes();
    if nodes.is_empty() && pic.pcie.nics.is_empty() {
        return;
    }
    out.push(entry(Swatch::Heading, "PCIe (nvidia-smi topo -m classes)"));
    for kind in [PcieKind::Switch, PcieKind::Switches, PcieKind::HostBridge] {
        if nodes.iter().any(|n| n.kind == kind) {
            let fill = if kind == PcieKind::HostBridge {
                palette::BRIDGE_FILL
            } else {
                palette::SWITCH_FILL
            };
            let text = match kind {
                PcieKind::Switch => "PIX: under one PCIe switch",
                PcieKind::Switches => "PXB: under a tree of PCIe switches",
                PcieKind::HostBridge => "PHB: through one CPU host bridge",
            };
            out.push(entry(
                Swatch::Box {
                    fill,
                    border: palette::PCIE,
                },
                text,
            ));
        }
    }
    if !pic.pcie.nics.is_empty() {
        out.push(entry(
            Swatch::Box {
                fill: palette::NIC_FILL,
                border: palette::NIC,
            },
            "NIC, by its switch or nearest GPUs",
        ));
        if pic
            .pcie
            .nics
            .iter()
            .any(|n| n.up.is_none() && (1..=2).contains(&n.near.len()))
        {
            out.push(entry(
                Swatch::Line {
                    colour: palette::NIC,
                    width: 2,
                    dashed: true,
                },
                "NIC to nearest GPUs, with the class",
            ));
        }
    }
}

fn row_height(e: &Entry) -> f64 {
    if e.swatch == Swatch::Heading {
        HEADING
    } else {
        ROW
    }
}

/// The legend's width and height.
pub fn size(pic: &Picture) -> (f64, f64) {
    (
        WIDTH,
        entries(pic).iter().map(row_height).sum::<f64>() + 12.0,
    )
}

/// Draws the legend with its top left corner at `origin`.
pub fn paint<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pic: &Picture,
    origin: (f64, f64),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let mut y = origin.1;
    let x = origin.0.round() as i32;
    for e in entries(pic) {
        let h = row_height(&e);
        let mid = (y
            + h / 2.0
            + if e.swatch == Swatch::Heading {
                4.0
            } else {
                0.0
            })
        .round() as i32;
        let text_x = match e.swatch {
            Swatch::Heading | Swatch::Text => x,
            _ => x + 46,
        };
        let size = if e.swatch == Swatch::Heading { 20 } else { 16 };
        let colour = if e.swatch == Swatch::Text {
            palette::MUTED
        } else {
            palette::INK
        };
        match e.swatch {
            Swatch::Line {
                colour,
                width,
                dashed,
            } => {
                let pts = vec![(x, mid), (x + 36, mid)];
                let style = colour.stroke_width(width);
                if dashed {
                    area.draw(&DashedPathElement::new(pts, 7, 5, style))?;
                } else {
                    area.draw(&PathElement::new(pts, style))?;
                }
            }
            Swatch::Box { fill, border } => {
                let r = [(x + 4, mid - 9), (x + 32, mid + 9)];
                area.draw(&Rectangle::new(r, fill.filled()))?;
                area.draw(&Rectangle::new(r, border.stroke_width(1)))?;
            }
            Swatch::Disc { fill, border } => {
                area.draw(&Circle::new((x + 18, mid), 10, fill.filled()))?;
                area.draw(&Circle::new((x + 18, mid), 10, border.stroke_width(2)))?;
            }
            Swatch::Heading | Swatch::Text => {}
        }
        let style = TextStyle::from(("sans-serif", size).into_font())
            .color(&colour)
            .pos(Pos::new(HPos::Left, VPos::Center));
        area.draw(&Text::new(e.text.clone(), (text_x, mid), style))?;
        y += h;
    }
    Ok(())
}
