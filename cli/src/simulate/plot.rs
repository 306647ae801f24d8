//! PNG charts of simulation results, and the summary of a results folder.
//!
//! Drawn with `plotters`' bitmap backend and its `ab_glyph` text renderer,
//! with a font embedded in the binary (Ubuntu Light from the
//! `epaint_default_fonts` crate, Ubuntu Font Licence): no fontconfig, no
//! system fonts, the same pixels on every machine.

use super::SimResult;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A chart or summary that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: {message}")]
    Draw { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a simulation result: {message}")]
    Result { path: PathBuf, message: String },
}

fn register_font() {
    // Registering twice replaces the same bytes: harmless.
    let _ = plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        epaint_default_fonts::UBUNTU_LIGHT,
    );
}

/// Mean curve of one policy: (arrived %, value) pairs.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Per policy, the mean over runs of a point field, at each arrived %.
pub fn mean_series(results: &[SimResult], frag: bool) -> Vec<Series> {
    let mut by_policy: BTreeMap<&str, BTreeMap<u32, (f64, u32)>> = BTreeMap::new();
    for r in results {
        let curve = by_policy.entry(&r.policy).or_default();
        for p in &r.points {
            let v = if frag {
                p.fragmented_gpu_pct
            } else {
                p.gpu_allocation_pct
            };
            let e = curve.entry(p.arrived_pct).or_default();
            e.0 += v;
            e.1 += 1;
        }
    }
    by_policy
        .into_iter()
        .map(|(label, curve)| Series {
            label: label.to_string(),
            points: curve
                .into_iter()
                .map(|(x, (sum, n))| (f64::from(x), sum / f64::from(n)))
                .collect(),
        })
        .collect()
}

/// How one policy's line looks. Colours from Paul Tol's "muted" scheme
/// (nine colours told apart with the common colour-vision deficiencies);
/// each policy also has its own pair of dash and marker, so the lines stay
/// apart in grey print too. Fixed per policy name, so that a policy looks
/// the same in every chart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LineLook {
    pub colour: RGBColor,
    pub dash: Dash,
    pub marker: Marker,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Triangle,
    Square,
}

/// Policies by name, with their colour (Tol muted), dash and marker.
const LOOKS: [(&str, RGBColor, Dash, Marker); 9] = [
    (
        "gputopo",
        RGBColor(0x33, 0x22, 0x88),
        Dash::Solid,
        Marker::Circle,
    ),
    (
        "fgd",
        RGBColor(0xCC, 0x66, 0x77),
        Dash::Dashed,
        Marker::Circle,
    ),
    (
        "best-fit",
        RGBColor(0x11, 0x77, 0x33),
        Dash::Dotted,
        Marker::Circle,
    ),
    (
        "gpu-packing",
        RGBColor(0x88, 0xCC, 0xEE),
        Dash::Solid,
        Marker::Triangle,
    ),
    (
        "gpu-clustering",
        RGBColor(0x88, 0x22, 0x55),
        Dash::Dashed,
        Marker::Triangle,
    ),
    (
        "dot-prod",
        RGBColor(0x44, 0xAA, 0x99),
        Dash::Dotted,
        Marker::Triangle,
    ),
    (
        "k8s-default",
        RGBColor(0xDD, 0xCC, 0x77),
        Dash::Solid,
        Marker::Square,
    ),
    (
        "gpuallocator",
        RGBColor(0x99, 0x99, 0x33),
        Dash::Dashed,
        Marker::Square,
    ),
    (
        "random",
        RGBColor(0xAA, 0x44, 0x99),
        Dash::Dotted,
        Marker::Square,
    ),
];

/// The look of `label`'s line; a name not in [`LOOKS`] takes the look at
/// its place among the chart's series.
pub fn look(label: &str, place: usize) -> LineLook {
    let k = LOOKS
        .iter()
        .position(|l| l.0 == label)
        .unwrap_or(place % LOOKS.len());
    let (_, colour, dash, marker) = LOOKS[k];
    LineLook {
        colour,
        dash,
        marker,
    }
}

type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);
const CHART_SIZE: (u32, u32) = (1600, 700);
/// The legend's column.
const LEGEND_W: u32 = 270;

