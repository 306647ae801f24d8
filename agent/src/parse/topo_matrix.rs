//! Parser of the `nvidia-smi topo -m` link matrix (and of `topo -mp`, its PCIe-only view).
//!
//! nvidia-smi prints a header of column names (`GPU0 … GPUn`, NICs as `NIC<k>` or as RDMA
//! device names, then `CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID` as the driver has them),
//! one row per device with one cell per device column, and a legend. Columns are tab-separated
//! with 8-column tab stops; copies that went through a terminal or Markdown have the tabs turned
//! into spaces, and are read by reconstructing the tab stops (an empty field shows as a gap one
//! tab stop wider than needed).
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

use gputopo_api::LinkClass;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Tab stops nvidia-smi's terminal output (and every expanded copy of it) is aligned to.
const TAB_STOP: usize = 8;

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
    /// The first line is not a matrix header: prose, or a GPU row with no header above it.
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
    /// 1-based character column where the offending token starts (tabs count as one).
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
pub fn parse(text: &str) -> Result<TopoMatrix, TopoParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));

    let (header_line, header_text) = loop {
        match lines.next() {
            None => {
                return Err(err(
                    1,
                    1,
                    TopoErrorKind::Empty,
                    "expected a `nvidia-smi topo -m` matrix but the text is empty".into(),
                ));
            }
            Some((_, l)) if l.trim().is_empty() => {}
            Some(found) => break found,
        }
    };
    // The last line read, to place an error at the end of the text.
    let mut last_line = header_line;
    let header = Header::parse(header_line, header_text)?;
    let n_dev = header.devices.len();
    let n_gpu = header.gpu_count();

    // Rows in header order; the NIC rows may be missing altogether (see the module doc).
    let mut rows: Vec<Row> = Vec::with_capacity(n_dev);
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
        }
    }
    let nic_rows = rows.len() == n_dev;

    check_symmetry(&header, &rows)?;

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
            if let Some(f) = split_fields(l).into_iter().find(|f| !f.text.is_empty())
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

/// One field of a line: its text (trimmed) and where it starts.
#[derive(Debug, Clone, Copy)]
struct Field<'a> {
    text: &'a str,
    /// 1-based character column of `text` (of the field's place when it is empty).
    column: usize,
}

/// Splits a line into fields: on tabs when it has any, else on the reconstructed tab stops.
fn split_fields(line: &str) -> Vec<Field<'_>> {
    if line.contains('\t') {
        split_tabbed(line)
    } else {
        split_spaced(line)
    }
}

fn split_tabbed(line: &str) -> Vec<Field<'_>> {
    let mut fields = Vec::new();
    let mut column = 1;
    for piece in line.split('\t') {
        let lead = piece.chars().take_while(|c| c.is_whitespace()).count();
        let text = piece.trim();
        let at = if text.is_empty() {
            column
        } else {
            column + lead
        };
        fields.push(Field { text, column: at });
        column += piece.chars().count() + 1;
    }
    fields
}

/// A run of non-blank characters: byte range and 0-based character columns.
#[derive(Debug, Clone, Copy)]
struct Word {
    byte_start: usize,
    byte_end: usize,
    col_start: usize,
    col_end: usize,
}

