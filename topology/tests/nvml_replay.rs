//! The NVML backend without a GPU: recordings (fixtures/recorded/*.yaml, hand
//! constructed from real `nvidia-smi topo -m` outputs) replayed into facts, the
//! recording format's errors, and record() → YAML → replay round trips.

use gputopo_api::{LinkClass, TopologySource};
use gputopo_topology::backend::nvml::{
    NvmlAnswers, NvmlError, NvmlSource, RecordedNvml, RemoteDeviceType, facts_from_answers,
    facts_from_nvml,
};
use gputopo_topology::backend::recording::{
    ACCEPTED_API_VERSIONS, NVLINK_COMMAND, RecordMeta, Recording, RecordingError, TOPO_COMMAND,
    record, replay_commands, replay_nvml,
};
use gputopo_topology::backend::sysfs::{
    NoSysfs, RealSysfs, RecordedSysfs, SysfsSource, format_cpulist, parse_cpulist,
};
use gputopo_topology::facts::{NodeFacts, RemoteEnd};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DGX1: &str = "dgx1-v100-nvml.yaml";
const H100: &str = "hgx-h100-8gpu-nvswitch-nvml.yaml";
const H100_DEGRADED: &str = "hgx-h100-8gpu-nvswitch-DEGRADED-gpu3-2-links-down-nvml.yaml";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn load(name: &str) -> Recording {
    let path = fixtures().join("recorded").join(name);
    Recording::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn replay(name: &str) -> NodeFacts {
    replay_nvml(&load(name)).unwrap_or_else(|e| panic!("{e}"))
}

fn class(facts: &NodeFacts, x: u32, y: u32) -> LinkClass {
    let (a, b) = (x.min(y), x.max(y));
    let hits: Vec<_> = facts
        .gpu_pairs
        .iter()
        .filter(|p| (p.a, p.b) == (a, b))
        .collect();
    assert_eq!(hits.len(), 1, "pair {a}-{b} must appear once");
    hits[0].class()
}

/// GPU×GPU cells of an `nvidia-smi topo -m` text (a test-local reading; the
/// real parser lives in `parse::topo_matrix`).
fn topo_cells(text: &str) -> BTreeMap<(u32, u32), LinkClass> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .split('\t')
        .filter(|s| !s.trim().is_empty())
        .collect();
    let mut out = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split('\t').collect();
        let Some(row) = cells[0]
            .strip_prefix("GPU")
            .and_then(|g| g.parse::<u32>().ok())
        else {
            continue;
        };
        for (label, cell) in header.iter().zip(&cells[1..]) {
            let Some(col) = label
                .strip_prefix("GPU")
                .and_then(|g| g.parse::<u32>().ok())
            else {
                continue;
            };
            if col != row {
                out.insert((row, col), cell.trim().parse::<LinkClass>().unwrap());
            }
        }
    }
    out
}

fn assert_matches_topo(facts: &NodeFacts, topo: &str) {
    let cells = topo_cells(topo);
    let n = facts.gpus.len() as u32;
    assert_eq!(cells.len() as u32, n * (n - 1), "matrix size");
    for ((r, c), want) in cells {
        assert_eq!(class(facts, r, c), want, "GPU{r}-GPU{c}");
    }
}

/// The same answers with every NVLink removed: what is left is the PCIe path.
fn without_nvlinks(answers: &NvmlAnswers) -> NvmlAnswers {
    let mut a = answers.clone();
    for d in &mut a.devices {
        d.nvlinks = None;
    }
    a
}

// ---------------------------------------------------------------------------
// DGX-1 V100: direct links, hybrid cube-mesh

#[test]
fn dgx1_pairs_are_the_cube_mesh_of_topo_m() {
    let rec = load(DGX1);
    let facts = replay(DGX1);
    assert_eq!(facts.source, TopologySource::Fixture);
    assert_eq!(facts.gpus.len(), 8);
    assert_eq!(facts.gpu_pairs.len(), 28);
    assert_eq!(class(&facts, 0, 3), LinkClass::Nv(2));
    assert_eq!(class(&facts, 0, 1), LinkClass::Nv(1));
    assert_eq!(class(&facts, 0, 5), LinkClass::Sys);
    assert_eq!(class(&facts, 4, 7), LinkClass::Nv(2));
    // Every cell of the matrix the recording was built from.
    assert_matches_topo(&facts, rec.command(TOPO_COMMAND).unwrap());
    assert_eq!(facts.driver_version.as_deref(), Some("418.67"));
    assert_eq!(facts.cuda_version.as_deref(), Some("10.1"));
    let g0 = &facts.gpus[0];
    assert_eq!(g0.product.as_deref(), Some("Tesla V100-SXM2-32GB"));
    assert_eq!(g0.pci_bus_id.as_deref(), Some("00000000:06:00.0"));
    assert_eq!(
        g0.mig_enabled, None,
        "R418 has no MIG query: unknown, not false"
    );
    assert_eq!(g0.fabric, None);
}

