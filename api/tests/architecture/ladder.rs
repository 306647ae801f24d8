//! The ladders: the scheduler core's top-level modules, and the modules of
//! the scheduler's `cycle/`, each stand on a level, and a module uses only
//! modules of its own level or below (over the import graph of `graph.rs`;
//! a use of an ancestor module, the crate root or `cycle/mod.rs`, is the
//! child's own). Every module has its place in the table: a new module
//! fails until it is added, a removed one until it is taken out.

use crate::ratchet::{Rule, ratchet};
use crate::source::RULES_DOC;
use crate::workspace::{CrateGraph, Finding, workspace};
use std::collections::BTreeSet;

/// A ladder: the modules under `under` in the crate rooted at `root`, by
/// level, bottom first.
struct Ladder {
    root: &'static str,
    under: &'static [&'static str],
    levels: &'static [Level],
}

struct Level {
    name: &'static str,
    modules: &'static [&'static str],
}

const CORE: Ladder = Ladder {
    root: "scheduler-core/src/lib.rs",
    under: &[],
    levels: &[
        Level {
            name: "configuration and what a pod asks",
            modules: &["config", "pod", "pod_constraints", "resources", "selector"],
        },
        // Every node of the snapshot holds the shape of its topology, so the
        // GPU-set choice on one shape sits below the snapshot.
        Level {
            name: "one node's topology and the GPU set on it",
            modules: &["gpuset"],
        },
        Level {
            name: "the cluster as one decision sees it, and what nodes report",
            modules: &["snapshot", "reported"],
        },
        Level {
            name: "the choosers",
            modules: &[
                "filter",
                "score",
                "fragmentation",
                "dra",
                "gang",
                "preempt",
                "inter_pod",
                "spread",
                "volumes",
            ],
        },
        Level {
            name: "whole decisions and their explanations",
            modules: &[
                "schedule",
                "node_fit",
                "gang_schedule",
                "preempt_schedule",
                "explain",
                "dra_schedule",
            ],
        },
    ],
};

const CYCLE: Ladder = Ladder {
    root: "scheduler/src/lib.rs",
    under: &["cycle"],
    levels: &[
        Level {
            name: "the state's parts, the outcome and the write interface",
            modules: &[
                "gang",
                "domains",
                "slice_recovery",
                "accounting",
                "clocks",
                "gang_status",
                "node_trust",
                "reservations",
                "nominations",
                "writes",
                "outcome",
                "queue",
                "preempt",
            ],
        },
        Level {
            name: "the state's owners",
            modules: &["holds", "written"],
        },
        Level {
            name: "one cycle's inputs",
            modules: &["prepare", "work"],
        },
        Level {
            name: "the pure decision steps",
            modules: &["steps"],
        },
        Level {
            name: "the driver, the only async part",
            modules: &["drive"],
        },
    ],
};

/// Today's uses of a higher level, (file, the file it uses), each to go.
const ALLOWLIST: &[(&str, &str)] = &[];

const RULE: Rule = Rule {
    statement: "a module of the core's ladder or the cycle's uses only modules of its own level \
                or below",
    remedy: "Move what the lower module needs down to its level (or below), or pass it in; \
             the levels are in api/tests/architecture/ladder.rs.",
    allowlist_in: "api/tests/architecture/ladder.rs",
};

#[test]
fn no_module_uses_a_higher_level() {
    let findings: Vec<Finding> = [CORE, CYCLE]
        .iter()
        .flat_map(|ladder| upward_uses(ladder, graph_of(ladder)))
        .collect();
    ratchet(&RULE, &findings, ALLOWLIST);
}