/// Reads a line whose tabs were expanded to spaces.
///
/// Words one space apart belong to one field (`CPU Affinity`) unless the second starts on a tab
/// stop (a 7-character name followed by its tab) and they do not begin a known column name. A field that starts whole tab stops later than
/// the previous field's tab would have taken it had empty fields in between. The diagonal ` X `
/// starts one column after its tab stop. A line whose alignment was lost (not on tab stops) is
/// read with no empty fields.
fn split_spaced(line: &str) -> Vec<Field<'_>> {
    let mut words = Vec::new();
    let mut open: Option<(usize, usize)> = None;
    let mut count = 0;
    for (col, (byte, ch)) in line.char_indices().enumerate() {
        count = col + 1;
        if ch.is_whitespace() {
            if let Some((b, c)) = open.take() {
                words.push(Word {
                    byte_start: b,
                    byte_end: byte,
                    col_start: c,
                    col_end: col,
                });
            }
        } else if open.is_none() {
            open = Some((byte, col));
        }
    }
    if let Some((b, c)) = open {
        words.push(Word {
            byte_start: b,
            byte_end: line.len(),
            col_start: c,
            col_end: count,
        });
    }

    let mut fields = Vec::new();
    let mut current: Option<Word> = None;
    let mut last_end: Option<usize> = None;
    for w in words {
        if let Some(cur) = current.as_mut() {
            let joined = line.get(cur.byte_start..w.byte_end).unwrap_or_default();
            if w.col_start == cur.col_end + 1
                && (!w.col_start.is_multiple_of(TAB_STOP) || is_attr_name_prefix(joined))
            {
                cur.byte_end = w.byte_end;
                cur.col_end = w.col_end;
                continue;
            }
            fields.push(spaced_field(line, *cur));
            last_end = Some(cur.col_end);
        }
        let text = line.get(w.byte_start..w.byte_end).unwrap_or_default();
        let first_stop = last_end.map_or(0, |e| (e / TAB_STOP + 1) * TAB_STOP);
        let start = if text == "X" && w.col_start % TAB_STOP == 1 {
            w.col_start - 1
        } else {
            w.col_start
        };
        if start >= first_stop && (start - first_stop).is_multiple_of(TAB_STOP) {
            for k in 0..(start - first_stop) / TAB_STOP {
                fields.push(Field {
                    text: "",
                    column: first_stop + k * TAB_STOP + 1,
                });
            }
        }
        current = Some(w);
    }
    if let Some(cur) = current {
        fields.push(spaced_field(line, cur));
    }
    fields
}

/// `GPU NUMA` or `CPU Affinity`: the start of a multi-word column name, kept together even where
/// a pasted header lost its alignment.
fn is_attr_name_prefix(s: &str) -> bool {
    ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
        .iter()
        .any(|name| {
            name.strip_prefix(s)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
}

fn spaced_field(line: &str, w: Word) -> Field<'_> {
    Field {
        text: line.get(w.byte_start..w.byte_end).unwrap_or_default(),
        column: w.col_start + 1,
    }
}

/// 1-based column just past the last non-blank character: where a missing field would start.
fn end_column(line: &str) -> usize {
    line.trim_end().chars().count() + 1
}

/// `GPU<n>` → n.
fn gpu_index(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("GPU")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `NIC<n>`, as newer drivers label NIC columns (resolved by the NIC legend).
fn is_nic_label(s: &str) -> bool {
    s.strip_prefix("NIC")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// An RDMA device name as older drivers print it in place of `NIC<n>` (`mlx5_0`, `mlx5_bond_0`,
/// `rocep49s0`, `mlx4_0`). Names holding `GPU`/`NIC` are two labels run together.
fn is_rdma_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
        && !s.contains("GPU")
        && !s.contains("NIC")
        && !is_cell_token(s)
}

/// Anything that can stand in a matrix cell, of `topo -m` or of `topo -p2p`.
fn is_cell_token(s: &str) -> bool {
    s == "X" || s.parse::<LinkClass>().is_ok() || P2P_CODES.contains(&s)
}

/// `NIC3: mlx5_3` in the NIC legend.
fn legend_entry(line: &str) -> Option<(&str, &str)> {
    let (label, name) = line.split_once(':')?;
    let (label, name) = (label.trim(), name.trim());
    (is_nic_label(label) && !name.is_empty() && !name.contains(char::is_whitespace))
        .then_some((label, name))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Attr {
    Cpu,
    Numa,
    GpuNumaId,
}

impl Attr {
    fn from_name(s: &str) -> Option<Attr> {
        match s {
            "CPU Affinity" => Some(Attr::Cpu),
            "NUMA Affinity" => Some(Attr::Numa),
            "GPU NUMA ID" => Some(Attr::GpuNumaId),
            _ => None,
        }
    }
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Attr::Cpu => "CPU Affinity",
            Attr::Numa => "NUMA Affinity",
            Attr::GpuNumaId => "GPU NUMA ID",
        })
    }
}

#[derive(Debug, Clone)]
struct Device {
    label: String,
    gpu: Option<u32>,
}

#[derive(Debug)]
struct Header {
    /// GPUs first, then NICs.
    devices: Vec<Device>,
    attrs: Vec<Attr>,
}

