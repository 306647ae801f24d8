//! `gputopo draw` on every recorded machine `gputopo` reads: each renders,
//! its SVG names every GPU, and every fabric link is drawn exactly once,
//! as a pair edge or inside a hub; named machines have the edges and hubs
//! their wiring calls for. Then the allocation inputs (a `GpuTopology`'s
//! status, a cluster `kind: List` and a node) and the binary's exit
//! statuses and messages.

use gputopo::draw::{self, Fabric, Picture};
use gputopo::topology;
use gputopo_api::{GpuTopology, GpuTopologySpec, Interconnect};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every fixture file `topology::load` reads, with its spec.
fn machines() -> Vec<(String, GpuTopologySpec)> {
    let mut out = Vec::new();
    for dir in ["fixtures/nvidia", "fixtures/amd", "fixtures/recorded"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .expect("the fixture folder exists")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        paths.sort();
        for path in paths {
            if let Ok(spec) = topology::load(&path) {
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                out.push((name, spec));
            }
        }
    }
    out
}

/// The texts of an SVG's `<text>` elements, unescaped enough for GPU
/// names and link labels.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..t.find("</text>")?];
            Some(body.trim().replace("&amp;", "&"))
        })
        .collect()
}

fn is_link_label(t: &str) -> bool {
    t.strip_prefix("NV")
        .is_some_and(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_digit()))
        || t == "XGMI"
        || t == "XGMI routed"
        || (t.starts_with("XGMI ") && t.ends_with(" hops"))
}

#[test]
fn every_fixture_machine_draws_every_gpu_and_every_link_once() {
    let machines = machines();
    assert!(
        machines.len() >= 40,
        "only {} machines read",
        machines.len()
    );
    for (name, spec) in &machines {
        let pic = Picture::new(spec, None);
        let svg = draw::svg(&pic).unwrap_or_else(|e| panic!("{name}: {e}"));
        let texts = texts(&svg);
        for g in &spec.gpus {
            let label = format!("GPU {}", g.index);
            assert!(
                texts
                    .iter()
                    .any(|t| *t == label || t.starts_with(&format!("{label} ·"))),
                "{name}: no {label} in the SVG"
            );
        }
        // Every NVLink or XGMI pair exactly once: an edge, or both ends on one hub.
        let fabric_links = spec
            .links
            .iter()
            .filter(|l| Fabric::of(l).is_some())
            .count();
        let in_hubs: usize = pic
            .hubs
            .iter()
            .map(|h| h.spokes.len() * (h.spokes.len() - 1) / 2)
            .sum();
        assert_eq!(pic.pairs.len() + in_hubs, fabric_links, "{name}");
        // One label per pair edge, and per spoke of a hub whose spokes differ.
        let spoke_labels: usize = pic
            .hubs
            .iter()
            .filter(|h| h.uniform().is_none())
            .map(|h| h.spokes.len())
            .sum();
        let labels = texts.iter().filter(|t| is_link_label(t)).count();
        assert_eq!(
            labels,
            pic.pairs.len() + spoke_labels,
            "{name}: link labels"
        );
        for hub in &pic.hubs {
            assert!(texts.contains(&hub.label), "{name}: no hub {}", hub.label);
        }
        // An NVSwitch machine whose pairs all agree is one hub, not 28 edges.
        if spec.summary.interconnect == Interconnect::Nvswitch && spec.gpus.len() >= 4 {
            assert!(pic.pairs.is_empty(), "{name}: {:?}", pic.pairs);
            assert_eq!(pic.hubs.len(), 1, "{name}");
        }
    }
}

fn picture(file: &str) -> Picture {
    let spec = topology::load(&root().join(file)).expect("the fixture reads");
    Picture::new(&spec, None)
}

