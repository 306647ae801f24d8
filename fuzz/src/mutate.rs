//! Text inputs: recorded fixtures damaged the ways real copies are (and
//! worse), and arbitrary text. An input is a seed text and up to eight
//! [`Edit`]s applied in order; proptest shrinks the list and each edit, so
//! a panic comes back as the seed with the fewest edits that still break it.
//!
//! Every input is bounded ([`MAX_INPUT`] bytes): an edit that would grow
//! the text past it is skipped, so "never hangs" means "never hangs on a
//! bounded input", as the kubelet, the API server and the file system bound
//! what reaches the parsers in practice.

use proptest::prelude::*;
use proptest::sample::Index;
use std::sync::Arc;

/// The largest input drawn, in bytes.
pub const MAX_INPUT: usize = 256 * 1024;

/// Numbers parsers meet at their limits: u32 / u64 / i64 edges, negative,
/// IEEE infinities and NaN in every spelling, precision beyond f64, hex,
/// signs, leading zeros.
pub const EXTREMES: &[&str] = &[
    "0",
    "-0",
    "-1",
    "+1",
    "1.5",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999999999999",
    "1e309",
    "-1e309",
    "1e-400",
    "1e18",
    "NaN",
    "nan",
    ".nan",
    "inf",
    "-inf",
    ".inf",
    "Infinity",
    "0x10",
    "0o7",
    "1_000",
    "007",
    "1e3",
    "1E+2",
    "0.0000001",
];

/// Characters and fragments that mean something to some parser, plus
/// multi-byte and invisible ones (byte slicing off a char boundary shows).
pub const TOKENS: &[&str] = &[
    "\t",
    " ",
    "\n",
    "\r\n",
    "\r",
    "\0",
    ":",
    ",",
    ";",
    "-",
    "/",
    ".",
    "=",
    "|",
    "#",
    "\"",
    "'",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "<",
    ">",
    "&",
    "*",
    "!",
    "?",
    "%",
    "\\",
    "---",
    "X",
    "N/A",
    "é",
    "略",
    "…",
    "😀",
    "\u{feff}",
    "\u{200b}",
    "\u{2028}",
    "\u{1b}[1m",
    "\u{1b}[0m",
    "::",
    "{i}",
    "{i:0",
    "{i:099}",
];

/// One damage done to a text.
#[derive(Clone, Debug)]
pub enum Edit {
    /// XOR one byte with a mask (the text is then read as UTF-8, lossily).
    FlipByte(Index, u8),
    /// Cut the text here.
    Truncate(Index),
    DeleteLine(Index),
    /// Repeat a line `n` more times.
    DuplicateLine(Index, u16),
    SwapLines(Index, Index),
    /// Remove the k-th field (tab, comma, or blank separated) of a line.
    DeleteColumn(Index, Index),
    /// Write the k-th field of a line twice.
    DuplicateColumn(Index, Index),
    /// This text up to a point, then another seed from a point on.
    Splice(Index, Index, Index),
    /// Replace the k-th number with an extreme one.
    Number(Index, &'static str),
    /// Insert a token (generic or the harness's own words).
    Insert(Index, Arc<str>),
    /// Replace the whole text by `n` copies of its first line.
    Repeat(u16),
}

/// A damaged seed: which seed, and what was done to it.
pub fn edit(words: Arc<[Arc<str>]>) -> impl Strategy<Value = Edit> {
    let token = prop_oneof![
        prop::sample::select(TOKENS).prop_map(Arc::<str>::from),
        prop::sample::select(EXTREMES).prop_map(Arc::<str>::from),
        prop::sample::select(words.to_vec()),
    ];
    prop_oneof![
        3 => (any::<Index>(), 1u8..=255).prop_map(|(i, m)| Edit::FlipByte(i, m)),
        1 => any::<Index>().prop_map(Edit::Truncate),
        2 => any::<Index>().prop_map(Edit::DeleteLine),
        1 => (any::<Index>(), 1u16..2000).prop_map(|(i, n)| Edit::DuplicateLine(i, n)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(l, k)| Edit::DeleteColumn(l, k)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(l, k)| Edit::DuplicateColumn(l, k)),
        1 => (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(s, a, b)| Edit::Splice(s, a, b)),
        4 => (any::<Index>(), prop::sample::select(EXTREMES)).prop_map(|(i, x)| Edit::Number(i, x)),
        3 => (any::<Index>(), token).prop_map(|(i, t)| Edit::Insert(i, t)),
        1 => (2u16..5000).prop_map(Edit::Repeat),
    ]
}

/// Texts drawn from `seeds`: mostly damaged copies, some untouched (the
/// parser must read its own fixtures), some arbitrary text.
pub fn texts(seeds: Arc<[String]>, words: &[&str]) -> BoxedStrategy<String> {
    prop_oneof![
        12 => damaged(seeds, words).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => arbitrary_text(),
    ]
    .boxed()
}

/// [`texts`] as bytes, not necessarily UTF-8, for parsers of raw bodies.
pub fn bytes(seeds: Arc<[String]>, words: &[&str]) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        12 => damaged(seeds, words),
        1 => prop::collection::vec(any::<u8>(), 0..2048),
    ]
    .boxed()
}

