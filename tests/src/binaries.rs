//! Where the control plane binaries built by `scripts/control-plane-binaries` are.
//!
//! `GPUTOPO_BIN_DIR` (the directory the script prints) wins; otherwise each
//! binary is looked up where the script puts it by default,
//! `${GPUTOPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gputopo}/bin/<tool>-<version>/`,
//! with the version read from the tool's `go.mod` at compile time, so a
//! version bump in `tests/tools/*/go.mod` never picks up a stale binary.
//!
//! Every test that needs these binaries carries `#[ignore = IGNORE_REASON]`
//! (the literal: an attribute takes no constant), so plain `cargo test`
//! runs everything else without the Go build and `scripts/test` runs the
//! ignored ones with the binaries (README, "Test tiers").

use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};

/// The reason every test that needs these binaries is ignored with, and the
/// only `#[ignore]` in the workspace (a test checks both), so that
/// `cargo test -- --ignored` runs exactly those tests.
pub const IGNORE_REASON: &str =
    "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored";

/// One Go module under `tests/tools/` and the module whose version names it.
#[derive(Clone, Copy, Debug)]
pub struct Tool {
    /// The folder under `tests/tools/` and the cache key's prefix.
    pub name: &'static str,
    /// The module whose required version is the tool's version.
    pub module: &'static str,
    go_mod: &'static str,
}

pub const ETCD: Tool = Tool {
    name: "etcd",
    module: "go.etcd.io/etcd/server/v3",
    go_mod: include_str!("../tools/etcd/go.mod"),
};
pub const KUBERNETES: Tool = Tool {
    name: "kubernetes",
    module: "k8s.io/kubernetes",
    go_mod: include_str!("../tools/kubernetes/go.mod"),
};
pub const KWOK: Tool = Tool {
    name: "kwok",
    module: "sigs.k8s.io/kwok",
    go_mod: include_str!("../tools/kwok/go.mod"),
};
pub const HELM: Tool = Tool {
    name: "helm",
    module: "helm.sh/helm/v3",
    go_mod: include_str!("../tools/helm/go.mod"),
};
pub const KUSTOMIZE: Tool = Tool {
    name: "kustomize",
    module: "sigs.k8s.io/kustomize/kustomize/v5",
    go_mod: include_str!("../tools/kustomize/go.mod"),
};
pub const JOBSET: Tool = Tool {
    name: "jobset",
    module: "sigs.k8s.io/jobset",
    go_mod: include_str!("../tools/jobset/go.mod"),
};
pub const KUEUE: Tool = Tool {
    name: "kueue",
    module: "sigs.k8s.io/kueue",
    go_mod: include_str!("../tools/kueue/go.mod"),
};
pub const LWS: Tool = Tool {
    name: "lws",
    module: "sigs.k8s.io/lws",
    go_mod: include_str!("../tools/lws/go.mod"),
};
pub const TRAINER: Tool = Tool {
    name: "trainer",
    module: "github.com/kubeflow/trainer/v2",
    go_mod: include_str!("../tools/trainer/go.mod"),
};

impl Tool {
    /// The version `go.mod` requires, e.g. `v1.37.2`.
    pub fn version(&self) -> &'static str {
        required_version(self.go_mod, self.module).unwrap_or_else(|| {
            panic!(
                "tests/tools/{}/go.mod does not require {}",
                self.name, self.module
            )
        })
    }
}

/// The Kubernetes release the control plane is built from (`v1.37.x`): what
/// the apiserver's `/version` must report.
pub fn kubernetes_version() -> &'static str {
    KUBERNETES.version()
}

fn required_version<'a>(go_mod: &'a str, module: &str) -> Option<&'a str> {
    go_mod.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let mut first = words.next()?;
        if first == "require" {
            first = words.next()?;
        }
        (first == module).then(|| words.next()).flatten()
    })
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GPUTOPO_CACHE") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(Path::new(&dir).join("gputopo"));
    }
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/gputopo"))
}

/// The path of `binary` (e.g. `kube-apiserver`) of `tool`, or an error that
/// says how to build it.
pub fn locate(tool: Tool, binary: &str) -> anyhow::Result<PathBuf> {
    resolve(
        std::env::var_os("GPUTOPO_BIN_DIR").map(PathBuf::from),
        cache_dir(),
        tool,
        binary,
    )
}

/// The source directory (in GOMODCACHE) of `tool`'s module, whose manifests
/// the tests read: the script links it as `<tool>-module` beside the binaries
/// and as `module` in the tool's cache folder.
pub fn locate_module(tool: Tool) -> anyhow::Result<PathBuf> {
    locate_linked(tool, "module")
}

/// The source directory of another module `tool` is built with, which the
/// script links as `module-<name>` (e.g. the Trainer's `scheduler-plugins`).
pub fn locate_dependency_module(tool: Tool, name: &str) -> anyhow::Result<PathBuf> {
    locate_linked(tool, &format!("module-{name}"))
}

fn locate_linked(tool: Tool, link: &str) -> anyhow::Result<PathBuf> {
    resolve(
        std::env::var_os("GPUTOPO_BIN_DIR").map(PathBuf::from),
        cache_dir(),
        tool,
        &format!("{}-{link}", tool.name),
    )
}