/// A line chart of `series` into `path` (PNG): every arrival on the left,
/// the end (where the policies part) zoomed in the middle, the legend on
/// the right ordered by each policy's last value.
pub fn line_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), PlotError> {
    register_font();
    let root = BitMapBackend::new(path, CHART_SIZE).into_drawing_area();
    draw_chart(&root, title, y_label, series)
        .and_then(|()| root.present())
        .map_err(|e| PlotError::Draw {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// One chart on any plotters backend.
pub fn draw_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    series: &[Series],
) -> Drawn<DB> {
    root.fill(&WHITE)?;
    let root = root.margin(14, 0, 0, 0);
    let root = root.titled(title, ("sans-serif", 28).into_font().color(&INK))?;
    let (plots, key) = root.split_horizontally(CHART_SIZE.0 - LEGEND_W);
    let (left, right) = plots.split_horizontally((CHART_SIZE.0 - LEGEND_W) * 58 / 100);
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let x_max = points().map(|p| p.0).fold(0.0f64, f64::max).max(10.0);
    let y_max = points().map(|p| p.1).fold(0.0f64, f64::max).max(1.0) * 1.05;
    let full = Panel {
        caption: "every arrival",
        x: 0.0..x_max + 5.0,
        y: 0.0..y_max,
    };
    let zoom_from = (x_max - 55.0).max(0.0);
    let (lo, hi) = points()
        .filter(|p| p.0 >= zoom_from)
        .fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
    let pad = ((hi - lo) * 0.08).max(1.0);
    let zoom = Panel {
        caption: "zoomed in on the end, where the policies part",
        x: zoom_from..x_max + 5.0,
        y: (lo - pad).max(0.0)..hi + pad,
    };
    panel(&left, &full, y_label, series)?;
    panel(&right, &zoom, y_label, series)?;
    legend(&key, series)
}

struct Panel {
    caption: &'static str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    spec: &Panel,
    y_label: &str,
    series: &[Series],
) -> Drawn<DB> {
    let mut chart = ChartBuilder::on(area)
        .caption(spec.caption, ("sans-serif", 18).into_font().color(&INK))
        .margin(14)
        .x_label_area_size(56)
        .y_label_area_size(78)
        .build_cartesian_2d(spec.x.clone(), spec.y.clone())?;
    let pct = |v: &f64| format!("{v:.0}%");
    chart
        .configure_mesh()
        .x_desc("arrived GPU demand (% of the cluster's GPUs)")
        .y_desc(y_label)
        .x_label_formatter(&pct)
        .y_label_formatter(&pct)
        .label_style(("sans-serif", 16).into_font().color(&INK))
        .axis_desc_style(("sans-serif", 17).into_font().color(&INK))
        .bold_line_style(RGBColor(0xD0, 0xD0, 0xD0))
        .light_line_style(WHITE)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let look = look(&s.label, i);
        let style = look.colour.stroke_width(3);
        // Only the points in the panel's range: a line is not clipped.
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| spec.x.contains(&p.0))
            .collect();
        match look.dash {
            Dash::Solid => chart.draw_series(LineSeries::new(pts, style))?,
            Dash::Dashed => chart.draw_series(DashedLineSeries::new(pts, 14, 7, style))?,
            Dash::Dotted => chart.draw_series(DashedLineSeries::new(pts, 3, 6, style))?,
        };
        let inside = s
            .points
            .iter()
            .filter(|p| spec.x.contains(&p.0) && spec.y.contains(&p.1));
        let area = chart.plotting_area();
        for &p in inside {
            let at = area.map_coordinate(&p);
            marker(&area.strip_coord_spec(), at, look)?;
        }
    }
    Ok(())
}

/// A marker of `look` at backend pixel `at` (the area's own pixels are
/// shifted by its base).
fn marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    at: (i32, i32),
    look: LineLook,
) -> Drawn<DB> {
    let base = area.get_base_pixel();
    let c = (at.0 - base.0, at.1 - base.1);
    let fill = look.colour.filled();
    match look.marker {
        Marker::Circle => area.draw(&Circle::new(c, 5, fill)),
        Marker::Triangle => area.draw(&TriangleMarker::new(c, 7, fill)),
        Marker::Square => area.draw(&Rectangle::new(
            [(c.0 - 5, c.1 - 5), (c.0 + 5, c.1 + 5)],
            fill,
        )),
    }
}