fn damaged(seeds: Arc<[String]>, words: &[&str]) -> impl Strategy<Value = Vec<u8>> + use<> {
    assert!(!seeds.is_empty(), "a harness needs at least one seed text");
    let words: Arc<[Arc<str>]> = words
        .iter()
        .map(|w| Arc::<str>::from(*w))
        .chain(std::iter::once(Arc::<str>::from("0")))
        .collect();
    // Few edits more often than many: inputs near a valid one reach
    // deepest, and shrink fastest.
    let edits = prop_oneof![
        1 => prop::collection::vec(edit(words.clone()), 0..1),
        4 => prop::collection::vec(edit(words.clone()), 1..3),
        2 => prop::collection::vec(edit(words), 3..8),
    ];
    (any::<Index>(), edits)
        .prop_map(move |(i, edits)| apply_bytes(&seeds, i.index(seeds.len()), &edits))
}

/// Any text up to 2 KiB, control characters and non-ASCII included.
pub fn arbitrary_text() -> BoxedStrategy<String> {
    prop_oneof![
        prop::string::string_regex("(?s:.{0,512})").expect("a valid regex"),
        prop::collection::vec(any::<u8>(), 0..2048)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
    .boxed()
}

/// `seeds[seed]` with `edits` applied.
pub fn apply_bytes(seeds: &[String], seed: usize, edits: &[Edit]) -> Vec<u8> {
    let mut text = seeds[seed].as_bytes().to_vec();
    for e in edits {
        if let Some(next) = edited(&text, seeds, e)
            && next.len() <= MAX_INPUT
        {
            text = next;
        }
    }
    text
}

/// The lines of `text`, each with its line break.
fn lines(text: &[u8]) -> Vec<&[u8]> {
    text.split_inclusive(|b| *b == b'\n').collect()
}

/// The byte ranges of the fields of a line: split on tabs if it has any,
/// else on commas, else on runs of blanks.
fn fields(line: &[u8]) -> Vec<(usize, usize)> {
    let sep: &dyn Fn(u8) -> bool = if line.contains(&b'\t') {
        &|b| b == b'\t'
    } else if line.contains(&b',') {
        &|b| b == b','
    } else {
        &|b| b == b' '
    };
    let mut out = Vec::new();
    let mut start = None;
    for (i, &b) in line.iter().enumerate() {
        match (sep(b) || b == b'\n', start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, line.len()));
    }
    out
}

