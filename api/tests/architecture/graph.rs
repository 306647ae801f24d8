//! One crate's file-level import graph: the module tree is read from a root
//! file (`mod` items, `#[path]` attributes, `foo.rs` + `foo/` and `mod.rs`
//! layouts; `#[cfg(test)]` left out), every path that starts with `crate::`,
//! `super::`, `self::`, a child module or an import of one (in `use` trees,
//! types, expressions, patterns and macro arguments) is resolved to the file
//! that defines what it names (re-exports and imports followed a bounded
//! number of times, else the deepest module file reached), and an edge runs
//! from the file that uses to that file. An edge to a file of one of the
//! user's own ancestor modules is left out: a child module is part of its
//! parent. Circles are the strongly connected components (`sccs.rs`).

use crate::source::is_test;
use proc_macro2::{Spacing, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::ext::IdentExt;
use syn::visit::{self, Visit};
use syn::{ImplItem, Item, TraitItem, UseTree};

/// How many imports a resolution follows before it settles for the deepest
/// module reached (re-export chains are short; this only stops loops).
const MAX_HOPS: u8 = 8;

/// Reads a file of the tree; `None` when there is none.
pub type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

type Segments = Vec<String>;

#[derive(Default)]
struct Module {
    path: Segments,
    file: usize,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Items defined here: types, functions, traits, constants, macros.
    defines: BTreeSet<String>,
    /// Names brought in by `use`, each to its path as written here.
    imports: BTreeMap<String, Segments>,
    globs: Vec<Segments>,
    /// Every path written here that may name something of this crate.
    refs: Vec<Segments>,
}

/// A crate's module tree and what each module refers to.
pub struct Tree {
    pub files: Vec<PathBuf>,
    /// Each file's own module (not its inline ones).
    file_module: Vec<usize>,
    modules: Vec<Module>,
}

/// From a file that uses to the file that defines, with the names used.
pub type Edges = BTreeMap<(usize, usize), BTreeSet<String>>;

impl Tree {
    /// Reads the tree from `root` (a `lib.rs`, `main.rs` or bin), handing
    /// back each file's syntax tree beside it (index = file index).
    pub fn load(root: &Path, read: Read) -> (Tree, Vec<syn::File>) {
        let mut builder = Builder {
            read,
            tree: Tree {
                files: Vec::new(),
                file_module: Vec::new(),
                modules: Vec::new(),
            },
            asts: Vec::new(),
        };
        let text = read(root).unwrap_or_else(|| panic!("{}: no such file", root.display()));
        builder.add_file(root.to_path_buf(), text, Vec::new(), None, true);
        let asts = builder
            .asts
            .into_iter()
            .map(|a| a.expect("parsed"))
            .collect();
        (builder.tree, asts)
    }

    /// The module path (`["snapshot", "build"]`) of each file.
    pub fn module_path(&self, file: usize) -> &[String] {
        &self.modules[self.file_module[file]].path
    }

    pub fn edges(&self) -> Edges {
        let mut edges = Edges::new();
        for (m, module) in self.modules.iter().enumerate() {
            for written in &module.refs {
                let Some(absolute) = self.absolute(m, written, 0) else {
                    continue;
                };
                let (target, name) = self.target(&absolute, 0).unwrap_or_else(|d| d);
                let (from, to) = (module.file, self.modules[target].file);
                if from == to || self.is_ancestor(to, from) {
                    continue;
                }
                edges.entry((from, to)).or_default().insert(name);
            }
        }
        edges
    }

    /// Whether file `a`'s module is a proper ancestor of file `b`'s.
    fn is_ancestor(&self, a: usize, b: usize) -> bool {
        let (a, b) = (self.module_path(a), self.module_path(b));
        a.len() < b.len() && b.starts_with(a)
    }

    /// The path from the crate root that `written`, written in module `m`,
    /// stands for; `None` when it leaves the crate.
    fn absolute(&self, m: usize, written: &[String], hops: u8) -> Option<Segments> {
        let first = written.first()?;
        let module = &self.modules[m];
        let mut start = match first.as_str() {
            "crate" => return Some(written[1..].to_vec()),
            "self" | "super" => m,
            name if module.children.contains_key(name) => {
                return Some([&module.path[..], written].concat());
            }
            name => {
                let import = module.imports.get(name)?;
                if hops >= MAX_HOPS || import[..] == written[..1] {
                    return None;
                }
                let base = self.absolute(m, import, hops + 1)?;
                return Some([&base[..], &written[1..]].concat());
            }
        };
        let mut rest = written;
        while let Some(seg) = rest.first() {
            match seg.as_str() {
                "self" => {}
                "super" => start = self.modules[start].parent?,
                _ => break,
            }
            rest = &rest[1..];
        }
        Some([&self.modules[start].path[..], rest].concat())
    }

    /// The module whose file defines what `absolute` names, with the name:
    /// `Ok` when found (through imports and globs if need be), `Err` with
    /// the deepest module reached when not.
    fn target(&self, absolute: &[String], hops: u8) -> Result<(usize, String), (usize, String)> {
        let mut m = 0;
        for (i, seg) in absolute.iter().enumerate() {
            let module = &self.modules[m];
            if let Some(&child) = module.children.get(seg) {
                m = child;
                continue;
            }
            if module.defines.contains(seg) {
                return Ok((m, seg.clone()));
            }
            if hops >= MAX_HOPS {
                return Err((m, seg.clone()));
            }
            // An import names what it brings in for certain: follow it
            // wherever it leads (inside the crate); a glob only may.
            let imported = module.imports.get(seg).and_then(|p| self.absolute(m, p, 0));
            if let Some(base) = imported {
                return self.target(&[&base[..], &absolute[i + 1..]].concat(), hops + 1);
            }
            for glob in &module.globs {
                let Some(base) = self.absolute(m, glob, 0) else {
                    continue;
                };
                if let Ok(found) = self.target(&[&base[..], &absolute[i..]].concat(), hops + 1) {
                    return Ok(found);
                }
            }
            return Err((m, seg.clone()));
        }
        let name = absolute.last().cloned().unwrap_or_else(|| "crate".into());
        Ok((m, name))
    }
}

struct Builder<'a> {
    read: Read<'a>,
    tree: Tree,
    asts: Vec<Option<syn::File>>,
}

