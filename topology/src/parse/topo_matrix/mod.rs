//! Parser of the `nvidia-smi topo -m` link matrix (and of `topo -mp`, its PCIe-only view).
//!
//! nvidia-smi prints a header of column names (`GPU0 … GPUn`, NICs as `NIC<k>` or as RDMA
//! device names, then `CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID` as the driver has them),
//! one row per device with one cell per device column, and a legend. Columns are tab-separated
//! with 8-column tab stops; copies that went through a terminal or Markdown have the tabs turned
//! into spaces, and are read by reconstructing the tab stops (an empty field shows as a gap one
//! tab stop wider than needed, counted from the row's label so that indentation does not shift
//! it). Copies whose tabs collapsed to single spaces read too: no cell or value holds a blank,
//! and no column name but `CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID`; what such a copy loses
//! is empty values, and a row short of one is an error. Terminal escape sequences are removed
//! first (`ansi.rs`); a header line that was cut off is rebuilt from the rows when they say it
//! all (`headerless.rs`).
//!
//! The parser is strict on purpose: a scheduler that trusted a guessed link would place jobs on
//! wires that are not there. A truncated or garbled matrix is a [`TopoParseError`] naming the
//! 1-based line and character column where the bad token starts, never a partial result.
//!
//! Decisions the parser makes:
//! - NIC rows are all-or-nothing: excerpts that keep only the GPU rows still say everything the
//!   scheduler needs (GPU↔GPU and GPU↔NIC), so a matrix without any NIC row parses, with
//!   [`MatrixNic::nic_links`] `None`; a matrix with only some NIC rows is an error.
//! - Every part of the matrix that is printed twice (GPU↔GPU, GPU↔NIC, NIC↔NIC) must agree in
//!   both directions.
//! - nvidia-smi writes an extra tab before `GPU NUMA ID` and before an `N/A` affinity value
//!   (`0\t\tN/A`); such an empty field is dropped when the row has more fields than the header
//!   has affinity columns. An empty field anywhere else is an empty value (cgroup-restricted CPU
//!   Affinity), read as unknown.
//! - `N/A` and empty affinity values read as unknown (`None`); other values are kept as given.
//! - Limit: a text cut inside the affinity fields of the last GPU row, in a matrix printed
//!   without NIC rows, cannot be told from a complete one (`0-55,112-16` is a valid CPU list).
//!
//! Here: the result's types and [`parse`] (this file); escape sequences (`ansi.rs`); splitting a
//! line into fields and telling column names apart (`fields.rs`); the header, the rows and their
//! cells (`rows.rs`); a matrix without its header line (`headerless.rs`).

mod ansi;
mod fields;
mod headerless;
mod rows;

use fields::{gpu_index, legend_entry, split_row_fields};
use gputopo_api::LinkClass;
use rows::{Header, Row, check_symmetry};
use std::collections::HashMap;

/// Cells of `nvidia-smi topo -p2p r|w|n|a|p`, which has the same shape as `topo -m`.
const P2P_CODES: [&str; 7] = ["OK", "CNS", "GNS", "TNS", "NS", "DR", "U"];

const LINK_CLASSES: &str = "a link class (NV<k>, PIX, PXB, PHB, NODE, SYS)";
const COLUMN_NAMES: &str = "a column name (GPU<n>, NIC<n>, an RDMA device name such as mlx5_0, \
                            CPU Affinity, NUMA Affinity or GPU NUMA ID)";

/// Why a `topo -m` text was rejected; `message` has the detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopoErrorKind {
    /// Nothing but blank lines.
    Empty,
    /// The first line is not a matrix header (prose), or it is a GPU row and the rows cannot
    /// stand in for the lost header (see `headerless.rs`).
    MissingHeader,
    /// A header name is not one `topo -m` prints (often two names run together by a lost tab).
    BadHeader,
    /// `nvidia-smi topo -p2p` output: a P2P capability matrix, not a link matrix.
    P2pMatrix,
    /// A line is not the row expected next.
    UnexpectedRow,
    /// The text ends, or a blank line comes, before every row was read.
    MissingRow,
    /// A row has fewer fields than the header has columns.
    ShortRow,
    /// A cell is not a link class, or `X` is not on the diagonal.
    BadCell,
    /// A CPU Affinity / NUMA Affinity / GPU NUMA ID value is not a CPU or node list.
    BadAttribute,
    /// A non-empty field after the last column.
    ExtraField,
    /// A link printed twice (row a column b, row b column a) reads differently.
    Asymmetric,
}