/// The legend, in its own column right of the panels: policies by their
/// last value, highest first, each with it.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[Series],
) -> Drawn<DB> {
    let mut rows: Vec<(usize, &Series, f64)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (i, s, s.points.last().map_or(0.0, |p| p.1)))
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    let (x0, y0, row) = (8, 60, 28);
    let base = area.get_base_pixel();
    let text = |s: &str, at: (i32, i32), size: i32| {
        Text::new(
            s.to_string(),
            at,
            ("sans-serif", size)
                .into_font()
                .color(&INK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        )
    };
    area.draw(&text("policy, value at the end", (x0, y0), 18))?;
    for (k, (i, s, last)) in rows.iter().enumerate() {
        let y = y0 + 34 + row * k as i32;
        let look = look(&s.label, *i);
        let style = look.colour.stroke_width(3);
        let pts = vec![(x0, y), (x0 + 52, y)];
        match look.dash {
            Dash::Solid => area.draw(&PathElement::new(pts, style))?,
            Dash::Dashed => area.draw(&DashedPathElement::new(pts, 14, 7, style))?,
            Dash::Dotted => area.draw(&DashedPathElement::new(pts, 3, 6, style))?,
        }
        marker(area, (base.0 + x0 + 26, base.1 + y), look)?;
        area.draw(&text(&format!("{}  {last:.1}%", s.label), (x0 + 64, y), 17))?;
    }
    Ok(())
}

/// Both charts (allocation and fragmentation) of `results` into `dir`.
pub fn charts(dir: &Path, title: &str, results: &[SimResult]) -> Result<Vec<PathBuf>, PlotError> {
    series_charts(
        dir,
        title,
        &mean_series(results, false),
        &mean_series(results, true),
    )
}

/// Both charts of mean curves already computed.
fn series_charts(
    dir: &Path,
    title: &str,
    alloc_series: &[Series],
    frag_series: &[Series],
) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let alloc = dir.join("gpu-allocation.png");
    line_chart(
        &alloc,
        &format!("GPU allocation: {title}"),
        "GPU allocation (% of the cluster's GPUs)",
        alloc_series,
    )?;
    let frag = dir.join("fragmentation.png");
    line_chart(
        &frag,
        &format!("FGD fragmentation: {title}"),
        "fragmented GPUs, FGD's measure (% of the cluster's GPUs)",
        frag_series,
    )?;
    Ok(vec![alloc, frag])
}

/// One policy's two mean curves in a summary.
struct PolicyCurves {
    label: String,
    alloc: Vec<(f64, f64)>,
    frag: Vec<(f64, f64)>,
}

/// The charts of a `summary.csv` that `simulate-report` wrote (its mean
/// columns per workload, policy and arrived %), redrawn without the runs:
/// into `plots/<workload>/` beside the file, as the report puts them.
pub fn summary_charts(csv_path: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let bad = |message: String| PlotError::Result {
        path: csv_path.to_path_buf(),
        message,
    };
    let mut reader = csv::Reader::from_path(csv_path).map_err(|e| bad(e.to_string()))?;
    let headers = reader.headers().map_err(|e| bad(e.to_string()))?.clone();
    let column = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            bad(format!(
                "no column {name:?}; a summary.csv of simulate-report has it"
            ))
        })
    };
    let cols = [
        column("workload")?,
        column("policy")?,
        column("arrived_pct")?,
        column("gpu_alloc_pct_mean")?,
        column("frag_over_total_pct_mean")?,
    ];
    // workload -> policy (in file order) -> points of both curves.
    let mut curves: BTreeMap<String, Vec<PolicyCurves>> = BTreeMap::new();
    for (n, record) in reader.records().enumerate() {
        let record = record.map_err(|e| bad(e.to_string()))?;
        let field = |c: usize| record.get(c).unwrap_or("");
        let number = |c: usize| {
            field(c)
                .parse::<f64>()
                .map_err(|_| bad(format!("row {}: {:?} is not a number", n + 2, field(c))))
        };
        let (x, alloc, frag) = (number(cols[2])?, number(cols[3])?, number(cols[4])?);
        let policies = curves.entry(field(cols[0]).to_string()).or_default();
        let policy = field(cols[1]);
        if !policies.iter().any(|p| p.label == policy) {
            policies.push(PolicyCurves {
                label: policy.to_string(),
                alloc: Vec::new(),
                frag: Vec::new(),
            });
        }
        if let Some(p) = policies.iter_mut().find(|p| p.label == policy) {
            p.alloc.push((x, alloc));
            p.frag.push((x, frag));
        }
    }
    let dir = csv_path.parent().unwrap_or(Path::new(".")).join("plots");
    let mut written = Vec::new();
    for (workload, policies) in curves {
        let series = |frag: bool| -> Vec<Series> {
            policies
                .iter()
                .map(|p| Series {
                    label: p.label.clone(),
                    points: if frag {
                        p.frag.clone()
                    } else {
                        p.alloc.clone()
                    },
                })
                .collect()
        };
        written.extend(series_charts(
            &dir.join(&workload),
            &workload,
            &series(false),
            &series(true),
        )?);
    }
    Ok(written)
}

