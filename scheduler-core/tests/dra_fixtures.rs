//! The ResourceSlices committed under `fixtures/dra/` (for end-to-end use)
//! must be what the builders in `tests/common/dra.rs` generate from the
//! recorded machines: a change to either fails here until the YAML is
//! regenerated with `GPUTOPO_BLESS=1 cargo test -p gputopo-scheduler-core --test dra_fixtures`.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::{
    DGX_A100, MACHINES, Machine, all_slices, fixture_yaml, repo_path, slice, slice_yaml,
    topology_spec,
};
use gputopo_api::k8s_openapi::api::resource::v1::ResourceSlice;
use gputopo_topology::dra_slice::{compute_domain_resource_slice, nic_resource_slice};

/// Compares (or with `GPUTOPO_BLESS`, writes) one committed fixture.
fn check(rel: &str, generated: &str) -> String {
    let path = repo_path(rel);
    if std::env::var_os("GPUTOPO_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, generated).expect("write");
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{rel}: cannot read the committed ResourceSlice: {e}"));
    assert!(
        committed == generated,
        "{rel} has drifted from the recorded machine; regenerate it with\n  GPUTOPO_BLESS=1 cargo test -p gputopo-scheduler-core --test dra_fixtures"
    );
    committed
}

#[test]
fn committed_channel_and_nic_slices_match_the_recorded_dgx_a100() {
    let m: &Machine = &DGX_A100;
    let channel = compute_domain_resource_slice(m.node);
    let nic = nic_resource_slice(m.node, &topology_spec(m)).expect("the DGX A100 has NICs");
    let mut read = Vec::new();
    for (rel, what, object) in [
        (
            "fixtures/dra/dgx-a100-compute-domain-resourceslice.yaml",
            "NVIDIA's ComputeDomain driver",
            &channel,
        ),
        (
            "fixtures/dra/dgx-a100-nic-resourceslice.yaml",
            "dranet (RDMA NICs)",
            &nic,
        ),
    ] {
        let committed = check(rel, &fixture_yaml(m, what, object));
        read.push(serde_yaml::from_str::<ResourceSlice>(&committed).expect("a ResourceSlice"));
    }
    assert_eq!(
        read,
        all_slices(m)[1..],
        "the committed slices read back as the builders'"
    );
}

#[test]
fn committed_resource_slices_match_the_recorded_machines() {
    for m in MACHINES {
        let rel = format!("fixtures/dra/{}-resourceslice.yaml", m.node);
        let generated = slice_yaml(m);
        let committed = check(&rel, &generated);
        let parsed: ResourceSlice = serde_yaml::from_str(&committed).expect("a ResourceSlice");
        assert_eq!(parsed, slice(m), "{rel} reads back as the builder's object");
    }
}
