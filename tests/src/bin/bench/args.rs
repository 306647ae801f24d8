//! What the bench binaries (the DRA side by side, the fault runs) share:
//! where the fixtures and the scheduler binary are by default, and the
//! seeded generator that makes every run of a seed submit the same work.

use std::path::{Path, PathBuf};

/// `--fixtures`, or the repository's `fixtures/`.
pub fn fixtures_dir(given: Option<&Path>) -> PathBuf {
    given.map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures")),
        Path::to_path_buf,
    )
}

/// `--scheduler`, or the `gputopo-scheduler` cargo built beside this binary.
pub fn scheduler_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("gputopo-scheduler"))
            .unwrap_or_default(),
    };
    anyhow::ensure!(
        path.is_file(),
        "{} not found: build it (cargo build -p gputopo-scheduler) or pass --scheduler PATH",
        path.display()
    );
    Ok(path)
}

/// splitmix64: the next number of the sequence `state` is at.
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
