//! The import graph on small literal source trees: what counts as an edge,
//! where it points, and which circles it finds.

use crate::graph::Tree;
use crate::sccs::circles;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The edges (`from -> to: names`) and circles of the tree rooted at
/// `src/lib.rs` among `files`.
fn graph(files: &[(&str, &str)]) -> (Vec<String>, Vec<Vec<String>>) {
    let sources: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(path, text)| (PathBuf::from(path), text.to_string()))
        .collect();
    let read = |p: &Path| sources.get(p).cloned();
    let (tree, _) = Tree::load(Path::new("src/lib.rs"), &read);
    let name = |f: usize| tree.files[f].display().to_string();
    let edges = tree.edges();
    let mut shown: Vec<String> = edges
        .iter()
        .map(|((from, to), names)| {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            format!("{} -> {}: {}", name(*from), name(*to), names.join(" "))
        })
        .collect();
    shown.sort();
    let found = circles(tree.files.len(), &edges)
        .into_iter()
        .map(|c| c.into_iter().map(name).collect())
        .collect();
    (shown, found)
}

#[test]
fn a_circle_between_siblings_is_found() {
    let (edges, found) = graph(&[
        ("src/lib.rs", "mod a; mod b;"),
        ("src/a.rs", "use crate::b::B; pub struct A;"),
        // An inline path in a signature, and one in a macro's arguments.
        (
            "src/b.rs",
            "pub struct B; fn f() -> crate::a::A { println!(\"{}\", super::a::N); todo!() }",
        ),
    ]);
    assert_eq!(
        edges,
        ["src/a.rs -> src/b.rs: B", "src/b.rs -> src/a.rs: A N"]
    );
    assert_eq!(found, [["src/a.rs", "src/b.rs"]]);
}

#[test]
fn a_child_using_its_parent_is_no_circle() {
    let (edges, found) = graph(&[
        ("src/lib.rs", "mod cycle;"),
        (
            "src/cycle/mod.rs",
            "mod binds; pub struct Cycle; fn run() { binds::start() }",
        ),
        (
            "src/cycle/binds.rs",
            "impl super::Cycle { fn bind(&self) { crate::cycle::Cycle::x() } } pub fn start() {}",
        ),
    ]);
    // The parent's use of its child counts; the child's of its parent not.
    assert_eq!(edges, ["src/cycle/mod.rs -> src/cycle/binds.rs: start"]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn a_reexport_is_followed_to_the_file_that_defines() {
    let (edges, found) = graph(&[
        ("src/lib.rs", "mod gpuset; mod snapshot;"),
        (
            "src/gpuset/mod.rs",
            "mod shape; mod heuristic; pub use shape::{NodeShape, generated}; pub(crate) use heuristic::*;",
        ),
        (
            "src/gpuset/shape.rs",
            "use crate::snapshot::Node; pub struct NodeShape;",
        ),
        ("src/gpuset/heuristic.rs", "pub fn ring_level() {}"),
        (
            "src/snapshot.rs",
            // `generated` is made by a macro: not found where the re-export
            // leads, it is attributed to the file reached there.
            "use crate::gpuset::{NodeShape, ring_level}; pub struct Node; \
             fn f() { crate::gpuset::generated() }",
        ),
    ]);
    assert_eq!(
        edges,
        [
            "src/gpuset/mod.rs -> src/gpuset/heuristic.rs: heuristic",
            "src/gpuset/mod.rs -> src/gpuset/shape.rs: NodeShape generated",
            "src/gpuset/shape.rs -> src/snapshot.rs: Node",
            "src/snapshot.rs -> src/gpuset/heuristic.rs: ring_level",
            "src/snapshot.rs -> src/gpuset/shape.rs: NodeShape generated",
        ]
    );
    assert_eq!(found, [["src/gpuset/shape.rs", "src/snapshot.rs"]]);
}

#[test]
fn test_code_and_outside_paths_are_left_out() {
    let (edges, found) = graph(&[
        (
            "src/lib.rs",
            "mod a; mod b; #[cfg(test)] mod tests; #[path = \"c_impl.rs\"] mod c;",
        ),
        (
            "src/a.rs",
            "use std::fmt; use b::Missing; pub struct A; \
             #[cfg(test)] fn t() -> crate::b::B { todo!() } \
             impl A { #[test] fn u() { crate::b::f() } fn v() -> fmt::Result { todo!() } }",
        ),
        ("src/b.rs", "use crate::a::A; pub struct B; pub fn f() {}"),
        // Read through `#[path]`; names nothing in the crate.
        ("src/c_impl.rs", "use crate::nowhere::Thing;"),
    ]);
    // `src/tests.rs` does not exist and is not read; `crate::nowhere` is
    // attributed to the deepest module reached (the root, an ancestor).
    assert_eq!(edges, ["src/b.rs -> src/a.rs: A"]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn an_unresolved_name_points_to_the_deepest_module_reached() {
    let (edges, found) = graph(&[
        ("src/lib.rs", "mod a; mod b;"),
        (
            "src/a.rs",
            "mod inner; fn f() { crate::b::made_by_macro!(); }",
        ),
        ("src/a/inner.rs", "pub fn g() { crate::b::Z::new(); }"),
        ("src/b.rs", "fn h() { crate::a::inner::g() }"),
    ]);
    assert_eq!(
        edges,
        [
            "src/a.rs -> src/b.rs: made_by_macro",
            "src/a/inner.rs -> src/b.rs: Z",
            "src/b.rs -> src/a/inner.rs: g",
        ]
    );
    assert_eq!(found, [["src/a/inner.rs", "src/b.rs"]]);
}
