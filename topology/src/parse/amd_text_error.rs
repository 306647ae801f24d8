//! The error of the AMD text parsers: what was wrong, where, and what is accepted.

/// A `rocm-smi` / `amd-smi` text that is not a complete, consistent topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct AmdTextError {
    /// 1-based line number.
    pub line: usize,
    /// 1-based character column where the offending token starts.
    pub column: usize,
    pub message: String,
}

pub(crate) fn at(line: usize, column: usize, message: impl Into<String>) -> AmdTextError {
    AmdTextError {
        line,
        column,
        message: message.into(),
    }
}

/// Whitespace-separated words of a line with their 1-based character columns.
pub(crate) fn words(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start: Option<(usize, usize)> = None;
    let mut col = 0;
    for (byte, ch) in line.char_indices() {
        col += 1;
        if ch.is_whitespace() {
            if let Some((b, c)) = start.take() {
                out.push((c, &line[b..byte]));
            }
        } else if start.is_none() {
            start = Some((byte, col));
        }
    }
    if let Some((b, c)) = start {
        out.push((c, &line[b..]));
    }
    out
}
