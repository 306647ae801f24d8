//! The rooms stay small enough to read: no Rust or Markdown file in the
//! repository over 600 lines (the architecture's rule). Split along a seam, as the
//! scheduler's `cycle/` and the core's `snapshot/` are, rather than grow one
//! file; an integration test that outgrows one file becomes
//! `tests/<name>/main.rs` with modules beside it (one binary still); a
//! document that outgrows one page gets pages beside it, as
//! `docs/contract/` and `docs/benchmarks/` are.

use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("api/ sits in the repository root")
        .to_path_buf()
}

/// Every `.rs` and `.md` file under `dir`, build outputs and VCS metadata
/// left out.
fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a readable entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            // `target*` covers CARGO_TARGET_DIR set inside the tree.
            if !(name.starts_with("target") || name.starts_with('.')) {
                source_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs" || e == "md") {
            out.push(path);
        }
    }
}

#[test]
fn no_rust_or_markdown_file_is_over_600_lines() {
    let root = repo_root();
    let mut files = Vec::new();
    source_files(&root, &mut files);
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
            (lines > MAX_LINES).then(|| {
                let shown = f.strip_prefix(&root).unwrap_or(f);
                format!("{} ({lines} lines)", shown.display())
            })
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "split these along a seam (at most {MAX_LINES} lines a file): {long:#?}"
    );
}