/// A `topo -m` text that is not a complete, consistent matrix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct TopoParseError {
    /// 1-based line number.
    pub line: usize,
    /// 1-based character column where the offending token starts, in the line as given: tabs
    /// count as one, and so does each character of a terminal escape sequence.
    pub column: usize,
    pub kind: TopoErrorKind,
    pub message: String,
}

/// A parsed `nvidia-smi topo -m` matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopoMatrix {
    /// GPUs in header order.
    pub gpus: Vec<MatrixGpu>,
    /// NICs in header order.
    pub nics: Vec<MatrixNic>,
    /// Which affinity columns the header has (old drivers have fewer).
    pub columns: AffinityColumns,
}

/// The affinity columns a header may carry, always in this order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AffinityColumns {
    pub cpu_affinity: bool,
    pub numa_affinity: bool,
    pub gpu_numa_id: bool,
}

/// One GPU row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixGpu {
    /// From the header label: `GPU3` is index 3 (cgroups may hide some indices).
    pub index: u32,
    /// A cpulist as printed (`0-55,112-167`); `None` when empty or `N/A`.
    pub cpu_affinity: Option<String>,
    /// As printed (`3`, `0-1`, `0,8,252-255`); `None` when empty, `N/A` or absent.
    pub numa_affinity: Option<String>,
    /// As printed; `None` when `N/A` or absent.
    pub gpu_numa_id: Option<String>,
    /// One cell per GPU column, in header order; `None` on the diagonal.
    pub gpu_links: Vec<Option<LinkClass>>,
    /// One cell per NIC column, in header order.
    pub nic_links: Vec<LinkClass>,
}

/// One NIC column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixNic {
    /// The header label: `NIC3`, or an RDMA device name on drivers without a NIC legend.
    pub label: String,
    /// The RDMA device name from the `NIC Legend`, else the label.
    pub name: String,
    /// The NIC's own row, one cell per NIC column (`None` on the diagonal); `None` when the text
    /// printed no NIC rows.
    pub nic_links: Option<Vec<Option<LinkClass>>>,
}

impl TopoMatrix {
    /// The GPU whose header label is `GPU<index>`.
    pub fn gpu(&self, index: u32) -> Option<&MatrixGpu> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// The link between GPUs `a` and `b` (by index); `None` when either is absent or `a == b`.
    pub fn gpu_link(&self, a: u32, b: u32) -> Option<LinkClass> {
        let column = self.gpus.iter().position(|g| g.index == b)?;
        self.gpu(a)?.gpu_links.get(column).copied().flatten()
    }

    /// The NIC with this name (legend-resolved) or header label.
    pub fn nic(&self, name: &str) -> Option<&MatrixNic> {
        self.nics
            .iter()
            .find(|n| n.name == name)
            .or_else(|| self.nics.iter().find(|n| n.label == name))
    }

    /// How the NIC named `nic` reaches GPU `gpu`.
    pub fn nic_link(&self, nic: &str, gpu: u32) -> Option<LinkClass> {
        let column = self
            .nics
            .iter()
            .position(|n| n.name == nic)
            .or_else(|| self.nics.iter().position(|n| n.label == nic))?;
        self.gpu(gpu)?.nic_links.get(column).copied()
    }
}

/// Parses `nvidia-smi topo -m` (or `topo -mp`) output.
///
/// Terminal escape sequences are removed first; an error's column counts in the line as given,
/// escape sequences included.
pub fn parse(text: &str) -> Result<TopoMatrix, TopoParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines = ansi::clean_lines(text);
    let texts: Vec<&str> = lines.iter().map(|l| l.text.as_ref()).collect();
    parse_lines(&texts).map_err(|mut e| {
        if let Some(line) = e.line.checked_sub(1).and_then(|i| lines.get(i)) {
            e.column = line.original_column(e.column);
        }
        e
    })
}