#[test]
fn dgx1_remote_gpus_are_inferred_from_bus_ids_without_device_type() {
    let facts = replay(DGX1);
    let links = facts.gpus[0].nvlinks.as_ref().unwrap();
    assert_eq!(links.len(), 6);
    assert!(links.iter().all(|l| l.active));
    assert_eq!(
        links[0].remote,
        Some(RemoteEnd::Gpu {
            pci_bus_id: "00000000:07:00.0".into()
        })
    );
}

#[test]
fn dgx1_numa_comes_from_sysfs_when_nvml_lacks_it() {
    let rec = load(DGX1);
    let answers = rec.nvml.as_ref().unwrap();
    assert!(
        answers
            .devices
            .iter()
            .all(|d| d.memory_affinity.is_none() && d.numa_node_id.is_none())
    );
    let facts = replay(DGX1);
    let numa: Vec<Option<i32>> = facts.gpus.iter().map(|g| g.numa_node).collect();
    assert_eq!(numa, [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
    // Without sysfs the node stays unknown: never a default.
    let bare = facts_from_answers(answers, &NoSysfs, TopologySource::Fixture).unwrap();
    assert!(bare.gpus.iter().all(|g| g.numa_node.is_none()));
    // CPU affinity came from NVML and is a canonical cpulist.
    assert_eq!(facts.gpus[0].cpu_affinity.as_deref(), Some("0-19,40-59"));
    assert_eq!(facts.gpus[7].cpu_affinity.as_deref(), Some("20-39,60-79"));
}

#[test]
fn dgx1_pcie_ancestors_match_topo_mp() {
    let rec = load(DGX1);
    let pcie = without_nvlinks(rec.nvml.as_ref().unwrap());
    let facts = facts_from_answers(
        &pcie,
        &RecordedSysfs::new(&rec.sysfs),
        TopologySource::Fixture,
    )
    .unwrap();
    let mp =
        std::fs::read_to_string(fixtures().join("nvidia/dgx1-v100-topo-mp-pcie-only-view.txt"))
            .unwrap();
    assert_matches_topo(&facts, &mp);
    assert_eq!(class(&facts, 0, 1), LinkClass::Pix);
    assert_eq!(class(&facts, 0, 2), LinkClass::Phb);
    assert_eq!(class(&facts, 0, 5), LinkClass::Sys);
}

// ---------------------------------------------------------------------------
// HGX H100: NVSwitch

#[test]
fn h100_nvswitch_pairs_are_nv18_everywhere() {
    let rec = load(H100);
    let facts = replay(H100);
    assert_eq!(facts.gpu_pairs.len(), 28);
    assert!(
        facts
            .gpu_pairs
            .iter()
            .all(|p| p.class() == LinkClass::Nv(18)),
        "{:?}",
        facts.gpu_pairs
    );
    assert_matches_topo(&facts, rec.command(TOPO_COMMAND).unwrap());
    let g = &facts.gpus[4];
    assert_eq!(g.product.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(g.memory_mib, Some(81559));
    assert_eq!(g.numa_node, Some(1));
    assert_eq!(g.cpu_affinity.as_deref(), Some("56-111,168-223"));
    assert_eq!(g.mig_enabled, Some(false));
    assert_eq!(
        g.fabric, None,
        "nil cluster UUID: no multi-node NVLink domain"
    );
    let links = g.nvlinks.as_ref().unwrap();
    assert_eq!(links.len(), 18);
    assert!(
        links
            .iter()
            .all(|l| l.active && matches!(l.remote, Some(RemoteEnd::Nvswitch { .. })))
    );
    assert_eq!(facts.driver_version.as_deref(), Some("580.126.20"));
    assert_eq!(facts.cuda_version.as_deref(), Some("13.0"));
}

#[test]
fn h100_pcie_ancestors_follow_the_switch_trees() {
    let rec = load(H100);
    let pcie = without_nvlinks(rec.nvml.as_ref().unwrap());
    let facts = facts_from_answers(&pcie, &NoSysfs, TopologySource::Fixture).unwrap();
    assert_eq!(class(&facts, 0, 1), LinkClass::Pxb);
    assert_eq!(class(&facts, 6, 7), LinkClass::Pxb);
    assert_eq!(class(&facts, 0, 2), LinkClass::Node);
    assert_eq!(class(&facts, 5, 7), LinkClass::Node);
    assert_eq!(class(&facts, 0, 4), LinkClass::Sys);
    assert_eq!(class(&facts, 3, 4), LinkClass::Sys);
}

#[test]
fn h100_degraded_gpu3_pairs_are_nv16_and_its_down_links_are_listed() {
    let facts = replay(H100_DEGRADED);
    for other in (0..8).filter(|g| *g != 3) {
        assert_eq!(
            class(&facts, 3, other),
            LinkClass::Nv(16),
            "GPU3-GPU{other}"
        );
    }
    for p in facts.gpu_pairs.iter().filter(|p| p.a != 3 && p.b != 3) {
        assert_eq!(p.class(), LinkClass::Nv(18), "{p:?}");
    }
    let down: Vec<u32> = facts.gpus[3]
        .nvlinks
        .as_ref()
        .unwrap()
        .iter()
        .filter(|l| !l.active)
        .map(|l| l.link)
        .collect();
    assert_eq!(down, [16, 17]);
    for g in facts.gpus.iter().filter(|g| g.index != 3) {
        assert!(g.nvlinks.as_ref().unwrap().iter().all(|l| l.active));
    }
}

#[test]
fn nvml_and_nvidia_smi_replays_of_one_recording_agree_on_every_pair() {
    for name in [DGX1, H100] {
        let rec = load(name);
        let from_nvml = replay_nvml(&rec).unwrap();
        let from_text = replay_commands(&rec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_text.source, TopologySource::Fixture);
        let classes = |f: &NodeFacts| -> BTreeMap<(u32, u32), LinkClass> {
            f.gpu_pairs
                .iter()
                .map(|p| ((p.a.min(p.b), p.a.max(p.b)), p.class()))
                .collect()
        };
        assert_eq!(classes(&from_nvml), classes(&from_text), "{name}");
        for (n, t) in from_nvml.gpus.iter().zip(&from_text.gpus) {
            assert_eq!(n.cpu_affinity, t.cpu_affinity, "{name} GPU{}", n.index);
        }
    }
}

#[test]
fn replayed_facts_normalize_to_the_contract_summary() {
    use gputopo_api::Interconnect;
    let summary = |name: &str| {
        let facts = replay(name);
        let spec =
            gputopo_topology::normalize::normalize("n", &facts).unwrap_or_else(|e| panic!("{e}"));
        let findings = gputopo_topology::health::assess(&spec, &facts);
        (spec.summary, findings)
    };
    let (dgx1, findings) = summary(DGX1);
    assert_eq!(dgx1.p2p_level, None, "DGX-1: some pairs have no NVLink");
    // Recorded from NVML: the cube-mesh's weakest pair crosses the sockets.
    assert_eq!(dgx1.p2p_bottleneck.as_deref(), Some("SYS"));
    assert_eq!(dgx1.interconnect, Interconnect::NvlinkMesh);
    assert_eq!((dgx1.largest_island, dgx1.numa_nodes), (8, Some(2)));
    assert!(findings.is_empty(), "{findings:?}");

    let (h100, findings) = summary(H100);
    assert_eq!(h100.p2p_level.as_deref(), Some("NV18"));
    assert_eq!(h100.interconnect, Interconnect::Nvswitch);
    assert!(findings.is_empty(), "{findings:?}");

    let (degraded, findings) = summary(H100_DEGRADED);
    assert_eq!(degraded.p2p_level.as_deref(), Some("NV16"));
    assert_eq!(degraded.p2p_bottleneck.as_deref(), Some("NV16"));
    assert!(
        !findings.is_empty() && findings.iter().all(|f| f.gpu == 3),
        "{findings:?}"
    );
}

// ---------------------------------------------------------------------------
// The recording format

#[test]
fn recordings_round_trip_and_keep_command_texts_verbatim() {
    for (name, source) in [
        (
            DGX1,
            Some("dgx1-v100-mlx5-no-numa-column-msccl-tools-topo-m.txt"),
        ),
        (
            H100,
            Some("hgx-h100-80gb-hbm3-8gpu-12nic-driver580-header-no-leading-tab-topo-m.txt"),
        ),
        (H100_DEGRADED, None),
    ] {
        let rec = load(name);
        let yaml = rec.to_yaml().unwrap();
        let back = Recording::from_yaml_str(&yaml, "re-serialized").unwrap();
        assert_eq!(back, rec, "{name}");
        if let Some(source) = source {
            let verbatim = std::fs::read_to_string(fixtures().join("nvidia").join(source)).unwrap();
            assert_eq!(rec.command(TOPO_COMMAND), Some(verbatim.as_str()), "{name}");
        }
    }
}

fn dgx1_text() -> String {
    std::fs::read_to_string(fixtures().join("recorded").join(DGX1)).unwrap()
}

/// Replaces the `nth` (0-based) occurrence of `from`.
fn replace_nth(text: &str, from: &str, to: &str, nth: usize) -> String {
    let (at, _) = text.match_indices(from).nth(nth).unwrap();
    format!("{}{}{}", &text[..at], to, &text[at + from.len()..])
}

#[test]
fn a_malformed_recording_names_the_file_and_the_field_path() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.yaml");
    let bad = replace_nth(&dgx1_text(), "memoryMiB: 32510", "memoryMiB: lots", 2);
    std::fs::write(&path, bad).unwrap();
    let err = Recording::load(&path).unwrap_err();
    let want = format!(
        "{}: nvml.devices[2].memoryMiB: invalid type: string \"lots\", expected u64",
        path.display()
    );
    assert!(err.to_string().starts_with(&want), "{err}");
    assert!(matches!(err, RecordingError::Parse { .. }));

    let typo = replace_nth(&dgx1_text(), "remoteDeviceType:", "remoteDevType:", 9);
    let err = Recording::from_yaml_str(&typo, "typo.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("typo.yaml: nvml.devices[1].nvlinks[3].remoteDevType: unknown field"),
        "{err}"
    );

    let err = Recording::load(&tmp.path().join("missing.yaml")).unwrap_err();
    assert!(err.to_string().starts_with(&format!(
        "{}: cannot read",
        tmp.path().join("missing.yaml").display()
    )));
}

#[test]
fn unknown_versions_and_kinds_are_refused_naming_what_is_accepted() {
    let text = dgx1_text().replace("gputopo.dev/recording-v1", "gputopo.dev/recording-v9");
    let err = Recording::from_yaml_str(&text, "future.yaml").unwrap_err();
    assert!(matches!(err, RecordingError::Version { .. }));
    let msg = err.to_string();
    assert!(
        msg.starts_with("future.yaml: apiVersion \"gputopo.dev/recording-v9\""),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!("accepted: {}", ACCEPTED_API_VERSIONS.join(", "))),
        "{msg}"
    );

    let text = dgx1_text().replace("kind: Recording", "kind: GpuTopology");
    let msg = Recording::from_yaml_str(&text, "k.yaml")
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("k.yaml: kind \"GpuTopology\""), "{msg}");

    let text = dgx1_text().replace("apiVersion: gputopo.dev/recording-v1\n", "");
    let msg = Recording::from_yaml_str(&text, "n.yaml")
        .unwrap_err()
        .to_string();
    assert_eq!(msg, "n.yaml: apiVersion: missing field");
}