#[test]
fn the_ladders_place_every_module() {
    let mut wrong = Vec::new();
    for ladder in [CORE, CYCLE] {
        let graph = graph_of(&ladder);
        let modules: BTreeSet<&str> = (0..graph.files.len())
            .filter_map(|f| rung(&ladder, graph, f))
            .collect();
        let placed: BTreeSet<&str> = ladder
            .levels
            .iter()
            .flat_map(|l| l.modules.iter().copied())
            .collect();
        let count: usize = ladder.levels.iter().map(|l| l.modules.len()).sum();
        assert_eq!(
            count,
            placed.len(),
            "{}: a module is placed twice",
            ladder.root
        );
        let under = ladder.under.join("::");
        for m in modules.difference(&placed) {
            wrong.push(format!(
                "  {} `{under}::{m}`: add it to the ladder, on its level",
                ladder.root
            ));
        }
        for m in placed.difference(&modules) {
            wrong.push(format!(
                "  {} `{under}::{m}`: no such module; take it off the ladder",
                ladder.root
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "the ladders in api/tests/architecture/ladder.rs must place every module (the levels \
         are documented in {RULES_DOC}):\n{}",
        wrong.join("\n")
    );
}

fn graph_of(ladder: &Ladder) -> &'static CrateGraph {
    workspace()
        .graphs
        .iter()
        .find(|g| g.root == ladder.root)
        .unwrap_or_else(|| panic!("{}: no such crate root", ladder.root))
}

/// The ladder's module that file `f` belongs to, if any (`None` for the
/// ladder's parent module and files outside it).
fn rung<'g>(ladder: &Ladder, graph: &'g CrateGraph, f: usize) -> Option<&'g str> {
    let path = &graph.modules[f];
    let inside =
        path.len() > ladder.under.len() && path.iter().zip(ladder.under).all(|(a, b)| a == b);
    inside.then(|| path[ladder.under.len()].as_str())
}

fn level(ladder: &Ladder, module: &str) -> Option<usize> {
    ladder
        .levels
        .iter()
        .position(|l| l.modules.contains(&module))
}

fn upward_uses(ladder: &Ladder, graph: &CrateGraph) -> Vec<Finding> {
    let mut found = Vec::new();
    for (&(from, to), names) in &graph.edges {
        let (Some(a), Some(b)) = (rung(ladder, graph, from), rung(ladder, graph, to)) else {
            continue;
        };
        let (Some(la), Some(lb)) = (level(ladder, a), level(ladder, b)) else {
            continue;
        };
        if la < lb {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            found.push(Finding {
                file: graph.files[from].clone(),
                item: graph.files[to].clone(),
                detail: format!(
                    "`{a}` (level {la}, {}) uses `{b}` (level {lb}, {}): {}",
                    ladder.levels[la].name,
                    ladder.levels[lb].name,
                    names.join(", ")
                ),
            });
        }
    }
    found
}

/// The rule on a literal crate: `config` (level 0) using `snapshot` (level
/// 1) is found; `snapshot` using `config` is not.
#[test]
fn an_upward_use_is_found_and_a_downward_one_is_not() {
    use crate::graph::Tree;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    const TOY: Ladder = Ladder {
        root: "src/lib.rs",
        under: &[],
        levels: &[
            Level {
                name: "low",
                modules: &["config"],
            },
            Level {
                name: "high",
                modules: &["snapshot"],
            },
        ],
    };
    let sources: BTreeMap<PathBuf, String> = [
        ("src/lib.rs", "pub mod config; pub mod snapshot;"),
        (
            "src/config.rs",
            "use crate::snapshot::Snapshot; pub struct Tiers;",
        ),
        (
            "src/snapshot.rs",
            "use crate::config::Tiers; pub struct Snapshot;",
        ),
    ]
    .iter()
    .map(|(p, t)| (PathBuf::from(p), t.to_string()))
    .collect();
    let (tree, _) = Tree::load(Path::new("src/lib.rs"), &|p| sources.get(p).cloned());
    let graph = CrateGraph {
        crate_dir: String::new(),
        root: TOY.root.to_string(),
        files: tree.files.iter().map(|f| f.display().to_string()).collect(),
        modules: (0..tree.files.len())
            .map(|f| tree.module_path(f).to_vec())
            .collect(),
        edges: tree.edges(),
    };
    let found: Vec<(String, String)> = upward_uses(&TOY, &graph)
        .into_iter()
        .map(|f| (f.file, f.item))
        .collect();
    assert_eq!(
        found,
        [("src/config.rs".to_string(), "src/snapshot.rs".to_string())]
    );
}
