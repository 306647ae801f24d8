//! The scanner over a recording replayed as NVML (no GPU here): the static
//! topology is read once and kept, the dynamic state every scan, so a link
//! going down, a GPU falling off the bus, a critical XID or a MIG
//! reconfiguration shows at the next scan; a vanished NVML makes every GPU
//! lost; SIGHUP (`forget`) reads the static topology again.

use gputopo_agent::discover::Source;
use gputopo_agent::scan::{Scanned, Scanner};
use gputopo_topology::discover::Source as SavedSource;
use gputopo_topology::health::FindingKind;
use serde_yaml::Value;
use std::path::{Path, PathBuf};

const HGX_H100: &str = "recorded/hgx-h100-8gpu-nvswitch-nvml.yaml";

fn copy_fixture(dir: &Path) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(HGX_H100);
    let to = dir.join("node.yaml");
    std::fs::copy(from, &to).expect("fixture copied");
    to
}

/// Edits the recording in one step (write beside, rename), as NVML would change.
fn edit(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut doc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).expect("read")).expect("YAML");
    change(&mut doc["nvml"]["devices"]);
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, serde_yaml::to_string(&doc).expect("YAML")).expect("written");
    std::fs::rename(&tmp, path).expect("renamed");
}

fn kinds(s: &Scanned) -> Vec<(u32, FindingKind)> {
    s.found.findings.iter().map(|f| (f.gpu, f.kind)).collect()
}

fn nvlinks(s: &Scanned, a: u32, b: u32) -> u32 {
    s.found.spec.link(a, b).expect("a link").nvlinks
}

#[tokio::test]
async fn dynamic_state_is_read_every_scan_and_the_topology_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = copy_fixture(dir.path());
    let mut scanner = Scanner::new(
        "hgx".into(),
        Source::Saved(SavedSource::Fixture(rec.clone())),
    );
    let first = scanner.scan().await.expect("scanned");
    assert!(
        first.found.findings.is_empty(),
        "{:?}",
        first.found.findings
    );
    assert_eq!(nvlinks(&first, 2, 5), 18);

    // GPU 2's link 3 goes down; the product name (static) changes in the
    // file too, which a live NVML would not report until asked again.
    edit(&rec, |devices| {
        devices[2]["nvlinks"][3]["active"] = Value::Bool(false);
        devices[2]["name"] = Value::String("Renamed".into());
    });
    let second = scanner.scan().await.expect("scanned");
    assert!(
        kinds(&second).contains(&(2, FindingKind::LinksDown)),
        "{:?}",
        second.found.findings
    );
    let down = second
        .found
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::LinksDown)
        .expect("links down");
    assert!(down.detail.contains("link 3 down"), "{}", down.detail);
    assert_eq!(nvlinks(&second, 2, 5), 17, "published links follow");
    assert_eq!(nvlinks(&second, 4, 5), 18);
    assert_eq!(
        second.found.spec.gpus[2].product.as_deref(),
        Some("NVIDIA H100 80GB HBM3"),
        "the static topology is kept"
    );

    // GPU 5 falls off the bus; GPU 6 reports XID 79 (and 13, the
    // application's fault); GPU 1 gets a MIG device.
    edit(&rec, |devices| {
        devices[5]["lost"] = Value::String("nvmlDeviceGetUUID: GPU is lost".into());
        devices[6]["xidErrors"] = serde_yaml::from_str("[13, 79]").expect("YAML");
        devices[1]["migDevices"] =
            serde_yaml::from_str("[{uuid: MIG-5c4cb2a1-0d62-5ec7-b7c5-1f1b0b1c2d3e}]")
                .expect("YAML");
    });
    let third = scanner.scan().await.expect("scanned");
    let k = kinds(&third);
    assert!(k.contains(&(5, FindingKind::GpuLost)), "{k:?}");
    assert!(k.contains(&(6, FindingKind::CriticalXid)), "{k:?}");
    let xid = third
        .found
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::CriticalXid)
        .expect("xid");
    assert!(
        xid.detail.contains("XID 79") && !xid.detail.contains("13"),
        "{}",
        xid.detail
    );
    assert_eq!(
        third.mig.get(&1).map(Vec::as_slice),
        Some(&["MIG-5c4cb2a1-0d62-5ec7-b7c5-1f1b0b1c2d3e".to_string()][..])
    );

    // GPU 5 answers again and GPU 6 reports nothing new: the XID is held.
    edit(&rec, |devices| {
        devices[5]
            .as_mapping_mut()
            .expect("a device")
            .remove("lost");
        devices[6]
            .as_mapping_mut()
            .expect("a device")
            .remove("xidErrors");
    });
    let fourth = scanner.scan().await.expect("scanned");
    let k = kinds(&fourth);
    assert!(!k.contains(&(5, FindingKind::GpuLost)), "{k:?}");
    assert!(k.contains(&(6, FindingKind::CriticalXid)), "{k:?}");

    // SIGHUP: everything is read again, held XIDs dropped.
    scanner.forget();
    let fifth = scanner.scan().await.expect("scanned");
    assert_eq!(fifth.found.spec.gpus[2].product.as_deref(), Some("Renamed"));
    assert!(!kinds(&fifth).contains(&(6, FindingKind::CriticalXid)));
}

#[tokio::test]
async fn nvml_that_stops_answering_loses_every_gpu_until_it_answers_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = copy_fixture(dir.path());
    let mut scanner = Scanner::new(
        "hgx".into(),
        Source::Saved(SavedSource::Fixture(rec.clone())),
    );
    scanner.scan().await.expect("scanned");
    let saved = std::fs::read(&rec).expect("read");
    std::fs::remove_file(&rec).expect("removed");
    let gone = scanner.scan().await.expect("still published");
    let lost: Vec<u32> = gone
        .found
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::GpuLost)
        .map(|f| f.gpu)
        .collect();
    assert_eq!(lost, (0..8).collect::<Vec<_>>());
    assert_eq!(gone.found.spec.gpus.len(), 8, "the topology is kept");
    // Reopened and read again once it answers.
    std::fs::write(&rec, saved).expect("restored");
    let back = scanner.scan().await.expect("scanned");
    assert!(back.found.findings.is_empty(), "{:?}", back.found.findings);
}

#[tokio::test]
async fn a_recording_that_never_answered_is_an_error_not_a_guess() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut scanner = Scanner::new(
        "n".into(),
        Source::Saved(SavedSource::Fixture(dir.path().join("absent.yaml"))),
    );
    let e = scanner.scan().await.expect_err("nothing to read");
    assert!(e.to_string().contains("absent.yaml"), "{e}");
}