impl Builder<'_> {
    /// Adds a file as the module `path`; `mod_rs` when its children sit
    /// beside it (`lib.rs`, `main.rs`, `mod.rs`, a `#[path]` file).
    fn add_file(
        &mut self,
        file: PathBuf,
        text: String,
        path: Segments,
        parent: Option<usize>,
        mod_rs: bool,
    ) -> usize {
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        let index = self.tree.files.len();
        let m = self.new_module(path, index, parent);
        self.tree.file_module.push(m);
        self.asts.push(None);
        let beside = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let children = if mod_rs {
            beside.clone()
        } else {
            let stem = file.file_stem().unwrap_or_default();
            beside.join(stem)
        };
        self.tree.files.push(file);
        if !is_test(&ast.attrs) {
            self.items(m, &ast.items, &children, &beside);
        }
        self.asts[index] = Some(ast);
        m
    }

    fn new_module(&mut self, path: Segments, file: usize, parent: Option<usize>) -> usize {
        let m = self.tree.modules.len();
        if let (Some(p), Some(name)) = (parent, path.last()) {
            self.tree.modules[p].children.insert(name.clone(), m);
        }
        self.tree.modules.push(Module {
            path,
            file,
            parent,
            ..Module::default()
        });
        m
    }

    /// Reads module `m`'s items; `children` is where its `mod x;` files
    /// sit, `path_base` what its `#[path]`s are relative to.
    fn items(&mut self, m: usize, items: &[Item], children: &Path, path_base: &Path) {
        for item in items {
            if is_test(item_attrs(item)) {
                continue;
            }
            match item {
                Item::Mod(decl) => self.child(m, decl, children, path_base),
                Item::Use(used) if used.leading_colon.is_none() => self.use_tree(m, &used.tree),
                _ => {
                    if let Some(name) = defined_name(item) {
                        self.tree.modules[m].defines.insert(name);
                    }
                    let mut refs = Refs(&mut self.tree.modules[m].refs);
                    refs.visit_item(item);
                }
            }
        }
    }

    fn child(&mut self, m: usize, decl: &syn::ItemMod, children: &Path, path_base: &Path) {
        let name = decl.ident.unraw().to_string();
        let path = [&self.tree.modules[m].path[..], std::slice::from_ref(&name)].concat();
        if let Some((_, items)) = &decl.content {
            let file = self.tree.modules[m].file;
            let child = self.new_module(path, file, Some(m));
            let dir = children.join(&name);
            self.items(child, items, &dir, &dir);
            return;
        }
        let explicit = path_attr(&decl.attrs).map(|p| path_base.join(p));
        let candidates = match &explicit {
            Some(file) => vec![file.clone()],
            None => vec![
                children.join(format!("{name}.rs")),
                children.join(&name).join("mod.rs"),
            ],
        };
        let (file, text) = candidates
            .iter()
            .find_map(|c| (self.read)(c).map(|text| (c.clone(), text)))
            .unwrap_or_else(|| panic!("mod {name}: none of {candidates:?} exists"));
        let mod_rs = explicit.is_some() || file.ends_with("mod.rs");
        self.add_file(file, text, path, Some(m), mod_rs);
    }

    fn use_tree(&mut self, m: usize, tree: &UseTree) {
        let module = &mut self.tree.modules[m];
        let mut leaves = Vec::new();
        use_leaves(tree, Vec::new(), &mut leaves);
        for leaf in leaves {
            match leaf.alias {
                Some(alias) if alias == "*" => module.globs.push(leaf.path.clone()),
                Some(alias) if alias != "_" => {
                    module.imports.insert(alias, leaf.path.clone());
                }
                _ => {}
            }
            module.refs.push(leaf.path);
        }
    }
}

