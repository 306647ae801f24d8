//! `amd-smi topology`'s tables: lines in, one table at a time (title,
//! header of BDFs, a row per GPU), each cell checked and folded into its
//! GPU pair's values, then the pairs out as [`AmdSmiAnswers`].

use super::{PairCells, TABLES, answers, bandwidth, link_type};
use crate::backend::amd_smi::AmdSmiAnswers;
use crate::parse::amd_text_error::{AmdTextError, at, words};
use crate::pci::canonical_pci_bus_id;
use std::collections::BTreeMap;

/// Each GPU pair's cells, keyed by (lower, higher) GPU ID.
type Pairs = BTreeMap<(u32, u32), PairCells>;

pub(super) fn parse_tables(text: &str) -> Result<AmdSmiAnswers, AmdTextError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut bdfs: Option<(usize, Vec<String>)> = None;
    let mut pairs = Pairs::new();
    let mut seen_tables = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (n, line) = (i + 1, lines[i]);
        i += 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed == "Legend:" {
            break;
        }
        let Some(title) = trimmed.strip_suffix(" TABLE:") else {
            return Err(at(
                n,
                1,
                format!(
                    "expected a table title (`WEIGHT TABLE:`; tables: {TABLES}) but found {trimmed:?}"
                ),
            ));
        };
        if seen_tables.contains(&title.to_string()) {
            return Err(at(n, 1, format!("table {title} appears twice")));
        }
        seen_tables.push(title.to_string());
        let header_no = i + 1;
        let names = table_header(title, header_no, lines.get(i).copied().unwrap_or(""))?;
        i += 1;
        match &bdfs {
            None => bdfs = Some((header_no, names.clone())),
            Some((_, first)) if *first != names => {
                return Err(at(
                    header_no,
                    1,
                    format!("table {title} lists other GPUs than the first table"),
                ));
            }
            Some(_) => {}
        }
        let table = Table {
            title,
            title_line: n,
            count: names.len(),
        };
        for (r, bdf) in names.iter().enumerate() {
            let row = Row {
                number: i + 1,
                text: lines.get(i).copied().unwrap_or(""),
                index: r,
                bdf,
            };
            i += 1;
            for (c, &(col, w)) in table.cells(&row)?.iter().enumerate() {
                table.read_cell(&row, c, col, w, &mut pairs)?;
            }
        }
    }
    let Some((_, names)) = bdfs else {
        return Err(at(
            1,
            1,
            format!(
                "no table found; expected `amd-smi topology` output (tables: {TABLES}) or its --json"
            ),
        ));
    };
    let gpus: Vec<(u32, Option<String>)> = names
        .into_iter()
        .enumerate()
        .map(|(i, b)| (i as u32, Some(b)))
        .collect();
    Ok(answers(&gpus, &pairs))
}

/// A table's header: the GPUs' BDFs, in the rows' order.
fn table_header(title: &str, header_no: usize, line: &str) -> Result<Vec<String>, AmdTextError> {
    let header = words(line);
    for (col, w) in &header {
        if canonical_pci_bus_id(w).is_none() {
            return Err(at(
                header_no,
                *col,
                format!("expected a PCI BDF such as 0000:0c:00.0 but found {w:?}"),
            ));
        }
    }
    if header.is_empty() {
        return Err(at(
            header_no,
            1,
            format!("table {title} has no header of BDFs"),
        ));
    }
    Ok(header.iter().map(|(_, w)| w.to_string()).collect())
}

/// The table being read.
struct Table<'a> {
    title: &'a str,
    /// The title's line number (unknown tables are reported there).
    title_line: usize,
    /// The GPUs its header names.
    count: usize,
}

/// One GPU's row of a table.
struct Row<'a> {
    /// Its line number.
    number: usize,
    text: &'a str,
    /// The GPU's ID: the row's place in the table.
    index: usize,
    /// The BDF the row must start with.
    bdf: &'a str,
}