// ---------------------------------------------------------------------------
// record() with fakes

/// Stands in for the real library: hands out fixed answers as `nvml`.
struct FakeNvml(Result<NvmlAnswers, NvmlError>);

impl NvmlSource for FakeNvml {
    fn snapshot(&self) -> Result<NvmlAnswers, NvmlError> {
        self.0.clone()
    }
}

fn fake_sysfs(root: &Path, answers: &NvmlAnswers) {
    for d in &answers.devices {
        let bus = d.pci_bus_id.as_deref().unwrap();
        let dir = root.join("bus/pci/devices").join(&bus[4..]); // 0000:18:00.0
        std::fs::create_dir_all(&dir).unwrap();
        let socket = if d.index < 4 { 0 } else { 1 };
        std::fs::write(dir.join("numa_node"), format!("{socket}\n")).unwrap();
        std::fs::write(dir.join("local_cpulist"), "0-3\n").unwrap();
        std::fs::write(dir.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(dir.join("class"), "0x030200\n").unwrap();
    }
}

#[test]
fn record_round_trips_through_yaml_to_the_same_facts() {
    let mut answers = load(H100).nvml.unwrap();
    // Let sysfs supply what NVML lacks here, so the sysfs part is exercised.
    for d in &mut answers.devices {
        d.memory_affinity = None;
        d.cpu_affinity = None;
    }
    let tmp = tempfile::tempdir().unwrap();
    fake_sysfs(tmp.path(), &answers);
    let sysfs = RealSysfs::new(tmp.path());
    let fake = FakeNvml(Ok(answers));
    let topo = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n";
    let run = |argv: &[&str]| (argv == ["nvidia-smi", "topo", "-m"]).then(|| topo.to_string());
    let meta = RecordMeta {
        node_name: "node-a".into(),
        recorded_at: "2026-02-03T04:05:06Z".into(),
        host: None,
        nvml_unavailable: None,
        amd_smi_unavailable: None,
    };
    let rec = record(Some(&fake), None, &run, &sysfs, meta);
    assert_eq!(rec.command(TOPO_COMMAND), Some(topo));
    assert_eq!(
        rec.command(NVLINK_COMMAND),
        None,
        "a failed command is absent"
    );
    assert_eq!(rec.sysfs.len(), 8);
    assert_eq!(rec.nvml_error, None);

    let yaml = rec.to_yaml().unwrap();
    let back = Recording::from_yaml_str(&yaml, "recorded.yaml").unwrap();
    assert_eq!(back, rec);

    let live = facts_from_nvml(&fake, &sysfs).unwrap();
    assert_eq!(live.source, TopologySource::Nvml);
    let replayed = replay_nvml(&back).unwrap();
    assert_eq!(replayed.source, TopologySource::Fixture);
    assert_eq!(
        NodeFacts {
            source: TopologySource::Nvml,
            ..replayed
        },
        live
    );
    assert_eq!(live.gpus[5].numa_node, Some(1), "from sysfs");
    assert_eq!(
        live.gpus[5].cpu_affinity.as_deref(),
        Some("0-3"),
        "from sysfs"
    );
}

#[test]
fn record_without_nvml_keeps_why_and_replay_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let sysfs = RealSysfs::new(tmp.path());
    let run = |_: &[&str]| None;
    let failing = FakeNvml(Err(NvmlError::System {
        call: "nvmlDeviceGetCount_v2",
        reason: "Unknown Error".into(),
    }));
    let rec = record(
        Some(&failing),
        None,
        &run,
        &sysfs,
        RecordMeta {
            node_name: "node-b".into(),
            ..RecordMeta::default()
        },
    );
    assert_eq!(rec.nvml, None);
    assert_eq!(
        rec.nvml_error.as_deref(),
        Some("nvmlDeviceGetCount_v2 failed: Unknown Error")
    );
    let err = replay_nvml(&rec).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "recording of node node-b: holds no NVML answers (nvmlDeviceGetCount_v2 failed"
        ),
        "{err}"
    );

    let rec = record(
        None,
        None,
        &run,
        &sysfs,
        RecordMeta {
            node_name: "node-c".into(),
            nvml_unavailable: Some("NVML not available: no driver".into()),
            ..RecordMeta::default()
        },
    );
    assert_eq!(
        rec.nvml_error.as_deref(),
        Some("NVML not available: no driver")
    );
    assert!(rec.commands.is_empty() && rec.sysfs.is_empty());
}

