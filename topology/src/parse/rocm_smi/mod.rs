//! Parser of `rocm-smi --showtopo` and `rocm-smi --showtoponuma`.
//!
//! rocm-smi prints banner lines (`==== Weight between two GPUs ====`), each
//! followed by its section: three GPU matrices (weight, hops, link type; a
//! header `GPU0 GPU1 …` then one row per GPU, `0` on the diagonal) and the
//! NUMA lines (`GPU[0]\t\t: (Topology) Numa Node: 0`; older releases print
//! `GPU 0          :`). What varies between captures, and is read here:
//! tabs or spaces (or spaces collapsed to one, as Markdown does), trailing
//! blanks, a leading blank line, `WARNING:` lines, the tool's own banners, any
//! subset of the sections (a single GPU prints only Link Type), and several
//! outputs of one node joined (`--showtopo` and `--showtoponuma`).
//!
//! Strict where it matters: a matrix with a missing or extra cell, a row out of
//! order, a cell that is not a number / `XGMI` / `PCIE`, a matrix that is not
//! symmetric, or two sections disagreeing on the GPUs is an error naming line
//! and column. The result is an [`AmdSmiAnswers`] (what the text says, nothing
//! more), which the AMD backend turns into facts.

mod matrix;

use super::amd_text_error::{AmdTextError, at};
use crate::backend::amd_smi::{AmdDeviceAnswers, AmdPairAnswer, AmdSmiAnswers};
use matrix::{Cell, Matrix, Section};
use std::collections::BTreeMap;

const SECTIONS: &str = "Weight between two GPUs, Hops between two GPUs, Link Type between two GPUs, \
                        Numa Nodes (rocm-smi --showtopo / --showtoponuma)";

/// Reads one or more `rocm-smi --showtopo` / `--showtoponuma` outputs of one node.
pub fn parse(text: &str) -> Result<AmdSmiAnswers, AmdTextError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut matrices: Vec<Matrix> = Vec::new();
    let mut numa: BTreeMap<u32, (usize, Option<i32>)> = BTreeMap::new();
    let mut any_section = false;
    let mut i = 0;
    while i < lines.len() {
        let (n, line) = (i + 1, lines[i]);
        i += 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("WARNING:") {
            continue;
        }
        let Some(title) = banner(trimmed) else {
            return Err(at(
                n,
                first_column(line),
                format!(
                    "expected a rocm-smi banner line (`==== <section> ====`) but found {trimmed:?}; \
                     accepted sections: {SECTIONS}"
                ),
            ));
        };
        match title {
            "ROCm System Management Interface" | "End of ROCm SMI Log" | "" => {}
            "Weight between two GPUs" | "Hops between two GPUs" | "Link Type between two GPUs" => {
                any_section = true;
                let section = Section::from_title(title);
                let (m, next) = matrix::read(&lines, i, section)?;
                i = next;
                if matrices.iter().any(|o| o.section == section) {
                    return Err(at(n, 1, format!("section {title:?} appears twice")));
                }
                matrices.push(m);
            }
            "Numa Nodes" => {
                any_section = true;
                i = read_numa(&lines, i, &mut numa)?;
            }
            other => {
                return Err(at(
                    n,
                    first_column(line),
                    format!(
                        "section {other:?} is not topology (is this another rocm-smi command's output?); \
                         accepted sections: {SECTIONS}"
                    ),
                ));
            }
        }
    }
    if !any_section {
        return Err(at(
            1,
            1,
            format!("no topology section found; accepted sections: {SECTIONS}"),
        ));
    }

    let gpus = common_gpus(&matrices, &numa)?;
    let devices = gpus
        .iter()
        .map(|&index| AmdDeviceAnswers {
            index,
            numa_node: numa.get(&index).and_then(|(_, n)| *n),
            ..AmdDeviceAnswers::default()
        })
        .collect();
    let pairs = pair_answers(&gpus, &matrices);
    Ok(AmdSmiAnswers {
        devices,
        pairs,
        ..AmdSmiAnswers::default()
    })
}

/// The GPUs every matrix names, in the same order (or the NUMA lines'
/// without a matrix); the NUMA lines may name no other.
fn common_gpus(
    matrices: &[Matrix],
    numa: &BTreeMap<u32, (usize, Option<i32>)>,
) -> Result<Vec<u32>, AmdTextError> {
    let mut gpus: Vec<u32> = Vec::new();
    for m in matrices {
        if gpus.is_empty() {
            gpus = m.gpus.clone();
        } else if m.gpus != gpus {
            return Err(at(
                m.header_line,
                1,
                format!(
                    "the {} matrix lists GPUs {:?} but an earlier section lists {:?}",
                    m.section.name(),
                    m.gpus,
                    gpus
                ),
            ));
        }
    }
    if gpus.is_empty() {
        gpus = numa.keys().copied().collect();
    } else if let Some((&g, &(line, _))) = numa.iter().find(|(g, _)| !gpus.contains(g)) {
        return Err(at(
            line,
            1,
            format!("the NUMA lines name GPU {g}, which the matrices do not list ({gpus:?})"),
        ));
    }
    Ok(gpus)
}