impl Table<'_> {
    /// The row's cells after its BDF: one per GPU of the header.
    fn cells<'r>(&self, row: &Row<'r>) -> Result<Vec<(usize, &'r str)>, AmdTextError> {
        let (title, count, bdf) = (self.title, self.count, row.bdf);
        let ws = words(row.text);
        match ws.first() {
            Some((_, w)) if *w == bdf => {}
            Some((col, w)) => {
                return Err(at(
                    row.number,
                    *col,
                    format!("expected the row of {bdf} but found {w:?}"),
                ));
            }
            None => {
                return Err(at(
                    row.number,
                    1,
                    format!(
                        "expected the row of {bdf}: table {title} stops after {} of {count} rows",
                        row.index
                    ),
                ));
            }
        }
        if ws.len() != count + 1 {
            let col = ws
                .get(count + 1)
                .map_or(row.text.trim_end().chars().count() + 1, |w| w.0);
            return Err(at(
                row.number,
                col,
                format!(
                    "row {bdf} has {} cells but the header has {count} GPUs (a missing or merged cell)",
                    ws.len() - 1
                ),
            ));
        }
        Ok(ws[1..].to_vec())
    }

    /// Cell `c` (GPU `c`, at column `col`) of `row`: the diagonal's self
    /// value, or one direction of a pair, which must agree with the other.
    fn read_cell(
        &self,
        row: &Row<'_>,
        c: usize,
        col: usize,
        w: &str,
        pairs: &mut Pairs,
    ) -> Result<(), AmdTextError> {
        let (title, r) = (self.title, row.index);
        let bad = |what: &str| {
            at(
                row.number,
                col,
                format!("expected {what} in table {title} but found {w:?}"),
            )
        };
        if c == r {
            let ok = match title {
                "WEIGHT" | "HOPS" => w == "0",
                "NUMA BW" => w == "N/A",
                "ACCESS" => w == "ENABLED",
                _ => w == "SELF",
            };
            if !ok {
                return Err(bad("the diagonal's self value (0, SELF, N/A or ENABLED)"));
            }
            return Ok(());
        }
        let key = ((r.min(c)) as u32, (r.max(c)) as u32);
        let e = pairs.entry(key).or_default();
        // Both directions must agree; the second read checks the first.
        match title {
            "WEIGHT" => agree(
                &mut e.weight,
                w.parse().map_err(|_| bad("a weight"))?,
                || bad("the same weight both ways"),
            )?,
            "HOPS" => agree(
                &mut e.hops,
                w.parse().map_err(|_| bad("a hop count"))?,
                || bad("the same hops both ways"),
            )?,
            "LINK TYPE" => agree(
                &mut e.link_type,
                link_type(w).ok_or_else(|| bad("XGMI or PCIE"))?,
                || bad("the same link type both ways"),
            )?,
            "NUMA BW" => {
                if let Some(b) = bandwidth(w) {
                    agree(
                        &mut e.bandwidth,
                        b.map_err(|_| bad("<min>-<max> MB/s or N/A"))?,
                        || bad("the same bandwidth both ways"),
                    )?;
                }
            }
            "ACCESS" => {
                if w != "ENABLED" && w != "DISABLED" {
                    return Err(bad("ENABLED or DISABLED"));
                }
            }
            "CACHE COHERANCY" | "ATOMICS" | "DMA" | "BI-DIRECTIONAL" => {}
            other => {
                return Err(at(
                    self.title_line,
                    1,
                    format!("unknown table {other:?}; tables: {TABLES}"),
                ));
            }
        }
        Ok(())
    }
}

/// Keeps the first value and checks a second against it.
fn agree<T: PartialEq>(
    slot: &mut Option<T>,
    value: T,
    differ: impl Fn() -> AmdTextError,
) -> Result<(), AmdTextError> {
    match slot {
        Some(old) if *old != value => Err(differ()),
        Some(_) => Ok(()),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}
