//! `nvidia-smi topo -m` outputs the parser has never seen: random machines
//! rendered the way nvidia-smi prints them, in every format variant the real
//! fixtures show (tab or space-expanded alignment, `mlx5_*` headers or `NICn`
//! with a legend, no NUMA column, `NUMA Affinity`, `GPU NUMA ID` with its
//! doubled tab, old `SOC`, a header without its leading tab or with leading
//! spaces, trailing blanks, empty fields trailing NIC rows). The parsed and
//! normalized object must equal the one built from the truth.

mod common;

use common::expand_tabs;

use gputopo_api::{LinkClass, LinkType, TopologySource};
use gputopo_topology::backend::nvidia_smi::facts_from_topo;
use gputopo_topology::facts::{GpuFacts, NicFacts, NodeFacts, PairFact};
use gputopo_topology::normalize::normalize;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Machine {
    n: usize,
    /// Upper triangle, row-major: the class of (a, b), a < b.
    pairs: Vec<LinkClass>,
    /// Per NIC: its link type to each GPU.
    nics: Vec<Vec<LinkType>>,
    cpu: Vec<String>,
    numa: Vec<NumaCell>,
}

#[derive(Debug, Clone)]
enum NumaCell {
    Node(i32),
    /// `0-1`: the GPU is local to several nodes, so no single one is known.
    Range(i32, i32),
}

#[derive(Debug, Clone, Copy)]
struct Format {
    /// 0: no NUMA column (old drivers), 1: `NUMA Affinity`, 2: and `GPU NUMA ID`.
    numa_columns: u8,
    nic_legend: bool,
    soc_for_sys: bool,
    expand_tabs: bool,
    /// 0: a leading tab (as printed), 1: none, 2: five spaces.
    header_indent: u8,
    nic_row_trailing_tabs: u8,
    trailing_spaces: bool,
}

fn link_class() -> impl Strategy<Value = LinkClass> {
    prop_oneof![
        Just(LinkClass::Sys),
        Just(LinkClass::Node),
        Just(LinkClass::Phb),
        Just(LinkClass::Pxb),
        Just(LinkClass::Pix),
        (1u32..=18).prop_map(LinkClass::Nv),
    ]
}

fn pcie_type() -> impl Strategy<Value = LinkType> {
    prop_oneof![
        Just(LinkType::Sys),
        Just(LinkType::Node),
        Just(LinkType::Phb),
        Just(LinkType::Pxb),
        Just(LinkType::Pix),
    ]
}

fn cpulist() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..64, 1u32..64).prop_map(|(a, len)| format!("{a}-{}", a + len)),
        (0u32..64, 1u32..64, 1u32..64).prop_map(|(a, len, gap)| {
            let b = a + len + gap + 1;
            format!("{a}-{},{b}-{}", a + len, b + len)
        }),
        Just("0,2,4,6,8,10".to_string()),
        Just("0".to_string()),
        // A cgroup-restricted cpuset shows as an empty field.
        Just(String::new()),
    ]
}

fn machine() -> impl Strategy<Value = Machine> {
    (1usize..=16, 0usize..=12).prop_flat_map(|(n, nics)| {
        (
            proptest::collection::vec(link_class(), n * (n - 1) / 2),
            proptest::collection::vec(proptest::collection::vec(pcie_type(), n), nics),
            proptest::collection::vec(cpulist(), n),
            proptest::collection::vec(
                prop_oneof![
                    4 => (0i32..8).prop_map(NumaCell::Node),
                    1 => (0i32..2).prop_map(|a| NumaCell::Range(a, a + 1)),
                ],
                n,
            ),
        )
            .prop_map(move |(pairs, nics, cpu, numa)| Machine {
                n,
                pairs,
                nics,
                cpu,
                numa,
            })
    })
}

fn format() -> impl Strategy<Value = Format> {
    (
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0u8..3,
        0u8..5,
        any::<bool>(),
    )
        .prop_map(
            |(numa_columns, nic_legend, soc_for_sys, expand_tabs, header_indent, t, trailing)| {
                Format {
                    numa_columns,
                    nic_legend,
                    soc_for_sys,
                    expand_tabs,
                    header_indent,
                    nic_row_trailing_tabs: t,
                    trailing_spaces: trailing,
                }
            },
        )
}