#[test]
fn replay_errors_name_the_node_and_the_pair() {
    let mut rec = load(DGX1);
    let nvml = rec.nvml.as_mut().unwrap();
    for d in &mut nvml.devices {
        d.nvlinks = None;
    }
    nvml.pairs.retain(|p| (p.a, p.b) != (2, 6));
    let err = replay_nvml(&rec).unwrap_err().to_string();
    assert!(
        err.starts_with("recording of node dgx1-v100-synthetic: GPUs 2 and 6: no active NVLink"),
        "{err}"
    );
}

#[test]
fn recorded_nvml_is_a_fixture_source() {
    let answers = load(H100).nvml.unwrap();
    let src = RecordedNvml { answers };
    let facts = facts_from_nvml(&src, &NoSysfs).unwrap();
    assert_eq!(facts.source, TopologySource::Fixture);
    // With no sysfs, NUMA still comes from NVML's memory affinity.
    assert_eq!(facts.gpus[0].numa_node, Some(0));
    let link = &src.answers.devices[0].nvlinks.as_ref().unwrap()[0];
    assert_eq!(link.remote_device_type, Some(RemoteDeviceType::Switch));
}

#[test]
fn cpulists_from_fixtures_are_canonical() {
    for text in ["0-55,112-167", "0-19,40-59", "0,64", "1"] {
        assert_eq!(format_cpulist(parse_cpulist(text).unwrap()), text);
    }
    assert_eq!(format_cpulist(parse_cpulist("0,1,2,3,8").unwrap()), "0-3,8");
    let rec = load(H100);
    let sysfs = RecordedSysfs::new(&rec.sysfs);
    assert_eq!(
        sysfs.local_cpulist("0000:db:00.0").as_deref(),
        Some("56-111,168-223")
    );
}
