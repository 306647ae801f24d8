//! A matrix whose header line was lost (an excerpt that starts at the `GPU0` row).
//!
//! The header is redundant with the rows when the matrix is square: every device column has
//! its row, with the same label, in the same order, and `X` where row and column meet. So the
//! device columns are read back from the row labels, but only when every row has exactly one
//! link cell per row; a row with more cells has columns with no row (NICs of a GPU-only
//! excerpt, or rows cut off), which cannot be named, and is refused.
//!
//! The affinity values after the cells are assigned to CPU Affinity, NUMA Affinity and GPU
//! NUMA ID in that order (the only order and the only subsets nvidia-smi prints: each driver
//! generation adds the next one). That needs every value to be visible: a row whose fields are
//! single-space separated (no tabs, no tab-stop alignment), or an empty value, could hide a
//! missing column, and is refused.

use super::fields::{Field, gpu_index, is_cell_token, is_nic_label, is_rdma_name};
use super::fields::{row_keeps_empty_fields, split_row_fields};
use super::rows::{Header, Row};
use super::{TopoErrorKind, TopoParseError, err};

const ACCEPTED: &str = "a matrix without its header line is read only when it has one row per \
                        column (GPU rows, then every NIC row) with X on the diagonal, and each \
                        GPU row shows all of its affinity values";

/// `GPU0  X  NV12 …`: the text starts with a row, not with the header.
pub(super) fn starts_with_row(line: &str) -> bool {
    let fields = split_row_fields(line);
    fields.first().is_some_and(|f| gpu_index(f.text).is_some())
        && fields.get(1).is_some_and(|f| is_cell_token(f.text))
}

/// The header the rows starting at `lines[0]` imply.
pub(super) fn header_from_rows(lines: &[(usize, &str)]) -> Result<Header, TopoParseError> {
    let rows: Vec<(usize, &str, Vec<Field<'_>>)> = lines
        .iter()
        .map(|(n, l)| (*n, *l, split_row_fields(l)))
        .take_while(|(_, _, fields)| {
            fields.first().is_some_and(|f| {
                gpu_index(f.text).is_some() || is_nic_label(f.text) || is_rdma_name(f.text)
            }) && fields.get(1).is_some_and(|f| is_cell_token(f.text))
        })
        .collect();
    let n_rows = rows.len();
    let missing = |line: usize, column: usize, why: String| {
        err(
            line,
            column,
            TopoErrorKind::MissingHeader,
            format!("the header line is missing and {why}; {ACCEPTED}"),
        )
    };

    let mut attr_count = 0;
    for (n, line, fields) in &rows {
        let label = fields.first().map_or("", |f| f.text);
        let cells = fields
            .iter()
            .skip(1)
            .take_while(|f| is_cell_token(f.text))
            .count();
        if cells > n_rows {
            let column = fields.get(1 + n_rows).map_or(1, |f| f.column);
            return Err(missing(
                *n,
                column,
                format!(
                    "row {label} has {cells} link cells for {n_rows} rows: the columns past the \
                     last row (NICs, or rows cut off) cannot be named"
                ),
            ));
        }
        // A row short of cells is reported where the cell is missing, when the rows are read.
        if cells < n_rows || gpu_index(label).is_none() {
            continue;
        }
        // nvidia-smi's padding empties come only after a NUMA value: a blank first value is an
        // empty CPU Affinity, which would shift every value after it.
        if let Some(f) = fields.get(1 + n_rows).filter(|f| f.text.is_empty())
            && fields.iter().skip(2 + n_rows).any(|f| !f.text.is_empty())
        {
            return Err(missing(
                *n,
                f.column,
                format!(
                    "row {label} has an empty first affinity value, which cannot be told from a                      missing column"
                ),
            ));
        }
        let values: Vec<&Field<'_>> = fields
            .iter()
            .skip(1 + n_rows)
            .filter(|f| !f.text.is_empty())
            .collect();
        if let Some(f) = values.get(3) {
            return Err(missing(
                *n,
                f.column,
                format!(
                    "row {label} has {} values after its cells, more than CPU Affinity, NUMA \
                     Affinity and GPU NUMA ID",
                    values.len()
                ),
            ));
        }
        if let Some(f) = values.first()
            && !row_keeps_empty_fields(line)
        {
            return Err(missing(
                *n,
                f.column,
                format!(
                    "row {label} has lost its tabs and alignment: an empty affinity value \
                     could have vanished, so its values cannot be assigned to columns"
                ),
            ));
        }
        attr_count = attr_count.max(values.len());
    }

    let labels: Vec<(usize, Field<'_>)> = rows
        .iter()
        .filter_map(|(n, _, fields)| fields.first().map(|f| (*n, *f)))
        .collect();
    Header::from_row_labels(&labels, attr_count)
}

/// Without a header, an empty affinity value cannot be told from a column that is not there.
pub(super) fn check_no_blank_values(
    header: &Header,
    rows: &[Row],
    row_lines: &[usize],
) -> Result<(), TopoParseError> {
    let n_gpu = header.gpu_count();
    for (row, line) in rows.iter().zip(row_lines).take(n_gpu) {
        if let Some(column) = row.blank_value_at {
            return Err(err(
                *line,
                column,
                TopoErrorKind::MissingHeader,
                format!(
                    "the header line is missing and this row has an empty affinity field, which \
                     cannot be told from a missing column; {ACCEPTED}"
                ),
            ));
        }
    }
    Ok(())
}
