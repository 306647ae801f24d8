//! Every install path carries everything: each `kubectl apply` command the
//! docs give for the plain manifests names every file of `daemonset/`
//! (which `plain_manifests.rs` proves holds exactly the chart's objects),
//! the namespace's file before any file with objects in it, so following
//! any documented command installs what `helm install` does, the admission
//! policies included.

use super::helm::documents;
use super::objects::kind_name;
use super::root;
use super::values::NAMESPACE;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every `.md` file of the README and `docs/`, recursively.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("docs/ readable") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files.sort();
    files
}

/// The `kubectl apply` commands in the shell blocks of `text`, each with
/// its `\`-continued lines joined.
fn apply_commands(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let (body, continued) = match trimmed.strip_suffix('\\') {
            Some(b) => (b.trim(), true),
            None => (trimmed, false),
        };
        match current.as_mut() {
            Some(c) => {
                c.push(' ');
                c.push_str(body);
            }
            None if body.starts_with("kubectl apply") => current = Some(body.to_string()),
            None => continue,
        }
        if !continued && let Some(c) = current.take() {
            commands.push(c);
        }
    }
    commands
}

/// The files a command applies (`-f FILE`), in order.
fn applied_files(command: &str) -> Vec<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "-f")
        .map(|w| w[1].to_string())
        .collect()
}

fn daemonset_files() -> BTreeSet<String> {
    std::fs::read_dir(root().join("daemonset"))
        .expect("daemonset/ readable")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| format!("daemonset/{}", p.file_name().unwrap().to_string_lossy()))
        .collect()
}

#[test]
fn every_documented_plain_manifest_install_applies_every_object_namespace_first() {
    let all = daemonset_files();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("a doc");
        for command in apply_commands(&text) {
            let files = applied_files(&command);
            if !files.iter().any(|f| all.contains(f)) {
                // The CRD alone (docs/upgrades.md), the device plugin's
                // own manifest: not an install of gputopo.
                continue;
            }
            checked += 1;
            let named: BTreeSet<String> = files.iter().cloned().collect();
            let missing: Vec<&String> = all.difference(&named).collect();
            assert!(
                missing.is_empty(),
                "{}: `{command}` leaves out {missing:?}",
                file.display()
            );
            let namespace_at = files.iter().position(|f| {
                file_docs(f)
                    .iter()
                    .any(|d| kind_name(d) == ("Namespace".into(), NAMESPACE.into()))
            });
            let first_namespaced = files.iter().position(|f| {
                file_docs(f)
                    .iter()
                    .any(|d| d["metadata"]["namespace"] == NAMESPACE)
            });
            assert!(
                namespace_at.is_some() && namespace_at <= first_namespaced,
                "{}: `{command}` applies objects in {NAMESPACE} before the namespace",
                file.display()
            );
        }
    }
    // docs/deploy.md and docs/operator.md each give one.
    assert!(checked >= 2, "only {checked} install commands found");
}

fn file_docs(file: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(root().join(file)).expect("a manifest");
    documents(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn the_command_reader_joins_continued_lines_and_finds_every_file() {
    let text = "```sh\nkubectl apply -f a.yaml \\\n  -f b.yaml\necho x\n```\nkubectl apply -f outside.yaml\n";
    let commands = apply_commands(text);
    assert_eq!(commands, ["kubectl apply -f a.yaml -f b.yaml"]);
    assert_eq!(applied_files(&commands[0]), ["a.yaml", "b.yaml"]);
}
