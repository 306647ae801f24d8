//! Library errors are types (`thiserror` enums), never `Result<_, String>`:
//! not in a function's or trait method's signature, a struct or enum field,
//! a type alias, a constant's or static's type, in any spelling
//! (`std::result::Result<T, String>`, `Result<T, std::string::String>`,
//! nested in `Option<...>` or `Box<dyn Fn() -> ...>`). Function bodies are
//! not read (a local's type is the function's business), nor is test code
//! (as for function lengths: the testenv crate's `tests/src/**` is library
//! code, its `tests/tests/**` test code), nor binaries (`src/main.rs`,
//! `src/bin/**`), where `anyhow` is the rule.

use crate::function_lengths::type_name;
use crate::ratchet::{Rule, ratchet};
use crate::source::is_test;
use crate::workspace::{Finding, workspace};
use syn::visit::{self, Visit};

/// Today's `Result<_, String>`s, (file, item), each to become a typed error.
const ALLOWLIST: &[(&str, &str)] = &[];

const RULE: Rule = Rule {
    statement: "no `Result<_, String>` in a signature, field, type alias or trait method of \
                library code",
    remedy: "Give each a typed error: a `thiserror` enum that names what went wrong.",
    allowlist_in: "api/tests/architecture/string_errors.rs",
};

#[test]
fn no_string_errors_in_library_code() {
    ratchet(&RULE, &workspace().string_errors, ALLOWLIST);
}

/// Each `Result<_, String>` in `ast`'s item signatures, named by its item
/// (`parse`, `Parser::parse`, `Config`).
pub fn string_errors(file: &str, ast: &syn::File) -> Vec<Finding> {
    let mut errors = StringErrors {
        file,
        names: Vec::new(),
        out: Vec::new(),
    };
    if !is_test(&ast.attrs) {
        errors.visit_file(ast);
    }
    errors.out
}

struct StringErrors<'a> {
    file: &'a str,
    names: Vec<String>,
    out: Vec<Finding>,
}

impl StringErrors<'_> {
    fn scope(&mut self, attrs: &[syn::Attribute], name: String, walk: impl FnOnce(&mut Self)) {
        if is_test(attrs) {
            return;
        }
        self.names.push(name);
        walk(self);
        self.names.pop();
    }
}

impl<'ast> Visit<'ast> for StringErrors<'_> {
    // Bodies: only the items declared in them are read.
    fn visit_expr(&mut self, _: &'ast syn::Expr) {}
    fn visit_local(&mut self, _: &'ast syn::Local) {}

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.scope(&f.attrs, f.sig.ident.to_string(), |s| {
            visit::visit_item_fn(s, f)
        });
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.scope(&f.attrs, f.sig.ident.to_string(), |s| {
            visit::visit_impl_item_fn(s, f)
        });
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        self.scope(&f.attrs, f.sig.ident.to_string(), |s| {
            visit::visit_trait_item_fn(s, f)
        });
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

    fn visit_item_struct(&mut self, i: &'ast syn::ItemStruct) {
        self.scope(&i.attrs, i.ident.to_string(), |s| {
            visit::visit_item_struct(s, i)
        });
    }

    fn visit_item_enum(&mut self, i: &'ast syn::ItemEnum) {
        self.scope(&i.attrs, i.ident.to_string(), |s| {
            visit::visit_item_enum(s, i)
        });
    }

    fn visit_item_union(&mut self, i: &'ast syn::ItemUnion) {
        self.scope(&i.attrs, i.ident.to_string(), |s| {
            visit::visit_item_union(s, i)
        });
    }

    fn visit_item_type(&mut self, i: &'ast syn::ItemType) {
        self.scope(&i.attrs, i.ident.to_string(), |s| {
            visit::visit_item_type(s, i)
        });
    }

    fn visit_item_const(&mut self, i: &'ast syn::ItemConst) {
        self.scope(&i.attrs, i.ident.to_string(), |s| {
            visit::visit_item_const(s, i)
        });
    }

    fn visit_item_static(&mut self, i: &'ast syn::ItemStatic) {
        self.scope(&i.attrs, i.ident.to_string(), |s| {
            visit::visit_item_static(s, i)
        });
    }

    fn visit_type_path(&mut self, ty: &'ast syn::TypePath) {
        if is_string_result(ty) {
            self.out.push(Finding {
                file: self.file.to_string(),
                item: self.names.join("::"),
                detail: format!("line {}", ty.path.segments[0].ident.span().start().line),
            });
        }
        visit::visit_type_path(self, ty);
    }
}

/// `Result<_, String>` however the two are spelled.
fn is_string_result(ty: &syn::TypePath) -> bool {
    let Some(last) = ty.path.segments.last() else {
        return false;
    };
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return false;
    };
    let types: Vec<&syn::Type> = args
        .args
        .iter()
        .filter_map(|a| match a {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    last.ident == "Result"
        && ty.qself.is_none()
        && matches!(types[..], [_, syn::Type::Path(error)]
            if error.qself.is_none()
                && error.path.segments.last().is_some_and(|s| s.ident == "String" && s.arguments.is_none()))
}

#[test]
fn every_spelling_of_a_string_error_is_found() {
    let source = r#"
        fn a() -> Result<(), String> { let _: Result<(), String> = Ok(()); Ok(()) }
        fn b(f: Box<dyn Fn() -> std::result::Result<u8, std::string::String>>) {}
        struct C { field: Option<Result<u8, String>> }
        type D<T> = Result<T, String>;
        trait E { fn e(&self) -> Result<(), String>; }
        impl F { fn f(&self) -> Result<&'static str, String> { fn g() -> Result<(), String> { Ok(()) } todo!() } }
        fn fine() -> Result<(), &'static str> { Ok(()) }
        fn also_fine() -> Result<(), Box<dyn std::error::Error>> { Ok(()) }
        fn io() -> std::io::Result<String> { todo!() }
        #[cfg(test)] mod tests { fn t() -> Result<(), String> { Ok(()) } }
    "#;
    let ast = syn::parse_file(source).expect("parses");
    let found: Vec<String> = string_errors("x.rs", &ast)
        .into_iter()
        .map(|f| f.item)
        .collect();
    assert_eq!(found, ["a", "b", "C", "D", "E::e", "F::f", "F::f::g"]);
}
