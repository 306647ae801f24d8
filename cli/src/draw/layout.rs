//! Where everything goes. The GPUs sit on a ring, NUMA groups in arcs of
//! it (two groups side by side, left and right, each top to bottom); a
//! chord between two points of a circle passes no other point of it, so
//! pair edges cross no GPU. A hub sits at the middle of its GPUs. Outside
//! the ring, one ring each: PCIe switches, host bridges, NICs, every item
//! at the angle of what it joins, pushed apart where they would touch.
//! Coordinates are pixels, y down.

use super::legend;
use super::model::Picture;
use std::collections::BTreeMap;
use std::f64::consts::{FRAC_PI_2, PI, TAU};

pub type Pt = (f64, f64);

pub const GPU_W: f64 = 176.0;
pub const GPU_H: f64 = 94.0;
pub const PCIE_W: f64 = 116.0;
pub const PCIE_H: f64 = 40.0;
pub const NIC_W: f64 = 132.0;
pub const NIC_H: f64 = 40.0;
pub const HUB_R: f64 = 56.0;
pub const LABEL_FONT: f64 = 16.0;
const MARGIN: f64 = 24.0;
const TITLE_H: f64 = 76.0;
const RING_GAP: f64 = 100.0;

/// A NUMA group's arc: an annular sector behind its GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub from: f64,
    pub to: f64,
    pub inner: f64,
    pub outer: f64,
    pub label_at: Pt,
}

/// Every position of a picture.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub width: u32,
    pub height: u32,
    pub center: Pt,
    pub gpus: BTreeMap<u32, Pt>,
    pub hubs: Vec<Pt>,
    pub pcie: Vec<Pt>,
    pub nics: Vec<Pt>,
    /// One per group, when there are several.
    pub bands: Vec<Band>,
    pub pair_labels: Vec<Pt>,
    /// Per hub, a label per spoke when the spokes differ.
    pub spoke_labels: Vec<Vec<Pt>>,
    /// Per NIC drawn straight to its nearest GPUs, where its class is written.
    pub nic_labels: Vec<Option<Pt>>,
    pub legend: Pt,
    pub title: Pt,
}

/// The width of a label of `chars` characters at [`LABEL_FONT`].
pub fn label_size(text: &str) -> Pt {
    (
        text.chars().count() as f64 * LABEL_FONT * 0.56 + 10.0,
        LABEL_FONT + 6.0,
    )
}

/// An axis-aligned box: centre and size.
#[derive(Clone, Copy, Debug)]
struct Rect {
    c: Pt,
    size: Pt,
}

impl Rect {
    fn overlap(&self, o: &Rect) -> f64 {
        let dx = (self.size.0 + o.size.0) / 2.0 - (self.c.0 - o.c.0).abs();
        let dy = (self.size.1 + o.size.1) / 2.0 - (self.c.1 - o.c.1).abs();
        if dx > 0.0 && dy > 0.0 { dx * dy } else { 0.0 }
    }
}

fn at(r: f64, angle: f64) -> Pt {
    (r * angle.cos(), r * angle.sin())
}

/// The ring: each GPU's angle.
fn ring(pic: &Picture) -> (f64, BTreeMap<u32, f64>) {
    let n = pic.gpus.len().max(1);
    let step = TAU / n as f64;
    // Neighbours on the ring at least a box and a gap apart.
    let radius = match n {
        1 => 0.0,
        2 => 230.0,
        _ => ((GPU_W + 70.0) / (2.0 * (PI / n as f64).sin())).max(230.0),
    };
    let mut angles = BTreeMap::new();
    if let [left, right] = pic.groups.as_slice()
        && left.gpus.len() == right.gpus.len()
    {
        // Side by side: the first group down the left, the second down the
        // right, so that GPU i faces GPU i + n/2 (a DGX-1's cross links).
        let (l, r) = (left.gpus.len() as f64, right.gpus.len() as f64);
        for (i, g) in left.gpus.iter().enumerate() {
            angles.insert(*g, PI + ((l - 1.0) / 2.0 - i as f64) * step);
        }
        for (i, g) in right.gpus.iter().enumerate() {
            angles.insert(*g, (i as f64 - (r - 1.0) / 2.0) * step);
        }
    } else {
        let order = pic.groups.iter().flat_map(|g| g.gpus.iter());
        let start = if n == 1 {
            -FRAC_PI_2
        } else {
            -FRAC_PI_2 - step / 2.0
        };
        for (p, g) in order.enumerate() {
            angles.insert(*g, start + p as f64 * step);
        }
    }
    (radius, angles)
}

