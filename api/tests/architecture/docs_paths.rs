//! The README and the docs name only paths that exist: every backticked span
//! of `README.md`, `BENCHMARKS.md` and `docs/**/*.md` that looks like a
//! repository path names a file or folder of the repository. A span that
//! starts with a top-level entry of the repository
//! (`scheduler/src/binding.rs`, `daemonset/`) is read from the root; one
//! written short (`cycle/drive.rs`, `Chart.yaml`, as the README's Layout
//! names files inside a crate) must be the tail of one. A span looks like a
//! path when it ends in `.rs`, `.md`, `.toml`, `.yaml` or `.proto`, or has a
//! `/` after a top-level entry of the repository (`scheduler/src/cycle/`), a
//! trailing `/` allowed; resource names and API groups (`nvidia.com/gpu`,
//! `apps/v1`) do not. Spans with placeholders or patterns (`<name>`, `*`,
//! `{a,b}`), spaces, `::`, URLs or a leading `/` (a path on a node or in an
//! image) are not repository paths, nor is an extension alone (`.proto`);
//! fenced code blocks are not read. The few files the docs name that are not
//! the repository's (a user's values file, another project's) are listed in
//! [`NOT_OURS`].

use crate::source::{RULES_DOC, relative, repo_root, walk};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Spans that look like repository paths and name someone else's file, with
/// why. Each must still occur, so the list cannot outlive its reason.
const NOT_OURS: &[(&str, &str)] = &[
    (
        "config.yaml",
        "the key of a user's scheduler ConfigMap (scheduler.existingConfigMap)",
    ),
    ("gputopo-values.yaml", "the values file a user writes"),
    (
        "assets/state-device-plugin/0500_daemonset.yaml",
        "a file of NVIDIA/gpu-operator",
    ),
];

#[test]
fn every_path_the_readme_and_docs_name_exists() {
    let root = repo_root();
    let mut all = Vec::new();
    walk(&root, &mut all);
    let existing: BTreeSet<String> = all.iter().map(|p| relative(&root, p)).collect();
    let top: BTreeSet<&str> = existing
        .iter()
        .filter(|p| !p.contains('/'))
        .map(String::as_str)
        .collect();
    let docs = documents(&root, &all);
    assert!(
        docs.iter().any(|d| d == RULES_DOC) && docs.iter().any(|d| d == "README.md"),
        "README.md and {RULES_DOC} are among the documents read: {docs:?}"
    );
    let mut missing = Vec::new();
    let mut not_ours_seen = BTreeSet::new();
    for doc in &docs {
        let text = fs::read_to_string(root.join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        for (line, path) in named_paths(&text, &top) {
            if NOT_OURS.iter().any(|(span, _)| *span == path) {
                not_ours_seen.insert(path);
            } else if !exists(&path, &existing, &top) {
                missing.push(format!("  {doc}:{line}: `{path}`"));
            }
        }
    }
    for (span, why) in NOT_OURS {
        assert!(
            not_ours_seen.contains(*span),
            "NOT_OURS lists `{span}` ({why}), which no document names any more: remove it"
        );
    }
    assert!(
        missing.is_empty(),
        "the README and docs name paths that do not exist in the repository (a file moved or \
         was renamed: name it where it is now; {RULES_DOC} lists this check):\n{}",
        missing.join("\n")
    );
}

/// `README.md`, `BENCHMARKS.md` and every Markdown file under `docs/`,
/// relative to the root.
fn documents(root: &Path, all: &[PathBuf]) -> Vec<String> {
    let mut docs = vec!["README.md".to_string(), "BENCHMARKS.md".to_string()];
    docs.extend(
        all.iter()
            .map(|p| relative(root, p))
            .filter(|p| p.starts_with("docs/") && p.ends_with(".md")),
    );
    docs
}

/// A span from a top-level entry is read from the root; a short one is the
/// tail of some path.
fn exists(span: &str, existing: &BTreeSet<String>, top: &BTreeSet<&str>) -> bool {
    let path = span.trim_end_matches('/');
    let first = path.split('/').next().unwrap_or_default();
    if existing.contains(path) {
        return true;
    }
    // `tests/deploy/` inside `tests/` reads as the crate's own folder: only
    // a span whose first part is not also a folder deeper down is strict.
    let nested_name = existing
        .iter()
        .any(|e| e.contains('/') && e.ends_with(&format!("/{first}")));
    (!top.contains(first) || nested_name)
        && existing.iter().any(|e| e.ends_with(&format!("/{path}")))
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
    // `.proto`: an extension named, not a file.
    let extension_only = bare.starts_with('.') && !bare.contains('/');
    let plain = !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
        && !bare.starts_with('/')
        && !extension_only;
    let first = bare.split('/').next().unwrap_or_default();
    let pathlike = (bare.contains('/') && top.contains(first))
        || [".rs", ".md", ".toml", ".yaml", ".proto"]
            .iter()
            .any(|ext| bare.ends_with(ext));
    plain && pathlike && !span.contains("://")
}

#[test]
fn what_looks_like_a_path() {
    let text = "See `scheduler/src/cycle/`, `cycle/drive.rs`, `Cargo.toml`, `docs/x.md`,\n\
                not `crate::x`, `Result<_, String>`, `tests/<name>/main.rs`, `a b/c`,\n\
                `nvidia.com/gpu`, `apps/v1`, `https://x.io/a.md`, `/etc/passwd.yaml`, `.proto`.\n\
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

#[test]
fn a_path_from_the_root_must_be_there_and_a_short_one_anywhere() {
    let existing: BTreeSet<String> = [
        "scheduler",
        "scheduler/src",
        "scheduler/src/cycle",
        "scheduler/src/cycle/drive.rs",
        "tests",
        "tests/tests",
        "tests/tests/deploy",
    ]
    .map(String::from)
    .into();
    let top = BTreeSet::from(["scheduler", "tests"]);
    let found = |p: &str| exists(p, &existing, &top);
    assert!(found("scheduler/src/cycle/"));
    assert!(found("cycle/drive.rs"));
    assert!(found("drive.rs"));
    // From a top-level entry, a tail match is not enough.
    assert!(!found("scheduler/drive.rs"));
    assert!(!found("scheduler/src/binding.rs"));
    assert!(!found("cycle/queue.rs"));
    // `tests/` is also a folder inside `tests/`: `tests/deploy/` is short.
    assert!(found("tests/deploy/"));
}
