//! Aligned text tables, as kubectl prints them: a header in capitals,
//! columns two spaces apart, the last column not padded (it holds the long
//! texts: reasons, messages).

/// `header` and `rows` as lines; each row as many cells as the header.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count() + 2;
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_the_last_is_not_padded() {
        let t = render(
            &["NODE", "GPUS", "REASON"],
            &[
                vec!["a".into(), "0,1".into(), "fits".into()],
                vec!["long-name".into(), "-".into(), "too few free GPUs".into()],
            ],
        );
        assert_eq!(
            t,
            "NODE       GPUS  REASON\na          0,1   fits\nlong-name  -     too few free GPUs\n"
        );
    }
}
