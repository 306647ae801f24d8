//! Terminal escape sequences (colour, bold, underline: `ESC [ … m`, and any other CSI, OSC or
//! DCS sequence) removed from a `topo -m` text captured from a colour terminal, with a map back
//! to the original character columns so that errors point into the text as it was given.
//!
//! The escape grammar is `anstyle-parse`'s (the VT500 state machine of `vte`, kept by the
//! rust-cli team for anstream/clap): a hand-written stripper would have to relearn which bytes end
//! which sequence.

use anstyle_parse::{DefaultCharAccumulator, Parser, Perform};

/// One line with its escape sequences removed.
pub(super) struct CleanLine<'a> {
    pub(super) text: std::borrow::Cow<'a, str>,
    /// 1-based original column of each character of `text`; `None` when nothing was removed.
    original_columns: Option<Vec<usize>>,
    /// Characters in the original line, to place a column past the end.
    original_len: usize,
}

impl CleanLine<'_> {
    /// The original line's column for a column of the cleaned line.
    pub(super) fn original_column(&self, column: usize) -> usize {
        let Some(map) = &self.original_columns else {
            return column;
        };
        match column.checked_sub(1).and_then(|i| map.get(i)) {
            Some(original) => *original,
            // Past the cleaned text's end: as far past the original's end.
            None => self.original_len + 1 + column.saturating_sub(map.len() + 1),
        }
    }
}

/// Collects what an escape-aware terminal would show, and where each character came from.
struct Visible {
    text: String,
    columns: Vec<usize>,
    /// 1-based column of the character being fed.
    at: usize,
}

impl Perform for Visible {
    fn print(&mut self, c: char) {
        self.text.push(c);
        self.columns.push(self.at);
    }

    /// Tabs and other C0 controls stay: the tab separates fields, and any other control is
    /// left for the parser to reject, not silently dropped.
    fn execute(&mut self, byte: u8) {
        self.text.push(char::from(byte));
        self.columns.push(self.at);
    }
}

/// The lines of `text`, each with its escape sequences removed.
pub(super) fn clean_lines(text: &str) -> Vec<CleanLine<'_>> {
    text.lines().map(clean_line).collect()
}

fn clean_line(line: &str) -> CleanLine<'_> {
    let original_len = line.chars().count();
    // Every sequence a terminal capture holds starts with ESC; lines without one stay borrowed.
    if !line.contains('\u{1b}') {
        return CleanLine {
            text: line.into(),
            original_columns: None,
            original_len,
        };
    }
    let mut parser = Parser::<DefaultCharAccumulator>::default();
    let mut visible = Visible {
        text: String::with_capacity(line.len()),
        columns: Vec::with_capacity(original_len),
        at: 0,
    };
    let mut buf = [0u8; 4];
    for (i, c) in line.chars().enumerate() {
        visible.at = i + 1;
        for byte in c.encode_utf8(&mut buf).bytes() {
            parser.advance(&mut visible, byte);
        }
    }
    CleanLine {
        text: visible.text.into(),
        original_columns: Some(visible.columns),
        original_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_are_removed_and_columns_map_back() {
        let line = "\u{1b}[4m\u{1b}[1m\tGPU0\tGPU1\u{1b}[0m";
        let clean = clean_line(line);
        assert_eq!(clean.text, "\tGPU0\tGPU1");
        // The tab was the 9th character of the original line, `GPU1` starts at its 15th.
        assert_eq!(clean.original_column(1), 9);
        assert_eq!(clean.original_column(7), 15);
        assert_eq!(clean.original_column(11), line.chars().count() + 1);
    }

    #[test]
    fn osc_titles_are_removed() {
        let clean = clean_line("\u{1b}]0;title\u{7}GPU0\t X ");
        assert_eq!(clean.text, "GPU0\t X ");
    }

    #[test]
    fn plain_lines_are_borrowed_unchanged() {
        let clean = clean_line("GPU0\t X \tNV4");
        assert!(matches!(clean.text, std::borrow::Cow::Borrowed(_)));
        assert_eq!(clean.original_column(5), 5);
    }
}