/// Reads every `*.json` result in `dir`, sorted by file name.
pub fn read_results(dir: &Path) -> Result<Vec<SimResult>, PlotError> {
    let io = |source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let mut results = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|source| PlotError::Io {
            path: path.clone(),
            source,
        })?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| PlotError::Result {
                path: path.clone(),
                message: e.to_string(),
            })?;
        results.push(from_json(&value).ok_or_else(|| PlotError::Result {
            path: path.clone(),
            message: "missing policy, seed, workload or points".into(),
        })?);
    }
    Ok(results)
}

fn from_json(v: &serde_json::Value) -> Option<SimResult> {
    let points = v
        .get("points")?
        .as_array()?
        .iter()
        .map(|p| {
            Some(super::Point {
                arrived_pct: p.get("arrivedPct")?.as_u64()? as u32,
                gpu_allocation_pct: p.get("gpuAllocationPct")?.as_f64()?,
                fragmented_gpu_pct: p.get("fragmentedGpuPct")?.as_f64()?,
                full_nvlink_slots8: p
                    .get("fullNvlinkSlots8")
                    .and_then(serde_json::Value::as_u64),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let u = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    Some(SimResult {
        policy: v.get("policy")?.as_str()?.to_string(),
        seed: v.get("seed")?.as_u64()?,
        cluster: v.get("cluster")?.as_str()?.to_string(),
        workload: v.get("workload")?.as_str()?.to_string(),
        inflate: v.get("inflate").and_then(serde_json::Value::as_f64),
        order: match v.get("order").and_then(serde_json::Value::as_str) {
            Some("arrival") => super::Order::Arrival,
            _ => super::Order::Shuffle,
        },
        nodes: u("nodes") as usize,
        total_gpus: u("totalGpus") as u32,
        typical_pod_types: u("typicalPodTypes") as usize,
        points,
        pods_arrived: u("podsArrived"),
        pods_placed: u("podsPlaced"),
        pods_failed: u("podsFailed"),
        gpu_pods_failed: u("gpuPodsFailed"),
        pods_ended: u("podsEnded"),
        gangs_placed: u("gangsPlaced"),
        gangs_failed: u("gangsFailed"),
        arrived_gpu_pct: f("arrivedGpuPct"),
        final_gpu_allocation_pct: f("finalGpuAllocationPct"),
        final_fragmented_gpu_pct: f("finalFragmentedGpuPct"),
        queue_time_p50_s: v.get("queueTimeP50S").and_then(serde_json::Value::as_f64),
        queue_time_p99_s: v.get("queueTimeP99S").and_then(serde_json::Value::as_f64),
        makespan_s: v.get("makespanS").and_then(serde_json::Value::as_f64),
        topology: v
            .get("topology")
            .and_then(|t| serde_json::from_value(t.clone()).ok()),
        whole_domains_free: v
            .get("wholeDomainsFree")
            .and_then(|t| serde_json::from_value(t.clone()).ok())
            .unwrap_or_default(),
        runtime_ms: v.get("runtimeMs").and_then(serde_json::Value::as_u64),
    })
}
