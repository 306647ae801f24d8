//! One GPU matrix of `rocm-smi --showtopo`: a header of GPU names, one row per GPU.

use super::banner;
use crate::backend::amd_smi::AmdLinkType;
use crate::parse::amd_text_error::{AmdTextError, at, words};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Weight,
    Hops,
    LinkType,
}

impl Section {
    pub(super) fn from_title(title: &str) -> Section {
        match title {
            "Weight between two GPUs" => Section::Weight,
            "Hops between two GPUs" => Section::Hops,
            _ => Section::LinkType,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Section::Weight => "Weight",
            Section::Hops => "Hops",
            Section::LinkType => "Link Type",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cell {
    Diagonal,
    Number(u64),
    Link(AmdLinkType),
}

#[derive(Debug)]
pub(super) struct Matrix {
    pub(super) section: Section,
    pub(super) header_line: usize,
    pub(super) gpus: Vec<u32>,
    cells: Vec<Vec<Cell>>,
}

impl Matrix {
    pub(super) fn cell(&self, i: usize, j: usize) -> Cell {
        self.cells
            .get(i)
            .and_then(|r| r.get(j))
            .copied()
            .unwrap_or(Cell::Diagonal)
    }
}

fn gpu_name(s: &str) -> Option<u32> {
    let d = s.strip_prefix("GPU")?;
    (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .then(|| d.parse().ok())
        .flatten()
}

/// Reads a matrix starting at line index `i` (just after its banner).
/// Returns it and the index of the first line after it.
pub(super) fn read(
    lines: &[&str],
    mut i: usize,
    section: Section,
) -> Result<(Matrix, usize), AmdTextError> {
    // The header: the first line that is not blank.
    while i < lines.len() && lines[i].trim().is_empty() {
        i += 1;
    }
    let Some(&header) = lines.get(i) else {
        return Err(at(
            i + 1,
            1,
            format!(
                "the {} section ends before its header (`GPU0 GPU1 …`)",
                section.name()
            ),
        ));
    };
    let header_line = i + 1;
    let gpus = header_gpus(header, header_line, section)?;
    i += 1;
    let n = gpus.len();
    let mut cells = Vec::with_capacity(n);
    for (r, &row_gpu) in gpus.iter().enumerate() {
        let line_no = i + 1;
        let line = lines.get(i).copied().unwrap_or("");
        if i >= lines.len() || line.trim().is_empty() || banner(line.trim()).is_some() {
            return Err(at(
                line_no,
                1,
                format!(
                    "expected row GPU{row_gpu} of the {} matrix but found {}: the matrix stops after {r} of {n} rows",
                    section.name(),
                    if i >= lines.len() {
                        "the end of the text"
                    } else {
                        "no row"
                    }
                ),
            ));
        }
        i += 1;
        cells.push(read_row(section, line_no, line, r, row_gpu, n)?);
    }
    check_symmetric(section, header_line, &gpus, &cells)?;
    Ok((
        Matrix {
            section,
            header_line,
            gpus,
            cells,
        },
        i,
    ))
}

/// The header's GPUs (`GPU0 GPU1 …`), each once.
fn header_gpus(
    header: &str,
    header_line: usize,
    section: Section,
) -> Result<Vec<u32>, AmdTextError> {
    let mut gpus = Vec::new();
    for (col, w) in words(header) {
        match gpu_name(w) {
            Some(g) if !gpus.contains(&g) => gpus.push(g),
            Some(g) => {
                return Err(at(
                    header_line,
                    col,
                    format!("GPU{g} appears twice in the header"),
                ));
            }
            None => {
                return Err(at(
                    header_line,
                    col,
                    format!(
                        "expected the {} header (GPU0 GPU1 …) but found {w:?}",
                        section.name()
                    ),
                ));
            }
        }
    }
    if gpus.is_empty() {
        return Err(at(header_line, 1, "expected GPU names in the header"));
    }
    Ok(gpus)
}

/// Row `r` (of GPU `row_gpu`) of an `n`-GPU matrix: its label, then
/// exactly `n` cells.
fn read_row(
    section: Section,
    line_no: usize,
    line: &str,
    r: usize,
    row_gpu: u32,
    n: usize,
) -> Result<Vec<Cell>, AmdTextError> {
    let ws = words(line);
    match ws.first() {
        Some((_, label)) if gpu_name(label) == Some(row_gpu) => {}
        Some((col, label)) => {
            return Err(at(
                line_no,
                *col,
                format!("expected row GPU{row_gpu} but found {label:?}"),
            ));
        }
        None => return Err(at(line_no, 1, format!("expected row GPU{row_gpu}"))),
    }
    if ws.len() < n + 1 {
        let end = line.trim_end().chars().count() + 1;
        return Err(at(
            line_no,
            end,
            format!(
                "row GPU{row_gpu} has {} of {n} cells (a missing or merged cell)",
                ws.len() - 1
            ),
        ));
    }
    if let Some((col, extra)) = ws.get(n + 1) {
        return Err(at(
            line_no,
            *col,
            format!("unexpected {extra:?} after the last column of row GPU{row_gpu}"),
        ));
    }
    ws[1..]
        .iter()
        .enumerate()
        .map(|(c, &(col, w))| cell(section, line_no, col, w, r == c))
        .collect()
}

/// The same link read from both ends.
fn check_symmetric(
    section: Section,
    header_line: usize,
    gpus: &[u32],
    cells: &[Vec<Cell>],
) -> Result<(), AmdTextError> {
    let n = gpus.len();
    for a in 0..n {
        for b in a + 1..n {
            if cells[a][b] != cells[b][a] {
                return Err(at(
                    header_line + 1 + b,
                    1,
                    format!(
                        "GPU{}→GPU{} reads {:?} but GPU{}→GPU{} reads {:?}: the {} matrix must be symmetric",
                        gpus[b],
                        gpus[a],
                        cells[b][a],
                        gpus[a],
                        gpus[b],
                        cells[a][b],
                        section.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn cell(
    section: Section,
    line: usize,
    col: usize,
    w: &str,
    diagonal: bool,
) -> Result<Cell, AmdTextError> {
    if diagonal {
        return match w {
            "0" => Ok(Cell::Diagonal),
            _ => Err(at(
                line,
                col,
                format!("expected 0 on the diagonal but found {w:?}"),
            )),
        };
    }
    match section {
        Section::Weight | Section::Hops => w.parse::<u64>().map(Cell::Number).map_err(|_| {
            at(
                line,
                col,
                format!(
                    "expected a {} (a whole number) but found {w:?}",
                    section.name().to_lowercase()
                ),
            )
        }),
        Section::LinkType => match w {
            "XGMI" => Ok(Cell::Link(AmdLinkType::Xgmi)),
            "PCIE" => Ok(Cell::Link(AmdLinkType::Pcie)),
            _ => Err(at(
                line,
                col,
                format!("expected a link type (XGMI or PCIE) but found {w:?}"),
            )),
        },
    }
}
