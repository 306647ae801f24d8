//! The architecture's rules, checked (docs/architecture.md states them):
//!
//! * `file_sizes`: no Rust or Markdown file over 600 lines;
//! * `circles`: no import circle between the files of a crate;
//! * `ladder`: the scheduler core's modules, and the scheduler cycle's,
//!   use only modules of their own level or below;
//! * `function_lengths`: no function of non-test code over 120 lines;
//! * `string_errors`: no `Result<_, String>` in library code;
//! * `pure_crates`: scheduler-core and topology have no kube client, async
//!   runtime or HTTP stack beneath them;
//! * `docs_paths`: every repository path the README and the docs name
//!   exists.
//!
//! The Rust is parsed with `syn` once for all checks (`workspace`): each
//! crate root's module tree is read (`graph`), then each check reads what
//! it needs. Checks with violations still in the code keep an allowlist of
//! them, a ratchet (`ratchet`): new violations fail, and so do listed ones
//! that no longer occur.
//!
//! `cargo test -p gputopo-api --test architecture` runs them all (a second
//! or two); a name after it (`file_sizes`, `circles`) runs one check.

mod circles;
mod docs_paths;
mod file_sizes;
mod function_lengths;
mod graph;
mod graph_tests;
mod ladder;
mod pure_crates;
mod ratchet;
mod sccs;
mod source;
mod string_errors;
mod workspace;
