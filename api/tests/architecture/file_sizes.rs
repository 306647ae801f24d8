//! The rooms stay small enough to read: no Rust or Markdown file in the
//! repository over 600 lines (the architecture's rule). Split along a seam, as the
//! scheduler's `cycle/` and the core's `snapshot/` are, rather than grow one
//! file; an integration test that outgrows one file becomes
//! `tests/<name>/main.rs` with modules beside it (one binary still); a
//! document that outgrows one page gets pages beside it, as
//! `docs/contract/` and `docs/benchmarks/` are.

use crate::source::{RULES_DOC, relative, repo_root, walk};
use std::fs;
use std::path::PathBuf;

const MAX_LINES: usize = 600;

/// Every `.rs` and `.md` file of the repository, build outputs and VCS
/// metadata left out.
fn source_files(root: &std::path::Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    walk(root, &mut all);
    all.retain(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs" || e == "md"));
    all
}

#[test]
fn no_rust_or_markdown_file_is_over_600_lines() {
    let root = repo_root();
    let files = source_files(&root);
    // The walk must have found the workspace, not an empty folder.
    assert!(
        files.len() > 200,
        "found only {} Rust and Markdown files under {}",
        files.len(),
        root.display()
    );
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = fs::read_to_string(f)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
                .lines()
                .count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", relative(&root, f)))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "split these along a seam (at most {MAX_LINES} lines a file, {RULES_DOC}): {long:#?}"
    );
}
