//! The repository as the checks read it: its root, the walk over its files
//! (build outputs and dot-folders left out), the workspace's crates and the
//! roots of their module trees, and what counts as test code.

use std::fs;
use std::path::{Path, PathBuf};
use syn::punctuated::Punctuated;
use syn::{Attribute, Meta, Token};

/// Where the rules are written down; every failure message cites it.
pub const RULES_DOC: &str = "docs/architecture.md";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("api/ sits in the repository root")
        .to_path_buf()
}

/// `path` relative to `root`, with `/` between components whatever the host.
pub fn relative(root: &Path, path: &Path) -> String {
    let shown = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<_> = shown
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// Every file and folder under `dir` (folders first, each before what it
/// holds), build outputs and VCS metadata left out: `target*` covers a
/// CARGO_TARGET_DIR set inside the tree.
pub fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if !(name.starts_with("target") || name.starts_with('.')) {
                out.push(path.clone());
                walk(&path, out);
            }
        } else {
            out.push(path);
        }
    }
}

/// The workspace's members, as the root `Cargo.toml` lists them.
pub fn workspace_members(root: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let start = manifest
        .find("members")
        .and_then(|at| manifest[at..].find('[').map(|open| at + open + 1))
        .expect("[workspace] members = [...] in the root Cargo.toml");
    let end = start
        + manifest[start..]
            .find(']')
            .expect("the members list closes");
    manifest[start..end]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Whether a crate root builds the library or a binary (where `anyhow` is
/// the rule and `String` errors are left alone).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RootKind {
    Lib,
    Bin,
}

/// One root of a module tree: `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`
/// or `src/bin/*/main.rs`, as cargo finds them.
pub struct CrateRoot {
    pub crate_dir: String,
    pub file: PathBuf,
    pub kind: RootKind,
}

pub fn crate_roots(root: &Path) -> Vec<CrateRoot> {
    let mut roots = Vec::new();
    for member in workspace_members(root) {
        let src = root.join(&member).join("src");
        let mut push = |file: PathBuf, kind| {
            if file.is_file() {
                roots.push(CrateRoot {
                    crate_dir: member.clone(),
                    file,
                    kind,
                });
            }
        };
        push(src.join("lib.rs"), RootKind::Lib);
        push(src.join("main.rs"), RootKind::Bin);
        let Ok(bins) = fs::read_dir(src.join("bin")) else {
            continue;
        };
        let mut bins: Vec<PathBuf> = bins.map(|e| e.expect("a bin entry").path()).collect();
        bins.sort();
        for bin in bins {
            if bin.is_dir() {
                push(bin.join("main.rs"), RootKind::Bin);
            } else if bin.extension().is_some_and(|e| e == "rs") {
                push(bin, RootKind::Bin);
            }
        }
    }
    roots
}

/// Whether these attributes make an item test code: `#[test]`, or a `cfg`
/// that holds only under test (`cfg(test)`, `cfg(all(test, ...))`).
pub fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        path.is_ident("test")
            || (path.is_ident("cfg") && attr.parse_args::<Meta>().is_ok_and(|m| needs_test(&m)))
    })
}

fn needs_test(meta: &Meta) -> bool {
    match meta {
        Meta::Path(p) => p.is_ident("test"),
        Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            .is_ok_and(|all| all.iter().any(needs_test)),
        _ => false,
    }
}

/// Whether a file of a crate's module tree is test code by where it lives:
/// in a `tests/`, `benches/` or `examples/` folder, or in the fuzzer
/// (`fuzz/`). The testenv crate lives in the top-level `tests/` folder but
/// its `tests/src/**` is library and binary code (the real local control
/// plane, the demo, the benchmark drivers) and is checked; its integration
/// tests (`tests/tests/**`) are test code like any crate's.
pub fn is_test_path(relative: &str) -> bool {
    let within = relative.strip_prefix(TESTENV_SRC).unwrap_or(relative);
    relative.starts_with("fuzz/")
        || within
            .split('/')
            .any(|c| matches!(c, "tests" | "benches" | "examples"))
}

/// The source folder of the testenv crate (the workspace member `tests`).
const TESTENV_SRC: &str = "tests/src/";
