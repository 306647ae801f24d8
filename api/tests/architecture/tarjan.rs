//! Circles in a graph of files: its strongly connected components of more
//! than one file, by Tarjan's algorithm (recursive: a crate's files are a
//! few hundred at most).

use crate::graph::Edges;

/// The strongly connected components of more than one file (Tarjan), each
/// sorted, in order of their first file.
pub fn circles(files: usize, edges: &Edges) -> Vec<Vec<usize>> {
    let mut next = vec![Vec::new(); files];
    for &(from, to) in edges.keys() {
        next[from].push(to);
    }
    let mut tarjan = Tarjan {
        next: &next,
        index: vec![None; files],
        low: vec![0; files],
        on_stack: vec![false; files],
        stack: Vec::new(),
        counter: 0,
        components: Vec::new(),
    };
    for v in 0..files {
        if tarjan.index[v].is_none() {
            tarjan.visit(v);
        }
    }
    let mut components: Vec<Vec<usize>> = tarjan
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|mut c| {
            c.sort();
            c
        })
        .collect();
    components.sort();
    components
}

struct Tarjan<'a> {
    next: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    counter: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.counter);
        self.low[v] = self.counter;
        self.counter += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &self.next[v] {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}
