//! Draws a laid-out picture on any plotters backend: the same calls make
//! the SVG and the PNG. Back to front: NUMA bands, PCIe and NIC lines,
//! fabric edges and hub spokes, hubs, boxes, edge labels, title, legend.

use super::layout::{
    Band, GPU_H, GPU_W, HUB_R, LABEL_FONT, Layout, NIC_H, NIC_W, PCIE_H, PCIE_W, Pt, label_size,
};
use super::legend;
use super::model::{Fabric, Gpu, Picture};
use super::palette;
use super::pcie::PcieKind;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn ip(p: Pt) -> (i32, i32) {
    (p.0.round() as i32, p.1.round() as i32)
}

fn style(size: f64, colour: RGBColor, h: HPos) -> TextStyle<'static> {
    TextStyle {
        font: ("sans-serif", size).into_font(),
        color: colour.to_backend_color(),
        pos: Pos::new(h, VPos::Center),
    }
}

fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &str,
    at: Pt,
    size: f64,
    colour: RGBColor,
) -> Drawn<DB> {
    area.draw(&Text::new(
        s.to_string(),
        ip(at),
        style(size, colour, HPos::Center),
    ))
}

/// A filled box with a border, centred on `c`.
fn boxed<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: Pt,
    size: Pt,
    fill: RGBColor,
    border: ShapeStyle,
) -> Drawn<DB> {
    let r = [
        ip((c.0 - size.0 / 2.0, c.1 - size.1 / 2.0)),
        ip((c.0 + size.0 / 2.0, c.1 + size.1 / 2.0)),
    ];
    area.draw(&Rectangle::new(r, fill.filled()))?;
    area.draw(&Rectangle::new(r, border))
}

fn line<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    a: Pt,
    b: Pt,
    style: ShapeStyle,
    dashed: bool,
) -> Drawn<DB> {
    let pts = vec![ip(a), ip(b)];
    if dashed {
        area.draw(&DashedPathElement::new(pts, 9, 6, style))
    } else {
        area.draw(&PathElement::new(pts, style))
    }
}

/// The whole picture.
pub fn paint<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pic: &Picture,
    layout: &Layout,
) -> Drawn<DB> {
    area.fill(&palette::WHITE)?;
    for (i, (band, group)) in layout.bands.iter().zip(&pic.groups).enumerate() {
        paint_band(area, band, layout.center, palette::band(i))?;
        text(area, &group.label, band.label_at, 16.0, palette::MUTED)?;
    }
    paint_pcie_lines(area, pic, layout)?;
    for p in &pic.pairs {
        let (a, b) = (layout.gpus[&p.a], layout.gpus[&p.b]);
        let s = palette::fabric(p.fabric).stroke_width(palette::width(p.fabric));
        line(area, a, b, s, matches!(p.fabric, Fabric::XgmiRouted(_)))?;
    }
    for (hub, at) in pic.hubs.iter().zip(&layout.hubs) {
        for (g, f) in &hub.spokes {
            let s = palette::fabric(*f).stroke_width(palette::width(*f));
            line(area, *at, layout.gpus[g], s, false)?;
        }
    }
    for (hub, at) in pic.hubs.iter().zip(&layout.hubs) {
        let colour = palette::fabric(hub.spokes.first().map_or(Fabric::Nv(1), |s| s.1));
        let fill = if colour == palette::NVLINK {
            palette::HUB_NVLINK
        } else {
            palette::HUB_XGMI
        };
        area.draw(&Circle::new(ip(*at), HUB_R as i32, fill.filled()))?;
        area.draw(&Circle::new(ip(*at), HUB_R as i32, colour.stroke_width(3)))?;
        text(area, &hub.label, (at.0, at.1 - 9.0), 16.0, palette::INK)?;
        let each = match hub.uniform() {
            Some(Fabric::Nv(k)) => format!("NV{k} each"),
            Some(_) => "every pair direct".to_string(),
            None => "per GPU below".to_string(),
        };
        text(area, &each, (at.0, at.1 + 12.0), 14.0, palette::INK)?;
    }
    for gpu in &pic.gpus {
        paint_gpu(area, gpu, layout.gpus[&gpu.index])?;
    }
    paint_pcie_boxes(area, pic, layout)?;
    paint_labels(area, pic, layout)?;
    text_left(area, &pic.title, layout.title, 26.0, palette::INK)?;
    let sub = (layout.title.0, layout.title.1 + 34.0);
    text_left(area, &pic.subtitle, sub, 16.0, palette::MUTED)?;
    legend::paint(area, pic, layout.legend)
}

