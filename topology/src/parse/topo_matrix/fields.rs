//! Splitting a `topo -m` line into fields (tabbed, with its tabs expanded to spaces, or with its
//! tabs collapsed to single spaces; indented or not), and telling the names that stand in a
//! header apart.

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

/// A run of non-blank characters: byte range, 0-based character columns, and (in a tabbed line)
/// how many tabs come before it.
#[derive(Debug, Clone, Copy)]
struct Word {
    byte_start: usize,
    byte_end: usize,
    col_start: usize,
    col_end: usize,
    tabs_before: usize,
}

/// Where a field goes: a word, or an empty field (1-based column of its place).
#[derive(Debug, Clone, Copy)]
enum Slot {
    Word(Word),
    Empty(usize),
}

/// Splits a matrix row into fields: one per word (no cell or affinity value holds a blank, so
/// cells whose tab became one space are still apart), with the empty fields that a tab (or, in
/// a space-expanded copy, a tab stop) marks. Leading empty fields are the line's indentation:
/// a row starts with its label, so they are dropped.
pub(super) fn split_row_fields(line: &str) -> Vec<Field<'_>> {
    let slots = slots(line, true);
    let first_word = slots
        .iter()
        .position(|s| matches!(s, Slot::Word(_)))
        .unwrap_or(slots.len());
    slots
        .get(first_word..)
        .unwrap_or_default()
        .iter()
        .map(|s| slot_field(line, *s))
        .collect()
}

/// Splits a header into column names: one per word, except that words one blank apart that
/// make up `CPU Affinity`, `NUMA Affinity` or `GPU NUMA ID` are one name (no other name holds
/// a blank, so a header whose tabs became single spaces reads the same).
pub(super) fn split_header_fields(line: &str) -> Vec<Field<'_>> {
    let mut fields = Vec::new();
    let mut open: Option<Word> = None;
    for slot in slots(line, false) {
        if let (Some(cur), Slot::Word(w)) = (open.as_mut(), slot) {
            let joined = line.get(cur.byte_start..w.byte_end).unwrap_or_default();
            if w.tabs_before == cur.tabs_before
                && w.col_start == cur.col_end + 1
                && is_attr_name_prefix(joined)
            {
                cur.byte_end = w.byte_end;
                cur.col_end = w.col_end;
                continue;
            }
        }
        if let Some(cur) = open.take() {
            fields.push(slot_field(line, Slot::Word(cur)));
        }
        match slot {
            Slot::Word(w) => open = Some(w),
            Slot::Empty(_) => fields.push(slot_field(line, slot)),
        }
    }
    if let Some(cur) = open {
        fields.push(slot_field(line, Slot::Word(cur)));
    }
    fields
}

fn slot_field(line: &str, slot: Slot) -> Field<'_> {
    match slot {
        Slot::Word(w) => Field {
            text: line.get(w.byte_start..w.byte_end).unwrap_or_default(),
            column: w.col_start + 1,
        },
        Slot::Empty(column) => Field { text: "", column },
    }
}

fn words(line: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut open: Option<(usize, usize)> = None;
    let mut tabs = 0;
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
                    tabs_before: tabs,
                });
            }
            if ch == '\t' {
                tabs += 1;
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
            tabs_before: tabs,
        });
    }
    words
}

/// The words of a line and its empty fields: on tabs when it has any, else on the
/// reconstructed tab stops.
fn slots(line: &str, row: bool) -> Vec<Slot> {
    let words = words(line);
    if line.contains('\t') {
        tabbed_slots(line, &words)
    } else {
        spaced_slots(line, &words, row)
    }
}

/// A piece between two tabs with no word in it is an empty field.
fn tabbed_slots(line: &str, words: &[Word]) -> Vec<Slot> {
    let mut piece_starts = vec![1];
    piece_starts.extend(
        line.chars()
            .enumerate()
            .filter(|(_, c)| *c == '\t')
            .map(|(i, _)| i + 2),
    );
    let mut slots = Vec::with_capacity(piece_starts.len().max(words.len()));
    let mut next = words.iter().peekable();
    for (piece, start) in piece_starts.iter().enumerate() {
        let mut any = false;
        while let Some(w) = next.next_if(|w| w.tabs_before == piece) {
            slots.push(Slot::Word(*w));
            any = true;
        }
        if !any {
            slots.push(Slot::Empty(*start));
        }
    }
    slots
}

/// Reads a line whose tabs were expanded to spaces (or collapsed to single spaces).
///
/// A word that starts whole tab stops later than the previous word's tab would have taken it
/// had empty fields in between; the diagonal ` X ` starts one column after its tab stop. Tab
/// stops count from the line's start for a header (its leading tab is part of the alignment)
/// and from the label for a row (nvidia-smi starts rows at the label, so blanks before it are
/// indentation added later). A line whose alignment was lost has no empty fields.
fn spaced_slots(line: &str, words: &[Word], row: bool) -> Vec<Slot> {
    let origin = if row {
        words.first().map_or(0, |w| w.col_start)
    } else {
        0
    };
    let mut slots = Vec::with_capacity(words.len());
    let mut last_end: Option<usize> = None;
    for w in words {
        let (col_start, col_end) = (w.col_start - origin, w.col_end - origin);
        let first_stop = last_end.map_or(0, |e| (e / TAB_STOP + 1) * TAB_STOP);
        let text_is_x = line.get(w.byte_start..w.byte_end) == Some("X");
        let start = if text_is_x && col_start % TAB_STOP == 1 {
            col_start - 1
        } else {
            col_start
        };
        if last_end.is_some()
            && start >= first_stop
            && (start - first_stop).is_multiple_of(TAB_STOP)
        {
            for k in 0..(start - first_stop) / TAB_STOP {
                slots.push(Slot::Empty(origin + first_stop + k * TAB_STOP + 1));
            }
        }
        slots.push(Slot::Word(*w));
        last_end = Some(col_end);
    }
    slots
}

/// `GPU NUMA` or `CPU Affinity`: the start of a multi-word column name.
fn is_attr_name_prefix(s: &str) -> bool {
    ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
        .iter()
        .any(|name| {
            name.strip_prefix(s)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
}

/// Whether a spaced row still has nvidia-smi's alignment (every field on a tab stop counted from
/// the label), so that its empty fields can be seen; a tabbed row always can.
pub(super) fn row_keeps_empty_fields(line: &str) -> bool {
    if line.contains('\t') {
        return true;
    }
    let words = words(line);
    let origin = words.first().map_or(0, |w| w.col_start);
    words.iter().all(|w| {
        let col = w.col_start - origin;
        let is_x = line.get(w.byte_start..w.byte_end) == Some("X");
        col.is_multiple_of(TAB_STOP) || (is_x && col % TAB_STOP == 1)
    })
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
            texts(&split_row_fields(line)),
            ["GPU0", "X", "NV18", "0-71", "0", "", "N/A"]
        );
        let header = "        GPU0    mlx5_10 mlx5_11 CPU Affinity    NUMA Affinity";
        assert_eq!(
            texts(&split_header_fields(header)),
            [
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
        let fields = split_row_fields("GPU0\t X \tNODENODE");
        assert_eq!(texts(&fields), ["GPU0", "X", "NODENODE"]);
        assert_eq!(fields[1].column, 7);
        assert_eq!(fields[2].column, 10);
    }
}
