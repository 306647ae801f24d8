//! The repository is self-contained: `docs/contract.md` is the contract and
//! `docs/references.md` holds the published figures, so
//!
//! * every relative link in `README.md`, `BENCHMARKS.md`, `fixtures/INDEX.md`
//!   and `docs/**/*.md` resolves to a file inside the repository (and, for a
//!   `#fragment` into a Markdown file, to one of its headings);
//! * no file of the repository names a path outside it (the old shared
//!   folder) or the old contract files by name.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("api/ sits in the repository root")
        .canonicalize()
        .expect("the repository root exists")
}

/// Every Markdown file under `dir`, its subfolders (`docs/contract/`) included.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("readable docs/ entry").path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The Markdown files whose links are checked.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "fixtures/INDEX.md"]
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.is_file())
        .collect();
    let mut docs = Vec::new();
    markdown_files(&root.join("docs"), &mut docs);
    docs.sort();
    files.extend(docs);
    files
}

/// Removes inline code spans (`` `...` ``), where `](` is not a link.
fn strip_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// Lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// The link targets of one line: inline `](target)` and reference `[x]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let line = strip_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        targets.push(target.to_string());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(close) = trimmed.find("]:")
        && let Some(target) = trimmed[close + 2..].split_whitespace().next()
    {
        targets.push(target.to_string());
    }
    targets
}

fn is_external(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    ["http://", "https://", "mailto:", "ftp://"]
        .iter()
        .any(|p| lower.starts_with(p))
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file's headings give, duplicates numbered as GitHub does.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !t[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(t[hashes..].trim().trim_end_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

#[test]
fn relative_links_in_the_docs_resolve_inside_the_repository() {
    let root = repo_root();
    let mut failures = Vec::new();
    let files = doc_files(&root);
    assert!(
        files.iter().any(|f| f.ends_with("docs/contract.md")),
        "docs/contract.md is missing: it is the project's contract"
    );
    for file in &files {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let dir = file.parent().expect("a file has a folder");
        for (line_no, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty() || is_external(&target) {
                    continue;
                }
                let (path, fragment) = match target.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (target.as_str(), None),
                };
                let resolved = if path.is_empty() {
                    file.clone()
                } else if path.starts_with('/') {
                    failures.push(format!(
                        "{rel}:{line_no}: link ({target}) is an absolute path; link relative to {rel}"
                    ));
                    continue;
                } else {
                    dir.join(path)
                };
                let Ok(canonical) = resolved.canonicalize() else {
                    failures.push(format!(
                        "{rel}:{line_no}: link ({target}) names {}, which does not exist",
                        resolved.display()
                    ));
                    continue;
                };
                if !canonical.starts_with(&root) {
                    failures.push(format!(
                        "{rel}:{line_no}: link ({target}) leads outside the repository, to {}",
                        canonical.display()
                    ));
                    continue;
                }
                if let Some(fragment) = fragment
                    && canonical.extension().is_some_and(|e| e == "md")
                {
                    let target_text = fs::read_to_string(&canonical)
                        .unwrap_or_else(|e| panic!("{}: {e}", canonical.display()));
                    if !anchors(&target_text).contains(fragment) {
                        failures.push(format!(
                            "{rel}:{line_no}: link ({target}): {} has no heading with anchor #{fragment}",
                            canonical.strip_prefix(&root).unwrap_or(&canonical).display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "broken links in the docs:\n{}",
        failures.join("\n")
    );
}

/// The repository's files: tracked and untracked-but-not-ignored, as git
/// lists them; without git, every file but `target/`, `.git/` and `.cache/`.
fn repository_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success());
    if let Some(out) = listed {
        let mut files: Vec<PathBuf> = out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        files.dedup();
        return files;
    }
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("readable entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                if !matches!(name.as_ref(), "target" | ".git" | ".cache") {
                    stack.push(path);
                }
            } else if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn nothing_in_the_repository_refers_outside_it() {
    let root = repo_root();
    // Built at run time, so that this file does not match itself.
    let needles: [(String, &str); 4] = [
        (["..", "/shared"].concat(), "a path outside the repository"),
        (
            ["/work", "/shared"].concat(),
            "a path outside the repository",
        ),
        (
            ["DESIGN", ".md"].concat(),
            "the old contract: cite docs/contract.md",
        ),
        (
            ["REFERENCE", ".md"].concat(),
            "the old reference figures: cite docs/references.md",
        ),
    ];
    let mut failures = Vec::new();
    for file in repository_files(&root) {
        let Ok(bytes) = fs::read(&file) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line_no, line) in text.lines().enumerate() {
            for (needle, what) in &needles {
                if line.contains(needle.as_str()) {
                    failures.push(format!("{rel}:{}: names {needle} ({what})", line_no + 1));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} reference(s) to files outside the repository:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
