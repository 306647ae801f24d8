//! No function of non-test code over 120 lines, counted from its `fn` line
//! to its closing brace (closures count inside their function): free
//! functions, methods and trait default methods alike. Test code is left
//! out: `#[cfg(test)]` modules and `#[test]` functions, the files of
//! `tests/`, `benches/` and `examples/` folders and the fuzzer (`fuzz/`);
//! binaries count. The testenv crate's `tests/src/**` is not test code
//! (only its `tests/tests/**` is): its control plane, demo and benchmark
//! drivers are checked.

use crate::ratchet::{Rule, ratchet};
use crate::source::is_test;
use crate::workspace::{Finding, workspace};
use syn::visit::{self, Visit};

const MAX_LINES: usize = 120;

/// Today's functions over the limit, (file, function), each to be split.
const ALLOWLIST: &[(&str, &str)] = &[];

const RULE: Rule = Rule {
    statement: "no function in non-test code over 120 lines, from its `fn` line to its \
                closing brace",
    remedy: "Split each along a seam: name its steps as functions of their own.",
    allowlist_in: "api/tests/architecture/function_lengths.rs",
};

#[test]
fn no_function_is_over_120_lines() {
    let workspace = workspace();
    assert!(
        workspace.library_files > 200,
        "read only {} library files",
        workspace.library_files
    );
    ratchet(&RULE, &workspace.long_fns, ALLOWLIST);
}

/// The functions of `ast` over the limit, named `Type::method`,
/// `Trait::method` or `outer::inner`.
pub fn long_fns(file: &str, ast: &syn::File) -> Vec<Finding> {
    let mut lengths = Lengths {
        file,
        names: Vec::new(),
        out: Vec::new(),
    };
    if !is_test(&ast.attrs) {
        lengths.visit_file(ast);
    }
    lengths.out
}

struct Lengths<'a> {
    file: &'a str,
    names: Vec<String>,
    out: Vec<Finding>,
}

impl Lengths<'_> {
    fn function(&mut self, attrs: &[syn::Attribute], sig: &syn::Signature, body: &syn::Block) {
        if is_test(attrs) {
            return;
        }
        let first = sig.fn_token.span.start().line;
        let last = body.brace_token.span.close().end().line;
        let lines = last + 1 - first;
        self.names.push(sig.ident.to_string());
        if lines > MAX_LINES {
            self.out.push(Finding {
                file: self.file.to_string(),
                item: self.names.join("::"),
                detail: format!("lines {first}-{last}, {lines} lines (at most {MAX_LINES})"),
            });
        }
        self.visit_block(body);
        self.names.pop();
    }

    fn scope(&mut self, attrs: &[syn::Attribute], name: String, walk: impl FnOnce(&mut Self)) {
        if is_test(attrs) {
            return;
        }
        self.names.push(name);
        walk(self);
        self.names.pop();
    }
}

impl<'ast> Visit<'ast> for Lengths<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.attrs, &f.sig, &f.block);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.function(&f.attrs, &f.sig, &f.block);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(body) = &f.default {
            self.function(&f.attrs, &f.sig, body);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let name = type_name(&i.self_ty);
        self.scope(&i.attrs, name, |s| visit::visit_item_impl(s, i));
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.scope(&t.attrs, t.ident.to_string(), |s| {
            visit::visit_item_trait(s, t)
        });
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.scope(&m.attrs, m.ident.to_string(), |s| {
            visit::visit_item_mod(s, m)
        });
    }
}

/// `Snapshot` for `impl Snapshot`, `impl<'a> Foo<'a>`, `impl Trait for Foo`.
pub fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "<impl>".to_string(),
    }
}

#[test]
fn what_counts_as_a_long_function() {
    let body = |n: usize| "    let _ = 1;\n".repeat(n - 2);
    // 121 lines from `fn` to `}` each, but the test ones are not counted.
    let source = format!(
        "/// doc\n#[inline]\nfn long() {{\n{}}}\nfn short() {{\n{}}}\n\
         impl Thing {{ fn method(&self) {{\n{}}} }}\n\
         trait Walk {{ fn walk(&self) {{\n{}}} fn required(&self); }}\n\
         fn outer() {{ let f = || {{ fn inner() {{\n{}}} }}; }}\n\
         #[cfg(test)]\nmod tests {{ fn helper() {{\n{}}} }}\n\
         #[test]\nfn a_test() {{\n{}}}\n",
        body(121),
        body(120),
        body(121),
        body(121),
        body(121),
        body(121),
        body(121),
    );
    let ast = syn::parse_file(&source).expect("parses");
    let found: Vec<String> = long_fns("x.rs", &ast)
        .into_iter()
        .map(|f| format!("{}: {}", f.item, f.detail))
        .collect();
    assert_eq!(
        found,
        [
            "long: lines 3-123, 121 lines (at most 120)",
            "Thing::method: lines 244-364, 121 lines (at most 120)",
            "Walk::walk: lines 365-485, 121 lines (at most 120)",
            // A closure counts inside its function, and so does a nested
            // function, which also counts on its own.
            "outer: lines 486-606, 121 lines (at most 120)",
            "outer::inner: lines 486-606, 121 lines (at most 120)",
        ]
    );
}