/// One parsed row: a cell per device column and, for GPUs, the affinity values.
#[derive(Debug)]
struct Row {
    cells: Vec<Option<LinkClass>>,
    /// (line, column) of each cell, to point at an asymmetry.
    at: Vec<(usize, usize)>,
    attrs: [Option<String>; 3],
}

impl Header {
    fn parse(line_no: usize, line: &str) -> Result<Header, TopoParseError> {
        let all = split_fields(line);
        let first_full = all.iter().position(|f| !f.text.is_empty()).unwrap_or(0);
        let last_full = all
            .iter()
            .rposition(|f| !f.text.is_empty())
            .unwrap_or(first_full);
        let fields = all.get(first_full..=last_full).unwrap_or_default();
        let Some(first) = fields.first() else {
            return Err(err(
                line_no,
                1,
                TopoErrorKind::MissingHeader,
                "expected the `topo -m` header".into(),
            ));
        };
        if gpu_index(first.text).is_none() {
            return Err(err(
                line_no,
                first.column,
                TopoErrorKind::MissingHeader,
                format!(
                    "expected the `nvidia-smi topo -m` header (column names starting with GPU0) \
                     but found {:?}",
                    first.text
                ),
            ));
        }
        if fields.get(1).is_some_and(|f| is_cell_token(f.text)) {
            return Err(err(
                line_no,
                first.column,
                TopoErrorKind::MissingHeader,
                format!(
                    "found row {} where the header (`GPU0 GPU1 … CPU Affinity`) was expected: \
                     the header line is missing",
                    first.text
                ),
            ));
        }

        let mut devices: Vec<Device> = Vec::new();
        let mut attrs: Vec<Attr> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for f in fields {
            let bad = |what: String| err(line_no, f.column, TopoErrorKind::BadHeader, what);
            if f.text.is_empty() {
                return Err(bad(format!(
                    "expected {COLUMN_NAMES} but found an empty field"
                )));
            }
            if !seen.insert(f.text) {
                return Err(bad(format!(
                    "column {:?} appears twice in the header",
                    f.text
                )));
            }
            if let Some(attr) = Attr::from_name(f.text) {
                if attrs.last().is_some_and(|a| *a >= attr) {
                    return Err(bad(format!("column {:?} is out of order", f.text)));
                }
                attrs.push(attr);
                continue;
            }
            let gpu = gpu_index(f.text);
            if gpu.is_none() && !is_nic_label(f.text) && !is_rdma_name(f.text) {
                let hint = if f.text.get(1..).is_some_and(|rest| {
                    rest.contains("GPU") || rest.contains("NIC") || rest.contains(' ')
                }) {
                    " (names run together: a tab was lost?)"
                } else {
                    ""
                };
                return Err(bad(format!(
                    "expected {COLUMN_NAMES} but found {:?}{hint}",
                    f.text
                )));
            }
            if !attrs.is_empty() {
                return Err(bad(format!(
                    "device column {:?} after the affinity columns",
                    f.text
                )));
            }
            if gpu.is_some() && devices.last().is_some_and(|d| d.gpu.is_none()) {
                return Err(bad(format!("GPU column {:?} after a NIC column", f.text)));
            }
            devices.push(Device {
                label: f.text.to_string(),
                gpu,
            });
        }
        Ok(Header { devices, attrs })
    }

    fn gpu_count(&self) -> usize {
        self.devices.iter().filter(|d| d.gpu.is_some()).count()
    }

    fn device_position(&self, label: &str) -> Option<usize> {
        self.devices.iter().position(|d| d.label == label)
    }