fn text_left<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &str,
    at: Pt,
    size: f64,
    colour: RGBColor,
) -> Drawn<DB> {
    let at = (at.0, at.1 + size / 2.0);
    area.draw(&Text::new(
        s.to_string(),
        ip(at),
        style(size, colour, HPos::Left),
    ))
}

/// An annular sector from `band.from` to `band.to`.
fn paint_band<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    band: &Band,
    center: Pt,
    colour: RGBColor,
) -> Drawn<DB> {
    let steps = 48;
    let arc = |r: f64, k: i32| {
        let a = band.from + (band.to - band.from) * f64::from(k) / f64::from(steps);
        ip((center.0 + r * a.cos(), center.1 + r * a.sin()))
    };
    let mut pts: Vec<(i32, i32)> = (0..=steps).map(|k| arc(band.outer, k)).collect();
    pts.extend((0..=steps).rev().map(|k| arc(band.inner, k)));
    area.draw(&Polygon::new(pts, colour.filled()))
}

/// GPUs and NICs to the switch or host bridge above them, switches to
/// their host bridge; NICs with no PCIe node to their nearest GPUs.
fn paint_pcie_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pic: &Picture,
    layout: &Layout,
) -> Drawn<DB> {
    let grey = palette::PCIE.stroke_width(2);
    for gpu in &pic.gpus {
        if let Some(up) = pic.pcie.up(gpu.index) {
            line(area, layout.gpus[&gpu.index], layout.pcie[up], grey, false)?;
        }
    }
    for (i, node) in pic.pcie_nodes().iter().enumerate() {
        if let Some(parent) = node.parent {
            line(area, layout.pcie[i], layout.pcie[parent], grey, false)?;
        }
    }
    for (j, nic) in pic.pcie.nics.iter().enumerate() {
        match nic.up {
            Some(up) => line(area, layout.nics[j], layout.pcie[up], grey, false)?,
            None if nic.near.len() <= 2 => {
                for g in &nic.near {
                    let s = palette::NIC.stroke_width(2);
                    line(area, layout.nics[j], layout.gpus[g], s, true)?;
                }
            }
            None => {}
        }
    }
    Ok(())
}

fn paint_pcie_boxes<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pic: &Picture,
    layout: &Layout,
) -> Drawn<DB> {
    for (node, at) in pic.pcie_nodes().iter().zip(&layout.pcie) {
        let fill = if node.kind == PcieKind::HostBridge {
            palette::BRIDGE_FILL
        } else {
            palette::SWITCH_FILL
        };
        boxed(
            area,
            *at,
            (PCIE_W, PCIE_H),
            fill,
            palette::PCIE.stroke_width(2),
        )?;
        text(
            area,
            node.kind.label(),
            (at.0, at.1 - 8.0),
            14.0,
            palette::INK,
        )?;
        text(
            area,
            node.kind.class(),
            (at.0, at.1 + 10.0),
            13.0,
            palette::MUTED,
        )?;
    }
    for (nic, at) in pic.pcie.nics.iter().zip(&layout.nics) {
        boxed(
            area,
            *at,
            (NIC_W, NIC_H),
            palette::NIC_FILL,
            palette::NIC.stroke_width(2),
        )?;
        let second = match (nic.up, nic.class) {
            (None, Some(class)) if nic.near.len() == pic.gpus.len() && nic.near.len() > 2 => {
                format!("{class}: every GPU")
            }
            (None, Some(class)) if nic.near.len() > 2 => {
                format!("{class}: GPU {}", ranges(&nic.near))
            }
            (_, Some(_)) => "NIC".to_string(),
            (_, None) => "no GPU link known".to_string(),
        };
        let name = short(&nic.name, 16);
        text(area, &name, (at.0, at.1 - 8.0), 14.0, palette::INK)?;
        text(
            area,
            &short(&second, 20),
            (at.0, at.1 + 10.0),
            12.0,
            palette::MUTED,
        )?;
    }
    Ok(())
}

