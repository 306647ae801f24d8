//! Circles in a graph of files: its strongly connected components of more
//! than one file (petgraph's Tarjan).

use crate::graph::Edges;
use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;

/// The strongly connected components of more than one file, each sorted,
/// in order of their first file.
pub fn circles(files: usize, edges: &Edges) -> Vec<Vec<usize>> {
    let mut graph = DiGraph::<(), ()>::with_capacity(files, edges.len());
    let nodes: Vec<_> = (0..files).map(|_| graph.add_node(())).collect();
    for &(from, to) in edges.keys() {
        graph.add_edge(nodes[from], nodes[to], ());
    }
    let mut components: Vec<Vec<usize>> = tarjan_scc(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut files: Vec<usize> = c.into_iter().map(|n| n.index()).collect();
            files.sort_unstable();
            files
        })
        .collect();
    components.sort();
    components
}
