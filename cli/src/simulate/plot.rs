//! PNG charts of simulation results, and the summary of a results folder.
//!
//! Drawn with `plotters`' bitmap backend and its `ab_glyph` text renderer,
//! with a font embedded in the binary (Ubuntu Light from the
//! `epaint_default_fonts` crate, Ubuntu Font Licence): no fontconfig, no
//! system fonts, the same pixels on every machine.

use super::SimResult;
use plotters::prelude::*;
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

/// A line chart of `series` into `path` (PNG).
pub fn line_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), PlotError> {
    register_font();
    let draw_err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..135f64, 0f64..y_max)
        .map_err(|e| draw_err(&e))?;
    chart
        .configure_mesh()
        .x_desc("arrived GPU demand, % of cluster GPUs")
        .y_desc(y_label)
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| draw_err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| draw_err(&e))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| draw_err(&e))?;
    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}

/// Both charts (allocation and fragmentation) of `results` into `dir`.
pub fn charts(dir: &Path, title: &str, results: &[SimResult]) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let alloc = dir.join("gpu-allocation.png");
    line_chart(
        &alloc,
        &format!("GPU allocation: {title}"),
        "GPU allocation, % of cluster GPUs",
        &mean_series(results, false),
    )?;
    let frag = dir.join("fragmentation.png");
    line_chart(
        &frag,
        &format!("FGD fragmentation: {title}"),
        "fragmented GPU, % of cluster GPUs",
        &mean_series(results, true),
    )?;
    Ok(vec![alloc, frag])
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