/// One name a `use` brings in: `alias` is the name it goes by (`*` for a
/// glob, `_` for none), `path` what it names, as written.
struct UseLeaf {
    alias: Option<String>,
    path: Segments,
}

fn use_leaves(tree: &UseTree, prefix: Segments, out: &mut Vec<UseLeaf>) {
    let mut leaf = |ident: &syn::Ident, alias: &syn::Ident| {
        let mut path = prefix.clone();
        if ident != "self" {
            path.push(ident.unraw().to_string());
        }
        let alias = if alias == "self" {
            path.last().cloned()
        } else {
            Some(alias.unraw().to_string())
        };
        out.push(UseLeaf { alias, path });
    };
    match tree {
        UseTree::Path(p) => {
            let mut next = prefix.clone();
            next.push(p.ident.unraw().to_string());
            use_leaves(&p.tree, next, out);
        }
        UseTree::Name(n) => leaf(&n.ident, &n.ident),
        UseTree::Rename(r) => leaf(&r.ident, &r.rename),
        UseTree::Glob(_) => out.push(UseLeaf {
            alias: Some("*".into()),
            path: prefix,
        }),
        UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix.clone(), out);
            }
        }
    }
}

/// Collects the paths an item writes that may name something of its crate:
/// all of two or more segments, and `crate`/`super`/`self` ones; inside
/// macro calls, `a::b` runs of tokens. Test items are skipped.
struct Refs<'a>(&'a mut Vec<Segments>);

impl<'ast> Visit<'ast> for Refs<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if !is_test(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        let attrs = match item {
            ImplItem::Fn(f) => &f.attrs,
            ImplItem::Const(c) => &c.attrs,
            ImplItem::Type(t) => &t.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast TraitItem) {
        if let TraitItem::Fn(f) = item
            && is_test(&f.attrs)
        {
            return;
        }
        visit::visit_trait_item(self, item);
    }

    /// A `use` in a function body: what it names is used.
    fn visit_item_use(&mut self, used: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        if used.leading_colon.is_none() {
            use_leaves(&used.tree, Vec::new(), &mut leaves);
        }
        self.0.extend(leaves.into_iter().map(|leaf| leaf.path));
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Segments = path
            .segments
            .iter()
            .map(|s| s.ident.unraw().to_string())
            .collect();
        let rooted = matches!(
            segments.first().map(String::as_str),
            Some("crate" | "super" | "self")
        );
        if path.leading_colon.is_none() && (segments.len() > 1 || rooted) {
            self.0.push(segments);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        scan_tokens(mac.tokens.clone(), self.0);
        visit::visit_macro(self, mac);
    }
}

/// The `a::b::c` runs in a macro's tokens (a macro body is not parsed).
fn scan_tokens(tokens: TokenStream, out: &mut Vec<Segments>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) => {
                scan_tokens(g.stream(), out);
                i += 1;
            }
            TokenTree::Ident(first) => {
                let mut segments = vec![first.unraw().to_string()];
                let mut j = i + 1;
                while let [
                    TokenTree::Punct(a),
                    TokenTree::Punct(b),
                    TokenTree::Ident(next),
                    ..,
                ] = &tokens[j.min(tokens.len())..]
                {
                    if !(a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
                    {
                        break;
                    }
                    segments.push(next.unraw().to_string());
                    j += 3;
                }
                if segments.len() > 1 {
                    out.push(segments);
                }
                i = j;
            }
            _ => i += 1,
        }
    }
}

fn defined_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.unraw().to_string())
}

pub fn item_attrs(item: &Item) -> &[syn::Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}
