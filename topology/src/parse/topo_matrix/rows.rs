//! The header (column names) and the rows (a cell per device column, then the affinity values),
//! and the check that every link printed twice reads the same both ways.

use super::fields::{
    Field, end_column, gpu_index, is_cell_token, is_nic_label, is_rdma_name, split_header_fields,
    split_row_fields,
};
use super::{
    AffinityColumns, COLUMN_NAMES, LINK_CLASSES, MatrixGpu, MatrixNic, P2P_CODES, TopoErrorKind,
    TopoMatrix, TopoParseError, err,
};
use gputopo_api::LinkClass;
use std::collections::HashMap;
use std::fmt;

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
pub(super) struct Device {
    pub(super) label: String,
    gpu: Option<u32>,
}

#[derive(Debug)]
pub(super) struct Header {
    /// GPUs first, then NICs.
    pub(super) devices: Vec<Device>,
    attrs: Vec<Attr>,
}

/// One parsed row: a cell per device column and, for GPUs, the affinity values.
#[derive(Debug)]
pub(super) struct Row {
    cells: Vec<Option<LinkClass>>,
    /// (line, column) of each cell, to point at an asymmetry.
    at: Vec<(usize, usize)>,
    attrs: [Option<String>; 3],
    /// Column of the first affinity value read from an empty field, or of an empty field left
    /// after the last one: harmless under a header, ambiguous without one.
    pub(super) blank_value_at: Option<usize>,
}

/// A row's link cells and the (line, column) of each.
type LinkCells = (Vec<Option<LinkClass>>, Vec<(usize, usize)>);

/// A GPU row's affinity values, the fields they took, and the first blank one's column.
type GpuAttributes = ([Option<String>; 3], usize, Option<usize>);