fn parse_lines(texts: &[&str]) -> Result<TopoMatrix, TopoParseError> {
    let numbered: Vec<(usize, &str)> = texts.iter().enumerate().map(|(i, l)| (i + 1, *l)).collect();
    let Some(first) = numbered.iter().position(|(_, l)| !l.trim().is_empty()) else {
        return Err(err(
            1,
            1,
            TopoErrorKind::Empty,
            "expected a `nvidia-smi topo -m` matrix but the text is empty".into(),
        ));
    };
    let from_first = numbered.get(first..).unwrap_or_default();
    let (header_line, header_text) = from_first.first().copied().unwrap_or((1, ""));
    // Without a header line the rows name the columns (see `headerless.rs`).
    let headerless = headerless::starts_with_row(header_text);
    let (header, rows_from) = if headerless {
        (headerless::header_from_rows(from_first)?, first)
    } else {
        (Header::parse(header_line, header_text)?, first + 1)
    };
    let mut lines = numbered.iter().skip(rows_from).copied();
    // The last line read, to place an error at the end of the text.
    let mut last_line = header_line;
    let n_dev = header.devices.len();
    let n_gpu = header.gpu_count();

    // Rows in header order; the NIC rows may be missing altogether (see the module doc).
    let mut rows: Vec<Row> = Vec::with_capacity(n_dev);
    let mut row_lines: Vec<usize> = Vec::with_capacity(n_dev);
    for (d, device) in header.devices.iter().enumerate() {
        let next = lines.next();
        let blank_or_end = match next {
            None => true,
            Some((n, l)) => {
                last_line = n;
                l.trim().is_empty()
            }
        };
        if blank_or_end {
            if d == n_gpu && d < n_dev {
                // Excerpt with GPU rows only: accepted, see the module doc.
                break;
            }
            let (line, found) = match next {
                Some((n, _)) => (n, "a blank line".to_string()),
                None => (last_line + 1, "the end of the text".to_string()),
            };
            return Err(err(
                line,
                1,
                TopoErrorKind::MissingRow,
                format!(
                    "expected row {} but found {found}: the matrix stops after {d} of {n_dev} rows \
                     (truncated?)",
                    device.label
                ),
            ));
        }
        if let Some((n, l)) = next {
            rows.push(header.parse_row(n, l, d)?);
            row_lines.push(n);
        }
    }
    let nic_rows = rows.len() == n_dev;

    check_symmetry(&header, &rows)?;
    if headerless {
        headerless::check_no_blank_values(&header, &rows, &row_lines)?;
    }

    // What follows the matrix: no further row, then an optional NIC legend.
    let mut legend: HashMap<String, String> = HashMap::new();
    let mut in_legend = false;
    let mut first_after = true;
    for (n, l) in lines {
        let trimmed = l.trim();
        if trimmed.is_empty() {
            first_after = false;
            continue;
        }
        if first_after {
            first_after = false;
            if let Some(f) = split_row_fields(l).into_iter().find(|f| !f.text.is_empty())
                && (header.device_position(f.text).is_some() || gpu_index(f.text).is_some())
            {
                return Err(err(
                    n,
                    f.column,
                    TopoErrorKind::UnexpectedRow,
                    format!(
                        "unexpected row {:?} after the last row of the matrix (all {} rows were \
                         already read)",
                        f.text,
                        rows.len()
                    ),
                ));
            }
        }
        if trimmed == "NIC Legend:" {
            in_legend = true;
            continue;
        }
        if in_legend {
            match legend_entry(trimmed) {
                Some((label, name)) => {
                    legend
                        .entry(label.to_string())
                        .or_insert_with(|| name.to_string());
                }
                None => in_legend = false,
            }
        }
    }

    Ok(header.into_matrix(rows, nic_rows, &legend))
}

fn err(line: usize, column: usize, kind: TopoErrorKind, message: String) -> TopoParseError {
    TopoParseError {
        line,
        column,
        kind,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_matrix() {
        let m = parse("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n")
            .unwrap();
        assert_eq!(m.gpu_link(0, 1), Some(LinkClass::Nv(4)));
        assert_eq!(m.gpu(1).unwrap().cpu_affinity.as_deref(), Some("0-7"));
    }
}
