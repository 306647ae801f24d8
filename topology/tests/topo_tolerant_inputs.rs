//! `nvidia-smi topo -m` texts as they reach us in the wild, one test per variant: captured from
//! a colour terminal, pasted with indentation, cut above the header, copied through a tool that
//! turned every tab into one space. Each reads as the clean text does, and each has a refusal
//! that names the line and column of the bad token in the text as given.

mod common;

use common::expand_tabs;

use gputopo_api::LinkClass;
use gputopo_topology::parse::topo_matrix::{self, TopoErrorKind, TopoMatrix, TopoParseError};

/// A 4-GPU NV12 board with two NICs, as a 535+ driver prints it (note the extra tab before
/// GPU NUMA ID, and the NIC rows' empty affinity fields).
const CLEAN: &str = "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV12\tNV12\tNV12\tPXB\tSYS\t0-31,64-95\t0\t\tN/A
GPU1\tNV12\t X \tNV12\tNV12\tPXB\tSYS\t0-31,64-95\t0\t\tN/A
GPU2\tNV12\tNV12\t X \tNV12\tSYS\tPXB\t32-63,96-127\t1\t\tN/A
GPU3\tNV12\tNV12\tNV12\t X \tSYS\tPXB\t32-63,96-127\t1\t\tN/A
NIC0\tPXB\tPXB\tSYS\tSYS\t X \tSYS\t\t\t\t
NIC1\tSYS\tSYS\tPXB\tPXB\tSYS\t X \t\t\t\t

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
";

fn clean() -> TopoMatrix {
    topo_matrix::parse(CLEAN).expect("the clean sample parses")
}

fn with_lines(text: &str, f: impl Fn(usize, &str) -> String) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| f(i, l) + "\n")
        .collect()
}

/// 1-based character column of the first `needle` on line `line` (1-based) of `text`.
fn column_of(text: &str, line: usize, needle: &str) -> usize {
    let l = text.lines().nth(line - 1).expect("line");
    l[..l.find(needle).expect("needle")].chars().count() + 1
}

fn refused(text: &str) -> TopoParseError {
    topo_matrix::parse(text).expect_err("must be refused")
}

#[test]
fn colour_terminal_capture_reads_as_the_clean_text() {
    // Bold underlined header, bold row labels, a coloured link cell, a window-title OSC.
    let text = with_lines(CLEAN, |i, l| match i {
        0 => format!("\u{1b}[4m\u{1b}[1m{l}\u{1b}[0m"),
        1..=6 => {
            let (label, rest) = l.split_once('\t').expect("row");
            let rest = rest.replacen("NV12", "\u{1b}[32mNV12\u{1b}[0m", 1);
            format!("\u{1b}[1m{label}\u{1b}[0m\t{rest}")
        }
        7 => format!("\u{1b}]0;nvidia-smi\u{7}{l}"),
        _ => l.to_string(),
    });
    let m = topo_matrix::parse(&text).expect("parses");
    assert_eq!(m, clean());
    assert_eq!(m.nic("mlx5_1").map(|n| n.label.as_str()), Some("NIC1"));
}

#[test]
fn colour_terminal_refusal_counts_columns_in_the_text_as_given() {
    // Two cells run together, one of them coloured: `NV12NV12` once the codes are gone.
    let text = with_lines(CLEAN, |i, l| {
        if i == 2 {
            l.replacen(
                "NV12\t X \tNV12",
                "NV12\t X \t\u{1b}[32mNV12\u{1b}[0mNV12",
                1,
            )
        } else {
            format!("\u{1b}[0m{l}")
        }
    });
    let e = refused(&text);
    assert_eq!((e.line, e.kind), (3, TopoErrorKind::BadCell), "{e}");
    assert!(e.message.contains("\"NV12NV12\""), "{e}");
    // The column of the token's first visible character, in the line as given (codes counted).
    assert_eq!(e.column, column_of(&text, 3, "NV12\u{1b}[0mNV12"), "{e}");
}

#[test]
fn indented_text_reads_as_the_clean_text() {
    let uniform = with_lines(CLEAN, |_, l| format!("    {l}"));
    assert_eq!(topo_matrix::parse(&uniform).expect("uniform"), clean());
    let varying = with_lines(CLEAN, |i, l| format!("{}{l}", " ".repeat(i * 3 % 7)));
    assert_eq!(topo_matrix::parse(&varying).expect("varying"), clean());
    // A space-expanded copy, indented: tab stops count from each row's label.
    let expanded = with_lines(CLEAN, |i, l| {
        format!("{}{}", " ".repeat(1 + i % 5), expand_tabs(l))
    });
    assert_eq!(topo_matrix::parse(&expanded).expect("expanded"), clean());
}