/// The row must start with its device's label.
fn check_row_label(
    line_no: usize,
    fields: &[Field<'_>],
    expected: &str,
) -> Result<(), TopoParseError> {
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
    Ok(())
}

/// One off-diagonal cell: a link class, or why not (a `topo -p2p` matrix's
/// codes named as such).
fn link_cell(line_no: usize, f: Field<'_>) -> Result<LinkClass, TopoParseError> {
    match f.text.parse::<LinkClass>() {
        Ok(class) => Ok(class),
        Err(_) if P2P_CODES.contains(&f.text) => Err(err(
            line_no,
            f.column,
            TopoErrorKind::P2pMatrix,
            format!(
                "found {:?}: this is a `nvidia-smi topo -p2p` P2P-capability matrix \
                     (cells OK, CNS, GNS, TNS, NS), not a `topo -m` link matrix",
                f.text
            ),
        )),
        Err(_) => {
            let found = if f.text.is_empty() {
                "an empty field".to_string()
            } else {
                format!("{:?}", f.text)
            };
            Err(err(
                line_no,
                f.column,
                TopoErrorKind::BadCell,
                format!("expected {LINK_CLASSES} but found {found}"),
            ))
        }
    }
}

impl Header {
    pub(super) fn parse(line_no: usize, line: &str) -> Result<Header, TopoParseError> {
        let all = split_header_fields(line);
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
                    // The whole line: the first word alone would hide which text this is.
                    line.split('\t')
                        .map(str::trim)
                        .find(|p| !p.is_empty())
                        .unwrap_or(first.text)
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

        let mut header = Header {
            devices: Vec::new(),
            attrs: Vec::new(),
        };
        for f in fields {
            header.add_column(line_no, *f)?;
        }
        Ok(header)
    }

    /// The header a matrix would have had, from its row labels (one row per device column) and
    /// the number of affinity columns, which nvidia-smi always prints in the order CPU Affinity,
    /// NUMA Affinity, GPU NUMA ID.
    pub(super) fn from_row_labels(
        labels: &[(usize, Field<'_>)],
        attr_count: usize,
    ) -> Result<Header, TopoParseError> {
        let mut header = Header {
            devices: Vec::new(),
            attrs: [Attr::Cpu, Attr::Numa, Attr::GpuNumaId]
                .into_iter()
                .take(attr_count)
                .collect(),
        };
        for (line_no, f) in labels {
            if header.devices.iter().any(|d| d.label == f.text) {
                return Err(err(
                    *line_no,
                    f.column,
                    TopoErrorKind::UnexpectedRow,
                    format!("row {:?} appears twice", f.text),
                ));
            }
            header.add_device(*line_no, *f)?;
        }
        Ok(header)
    }

    fn add_column(&mut self, line_no: usize, f: Field<'_>) -> Result<(), TopoParseError> {
        let bad = |what: String| err(line_no, f.column, TopoErrorKind::BadHeader, what);
        if f.text.is_empty() {
            return Err(bad(format!(
                "expected {COLUMN_NAMES} but found an empty field"
            )));
        }
        let attr = Attr::from_name(f.text);
        if self.devices.iter().any(|d| d.label == f.text)
            || attr.is_some_and(|a| self.attrs.contains(&a))
        {
            return Err(bad(format!(
                "column {:?} appears twice in the header",
                f.text
            )));
        }
        if let Some(attr) = attr {
            if self.attrs.last().is_some_and(|a| *a >= attr) {
                return Err(bad(format!("column {:?} is out of order", f.text)));
            }
            self.attrs.push(attr);
            return Ok(());
        }
        if !self.attrs.is_empty()
            && (gpu_index(f.text).is_some() || is_nic_label(f.text) || is_rdma_name(f.text))
        {
            return Err(bad(format!(
                "device column {:?} after the affinity columns",
                f.text
            )));
        }
        self.add_device(line_no, f)
    }

    /// A GPU or NIC column, named in a header or by a row label.
    fn add_device(&mut self, line_no: usize, f: Field<'_>) -> Result<(), TopoParseError> {
        let bad = |what: String| err(line_no, f.column, TopoErrorKind::BadHeader, what);
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
        if gpu.is_some() && self.devices.last().is_some_and(|d| d.gpu.is_none()) {
            return Err(bad(format!("GPU column {:?} after a NIC column", f.text)));
        }
        self.devices.push(Device {
            label: f.text.to_string(),
            gpu,
        });
        Ok(())
    }

    pub(super) fn gpu_count(&self) -> usize {
        self.devices.iter().filter(|d| d.gpu.is_some()).count()
    }

    pub(super) fn device_position(&self, label: &str) -> Option<usize> {
        self.devices.iter().position(|d| d.label == label)
    }

    pub(super) fn parse_row(
        &self,
        line_no: usize,
        line: &str,
        d: usize,
    ) -> Result<Row, TopoParseError> {
        let expected = self.devices.get(d).map_or("", |dev| dev.label.as_str());
        let fields = split_row_fields(line);
        check_row_label(line_no, &fields, expected)?;
        let (cells, at) = self.link_cells(line_no, line, &fields, d, expected)?;
        let rest = fields.get(1 + self.devices.len()..).unwrap_or_default();
        let is_gpu = self.devices.get(d).is_some_and(|dev| dev.gpu.is_some());
        let (attrs, used, mut blank_value_at) = if is_gpu {
            self.gpu_attributes(line_no, line, rest, expected)?
        } else {
            (Default::default(), 0, None)
        };
        if is_gpu && let Some(f) = rest.get(used..).and_then(|r| r.first()) {
            blank_value_at = blank_value_at.or(Some(f.column));
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
        Ok(Row {
            cells,
            at,
            attrs,
            blank_value_at,
        })
    }

    /// Row `d`'s link cells, one per device column (`None` on the diagonal),
    /// with where each is.
    fn link_cells(
        &self,
        line_no: usize,
        line: &str,
        fields: &[Field<'_>],
        d: usize,
        expected: &str,
    ) -> Result<LinkCells, TopoParseError> {
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
            cells.push(Some(link_cell(line_no, *f)?));
        }
        Ok((cells, at))
    }

    /// A GPU row's affinity values after its cells (the fields in `rest`):
    /// the values, how many fields they took, and the column of the first
    /// one read from an empty field.
    fn gpu_attributes(
        &self,
        line_no: usize,
        line: &str,
        rest: &[Field<'_>],
        expected: &str,
    ) -> Result<GpuAttributes, TopoParseError> {
        let mut attrs: [Option<String>; 3] = Default::default();
        let mut blank_value_at = None;
        let mut used = 0;
        let mut surplus = rest.len().saturating_sub(self.attrs.len());
        for attr in &self.attrs {
            // The extra tab nvidia-smi writes before `GPU NUMA ID` and before an `N/A` value.
            if surplus > 0
                && rest.get(used).is_some_and(|f| f.text.is_empty())
                && (*attr == Attr::GpuNumaId || rest.get(used + 1).is_some_and(|f| f.text == "N/A"))
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
            if f.text.is_empty() {
                blank_value_at = blank_value_at.or(Some(f.column));
            }
            attrs[*attr as usize] = attribute(line_no, *f, *attr)?;
        }
        Ok((attrs, used, blank_value_at))
    }

    pub(super) fn into_matrix(
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
pub(super) fn check_symmetry(header: &Header, rows: &[Row]) -> Result<(), TopoParseError> {
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
