//! One copy of each label key, label value and resource name, shared by every
//! node: 5,000 nodes labelled `nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3`
//! hold the text once and compare it as a `u32`.

use std::collections::HashMap;
use std::sync::Arc;

/// An interned string: compare and hash as an integer, resolve through the
/// snapshot's [`Interner`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Sym(pub(crate) u32);

#[derive(Clone, Debug, Default)]
pub(crate) struct Interner {
    /// Both shared between copies of a snapshot and copied on the first
    /// new string: a cycle's copy interns little or nothing.
    map: Arc<HashMap<Arc<str>, Sym>>,
    strings: Arc<Vec<Arc<str>>>,
}

impl Interner {
    pub(crate) fn intern(&mut self, s: &str) -> Sym {
        if let Some(&sym) = self.map.get(s) {
            return sym;
        }
        let text: Arc<str> = Arc::from(s);
        let sym = Sym(self.strings.len() as u32);
        Arc::make_mut(&mut self.strings).push(Arc::clone(&text));
        Arc::make_mut(&mut self.map).insert(text, sym);
        sym
    }

    /// The symbol of `s` if any node or resource uses it: a string never
    /// interned is on no node, which is all a selector needs to know.
    pub(crate) fn get(&self, s: &str) -> Option<Sym> {
        self.map.get(s).copied()
    }

    pub(crate) fn resolve(&self, sym: Sym) -> &str {
        self.strings.get(sym.0 as usize).map_or("", |s| s)
    }

    pub(crate) fn shared(&self, sym: Sym) -> Arc<str> {
        self.strings
            .get(sym.0 as usize)
            .cloned()
            .unwrap_or_else(|| Arc::from(""))
    }

    pub(crate) fn len(&self) -> usize {
        self.strings.len()
    }
}