impl Machine {
    fn class(&self, a: usize, b: usize) -> LinkClass {
        let (a, b) = (a.min(b), a.max(b));
        // Index of (a, b) in the row-major upper triangle.
        self.pairs[a * (2 * self.n - a - 1) / 2 + (b - a - 1)]
    }

    fn truth(&self, f: &Format) -> NodeFacts {
        NodeFacts {
            source: TopologySource::NvidiaSmi,
            vendor: Some(gputopo_api::GpuVendor::Nvidia),
            driver_version: None,
            cuda_version: None,
            gpus: (0..self.n)
                .map(|i| GpuFacts {
                    index: i as u32,
                    cpu_affinity: (!self.cpu[i].is_empty()).then(|| self.cpu[i].clone()),
                    numa_node: match (&self.numa[i], f.numa_columns) {
                        (NumaCell::Node(n), 1 | 2) => Some(*n),
                        _ => None,
                    },
                    ..GpuFacts::default()
                })
                .collect(),
            gpu_pairs: (0..self.n)
                .flat_map(|a| (a + 1..self.n).map(move |b| (a, b)))
                .map(|(a, b)| PairFact::new(a as u32, b as u32, self.class(a, b)))
                .collect(),
            nics: self
                .nics
                .iter()
                .enumerate()
                .map(|(k, links)| NicFacts {
                    name: format!("mlx5_{}", nic_device(k)),
                    numa_node: None,
                    gpu_links: links
                        .iter()
                        .enumerate()
                        .map(|(g, t)| (g as u32, *t))
                        .collect(),
                })
                .collect(),
        }
    }

    /// The text nvidia-smi would print, in format `f`, and the byte ranges of
    /// each GPU row's label and link cells (where any cut loses a cell).
    fn render(&self, f: &Format) -> (String, Vec<std::ops::Range<usize>>) {
        let cell = |c: LinkClass| -> String {
            match c {
                LinkClass::Sys if f.soc_for_sys => "SOC".to_string(),
                other => other.to_string(),
            }
        };
        let pcie = |t: LinkType| cell(LinkClass::new(t, 0));
        let nic_label = |k: usize| {
            if f.nic_legend {
                format!("NIC{k}")
            } else {
                format!("mlx5_{}", nic_device(k))
            }
        };
        let mut columns: Vec<String> = (0..self.n).map(|i| format!("GPU{i}")).collect();
        columns.extend((0..self.nics.len()).map(nic_label));
        columns.push("CPU Affinity".into());
        if f.numa_columns >= 1 {
            columns.push("NUMA Affinity".into());
        }
        if f.numa_columns == 2 {
            columns.push("GPU NUMA ID".into());
        }
        let indent = match f.header_indent {
            0 => "\t",
            1 => "",
            _ => "     ",
        };
        let mut lines = vec![format!("{indent}{}", columns.join("\t"))];
        // Per GPU row: how many leading fields are the label and the link cells.
        for a in 0..self.n {
            let mut row = vec![format!("GPU{a}")];
            for b in 0..self.n {
                row.push(if a == b {
                    " X ".into()
                } else {
                    cell(self.class(a, b))
                });
            }
            for nic in &self.nics {
                row.push(pcie(nic[a]));
            }
            row.push(self.cpu[a].clone());
            if f.numa_columns >= 1 {
                row.push(match &self.numa[a] {
                    NumaCell::Node(n) => n.to_string(),
                    NumaCell::Range(x, y) => format!("{x}-{y}"),
                });
            }
            if f.numa_columns == 2 {
                // Newer drivers print an empty field before GPU NUMA ID.
                row.push(String::new());
                row.push("N/A".into());
            }
            lines.push(row.join("\t"));
        }
        for (k, links) in self.nics.iter().enumerate() {
            let mut row = vec![nic_label(k)];
            row.extend(links.iter().map(|t| pcie(*t)));
            for j in 0..self.nics.len() {
                row.push(if j == k {
                    " X ".into()
                } else {
                    pcie(self.nics[k][0].min(self.nics[j][0]))
                });
            }
            let mut line = row.join("\t");
            for _ in 0..f.nic_row_trailing_tabs {
                line.push('\t');
            }
            lines.push(line);
        }
        lines.push(String::new());
        lines.push("Legend:".into());
        lines.push(String::new());
        lines.push("  X    = Self".into());
        lines.push("  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)".into());
        lines.push("  NV#  = Connection traversing a bonded set of # NVLinks".into());
        if f.nic_legend && !self.nics.is_empty() {
            lines.push(String::new());
            lines.push("NIC Legend:".into());
            lines.push(String::new());
            for k in 0..self.nics.len() {
                lines.push(format!("  NIC{k}: mlx5_{}", nic_device(k)));
            }
        }
        let mut text = String::new();
        let mut gpu_cells = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let line = if f.expand_tabs {
                expand_tabs(line)
            } else {
                line.clone()
            };
            if (1..=self.n).contains(&i) {
                // The link cells end where the CPU affinity field begins.
                let cells_end = nth_field_end(&line, self.n + self.nics.len() + 1);
                gpu_cells.push(text.len()..text.len() + cells_end);
            }
            text.push_str(&line);
            if f.trailing_spaces {
                text.push_str("   ");
            }
            text.push('\n');
        }
        (text, gpu_cells)
    }
}

