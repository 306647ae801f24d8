//! The ResourceSlices committed under `fixtures/dra/` (for end-to-end use)
//! must be what the builders in `tests/common/dra.rs` generate from the
//! recorded machines: a change to either fails here until the YAML is
//! regenerated with `GPUTOPO_BLESS=1 cargo test -p gputopo-scheduler-core --test dra_fixtures`.

#[path = "common/dra.rs"]
mod fixtures;

use fixtures::{MACHINES, repo_path, slice, slice_yaml};
use gputopo_api::k8s_openapi::api::resource::v1::ResourceSlice;

#[test]
fn committed_resource_slices_match_the_recorded_machines() {
    let bless = std::env::var_os("GPUTOPO_BLESS").is_some();
    for m in MACHINES {
        let rel = format!("fixtures/dra/{}-resourceslice.yaml", m.node);
        let path = repo_path(&rel);
        let generated = slice_yaml(m);
        if bless {
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, &generated).expect("write");
        }
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{rel}: cannot read the committed ResourceSlice: {e}"));
        assert!(
            committed == generated,
            "{rel} has drifted from the recorded machine; regenerate it with\n  GPUTOPO_BLESS=1 cargo test -p gputopo-scheduler-core --test dra_fixtures"
        );
        let parsed: ResourceSlice = serde_yaml::from_str(&committed).expect("a ResourceSlice");
        assert_eq!(parsed, slice(m), "{rel} reads back as the builder's object");
    }
}
