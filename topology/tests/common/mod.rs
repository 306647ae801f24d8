//! Helpers shared by the topology crate's tests.

/// What a terminal or markdown renderer does to the tabs of one line:
/// 8-column tab stops.
pub fn expand_tabs(line: &str) -> String {
    let mut out = String::with_capacity(line.len() * 2);
    let mut col = 0;
    for ch in line.chars() {
        if ch == '\t' {
            let n = 8 - col % 8;
            out.extend(std::iter::repeat_n(' ', n));
            col += n;
        } else {
            out.push(ch);
            col += 1;
        }
    }
    out
}