    fn parse_row(&self, line_no: usize, line: &str, d: usize) -> Result<Row, TopoParseError> {
        let expected = self.devices.get(d).map_or("", |dev| dev.label.as_str());
        let fields = split_fields(line);
        let label = fields.first().copied().unwrap_or(Field {
            text: "",
            column: 1,
        });
        if label.text != expected {
            let label = if label.text.is_empty() {
                fields
                    .iter()
                    .find(|f| !f.text.is_empty())
                    .copied()
                    .unwrap_or(label)
            } else {
                label
            };
            return Err(err(
                line_no,
                label.column,
                TopoErrorKind::UnexpectedRow,
                format!("expected row {expected} but found {:?}", label.text),
            ));
        }

        let n_dev = self.devices.len();
        let mut cells = Vec::with_capacity(n_dev);
        let mut at = Vec::with_capacity(n_dev);
        for (c, column) in self.devices.iter().enumerate() {
            let Some(f) = fields.get(1 + c) else {
                return Err(err(
                    line_no,
                    end_column(line),
                    TopoErrorKind::ShortRow,
                    format!(
                        "row {expected} ends after {c} of {n_dev} cells: expected {LINK_CLASSES} \
                         for column {} (truncated line?)",
                        column.label
                    ),
                ));
            };
            at.push((line_no, f.column));
            if c == d {
                if f.text != "X" {
                    return Err(err(
                        line_no,
                        f.column,
                        TopoErrorKind::BadCell,
                        format!("expected X on the diagonal but found {:?}", f.text),
                    ));
                }
                cells.push(None);
                continue;
            }
            match f.text.parse::<LinkClass>() {
                Ok(class) => cells.push(Some(class)),
                Err(_) if P2P_CODES.contains(&f.text) => {
                    return Err(err(
                        line_no,
                        f.column,
                        TopoErrorKind::P2pMatrix,
                        format!(
                            "found {:?}: this is a `nvidia-smi topo -p2p` P2P-capability matrix \
                             (cells OK, CNS, GNS, TNS, NS), not a `topo -m` link matrix",
                            f.text
                        ),
                    ));
                }
                Err(_) => {
                    let found = if f.text.is_empty() {
                        "an empty field".to_string()
                    } else {
                        format!("{:?}", f.text)
                    };
                    return Err(err(
                        line_no,
                        f.column,
                        TopoErrorKind::BadCell,
                        format!("expected {LINK_CLASSES} but found {found}"),
                    ));
                }
            }
        }

        let rest = fields.get(1 + n_dev..).unwrap_or_default();
        let is_gpu = self.devices.get(d).is_some_and(|dev| dev.gpu.is_some());
        let mut attrs: [Option<String>; 3] = Default::default();
        let mut used = 0;
        if is_gpu {
            let mut surplus = rest.len().saturating_sub(self.attrs.len());
            for attr in &self.attrs {
                // The extra tab nvidia-smi writes before `GPU NUMA ID` and before an `N/A` value.
                if surplus > 0
                    && rest.get(used).is_some_and(|f| f.text.is_empty())
                    && (*attr == Attr::GpuNumaId
                        || rest.get(used + 1).is_some_and(|f| f.text == "N/A"))
                {
                    used += 1;
                    surplus -= 1;
                }
                let Some(f) = rest.get(used) else {
                    return Err(err(
                        line_no,
                        end_column(line),
                        TopoErrorKind::ShortRow,
                        format!("row {expected} ends before its {attr} field (truncated line?)"),
                    ));
                };
                used += 1;
                attrs[*attr as usize] = attribute(line_no, *f, *attr)?;
            }
        }
        if let Some(f) = rest
            .get(used..)
            .and_then(|r| r.iter().find(|f| !f.text.is_empty()))
        {
            return Err(err(
                line_no,
                f.column,
                TopoErrorKind::ExtraField,
                format!(
                    "unexpected {:?} after the last column of row {expected} (the header has \
                     fewer columns than this row)",
                    f.text
                ),
            ));
        }
        Ok(Row { cells, at, attrs })
    }