#[test]
fn indented_refusal_names_the_column_in_the_indented_line() {
    let text = with_lines(CLEAN, |i, l| {
        let l = if i == 4 {
            l.replacen("\tNV12\t X ", "\t X ", 1)
        } else {
            l.to_string()
        };
        format!("{}{l}", " ".repeat(2 + i))
    });
    let e = refused(&text);
    assert_eq!(e.line, 5, "{e}");
    assert_eq!(e.kind, TopoErrorKind::BadCell, "{e}");
    // GPU3's row lost a cell: its X now sits in column GPU2.
    assert_eq!(e.column, column_of(&text, 5, "X"), "{e}");
    assert!(e.message.contains("but found \"X\""), "{e}");
}

#[test]
fn lost_header_is_rebuilt_from_the_rows_of_a_square_matrix() {
    let text: String = CLEAN.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let m = topo_matrix::parse(&text).expect("parses");
    assert_eq!(m, clean());
    assert_eq!(m.gpu_link(2, 3), Some(LinkClass::Nv(12)));
    assert_eq!(m.gpus[3].cpu_affinity.as_deref(), Some("32-63,96-127"));
    // Space-expanded and without NICs too.
    let no_nics = "GPU0     X      NV4     0-7     0\nGPU1    NV4      X      8-15    1\n";
    let m = topo_matrix::parse(no_nics).expect("parses");
    assert_eq!(m.gpu_link(0, 1), Some(LinkClass::Nv(4)));
    assert_eq!(m.gpus[1].numa_affinity.as_deref(), Some("1"));
    assert!(m.columns.cpu_affinity && m.columns.numa_affinity && !m.columns.gpu_numa_id);
}

#[test]
fn lost_header_refusals_name_line_and_column() {
    // GPU rows only: the NIC columns have no row to name them.
    let gpu_rows: String = CLEAN
        .lines()
        .skip(1)
        .take(4)
        .map(|l| format!("{l}\n"))
        .collect();
    let e = refused(&gpu_rows);
    assert_eq!((e.line, e.kind), (1, TopoErrorKind::MissingHeader), "{e}");
    assert_eq!(e.column, column_of(&gpu_rows, 1, "PXB"), "{e}");
    assert!(e.message.contains("header line is missing"), "{e}");
    assert!(e.message.contains("one row per column"), "{e}");

    // A merged cell.
    let merged = "GPU0\t X \tNV12NV12\nGPU1\tNV12\t X \n";
    let e = refused(merged);
    assert_eq!((e.line, e.column), (1, 10), "{e}");

    // A missing cell: GPU1's row is one short, so its X lands in GPU0's column.
    let missing = "GPU0\t X \tNV12\tNV12\t0-7\nGPU1\t X \tNV12\t0-7\nGPU2\tNV12\tNV12\t X \t0-7\n";
    let e = refused(missing);
    assert_eq!(
        (e.line, e.column, e.kind),
        (2, 7, TopoErrorKind::BadCell),
        "{e}"
    );

    // Single spaces: an empty CPU Affinity could have vanished, so the values are not assigned.
    let collapsed = "GPU0 X NV4 0\nGPU1 NV4 X 1\n";
    let e = refused(collapsed);
    assert_eq!(
        (e.line, e.column, e.kind),
        (1, 12, TopoErrorKind::MissingHeader),
        "{e}"
    );
    // Without values there is nothing to lose.
    let m = topo_matrix::parse("GPU0 X NV4\nGPU1 NV4 X\n").expect("links only");
    assert_eq!(m.gpu_link(1, 0), Some(LinkClass::Nv(4)));

    // An empty value (cgroup-restricted CPU Affinity) cannot be told from a missing column.
    let e = refused("GPU0\t X \tNV4\t\t0\nGPU1\tNV4\t X \t\t0\n");
    assert_eq!((e.line, e.kind), (1, TopoErrorKind::MissingHeader), "{e}");
}

#[test]
fn tabs_collapsed_to_single_spaces_read_as_the_clean_text() {
    let text = with_lines(CLEAN, |_, l| {
        l.split_whitespace().collect::<Vec<_>>().join(" ")
    });
    assert_eq!(topo_matrix::parse(&text).expect("parses"), clean());
}

#[test]
fn tabs_collapsed_refusals_name_line_and_column() {
    // A cgroup-restricted (empty) CPU Affinity vanishes with its tab: refused, not shifted.
    let cgroup =
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t\t0\nGPU1\tNV4\t X \t\t0\n";
    let text = with_lines(cgroup, |_, l| {
        l.split_whitespace().collect::<Vec<_>>().join(" ")
    });
    let e = refused(&text);
    assert_eq!((e.line, e.kind), (2, TopoErrorKind::ShortRow), "{e}");
    assert_eq!(e.column, text.lines().nth(1).expect("row").len() + 1, "{e}");

    // Two cells run together with no blank left between them.
    let text = with_lines(CLEAN, |i, l| {
        let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
        if i == 3 {
            l.replacen("X NV12", "XNV12", 1)
        } else {
            l
        }
    });
    let e = refused(&text);
    assert_eq!((e.line, e.kind), (4, TopoErrorKind::BadCell), "{e}");
    assert_eq!(e.column, column_of(&text, 4, "XNV12"), "{e}");
}