fn resolve(
    bin_dir: Option<PathBuf>,
    cache: Option<PathBuf>,
    tool: Tool,
    binary: &str,
) -> anyhow::Result<PathBuf> {
    // A module link (`<tool>-module...` in the set) is plainly `module...`
    // in the tool's own cache folder.
    let module_link = binary
        .strip_prefix(tool.name)
        .and_then(|rest| rest.strip_prefix('-'))
        .filter(|rest| rest.starts_with("module"));
    let (path, origin) = match bin_dir {
        Some(dir) => (dir.join(binary), "GPUTOPO_BIN_DIR"),
        None => {
            let cache = cache.context(
                "neither GPUTOPO_BIN_DIR, GPUTOPO_CACHE, XDG_CACHE_HOME nor HOME is set",
            )?;
            let name = module_link.unwrap_or(binary);
            (
                cache
                    .join("bin")
                    .join(format!("{}-{}", tool.name, tool.version()))
                    .join(name),
                "the default cache",
            )
        }
    };
    let found = if module_link.is_some() {
        path.is_dir()
    } else {
        path.is_file()
    };
    if !found {
        bail!(
            "{binary} ({} {}) not found at {} ({origin}). The integration tests run the real \
             control plane, built from source: run `scripts/control-plane-binaries` (a cold \
             build takes about 10 minutes on 2 cores) and, if you use a non-default cache, \
             `export GPUTOPO_BIN_DIR=$(scripts/control-plane-binaries)`. Plain `cargo test` \
             skips the tests that need them: each carries `#[ignore = \"{IGNORE_REASON}\"]`; \
             a test that plain `cargo test` ran to here lacks that mark",
            tool.module,
            tool.version(),
            path.display()
        );
    }
    Ok(path)
}

/// A binary of this workspace that cargo built beside the running test
/// (`target/<profile>/<name>`; `cargo test --workspace` builds every one).
/// Panics naming how to build it when it is missing: a test cannot go on.
pub fn workspace_binary(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test>-<hash>
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: build it first (cargo build -p {package}; cargo test --workspace does)",
        path.display()
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_go_mod() {
        assert!(
            kubernetes_version().starts_with("v1.37."),
            "{}",
            kubernetes_version()
        );
        assert!(ETCD.version().starts_with("v3."));
        assert!(KWOK.version().starts_with("v0."));
        assert!(HELM.version().starts_with("v3."));
        for tool in [KUSTOMIZE, JOBSET, KUEUE, LWS, TRAINER] {
            assert!(tool.version().starts_with('v'), "{tool:?}");
        }
    }

    #[test]
    fn a_module_link_is_looked_up_as_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve(Some(dir.path().to_owned()), None, JOBSET, "jobset-module").unwrap_err();
        assert!(err.to_string().contains("jobset-module"), "{err}");
        std::fs::create_dir(dir.path().join("jobset-module")).unwrap();
        let found = resolve(Some(dir.path().to_owned()), None, JOBSET, "jobset-module").unwrap();
        assert_eq!(found, dir.path().join("jobset-module"));

        let cached = dir
            .path()
            .join("bin")
            .join(format!("jobset-{}", JOBSET.version()));
        std::fs::create_dir_all(cached.join("module")).unwrap();
        let found = resolve(None, Some(dir.path().to_owned()), JOBSET, "jobset-module").unwrap();
        assert_eq!(found, cached.join("module"));
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let empty = tempfile::tempdir().unwrap();
        let err = resolve(
            Some(empty.path().to_owned()),
            None,
            KUBERNETES,
            "kube-apiserver",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("scripts/control-plane-binaries"), "{msg}");
        assert!(msg.contains("GPUTOPO_BIN_DIR"), "{msg}");
        assert!(msg.contains(IGNORE_REASON), "{msg}");

        let err = resolve(None, Some(empty.path().to_owned()), ETCD, "etcd").unwrap_err();
        let expected = empty
            .path()
            .join("bin")
            .join(format!("etcd-{}", ETCD.version()))
            .join("etcd");
        assert!(
            err.to_string().contains(&expected.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn required_version_reads_both_forms() {
        let go_mod =
            "module x\n\nrequire a.b/c v1.2.3\n\nrequire (\n\td.e/f v0.1.0 // indirect\n)\n";
        assert_eq!(required_version(go_mod, "a.b/c"), Some("v1.2.3"));
        assert_eq!(required_version(go_mod, "d.e/f"), Some("v0.1.0"));
        assert_eq!(required_version(go_mod, "a.b"), None);
    }

    /// `scripts/test` runs the cheap tier, then `cargo test -- --ignored`
    /// with the binaries: an `#[ignore]` with another reason would be run
    /// there and skipped here for a reason nobody documented.
    #[test]
    fn every_ignored_test_is_one_that_needs_the_control_plane() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let expected = format!("#[ignore = \"{IGNORE_REASON}\"]");
        let mut marked = 0;
        let mut others = Vec::new();
        for file in rust_files(&workspace) {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line == expected {
                    marked += 1;
                } else if line.starts_with("#[ignore")
                    || line.starts_with("ignore =")
                    || (line.starts_with("#[cfg_attr") && line.contains("ignore"))
                {
                    let file = file.strip_prefix(&workspace).unwrap_or(&file);
                    others.push(format!("{}:{}: {line}", file.display(), n + 1));
                }
            }
        }
        assert!(others.is_empty(), "use {expected}:\n{}", others.join("\n"));
        assert!(marked > 0, "no test is marked {expected}");
    }

    /// The workspace's `.rs` files, without build output and hidden folders.
    fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                found.extend(rust_files(&path));
            } else if name.ends_with(".rs") {
                found.push(path);
            }
        }
        found
    }
}