/// `0,1,2,3,6` → `0-3,6`.
fn ranges(gpus: &[u32]) -> String {
    let mut sorted = gpus.to_vec();
    sorted.sort_unstable();
    let mut parts: Vec<String> = Vec::new();
    let mut k = 0;
    while k < sorted.len() {
        let mut end = k;
        while end + 1 < sorted.len() && sorted[end + 1] == sorted[end] + 1 {
            end += 1;
        }
        parts.push(if end > k {
            format!("{}-{}", sorted[k], sorted[end])
        } else {
            sorted[k].to_string()
        });
        k = end + 1;
    }
    parts.join(",")
}

fn short(s: &str, chars: usize) -> String {
    if s.chars().count() > chars {
        format!("{}…", s.chars().take(chars - 1).collect::<String>())
    } else {
        s.to_string()
    }
}

/// A GPU's box: index, product, memory, holder; filled with its pod's colour.
fn paint_gpu<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, gpu: &Gpu, at: Pt) -> Drawn<DB> {
    let fill = gpu.pod.map_or(palette::WHITE, palette::pod);
    boxed(area, at, (GPU_W, GPU_H), fill, palette::INK.stroke_width(2))?;
    let mut lines: Vec<(String, f64)> = vec![(
        format!("GPU {}{}", gpu.index, if gpu.mig { " · MIG" } else { "" }),
        21.0,
    )];
    if let Some(p) = &gpu.product {
        lines.push((p.clone(), 15.0));
    }
    if let Some(mib) = gpu.memory_mib {
        lines.push((format!("{:.0} GiB", mib as f64 / 1024.0), 15.0));
    }
    if let Some(first) = gpu.holders.first() {
        let more = gpu.holders.len() - 1;
        let who = if more > 0 {
            format!("{} +{more}", short(first, 18))
        } else {
            short(first, 24)
        };
        lines.push((who, 15.0));
    }
    let step = 19.0;
    let top = at.1 - step * (lines.len() as f64 - 1.0) / 2.0;
    for (k, (s, size)) in lines.iter().enumerate() {
        text(area, s, (at.0, top + k as f64 * step), *size, palette::INK)?;
    }
    Ok(())
}

/// A label on a white ground framed in its edge's colour.
fn label<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &str,
    at: Pt,
    colour: RGBColor,
) -> Drawn<DB> {
    boxed(
        area,
        at,
        label_size(s),
        palette::WHITE,
        colour.stroke_width(1),
    )?;
    text(area, s, at, LABEL_FONT, palette::INK)
}

fn paint_labels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pic: &Picture,
    layout: &Layout,
) -> Drawn<DB> {
    for (p, at) in pic.pairs.iter().zip(&layout.pair_labels) {
        label(area, &p.fabric.label(), *at, palette::fabric(p.fabric))?;
    }
    for (hub, spots) in pic.hubs.iter().zip(&layout.spoke_labels) {
        for ((_, f), at) in hub.spokes.iter().zip(spots) {
            label(area, &f.label(), *at, palette::fabric(*f))?;
        }
    }
    for (nic, at) in pic.pcie.nics.iter().zip(&layout.nic_labels) {
        if let (Some(at), Some(class)) = (at, nic.class) {
            label(area, class.as_str(), *at, palette::NIC)?;
        }
    }
    Ok(())
}