/// The byte ranges of the numbers of a text (digits, with a sign, a point
/// and an exponent).
fn numbers(text: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        if text[i].is_ascii_digit() {
            let start = if i > 0 && text[i - 1] == b'-' {
                i - 1
            } else {
                i
            };
            while i < text.len() && (text[i].is_ascii_digit() || b".eE".contains(&text[i])) {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

fn edited(text: &[u8], seeds: &[String], edit: &Edit) -> Option<Vec<u8>> {
    let join = |parts: &[&[u8]]| parts.concat();
    match edit {
        Edit::FlipByte(i, mask) => {
            let mut t = text.to_vec();
            let at = i.index(t.len().max(1));
            if let Some(b) = t.get_mut(at) {
                *b ^= mask;
            }
            Some(t)
        }
        Edit::Truncate(i) => Some(text[..i.index(text.len() + 1)].to_vec()),
        Edit::DeleteLine(i) => {
            let mut ls = lines(text);
            if ls.is_empty() {
                return None;
            }
            ls.remove(i.index(ls.len()));
            Some(join(&ls))
        }
        Edit::DuplicateLine(i, n) => {
            let ls = lines(text);
            if ls.is_empty() {
                return None;
            }
            let k = i.index(ls.len());
            let extra = ls[k].len() * usize::from(*n);
            if text.len() + extra > MAX_INPUT {
                return None;
            }
            let mut out = Vec::with_capacity(text.len() + extra);
            for (j, l) in ls.iter().enumerate() {
                out.extend_from_slice(l);
                if j == k {
                    let line: Vec<u8> = if l.ends_with(b"\n") {
                        l.to_vec()
                    } else {
                        [*l, b"\n"].concat()
                    };
                    for _ in 0..*n {
                        out.extend_from_slice(&line);
                    }
                }
            }
            Some(out)
        }
        Edit::SwapLines(a, b) => {
            let mut ls = lines(text);
            if ls.is_empty() {
                return None;
            }
            let (a, b) = (a.index(ls.len()), b.index(ls.len()));
            ls.swap(a, b);
            Some(join(&ls))
        }
        Edit::DeleteColumn(l, k) | Edit::DuplicateColumn(l, k) => {
            let ls = lines(text);
            if ls.is_empty() {
                return None;
            }
            let at = l.index(ls.len());
            let fs = fields(ls[at]);
            if fs.is_empty() {
                return None;
            }
            let (s, e) = fs[k.index(fs.len())];
            let line = ls[at];
            let new_line = if matches!(edit, Edit::DeleteColumn(..)) {
                [&line[..s], &line[e..]].concat()
            } else {
                [&line[..e], b"\t", &line[s..]].concat()
            };
            let mut out: Vec<&[u8]> = ls.clone();
            out[at] = &new_line;
            Some(join(&out))
        }
        Edit::Splice(other, a, b) => {
            let other = seeds[other.index(seeds.len())].as_bytes();
            let head = &text[..a.index(text.len() + 1)];
            let tail = &other[b.index(other.len() + 1)..];
            Some([head, tail].concat())
        }
        Edit::Number(i, x) => {
            let ns = numbers(text);
            if ns.is_empty() {
                return None;
            }
            let (s, e) = ns[i.index(ns.len())];
            Some([&text[..s], x.as_bytes(), &text[e..]].concat())
        }
        Edit::Insert(i, token) => {
            let at = i.index(text.len() + 1);
            Some([&text[..at], token.as_bytes(), &text[at..]].concat())
        }
        Edit::Repeat(n) => {
            let first = lines(text).first().copied().unwrap_or(b"");
            let line: Vec<u8> = if first.ends_with(b"\n") {
                first.to_vec()
            } else {
                [first, b"\n"].concat()
            };
            let n = usize::from(*n).min(MAX_INPUT / line.len().max(1));
            Some(line.repeat(n))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;

    #[test]
    fn fields_and_numbers_are_found() {
        assert_eq!(fields(b"GPU0\tX \tNV1\n"), vec![(0, 4), (5, 7), (8, 11)]);
        assert_eq!(fields(b"a,b"), vec![(0, 1), (2, 3)]);
        assert_eq!(numbers(b"GPU12 -3 1.5e3"), vec![(3, 5), (6, 8), (9, 14)]);
    }

    #[test]
    fn edits_stay_within_the_bound() {
        let seeds = vec!["x".repeat(1000) + "\n"];
        let out = apply_bytes(&seeds, 0, &[Edit::Repeat(4999), Edit::Repeat(4999)]);
        assert!(out.len() <= MAX_INPUT, "{}", out.len());
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let line = any::<Index>().new_tree(&mut runner).unwrap().current();
        let out = apply_bytes(&seeds, 0, &[Edit::DuplicateLine(line, 1999)]);
        assert_eq!(out.len(), seeds[0].len(), "too long: left as it was");
    }
}
