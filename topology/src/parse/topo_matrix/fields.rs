//! Splitting a `topo -m` line into fields, tabbed or with its tabs expanded to spaces, and
//! telling the names that stand in a header apart.

use super::P2P_CODES;
use gputopo_api::LinkClass;

/// Tab stops nvidia-smi's terminal output (and every expanded copy of it) is aligned to.
const TAB_STOP: usize = 8;

/// One field of a line: its text (trimmed) and where it starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field<'a> {
    pub(super) text: &'a str,
    /// 1-based character column of `text` (of the field's place when it is empty).
    pub(super) column: usize,
}

/// Splits a line into fields: on tabs when it has any, else on the reconstructed tab stops.
pub(super) fn split_fields(line: &str) -> Vec<Field<'_>> {
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
pub(super) fn end_column(line: &str) -> usize {
    line.trim_end().chars().count() + 1
}

/// `GPU<n>` → n.
pub(super) fn gpu_index(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("GPU")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `NIC<n>`, as newer drivers label NIC columns (resolved by the NIC legend).
pub(super) fn is_nic_label(s: &str) -> bool {
    s.strip_prefix("NIC")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// An RDMA device name as older drivers print it in place of `NIC<n>` (`mlx5_0`, `mlx5_bond_0`,
/// `rocep49s0`, `mlx4_0`). Names holding `GPU`/`NIC` are two labels run together.
pub(super) fn is_rdma_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
        && !s.contains("GPU")
        && !s.contains("NIC")
        && !is_cell_token(s)
}

/// Anything that can stand in a matrix cell, of `topo -m` or of `topo -p2p`.
pub(super) fn is_cell_token(s: &str) -> bool {
    s == "X" || s.parse::<LinkClass>().is_ok() || P2P_CODES.contains(&s)
}

/// `NIC3: mlx5_3` in the NIC legend.
pub(super) fn legend_entry(line: &str) -> Option<(&str, &str)> {
    let (label, name) = line.split_once(':')?;
    let (label, name) = (label.trim(), name.trim());
    (is_nic_label(label) && !name.is_empty() && !name.contains(char::is_whitespace))
        .then_some((label, name))
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
}
