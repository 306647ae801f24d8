//! The workspace read once for every check (the tests share it): each crate
//! root's module tree and import graph, and, from each non-test file's
//! syntax tree, its long functions and `String` errors. Only plain data is
//! kept, so the tests' threads can share it.

use crate::graph::{Edges, Tree};
use crate::source::{RootKind, crate_roots, is_test_path, relative, repo_root};
use crate::{function_lengths, string_errors};
use std::collections::BTreeSet;
use std::fs;
use std::sync::OnceLock;

/// One crate root's files (relative to the repository) and their imports.
pub struct CrateGraph {
    pub crate_dir: String,
    pub root: String,
    pub files: Vec<String>,
    pub modules: Vec<Vec<String>>,
    pub edges: Edges,
}

/// A rule broken: where, by which item, and what the reader needs to know.
pub struct Finding {
    pub file: String,
    pub item: String,
    pub detail: String,
}

pub struct Workspace {
    pub graphs: Vec<CrateGraph>,
    pub long_fns: Vec<Finding>,
    pub string_errors: Vec<Finding>,
    /// The files whose functions and signatures were read.
    pub library_files: usize,
}

pub fn workspace() -> &'static Workspace {
    static WORKSPACE: OnceLock<Workspace> = OnceLock::new();
    WORKSPACE.get_or_init(read_workspace)
}

fn read_workspace() -> Workspace {
    let repo = repo_root();
    let mut workspace = Workspace {
        graphs: Vec::new(),
        long_fns: Vec::new(),
        string_errors: Vec::new(),
        library_files: 0,
    };
    let mut seen = BTreeSet::new();
    // Libraries first: a file a library and a binary both compile is
    // library code.
    let mut roots = crate_roots(&repo);
    roots.sort_by_key(|r| r.kind != RootKind::Lib);
    for root in roots {
        let (tree, asts) = Tree::load(&root.file, &|p| fs::read_to_string(p).ok());
        let files: Vec<String> = tree.files.iter().map(|f| relative(&repo, f)).collect();
        for (file, ast) in files.iter().zip(&asts) {
            if is_test_path(file) || !seen.insert(file.clone()) {
                continue;
            }
            workspace.library_files += 1;
            workspace
                .long_fns
                .extend(function_lengths::long_fns(file, ast));
            if root.kind == RootKind::Lib {
                workspace
                    .string_errors
                    .extend(string_errors::string_errors(file, ast));
            }
        }
        workspace.graphs.push(CrateGraph {
            crate_dir: root.crate_dir,
            root: relative(&repo, &root.file),
            modules: (0..files.len())
                .map(|f| tree.module_path(f).to_vec())
                .collect(),
            edges: tree.edges(),
            files,
        });
    }
    workspace
}
