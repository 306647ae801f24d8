//! `gputopo draw`: a picture of one node's wiring and who holds its GPUs,
//! as SVG or PNG (docs/cli.md, "gputopo draw").
//!
//! The node comes from any file `topology::load` reads (a `GpuTopology`
//! object, whose `status.allocations` are drawn too; a bare spec; an agent
//! recording; `nvidia-smi topo -m`, `rocm-smi` or `amd-smi` text), or from
//! a cluster `kind: List` and a node name (its `GpuTopology` object, and
//! the pods bound to it as the scheduler sees them). [`model`] decides what
//! is shown, [`layout`] where, [`paint`] draws it on a plotters backend:
//! one drawing function for both formats. Text is laid out with the font
//! the simulator's charts embed (Ubuntu Light, `epaint_default_fonts`), so
//! a PNG has the same pixels on every machine; an SVG names `sans-serif`.

mod layout;
mod legend;
pub mod model;
mod paint;
mod palette;
pub mod pcie;

pub use model::{Fabric, Holders, Picture};

use crate::cluster::{self, ClusterFileError, Overrides};
use crate::topology::{self, TopologyFileError};
use gputopo_api::GpuTopologySpec;
use gputopo_api::k8s_openapi::jiff::Timestamp;
use layout::Layout;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// The formats `--output` may name, by extension.
pub const FORMATS: &str = ".svg, .png";

/// A picture that could not be made; every variant names its file.
#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    #[error("{path}: the picture's format is read from the file's extension; accepted: {FORMATS}")]
    Format { path: PathBuf },
    #[error(transparent)]
    Topology(#[from] TopologyFileError),
    #[error(transparent)]
    Cluster(#[from] ClusterFileError),
    #[error("{path}: no GpuTopology for node {node:?}; the file has: {known}")]
    NoNode {
        path: PathBuf,
        node: String,
        known: String,
    },
    #[error("{path}: drawing failed: {message}")]
    Draw { path: PathBuf, message: String },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// SVG or PNG, by the output file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

impl Format {
    pub fn of(path: &Path) -> Result<Format, DrawError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(DrawError::Format {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// Where the node comes from.
#[derive(Clone, Debug)]
pub enum Input {
    /// A topology file (any form `topology::load` reads).
    File(PathBuf),
    /// A cluster `kind: List` and a node in it; `now` judges the node's
    /// kubelet readings' age, as `explain --now` does.
    Cluster {
        path: PathBuf,
        node: String,
        now: Option<Timestamp>,
    },
}

/// The node's topology and, when the input says, who holds its GPUs.
pub fn load(input: &Input) -> Result<(GpuTopologySpec, Option<Holders>), DrawError> {
    match input {
        Input::File(path) => {
            let (spec, status) = topology::load_with_status(path)?;
            Ok((spec, status.as_ref().map(model::holders_from_status)))
        }
        Input::Cluster { path, node, now } => {
            let overrides = Overrides {
                tiers: None,
                now: *now,
            };
            let cluster = cluster::load(path, &overrides)?;
            let object = cluster.dra.topologies.iter().find(|t| {
                t.metadata.name.as_deref() == Some(node.as_str()) || t.spec.node_name == *node
            });
            let Some(object) = object else {
                let known: Vec<String> = cluster
                    .dra
                    .topologies
                    .iter()
                    .map(|t| t.spec.node_name.clone())
                    .collect();
                return Err(DrawError::NoNode {
                    path: path.clone(),
                    node: node.clone(),
                    known: if known.is_empty() {
                        "no GpuTopology objects (give a kind: List as `kubectl get nodes,pods,gputopologies -A -o yaml` prints it)".into()
                    } else {
                        known.join(", ")
                    },
                });
            };
            let holders = match cluster.snapshot.node_id(node) {
                Some(id) => holders_from_snapshot(&cluster.snapshot, id),
                None => object
                    .status
                    .as_ref()
                    .map(model::holders_from_status)
                    .unwrap_or_default(),
            };
            Ok((object.spec.clone(), Some(holders)))
        }
    }
}

/// The pods bound to a node as the scheduler sees them: whole GPUs, and
/// shares of one GPU with their part.
fn holders_from_snapshot(
    snapshot: &gputopo_scheduler_core::snapshot::Snapshot,
    id: gputopo_scheduler_core::snapshot::NodeId,
) -> Holders {
    let mut holders = Holders::new();
    for (_, pod) in snapshot.node(id).pods() {
        let key = pod.key();
        for gpu in (0..32).filter(|g| pod.gpus & (1 << g) != 0) {
            let name = if pod.stand_in > 0 {
                format!("{key} (GPU not known)")
            } else {
                key.clone()
            };
            holders.entry(gpu).or_default().push(name);
        }
        if let Some(share) = pod.shared {
            let pct = f64::from(share.milli) / 10.0;
            holders
                .entry(share.gpu)
                .or_default()
                .push(format!("{key} ({pct:.0}%)"));
        }
    }
    holders
}

fn register_font() {
    // As the simulator's charts (simulate/plot.rs): registering twice
    // replaces the same bytes.
    let _ = plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        epaint_default_fonts::UBUNTU_LIGHT,
    );
}

/// The picture as SVG text.
pub fn svg(pic: &Picture) -> Result<String, DrawError> {
    register_font();
    let layout = Layout::new(pic);
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (layout.width, layout.height)).into_drawing_area();
        let drawn = paint::paint(&root, pic, &layout).and_then(|()| root.present());
        drawn.map_err(|e| DrawError::Draw {
            path: PathBuf::from("(svg)"),
            message: e.to_string(),
        })?;
    }
    Ok(out)
}

/// Writes the picture into `path`, SVG or PNG by its extension.
pub fn write(pic: &Picture, path: &Path) -> Result<(), DrawError> {
    match Format::of(path)? {
        Format::Svg => std::fs::write(path, svg(pic)?).map_err(|source| DrawError::Write {
            path: path.to_path_buf(),
            source,
        }),
        Format::Png => {
            register_font();
            let layout = Layout::new(pic);
            let root = BitMapBackend::new(path, (layout.width, layout.height)).into_drawing_area();
            paint::paint(&root, pic, &layout)
                .and_then(|()| root.present())
                .map_err(|e| DrawError::Draw {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })
        }
    }
}

/// `gputopo draw`: reads the input, draws, writes `output`.
pub fn run(input: &Input, output: &Path) -> Result<Picture, DrawError> {
    Format::of(output)?;
    let (spec, holders) = load(input)?;
    let pic = Picture::new(&spec, holders.as_ref());
    write(&pic, output)?;
    Ok(pic)
}