/// Each GPU pair's answers, from every matrix read.
fn pair_answers(gpus: &[u32], matrices: &[Matrix]) -> Vec<AmdPairAnswer> {
    let mut pairs = Vec::new();
    for (i, &a) in gpus.iter().enumerate() {
        for (j, &b) in gpus.iter().enumerate().skip(i + 1) {
            let mut p = AmdPairAnswer {
                a,
                b,
                ..AmdPairAnswer::default()
            };
            for m in matrices {
                match m.cell(i, j) {
                    Cell::Number(v) if m.section == Section::Weight => p.weight = Some(v),
                    Cell::Number(v) => p.hops = u32::try_from(v).ok(),
                    Cell::Link(t) => p.link_type = Some(t),
                    Cell::Diagonal => {}
                }
            }
            pairs.push(p);
        }
    }
    pairs
}

/// `==== Title ====` → `Title`; `None` for a line that is not a banner.
fn banner(trimmed: &str) -> Option<&str> {
    let inner = trimmed.strip_prefix('=')?.strip_suffix('=')?;
    Some(inner.trim_matches('=').trim())
}

fn first_column(line: &str) -> usize {
    line.chars().take_while(|c| c.is_whitespace()).count() + 1
}

/// `GPU[3]` or `GPU 3` (older releases) before the colon → 3.
fn numa_gpu(head: &str) -> Option<u32> {
    let rest = head.trim().strip_prefix("GPU")?;
    let digits = match rest.strip_prefix('[') {
        Some(r) => r.strip_suffix(']')?,
        None => rest.trim_start(),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The NUMA lines, up to the next banner. Returns the index of that banner.
fn read_numa(
    lines: &[&str],
    mut i: usize,
    numa: &mut BTreeMap<u32, (usize, Option<i32>)>,
) -> Result<usize, AmdTextError> {
    while i < lines.len() {
        let (n, line) = (i + 1, lines[i]);
        let trimmed = line.trim();
        if banner(trimmed).is_some() {
            return Ok(i);
        }
        i += 1;
        if trimmed.is_empty() || trimmed.starts_with("WARNING:") {
            continue;
        }
        let expected = "`GPU[<n>] : (Topology) Numa Node: <node>` or `… Numa Affinity: <node>`";
        let Some((head, tail)) = line.split_once(':') else {
            return Err(at(
                n,
                first_column(line),
                format!("expected {expected} but found {trimmed:?}"),
            ));
        };
        let Some(gpu) = numa_gpu(head) else {
            return Err(at(
                n,
                first_column(line),
                format!("expected GPU[<n>] or GPU <n> but found {:?}", head.trim()),
            ));
        };
        let value_col = head.chars().count() + 2;
        let tail = tail.trim();
        let (key, value) = tail
            .strip_prefix("(Topology)")
            .and_then(|t| t.trim().split_once(':'))
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| {
                at(
                    n,
                    value_col,
                    format!("expected {expected} but found {tail:?}"),
                )
            })?;
        let node: i64 = value.parse().map_err(|_| {
            at(
                n,
                value_col,
                format!("expected a NUMA node number for {key} but found {value:?}"),
            )
        })?;
        match key {
            // -1: the kernel knows no NUMA node for the device.
            "Numa Node" => {
                let node = i32::try_from(node).ok().filter(|v| *v >= 0);
                if let Some((_, Some(old))) = numa.get(&gpu)
                    && Some(*old) != node
                {
                    return Err(at(
                        n,
                        value_col,
                        format!("GPU {gpu} is given NUMA node {old} and {value}"),
                    ));
                }
                numa.insert(gpu, (n, node));
            }
            // The CPU node nearest the GPU; the same number on every capture seen.
            "Numa Affinity" => {
                numa.entry(gpu).or_insert((n, None));
            }
            other => {
                return Err(at(
                    n,
                    value_col,
                    format!("expected Numa Node or Numa Affinity but found {other:?}"),
                ));
            }
        }
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_heads_old_and_new() {
        assert_eq!(numa_gpu("GPU[12]\t\t"), Some(12));
        assert_eq!(numa_gpu("GPU 3          "), Some(3));
        assert_eq!(numa_gpu("GPU[x]"), None);
        assert_eq!(banner("=== Numa Nodes ==="), Some("Numa Nodes"));
    }
}
