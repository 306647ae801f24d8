//! No input makes the `nvidia-smi` parsers panic: random text, text made of matrix tokens, and
//! the recorded fixtures with characters deleted, inserted, swapped or replaced (non-ASCII
//! included, so byte slicing off a character boundary would show) and cut at a random point.

use gputopo_topology::backend::nvidia_smi::facts_from_texts;
use gputopo_topology::parse::{nvlink_status, smi_query, topo_matrix};
use proptest::prelude::*;
use proptest::sample::Index;
use std::path::PathBuf;
use std::sync::LazyLock;

/// Every nvidia fixture, whatever it holds: each parser also meets the others' inputs.
static FIXTURES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nvidia");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures/nvidia")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("fixture"))
        .collect()
});

/// Characters that matter to the parsers, plus multi-byte ones.
const ALPHABET: &[char] = &[
    '\t', ' ', '\n', '\r', ':', '.', ',', '-', '(', ')', '<', '>', '/', 'X', 'G', 'P', 'U', 'N',
    'V', 'I', 'C', 'S', 'Y', 'H', 'B', 'O', 'D', 'E', 'L', 'K', '0', '1', '2', '8', '略', 'é', '…',
    '\u{feff}', '\u{2028}',
];

#[derive(Debug, Clone)]
enum Edit {
    Delete(Index),
    Insert(Index, char),
    Swap(Index),
    Replace(Index, char),
    DuplicateLine(Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let c = prop::sample::select(ALPHABET);
    prop_oneof![
        any::<Index>().prop_map(Edit::Delete),
        (any::<Index>(), c.clone()).prop_map(|(i, c)| Edit::Insert(i, c)),
        any::<Index>().prop_map(Edit::Swap),
        (any::<Index>(), c).prop_map(|(i, c)| Edit::Replace(i, c)),
        any::<Index>().prop_map(Edit::DuplicateLine),
    ]
}

fn apply(text: &str, edits: &[Edit], cut: Option<Index>) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let len = chars.len();
        match e {
            Edit::Delete(i) if len > 0 => {
                chars.remove(i.index(len));
            }
            Edit::Insert(i, c) => chars.insert(i.index(len + 1), *c),
            Edit::Swap(i) if len > 1 => chars.swap(i.index(len - 1), i.index(len - 1) + 1),
            Edit::Replace(i, c) if len > 0 => chars[i.index(len)] = *c,
            Edit::DuplicateLine(i) => {
                let s: String = chars.iter().collect();
                let lines: Vec<&str> = s.lines().collect();
                if !lines.is_empty() {
                    let k = i.index(lines.len());
                    let mut out: Vec<&str> = lines.clone();
                    out.insert(k, lines[k]);
                    chars = out.join("\n").chars().collect();
                }
            }
            _ => {}
        }
    }
    if let Some(cut) = cut {
        let keep = cut.index(chars.len() + 1);
        chars.truncate(keep);
    }
    chars.into_iter().collect()
}

fn mutated_fixture() -> impl Strategy<Value = String> {
    (
        any::<Index>(),
        prop::collection::vec(edit(), 0..8),
        prop::option::of(any::<Index>()),
    )
        .prop_map(|(f, edits, cut)| {
            let text = &FIXTURES[f.index(FIXTURES.len())];
            apply(text, &edits, cut)
        })
}

/// Every parser, and the backend over all three inputs at once.
fn feed(text: &str) {
    let _ = topo_matrix::parse(text);
    let _ = nvlink_status::parse(text);
    let _ = smi_query::parse(text);
    let _ = smi_query::parse_text(text);
    let _ = smi_query::parse_xml(text);
    let _ = facts_from_texts(text, Some(text), Some(text));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_text_never_panics(text in any::<String>()) {
        feed(&text);
    }

    #[test]
    fn token_soup_never_panics(words in prop::collection::vec(prop::sample::select(&[
        "GPU0", "GPU1", "GPU2", "NIC0", "mlx5_0", "X", " X ", "NV12", "NV", "SYS", "SOC", "PIX",
        "NODE", "N/A", "OK", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "0-7", "\t", "\t\t",
        "    ", " ", "\n", "NIC Legend:", "  NIC0: mlx5_0", "Link 0: 25 GB/s", "GPU 0: A (UUID: 略)",
        "<inactive>", "[snip]", "    PCI", "        Bus Id : 0:2:0", "Total : 5 MiB", "略",
    ][..]), 0..120)) {
        feed(&words.concat());
    }

    #[test]
    fn mutated_fixtures_never_panic(text in mutated_fixture()) {
        feed(&text);
    }

    #[test]
    fn mutated_matrix_with_other_outputs_never_panics(
        topo in mutated_fixture(),
        nvlink in mutated_fixture(),
        query in mutated_fixture(),
    ) {
        let _ = facts_from_texts(&topo, Some(&nvlink), Some(&query));
    }
}

/// A complete matrix cut at every character: each prefix is an error or a matrix, never a panic,
/// and a prefix that stops before the last GPU row's affinity fields is an error.
#[test]
fn every_prefix_of_a_matrix_is_handled() {
    let name = "hgx-h100-80gb-hbm3-8gpu-12nic-driver580-header-no-leading-tab-topo-m.txt";
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nvidia");
    let text = std::fs::read_to_string(dir.join(name)).expect("fixture");
    let chars: Vec<char> = text.chars().collect();
    // Line 9 is the GPU7 row; its CPU Affinity is the first field a cut could leave plausible.
    let before: usize = text.lines().take(8).map(|l| l.chars().count() + 1).sum();
    let line9 = text.lines().nth(8).expect("GPU7 row");
    let cpu_at = before
        + line9[..line9.find("56-111").expect("cpu list")]
            .chars()
            .count();
    for end in 0..chars.len() {
        let prefix: String = chars[..end].iter().collect();
        let parsed = topo_matrix::parse(&prefix);
        if end <= cpu_at {
            assert!(parsed.is_err(), "a cut at {end} parsed");
        }
    }
    assert!(topo_matrix::parse(&text).is_ok());
}
