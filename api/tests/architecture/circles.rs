//! No import circles between files: in each crate's module tree, the files
//! that use one another through `crate::`, `super::`, `self::` and module
//! paths (the graph of `graph.rs`) form no strongly connected component of
//! more than one file. A child module is part of its parent, so a use of an
//! ancestor's item does not count; a parent's use of its child does.

use crate::ratchet::{Rule, ratchet};
use crate::sccs;
use crate::workspace::{CrateGraph, Finding, workspace};
use std::collections::BTreeSet;

/// Today's circles, (crate's `src/`, its files), each to be broken.
const ALLOWLIST: &[(&str, &str)] = &[];

const RULE: Rule = Rule {
    statement: "no import circle between the files of a crate (a use of an ancestor module \
                does not count)",
    remedy: "Break each: move what both sides need below both, or pass it in. A circle that \
             only shrank (its files part of an allowlisted one's) replaces that entry.",
    allowlist_in: "api/tests/architecture/circles.rs",
};

#[test]
fn no_import_circles() {
    let workspace = workspace();
    let mut seen = BTreeSet::new();
    let findings: Vec<Finding> = workspace
        .graphs
        .iter()
        .flat_map(circles_of)
        .filter(|f| seen.insert((f.file.clone(), f.item.clone())))
        .collect();
    ratchet(&RULE, &findings, ALLOWLIST);
}

/// Each circle as a finding: its crate's `src/`, its files, and its edges
/// (`a.rs -> b.rs (names)`).
pub fn circles_of(graph: &CrateGraph) -> Vec<Finding> {
    let src = format!("{}/src/", graph.crate_dir);
    let short = |f: usize| {
        let file = &graph.files[f];
        file.strip_prefix(&src).unwrap_or(file).to_string()
    };
    sccs::circles(graph.files.len(), &graph.edges)
        .into_iter()
        .map(|circle| {
            let members: BTreeSet<usize> = circle.iter().copied().collect();
            let edges: Vec<String> = graph
                .edges
                .iter()
                .filter(|((from, to), _)| members.contains(from) && members.contains(to))
                .map(|((from, to), names)| {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    format!("{} -> {} ({})", short(*from), short(*to), names.join(", "))
                })
                .collect();
            let mut files: Vec<String> = circle.iter().map(|&f| short(f)).collect();
            files.sort();
            Finding {
                file: src.trim_end_matches('/').to_string(),
                item: files.join(", "),
                detail: format!("\n      {}", edges.join("\n      ")),
            }
        })
        .collect()
}
