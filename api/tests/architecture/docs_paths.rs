//! The architecture's document names only paths that exist: every
//! backticked span of `docs/architecture.md` that looks like a repository
//! path names a file or folder of the repository, from its root or, written
//! short (`cycle/drive.rs`), as the tail of one. A span looks like a path
//! when it ends in `.rs`, `.md`, `.toml` or `.yaml`, or has a `/` after a
//! top-level entry of the repository (`scheduler/src/cycle/`), a trailing
//! `/` allowed; resource names and API groups (`nvidia.com/gpu`,
//! `apps/v1`) do not. Spans with placeholders or patterns (`<name>`, `*`,
//! `{a,b}`), spaces, `::` or URLs are not paths; fenced code blocks are not
//! read.

use crate::source::{RULES_DOC, relative, repo_root, walk};
use std::collections::BTreeSet;
use std::fs;

#[test]
fn every_path_docs_architecture_names_exists() {
    let root = repo_root();
    let doc = root.join(RULES_DOC);
    let text = fs::read_to_string(&doc).unwrap_or_else(|e| {
        panic!(
            "{RULES_DOC} states the architecture's rules these tests check; it cannot be read: {e}"
        )
    });
    let mut all = Vec::new();
    walk(&root, &mut all);
    let existing: BTreeSet<String> = all.iter().map(|p| relative(&root, p)).collect();
    let top: BTreeSet<&str> = existing
        .iter()
        .filter(|p| !p.contains('/'))
        .map(String::as_str)
        .collect();
    let named = named_paths(&text, &top);
    let missing: Vec<String> = named
        .iter()
        .filter(|(_, path)| {
            let path = path.trim_end_matches('/');
            !existing.contains(path) && !existing.iter().any(|e| e.ends_with(&format!("/{path}")))
        })
        .map(|(line, path)| format!("  line {line}: `{path}`"))
        .collect();
    assert!(
        missing.is_empty(),
        "{RULES_DOC} names paths that do not exist in the repository (a file moved or was \
         renamed: name it where it is now):\n{}",
        missing.join("\n")
    );
}

/// The (line, span) of each backticked span outside fenced code that looks
/// like a path.
fn named_paths(text: &str, top: &BTreeSet<&str>) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            if looks_like_path(span, top) {
                out.push((n + 1, span.to_string()));
            }
        }
    }
    out
}

fn looks_like_path(span: &str, top: &BTreeSet<&str>) -> bool {
    let bare = span.trim_end_matches('/');
    let plain = !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
        && !bare.starts_with('/');
    let first = bare.split('/').next().unwrap_or_default();
    let pathlike = (bare.contains('/') && top.contains(first))
        || [".rs", ".md", ".toml", ".yaml"]
            .iter()
            .any(|ext| bare.ends_with(ext));
    plain && pathlike && !span.contains("://")
}

#[test]
fn what_looks_like_a_path() {
    let text = "See `scheduler/src/cycle/`, `cycle/drive.rs`, `Cargo.toml`, `docs/x.md`,\n\
                not `crate::x`, `Result<_, String>`, `tests/<name>/main.rs`, `a b/c`,\n\
                `nvidia.com/gpu`, `apps/v1`, `https://x.io/a.md`.\n\
                ```\n`in/fence.rs`\n```\n";
    let top = BTreeSet::from(["scheduler", "docs", "tests"]);
    let named: Vec<String> = named_paths(text, &top)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        named,
        [
            "scheduler/src/cycle/",
            "cycle/drive.rs",
            "Cargo.toml",
            "docs/x.md"
        ]
    );
}
