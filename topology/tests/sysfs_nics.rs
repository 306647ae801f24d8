//! NICs in NVML mode: NVML names no NIC, so the agent reads the RDMA
//! devices from sysfs and places them and the GPUs in the PCI tree. A sysfs
//! tree laid out as a DGX H100's (one PCIe switch per GPU holding the
//! GPU and its ConnectX-7, one host bridge per switch, four per socket;
//! NVIDIA's DGX H100 user guide) under the HGX H100 recording's GPUs;
//! symlinks as the kernel makes them (`bus/pci/devices/<id>` and
//! `class/infiniband/<name>/device` pointing into `devices/`).

use gputopo_api::LinkType;
use gputopo_topology::backend::nvml::{RecordedNvml, facts_from_answers};
use gputopo_topology::backend::recording::{RecordMeta, Recording, record, replay_nvml};
use gputopo_topology::backend::sysfs::RealSysfs;
use gputopo_topology::discover::build;
use gputopo_topology::dra_slice::link_devices;
use std::path::Path;

const GPU_BUSES: [u8; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

fn recording() -> Recording {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/recorded/hgx-h100-8gpu-nvswitch-nvml.yaml");
    Recording::from_yaml_str(&std::fs::read_to_string(&path).expect("readable"), "hgx")
        .expect("reads")
}

fn device(root: &Path, path: &str, numa: i32) {
    let dir = root.join("devices").join(path);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("numa_node"), format!("{numa}\n")).expect("numa_node");
    let id = path.rsplit('/').next().expect("an id");
    let link = root.join("bus/pci/devices").join(id);
    std::fs::create_dir_all(link.parent().expect("parent")).expect("bus dir");
    std::os::unix::fs::symlink(format!("../../../devices/{path}"), link).expect("symlink");
}

/// The tree: GPU i and mlx5_i under one switch below host bridge i.
fn dgx_h100_sysfs(root: &Path) {
    for (i, bus) in GPU_BUSES.iter().enumerate() {
        let numa = if i < 4 { 0 } else { 1 };
        let (rc, up, down) = (bus - 3, bus - 2, bus - 1);
        let switch = format!("pci0000:{rc:02x}/0000:{rc:02x}:01.0/0000:{up:02x}:00.0");
        device(
            root,
            &format!("{switch}/0000:{down:02x}:00.0/0000:{bus:02x}:00.0"),
            numa,
        );
        let nic_bus = bus + 1;
        let nic = format!("{switch}/0000:{down:02x}:01.0/0000:{nic_bus:02x}:00.0");
        device(root, &nic, numa);
        let ib = root.join(format!("class/infiniband/mlx5_{i}"));
        std::fs::create_dir_all(&ib).expect("ib dir");
        std::os::unix::fs::symlink(format!("../../../devices/{nic}"), ib.join("device"))
            .expect("symlink");
    }
}

fn check(nics: &[gputopo_api::Nic]) {
    assert_eq!(nics.len(), 8, "{nics:?}");
    for (i, nic) in nics.iter().enumerate() {
        assert_eq!(nic.name, format!("mlx5_{i}"));
        assert_eq!(nic.numa_node, Some(if i < 4 { 0 } else { 1 }));
        for l in &nic.gpu_links {
            let expected = if l.gpu as usize == i {
                LinkType::Pix
            } else if (l.gpu < 4) == (i < 4) {
                LinkType::Node
            } else {
                LinkType::Sys
            };
            assert_eq!(l.link_type, expected, "mlx5_{i} to GPU {}", l.gpu);
        }
    }
}

#[test]
fn nvml_mode_reads_the_nics_and_their_links_from_sysfs() {
    let tmp = tempfile::tempdir().expect("tmp");
    dgx_h100_sysfs(tmp.path());
    let answers = recording().nvml.expect("NVML answers");
    let facts = facts_from_answers(
        &answers,
        &RealSysfs::new(tmp.path()),
        gputopo_api::TopologySource::Nvml,
    )
    .expect("facts");
    let spec = build("node-a", facts).expect("builds").spec;
    check(&spec.nics);
    // Each GPU's rail is the NIC under its switch.
    let devices = link_devices(&spec);
    for i in 0..8 {
        let gpu = devices
            .iter()
            .find(|d| d["name"] == format!("gpu-{i}"))
            .expect("a link device");
        assert_eq!(gpu["attributes"]["rail"]["string"], format!("mlx5_{i}"));
    }
}

#[test]
fn a_recording_keeps_the_nics_and_replays_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    dgx_h100_sysfs(tmp.path());
    let nvml = RecordedNvml {
        answers: recording().nvml.expect("NVML answers"),
    };
    let meta = RecordMeta {
        node_name: "dgx-h100".into(),
        recorded_at: "2026-11-29T12:00:00Z".into(),
        host: None,
        nvml_unavailable: None,
        amd_smi_unavailable: None,
    };
    let rec = record(
        Some(&nvml),
        None,
        &|_| None,
        &RealSysfs::new(tmp.path()),
        meta,
    );
    assert_eq!(rec.rdma_nics.len(), 8);
    let yaml = rec.to_yaml().expect("writes");
    let again = Recording::from_yaml_str(&yaml, "round trip").expect("reads back");
    let spec = build("node-a", replay_nvml(&again).expect("replays"))
        .expect("builds")
        .spec;
    check(&spec.nics);
}

#[test]
fn without_sysfs_paths_no_nic_is_invented() {
    // The committed recordings predate NIC reading: no NIC, as before.
    let spec = build("node-a", replay_nvml(&recording()).expect("replays"))
        .expect("builds")
        .spec;
    assert!(spec.nics.is_empty());
}