    fn into_matrix(
        self,
        rows: Vec<Row>,
        nic_rows: bool,
        legend: &HashMap<String, String>,
    ) -> TopoMatrix {
        let n_gpu = self.gpu_count();
        let mut rows = rows.into_iter();
        let mut gpus = Vec::with_capacity(n_gpu);
        for device in self.devices.iter().take(n_gpu) {
            let Some(row) = rows.next() else { break };
            let [cpu_affinity, numa_affinity, gpu_numa_id] = row.attrs;
            let mut cells = row.cells;
            let nic_links = cells.split_off(n_gpu.min(cells.len()));
            gpus.push(MatrixGpu {
                index: device.gpu.unwrap_or_default(),
                cpu_affinity,
                numa_affinity,
                gpu_numa_id,
                gpu_links: cells,
                nic_links: nic_links.into_iter().flatten().collect(),
            });
        }
        let nics = self
            .devices
            .iter()
            .skip(n_gpu)
            .map(|device| MatrixNic {
                label: device.label.clone(),
                name: legend
                    .get(&device.label)
                    .cloned()
                    .unwrap_or_else(|| device.label.clone()),
                nic_links: if nic_rows {
                    rows.next()
                        .map(|r| r.cells.into_iter().skip(n_gpu).collect())
                } else {
                    None
                },
            })
            .collect();
        TopoMatrix {
            gpus,
            nics,
            columns: AffinityColumns {
                cpu_affinity: self.attrs.contains(&Attr::Cpu),
                numa_affinity: self.attrs.contains(&Attr::Numa),
                gpu_numa_id: self.attrs.contains(&Attr::GpuNumaId),
            },
        }
    }
}

/// Validates one affinity value; empty and `N/A` are unknown.
fn attribute(line_no: usize, f: Field<'_>, attr: Attr) -> Result<Option<String>, TopoParseError> {
    if f.text.is_empty() || f.text == "N/A" {
        return Ok(None);
    }
    let list = f
        .text
        .bytes()
        .all(|b| b.is_ascii_digit() || b == b',' || b == b'-');
    if !list || !f.text.starts_with(|c: char| c.is_ascii_digit()) {
        let what = match attr {
            Attr::Cpu => "a CPU list such as 0-31,64-95",
            Attr::Numa => "a NUMA node or node list such as 0 or 0-1",
            Attr::GpuNumaId => "a NUMA node id or N/A",
        };
        return Err(err(
            line_no,
            f.column,
            TopoErrorKind::BadAttribute,
            format!("expected {what} for {attr} but found {:?}", f.text),
        ));
    }
    Ok(Some(f.text.to_string()))
}

/// Every link printed twice must read the same both ways.
fn check_symmetry(header: &Header, rows: &[Row]) -> Result<(), TopoParseError> {
    for (j, row_j) in rows.iter().enumerate() {
        for (i, row_i) in rows.iter().enumerate().take(j) {
            let (Some(a), Some(b)) = (row_i.cells.get(j), row_j.cells.get(i)) else {
                continue;
            };
            if a != b {
                let (line, column) = row_j.at.get(i).copied().unwrap_or((1, 1));
                let name = |k: usize| header.devices.get(k).map_or("?", |d| d.label.as_str());
                let show = |c: &Option<LinkClass>| c.map_or("X".to_string(), |c| c.to_string());
                return Err(err(
                    line,
                    column,
                    TopoErrorKind::Asymmetric,
                    format!(
                        "{}→{} is {} but {}→{} is {}: a topo -m matrix is symmetric",
                        name(j),
                        name(i),
                        show(b),
                        name(i),
                        name(j),
                        show(a)
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(fields: &[Field<'a>]) -> Vec<&'a str> {
        fields.iter().map(|f| f.text).collect()
    }

    #[test]
    fn spaced_fields_rebuild_empty_tab_fields() {
        let line = "GPU0     X      NV18    0-71    0               N/A";
        assert_eq!(
            texts(&split_fields(line)),
            ["GPU0", "X", "NV18", "0-71", "0", "", "N/A"]
        );
        let header = "        GPU0    mlx5_10 mlx5_11 CPU Affinity    NUMA Affinity";
        assert_eq!(
            texts(&split_fields(header)),
            [
                "",
                "GPU0",
                "mlx5_10",
                "mlx5_11",
                "CPU Affinity",
                "NUMA Affinity"
            ]
        );
    }

    #[test]
    fn tabbed_fields_report_character_columns() {
        let fields = split_fields("GPU0\t X \tNODENODE");
        assert_eq!(texts(&fields), ["GPU0", "X", "NODENODE"]);
        assert_eq!(fields[1].column, 7);
        assert_eq!(fields[2].column, 10);
    }

    #[test]
    fn minimal_matrix() {
        let m = parse("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n")
            .unwrap();
        assert_eq!(m.gpu_link(0, 1), Some(LinkClass::Nv(4)));
        assert_eq!(m.gpu(1).unwrap().cpu_affinity.as_deref(), Some("0-7"));
    }
}
