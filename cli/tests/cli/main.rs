//! The `gputopo` binary on real fixtures: `place` against a brute-force
//! optimum computed here from the parsed spec, its exit statuses and error
//! messages, every accepted topology form, and `explain` on the cluster
//! fixtures agreeing with the library's decision.
//!
//! The tests are in [`place`] and [`explain`]; this file holds what both use:
//! running the binary and reading what it printed.

mod explain;
mod explain_gang;
mod place;

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn gputopo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputopo"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the binary runs")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}