/// Byte offset just past the `n`-th whitespace-separated field of a line.
fn nth_field_end(line: &str, n: usize) -> usize {
    let mut seen = 0;
    let mut in_field = false;
    for (i, c) in line.char_indices() {
        let blank = c == ' ' || c == '\t';
        // The diagonal " X " counts as one field.
        if !blank && !in_field {
            in_field = true;
        } else if blank && in_field {
            in_field = false;
            seen += 1;
            if seen == n {
                return i;
            }
        }
    }
    line.len()
}

/// NIC k's RDMA device: deliberately not k, as on machines where NIC0 is mlx5_1.
fn nic_device(k: usize) -> usize {
    (k + 3) % 13
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn parses_unseen_outputs_in_every_format(m in machine(), f in format()) {
        // Space-expanded text whose last column is an empty CPU affinity cannot be
        // told from a line cut short; the parser rightly refuses to guess there.
        prop_assume!(!(f.expand_tabs && f.numa_columns == 0 && m.cpu.iter().any(String::is_empty)));
        let (text, _) = m.render(&f);
        let facts = facts_from_topo(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n--- input ---\n{text}")))?;
        let got = normalize("node", &facts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let want = normalize("node", &m.truth(&f)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&got.links, &want.links, "links differ for\n{}", text);
        prop_assert_eq!(&got.nics, &want.nics, "NICs differ for\n{}", text);
        prop_assert_eq!(&got.islands, &want.islands);
        prop_assert_eq!(&got.summary, &want.summary);
        for (g, w) in got.gpus.iter().zip(&want.gpus) {
            prop_assert_eq!(g.index, w.index);
            prop_assert_eq!(&g.cpu_affinity, &w.cpu_affinity, "GPU{} CPU affinity in\n{}", g.index, text);
            prop_assert_eq!(g.numa_node, w.numa_node, "GPU{} NUMA node in\n{}", g.index, text);
            prop_assert_eq!(&g.uuid, &None, "a topo matrix names no UUID");
        }
    }

    /// Cutting an output inside a GPU row's link cells is an error naming a
    /// line, never a guess.
    #[test]
    fn truncated_matrices_are_errors_naming_the_line(
        m in machine(), f in format(), row in 0usize..16, at in 0.0f64..1.0
    ) {
        prop_assume!(m.n >= 2);
        let (text, gpu_cells) = m.render(&f);
        let cells = &gpu_cells[row % m.n];
        let mut cut = cells.start + ((cells.end - cells.start) as f64 * at) as usize;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut_text = &text[..cut];
        match facts_from_topo(cut_text) {
            Ok(_) => prop_assert!(false, "a matrix cut inside GPU{}'s cells parsed:\n{}", row % m.n, cut_text),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("line"), "the error names no line: {}", msg);
            }
        }
    }
}
