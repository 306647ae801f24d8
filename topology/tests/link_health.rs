//! NVLink health over the degraded fixtures: the `Degraded` condition names
//! the GPU and the links.

use gputopo_api::TopologySource;
use gputopo_topology::backend::nvidia_smi::facts_from_texts;
use gputopo_topology::discover::build;
use gputopo_topology::facts::{GpuFacts, NodeFacts, PairFact};
use gputopo_topology::health::{FindingKind, degraded_condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../fixtures/nvidia/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture readable")
}

fn epoch() -> Time {
    Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

/// vllm#16336: GPU2 of an 8× B200 lost its NVLinks (NODE/SYS to every peer
/// while the rest are NV18). The capture lacks the header and is cut inside
/// row GPU6, so the parser refuses it (see the snapshot); the GPU-to-GPU cells
/// of rows GPU0..GPU6 survive and give every GPU pair.
#[test]
fn b200_gpu_that_fell_off_the_nvswitch() {
    let text = fixture("b200-8gpu-DEGRADED-gpu2-no-nvlink-vllm-issue16336-NO-HEADER-TRUNCATED.txt");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("GPU"))
        .map(|l| l.split_whitespace().collect())
        .filter(|cells: &Vec<&str>| cells.len() > 8)
        .collect();
    assert_eq!(
        rows.len(),
        7,
        "the capture holds the GPU cells of rows GPU0..GPU6"
    );
    let mut pairs = Vec::new();
    for (a, row) in rows.iter().enumerate() {
        for b in a + 1..8 {
            pairs.push(PairFact::new(
                a as u32,
                b as u32,
                row[1 + b].parse().expect("a link class"),
            ));
        }
    }
    let facts = NodeFacts {
        source: TopologySource::Fixture,
        vendor: None,
        driver_version: None,
        cuda_version: None,
        gpus: (0..8)
            .map(|index| GpuFacts {
                index,
                product: Some("NVIDIA B200".into()),
                ..GpuFacts::default()
            })
            .collect(),
        gpu_pairs: pairs,
        nics: vec![],
    };
    let d = build("b200", facts).expect("normalizes");
    assert_eq!(d.spec.summary.p2p_level, None);
    assert_eq!(d.findings.len(), 1, "{:?}", d.findings);
    let f = &d.findings[0];
    assert_eq!((f.gpu, f.kind), (2, FindingKind::WeakerThanPeersInMatrix));
    assert!(
        f.detail.contains("no NVLink to GPU 0,1,3,4,5,6,7"),
        "{}",
        f.detail
    );
    assert!(f.detail.contains("NV18"), "{}", f.detail);
    let c = degraded_condition(&d.findings, epoch());
    assert_eq!((c.type_.as_str(), c.status.as_str()), ("Degraded", "True"));
    assert!(c.message.starts_with("GPU2: "), "{}", c.message);
}

/// A hand-edited H200 `nvlink -s` (fixtures/INDEX.md marks it so) with slow
/// links on GPU0; the 2-GPU matrix is written here to go with it.
#[test]
fn h200_links_running_slow() {
    let topo = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n\
                GPU0\t X \tNV18\t0-47\t0\t\tN/A\n\
                GPU1\tNV18\t X \t0-47\t0\t\tN/A\n";
    let nvlink = fixture("testfixture-h200-2gpu-nvlink-status-DEGRADED-links-hand-edited.txt");
    let facts = facts_from_texts(topo, Some(&nvlink), None).expect("parses");
    let d = build("h200", facts).expect("normalizes");
    let slow: Vec<_> = d
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::SlowLinks)
        .collect();
    assert_eq!(slow.len(), 1, "{:?}", d.findings);
    assert_eq!(slow[0].gpu, 0);
    assert!(
        slow[0].detail.contains("links 2,3,4,10"),
        "{}",
        slow[0].detail
    );
    assert!(
        slow[0].detail.contains("expected 26.562"),
        "{}",
        slow[0].detail
    );
    assert!(
        d.findings.iter().all(|f| f.gpu == 0),
        "GPU1 is healthy: {:?}",
        d.findings
    );
}

/// The matching `topo -m` and `nvlink -s` of one 4-GPU HGX A100: 12 links up
/// on every GPU, nothing to report.
#[test]
fn healthy_hgx_a100_with_link_state() {
    let topo = fixture("hgx-a100-4gpu-sxm4-80gb-epyc7532-driver580-roce-nic-rocep49s0-topo-m.txt");
    let nvlink = fixture("hgx-a100-4gpu-sxm4-80gb-driver580-nvlink-s-12-links.txt");
    let facts = facts_from_texts(&topo, Some(&nvlink), None).expect("parses");
    assert!(
        facts
            .gpus
            .iter()
            .all(|g| g.nvlinks.as_ref().map(Vec::len) == Some(12))
    );
    assert_eq!(
        facts.gpus[0].product.as_deref(),
        Some("NVIDIA A100-SXM4-80GB")
    );
    let d = build("hgx", facts).expect("normalizes");
    assert!(d.findings.is_empty(), "{:?}", d.findings);
    let c = degraded_condition(&d.findings, epoch());
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NvLinksHealthy")
    );
}

/// Three RTX A6000 cards, one NVLink bridge: the third card reports all links
/// inactive, which is how an unbridged PCIe card looks, not a fault.
#[test]
fn unbridged_pcie_card_is_not_degraded() {
    let topo = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n\
                GPU0\t X \tNV4\tSYS\t0-15\t0\n\
                GPU1\tNV4\t X \tSYS\t0-15\t0\n\
                GPU2\tSYS\tSYS\t X \t16-31\t1\n";
    let nvlink = fixture("rtx-a6000-3gpu-one-nvlink-pair-links-inactive-nvlink-s.txt");
    let facts = facts_from_texts(topo, Some(&nvlink), None).expect("parses");
    let d = build("a6000", facts).expect("normalizes");
    assert!(d.findings.is_empty(), "{:?}", d.findings);
}

/// The synthetic NVML recording with two of GPU3's 18 links down.
#[test]
fn nvml_recording_with_links_down() {
    let path = format!(
        "{}/../fixtures/recorded/hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let rec = gputopo_topology::backend::recording::Recording::load(std::path::Path::new(&path))
        .expect("loads");
    let facts = gputopo_topology::backend::recording::replay_nvml(&rec).expect("replays");
    let d = build("h100", facts).expect("normalizes");
    let kinds: Vec<(u32, FindingKind)> = d.findings.iter().map(|f| (f.gpu, f.kind)).collect();
    assert!(kinds.contains(&(3, FindingKind::LinksDown)), "{kinds:?}");
    assert!(
        kinds.contains(&(3, FindingKind::FewerLinksThanProduct)),
        "{kinds:?}"
    );
    assert!(kinds.iter().all(|(gpu, _)| *gpu == 3), "{kinds:?}");
    let down = d
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::LinksDown)
        .expect("found");
    assert!(down.detail.contains("links 16,17 down"), "{}", down.detail);
    assert_eq!(d.spec.summary.p2p_level.as_deref(), Some("NV16"));
}