#[test]
fn named_machines_have_the_edges_and_hubs_of_their_wiring() {
    // DGX-1 V100: the hybrid cube-mesh, 16 NVLink pairs (NV1 and NV2), no hub.
    for file in [
        "fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt",
        "fixtures/recorded/dgx1-v100-nvml.yaml",
    ] {
        let pic = picture(file);
        assert_eq!(pic.pairs.len(), 16, "{file}");
        assert!(pic.hubs.is_empty(), "{file}");
        let counts: Vec<Fabric> = pic.pairs.iter().map(|p| p.fabric).collect();
        assert!(counts.contains(&Fabric::Nv(1)) && counts.contains(&Fabric::Nv(2)));
    }
    let dgx1 = picture("fixtures/nvidia/dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt");
    // Its four NICs, each under the PCIe switch of a GPU pair.
    assert_eq!(dgx1.pcie.nics.len(), 4);
    assert!(dgx1.pcie.nics.iter().all(|n| n.up.is_some()));
    // HGX H100: one NVSwitch hub, NV18 to each of 8 GPUs.
    let h100 = picture("fixtures/recorded/hgx-h100-8gpu-nvswitch-nvml.yaml");
    assert!(h100.pairs.is_empty());
    assert_eq!(h100.hubs.len(), 1);
    assert_eq!(h100.hubs[0].label, "NVSwitch");
    assert_eq!(h100.hubs[0].uniform(), Some(Fabric::Nv(18)));
    assert_eq!(h100.hubs[0].spokes.len(), 8);
    // Two links of GPU 3 down: still one hub, GPU 3's spoke NV16.
    let degraded =
        picture("fixtures/recorded/hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml");
    assert_eq!(degraded.hubs.len(), 1);
    assert!(degraded.hubs[0].spokes.contains(&(3, Fabric::Nv(16))));
    assert!(degraded.hubs[0].spokes.contains(&(0, Fabric::Nv(18))));
    // Bridged pairs, one GPU per NUMA node: two NV12 edges, four groups.
    let pairs = picture(
        "fixtures/nvidia/4gpu-nv12-bridged-pairs-4numa-one-gpu-per-numa-matrix-only-NO-LEGEND-captured.txt",
    );
    assert_eq!(pairs.pairs.len(), 2);
    assert!(pairs.pairs.iter().all(|p| p.fabric == Fabric::Nv(12)));
    assert_eq!(pairs.groups.len(), 4);
    // MI300X class: 8 GPUs, every pair direct XGMI: one mesh hub.
    let mi300 = picture(
        "fixtures/amd/amd-mi308x-8gpu-0x74a2-rocm72-rocm-smi-showtopo-lowpower-warning.txt",
    );
    assert_eq!(mi300.hubs.len(), 1);
    assert_eq!(mi300.hubs[0].label, "XGMI mesh");
    assert!(mi300.pairs.is_empty());
    // Two hives of four: 12 XGMI edges, no hub (4 GPUs stay pairs).
    let hives = picture(
        "fixtures/amd/amd-8gpu-two-xgmi-hives-of-4-pcie-between-64gb-likely-mi210-rocm-smi-showtopo.txt",
    );
    assert_eq!(hives.pairs.len(), 12);
    assert!(hives.hubs.is_empty());
    // PCIe only: no fabric edge, GPU pairs under their host bridges.
    let pcie = picture("fixtures/nvidia/rtx4090-8gpu-pcie-2socket-vast-driver570-topo-m.txt");
    assert!(pcie.pairs.is_empty() && pcie.hubs.is_empty());
    assert!(!pcie.pcie_nodes().is_empty());
    assert_eq!(pcie.groups.len(), 2);
}

/// `kube-list.yaml`'s gpu-a object (its status holds GPU 2) as a file.
fn object_with_status(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("fixtures/clusters/kube-list.yaml")).unwrap();
    let list: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let item = list["items"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "GpuTopology")
        .unwrap();
    let object: GpuTopology = serde_yaml::from_value(item.clone()).unwrap();
    let path = dir.join("gpu-a.yaml");
    std::fs::write(&path, serde_yaml::to_string(&object).unwrap()).unwrap();
    path
}

#[test]
fn a_gpu_topology_objects_status_is_drawn_as_its_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let path = object_with_status(dir.path());
    let (spec, holders) = draw::load(&draw::Input::File(path)).unwrap();
    let pic = Picture::new(&spec, holders.as_ref());
    assert_eq!(pic.pods, vec![("other/notebook".to_string(), vec![2])]);
    assert_eq!(pic.gpu(2).unwrap().pod, Some(0));
    assert_eq!(pic.gpu(0).unwrap().pod, None);
    let texts = texts(&draw::svg(&pic).unwrap());
    assert!(texts.iter().any(|t| t == "other/notebook"), "{texts:?}");
    assert!(
        texts.iter().any(|t| t == "1 of 4 GPUs held by 1 pod"),
        "{texts:?}"
    );
    // A fixture alone says nothing of the allocation.
    let bare = picture("fixtures/recorded/dgx1-v100-nvml.yaml");
    assert!(bare.pods.is_empty());
    assert_eq!(bare.allocation, "allocation not known (topology only)");
}

fn gputopo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gputopo"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the binary runs")
}

#[test]
fn the_binary_draws_png_and_svg_from_a_cluster_and_refuses_other_formats() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("gpu-b.png");
    let list = "fixtures/clusters/kube-list.yaml";
    // As of a fresh reading, gpu-b's kubelet says ml/trainer holds GPUs 0 and 2.
    let out = gputopo(&[
        "draw",
        "--cluster",
        list,
        "--node",
        "gpu-b",
        "--now",
        "2026-03-01T10:05:00Z",
        "--output",
        png.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let svg = dir.path().join("gpu-b.svg");
    let out = gputopo(&[
        "draw",
        "--cluster",
        list,
        "--node",
        "gpu-b",
        "--now",
        "2026-03-01T10:05:00Z",
        "--output",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let texts = texts(&std::fs::read_to_string(&svg).unwrap());
    assert!(
        texts.iter().any(|t| t == "ml/trainer: GPU 0, 2"),
        "{texts:?}"
    );
    let jpg = dir.path().join("x.jpg");
    let out = gputopo(&[
        "draw",
        "fixtures/recorded/dgx1-v100-nvml.yaml",
        "--output",
        jpg.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("accepted: .svg, .png") && err.contains("x.jpg"),
        "{err}"
    );
    assert!(!jpg.exists());
    let out = gputopo(&[
        "draw",
        "--cluster",
        list,
        "--node",
        "gpu-z",
        "--output",
        png.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"gpu-z\"") && err.contains("gpu-a, gpu-b"),
        "{err}"
    );
}