/// The mean direction of some angles.
fn mean_angle(angles: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut s, mut c, mut n) = (0.0, 0.0, 0);
    for a in angles {
        s += a.sin();
        c += a.cos();
        n += 1;
    }
    (n > 0).then(|| {
        if s.abs() + c.abs() < 1e-9 {
            FRAC_PI_2
        } else {
            s.atan2(c)
        }
    })
}

/// Whether GPUs lie all around the ring: their directions cancel out.
fn balanced(gpus: &[u32], gpu_angle: &BTreeMap<u32, f64>) -> bool {
    let (mut s, mut c, mut n) = (0.0, 0.0, 0.0);
    for a in gpus.iter().filter_map(|g| gpu_angle.get(g)) {
        s += a.sin();
        c += a.cos();
        n += 1.0;
    }
    n >= 3.0 && s.hypot(c) < 0.25 * n
}

/// Pushes items on one ring apart until neighbours are `width` apart along it.
fn spread(angles: &mut [f64], radius: f64, width: f64) {
    let n = angles.len();
    if n < 2 || radius <= 0.0 {
        return;
    }
    let min = ((width + 14.0) / radius).min(TAU / n as f64);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        angles[a]
            .rem_euclid(TAU)
            .total_cmp(&angles[b].rem_euclid(TAU))
    });
    // Sorted and unwrapped: a[k] <= a[k + 1], the last before a[0] + TAU.
    let mut a: Vec<f64> = order.iter().map(|&i| angles[i].rem_euclid(TAU)).collect();
    for _ in 0..500 {
        let mut moved = false;
        for k in 0..n {
            let next = if k + 1 < n { a[k + 1] } else { a[0] + TAU };
            let gap = next - a[k];
            if gap + 1e-6 < min {
                let push = (min - gap) / 2.0;
                a[k] -= push;
                if k + 1 < n {
                    a[k + 1] += push;
                } else {
                    a[0] += push;
                }
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    for (k, &i) in order.iter().enumerate() {
        angles[i] = a[k];
    }
}

/// Moves a box outward along its ray until it overlaps none placed before.
fn settle(angle: f64, radius: f64, size: Pt, placed: &mut Vec<Rect>) -> Pt {
    let mut r = radius;
    for _ in 0..200 {
        let rect = Rect {
            c: at(r, angle),
            size: (size.0 + 24.0, size.1 + 24.0),
        };
        if placed.iter().all(|o| rect.overlap(o) == 0.0) {
            break;
        }
        r += 6.0;
    }
    placed.push(Rect {
        c: at(r, angle),
        size,
    });
    at(r, angle)
}

/// The outer rings: PCIe nodes (switches inside, host bridges outside) and
/// NICs, each settled clear of the boxes placed before it.
fn outer(pic: &Picture, radius: f64, gpu_angle: &BTreeMap<u32, f64>) -> (Vec<Pt>, Vec<Pt>, f64) {
    let mut placed: Vec<Rect> = gpu_angle
        .values()
        .map(|&a| Rect {
            c: at(radius, a),
            size: (GPU_W, GPU_H),
        })
        .collect();
    let nodes = pic.pcie_nodes();
    let bridge = |i: usize| nodes[i].kind == super::pcie::PcieKind::HostBridge;
    let mean_of = |gpus: &[u32]| {
        mean_angle(gpus.iter().filter_map(|g| gpu_angle.get(g).copied())).unwrap_or(FRAC_PI_2)
    };
    let mut pcie = vec![(0.0, 0.0); nodes.len()];
    let mut pcie_angle = vec![0.0; nodes.len()];
    let mut r = (radius + RING_GAP).max(150.0);
    // A host bridge whose GPUs lie all around the ring (a PCIe box's one
    // root) sits in the middle, when no hub does.
    let centred = (0..nodes.len())
        .find(|&i| bridge(i) && pic.hubs.is_empty() && balanced(&nodes[i].all_gpus, gpu_angle));
    if let Some(i) = centred {
        placed.push(Rect {
            c: (0.0, 0.0),
            size: (PCIE_W, PCIE_H),
        });
        pcie_angle[i] = FRAC_PI_2;
    }
    for level in [false, true] {
        let idx: Vec<usize> = (0..nodes.len())
            .filter(|&i| bridge(i) == level && Some(i) != centred)
            .collect();
        let mut angles: Vec<f64> = idx.iter().map(|&i| mean_of(&nodes[i].all_gpus)).collect();
        spread(&mut angles, r, PCIE_W);
        for (k, &i) in idx.iter().enumerate() {
            pcie[i] = settle(angles[k], r, (PCIE_W, PCIE_H), &mut placed);
            pcie_angle[i] = angles[k];
        }
        // The next ring a step out; `settle` moves what still collides.
        if !idx.is_empty() {
            r += RING_GAP * 0.7;
        }
    }
    let mut angles: Vec<f64> = pic
        .pcie
        .nics
        .iter()
        .map(|nic| match nic.up {
            Some(up) => pcie_angle[up],
            None => mean_of(&nic.near),
        })
        .collect();
    spread(&mut angles, r, NIC_W);
    let nics: Vec<Pt> = angles
        .iter()
        .map(|&a| settle(a, r, (NIC_W, NIC_H), &mut placed))
        .collect();
    (pcie, nics, reach(&placed))
}

/// How far from the centre the farthest box's middle is.
fn reach(placed: &[Rect]) -> f64 {
    placed
        .iter()
        .map(|b| b.c.0.hypot(b.c.1))
        .fold(0.0, f64::max)
}

impl Layout {
    pub fn new(pic: &Picture) -> Layout {
        let (radius, angle) = ring(pic);
        let gpus: BTreeMap<u32, Pt> = angle.iter().map(|(g, a)| (*g, at(radius, *a))).collect();
        let hubs: Vec<Pt> = pic
            .hubs
            .iter()
            .map(|h| {
                let n = h.spokes.len().max(1) as f64;
                let (x, y) = h
                    .spokes
                    .iter()
                    .filter_map(|s| gpus.get(&s.0))
                    .fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
                (x / n, y / n)
            })
            .collect();
        let (pcie, nics, reach) = outer(pic, radius, &angle);
        let bands = bands(pic, radius, reach, &angle);
        let mut frame = Frame::default();
        let mut layout = Layout {
            width: 0,
            height: 0,
            center: (0.0, 0.0),
            gpus,
            hubs,
            pcie,
            nics,
            bands,
            pair_labels: Vec::new(),
            spoke_labels: Vec::new(),
            nic_labels: Vec::new(),
            legend: (0.0, 0.0),
            title: (0.0, 0.0),
        };
        frame.boxes(&layout);
        layout.place_labels(pic, &mut frame);
        layout.fit(pic, &frame);
        layout
    }

    /// Edge labels, each at the first point along its edge that overlaps
    /// nothing placed before (the least overlap when none is clear).
    fn place_labels(&mut self, pic: &Picture, frame: &mut Frame) {
        for p in &pic.pairs {
            let (a, b) = (self.gpus[&p.a], self.gpus[&p.b]);
            let pos = frame.label(
                a,
                b,
                &p.fabric.label(),
                &[0.5, 0.38, 0.62, 0.3, 0.7, 0.44, 0.56, 0.22, 0.78],
            );
            self.pair_labels.push(pos);
        }
        for (h, hub) in pic.hubs.iter().enumerate() {
            let mut spots = Vec::new();
            if hub.uniform().is_none() {
                for (g, f) in &hub.spokes {
                    let pos =
                        frame.label(self.hubs[h], self.gpus[g], &f.label(), &[0.62, 0.55, 0.7]);
                    spots.push(pos);
                }
            }
            self.spoke_labels.push(spots);
        }
        for b in &mut self.bands {
            b.label_at = frame.band_label(b);
        }
        for (j, nic) in pic.pcie.nics.iter().enumerate() {
            let direct = nic.up.is_none() && (1..=2).contains(&nic.near.len());
            let label = nic.class.map(|c| c.as_str()).unwrap_or("");
            self.nic_labels.push(direct.then(|| {
                frame.label(
                    self.nics[j],
                    self.gpus[&nic.near[0]],
                    label,
                    &[0.5, 0.4, 0.6],
                )
            }));
        }
    }

    /// Moves everything into a canvas with room for the title and legend.
    fn fit(&mut self, pic: &Picture, frame: &Frame) {
        let (mut x0, mut y0, mut x1, mut y1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
        let mut grow = |p: Pt, s: Pt| {
            x0 = x0.min(p.0 - s.0 / 2.0);
            x1 = x1.max(p.0 + s.0 / 2.0);
            y0 = y0.min(p.1 - s.1 / 2.0);
            y1 = y1.max(p.1 + s.1 / 2.0);
        };
        for r in &frame.taken {
            grow(r.c, r.size);
        }
        for b in &self.bands {
            for k in 0..=32 {
                let a = b.from + (b.to - b.from) * f64::from(k) / 32.0;
                grow(at(b.outer, a), (0.0, 0.0));
            }
            grow(b.label_at, (180.0, 22.0));
        }
        let (legend_w, legend_h) = legend::size(pic);
        let dx = MARGIN - x0;
        let dy = MARGIN + TITLE_H - y0;
        let shift = |p: &mut Pt| {
            p.0 += dx;
            p.1 += dy;
        };
        self.gpus.values_mut().for_each(shift);
        self.hubs.iter_mut().for_each(shift);
        self.pcie.iter_mut().for_each(shift);
        self.nics.iter_mut().for_each(shift);
        self.pair_labels.iter_mut().for_each(shift);
        self.spoke_labels.iter_mut().flatten().for_each(shift);
        self.nic_labels.iter_mut().flatten().for_each(shift);
        for b in &mut self.bands {
            shift(&mut b.label_at);
        }
        self.center = (dx, dy);
        let diagram_w = x1 - x0;
        let title_w = (pic.title.chars().count() as f64 * 13.0)
            .max(pic.subtitle.chars().count() as f64 * 8.0);
        self.title = (MARGIN, MARGIN);
        self.legend = (MARGIN + diagram_w + 36.0, MARGIN + TITLE_H);
        let width = (self.legend.0 + legend_w + MARGIN).max(title_w + 2.0 * MARGIN);
        let height = (MARGIN + TITLE_H + (y1 - y0).max(legend_h) + MARGIN).max(360.0);
        self.width = width.ceil() as u32;
        self.height = height.ceil() as u32;
    }
}

/// The NUMA groups' arcs, when there are several groups.
fn bands(pic: &Picture, radius: f64, reach: f64, angle: &BTreeMap<u32, f64>) -> Vec<Band> {
    if pic.groups.len() < 2 {
        return Vec::new();
    }
    let step = TAU / pic.gpus.len().max(1) as f64;
    let inner = (radius - GPU_H / 2.0 - 30.0)
        .max(HUB_R + 24.0)
        .min(radius * 0.6);
    let outer = reach + 64.0;
    pic.groups
        .iter()
        .map(|g| {
            let a: Vec<f64> = g.gpus.iter().map(|i| angle[i]).collect();
            let (lo, hi) = a
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let (from, to) = (lo - step / 2.0 + 0.02, hi + step / 2.0 - 0.02);
            Band {
                from,
                to,
                inner,
                outer,
                label_at: at(outer - 20.0, (from + to) / 2.0),
            }
        })
        .collect()
}

/// What is placed so far, for labels to keep clear of.
#[derive(Default)]
struct Frame {
    taken: Vec<Rect>,
}

impl Frame {
    fn boxes(&mut self, layout: &Layout) {
        for p in layout.gpus.values() {
            self.taken.push(Rect {
                c: *p,
                size: (GPU_W, GPU_H),
            });
        }
        for p in &layout.hubs {
            self.taken.push(Rect {
                c: *p,
                size: (HUB_R * 2.0, HUB_R * 2.0),
            });
        }
        for p in &layout.pcie {
            self.taken.push(Rect {
                c: *p,
                size: (PCIE_W, PCIE_H),
            });
        }
        for p in &layout.nics {
            self.taken.push(Rect {
                c: *p,
                size: (NIC_W, NIC_H),
            });
        }
    }

    /// A NUMA group's name: inside its band near the outer edge, at the
    /// middle of the arc or as near it as is clear.
    fn band_label(&mut self, b: &Band) -> Pt {
        let size = (150.0, 24.0);
        let mid = (b.from + b.to) / 2.0;
        let half = (b.to - b.from) / 2.0;
        let mut best = (f64::MAX, at(b.outer - 22.0, mid));
        for k in 0..24 {
            let off = half * 0.85 * f64::from(k / 2) / 12.0 * if k % 2 == 0 { 1.0 } else { -1.0 };
            for r in [b.outer - 22.0, b.outer - 52.0] {
                let rect = Rect {
                    c: at(r, mid + off),
                    size,
                };
                let cost: f64 = self.taken.iter().map(|o| rect.overlap(o)).sum();
                if cost < best.0 {
                    best = (cost, rect.c);
                }
            }
            if best.0 == 0.0 {
                break;
            }
        }
        self.taken.push(Rect { c: best.1, size });
        best.1
    }

    fn label(&mut self, a: Pt, b: Pt, text: &str, spots: &[f64]) -> Pt {
        let size = label_size(text);
        let mut best = (f64::MAX, a);
        for &t in spots {
            let c = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
            let r = Rect { c, size };
            let cost: f64 = self.taken.iter().map(|o| r.overlap(o)).sum();
            if cost < best.0 {
                best = (cost, c);
            }
            if cost == 0.0 {
                break;
            }
        }
        self.taken.push(Rect { c: best.1, size });
        best.1
    }
}
