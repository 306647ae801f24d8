//! Where the control plane binaries built by `scripts/control-plane-binaries` are.
//!
//! `GPUTOPO_BIN_DIR` (the directory the script prints) wins; otherwise each
//! binary is looked up where the script puts it by default,
//! `${GPUTOPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gputopo}/bin/<tool>-<version>/`,
//! with the version read from the tool's `go.mod` at compile time, so a
//! version bump in `tests/tools/*/go.mod` never picks up a stale binary.

use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};

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

fn resolve(
    bin_dir: Option<PathBuf>,
    cache: Option<PathBuf>,
    tool: Tool,
    binary: &str,
) -> anyhow::Result<PathBuf> {
    let (path, origin) = match bin_dir {
        Some(dir) => (dir.join(binary), "GPUTOPO_BIN_DIR"),
        None => {
            let cache = cache.context(
                "neither GPUTOPO_BIN_DIR, GPUTOPO_CACHE, XDG_CACHE_HOME nor HOME is set",
            )?;
            (
                cache
                    .join("bin")
                    .join(format!("{}-{}", tool.name, tool.version()))
                    .join(binary),
                "the default cache",
            )
        }
    };
    if !path.is_file() {
        bail!(
            "{binary} ({} {}) not found at {} ({origin}). The integration tests run the real \
             control plane, built from source: run `scripts/control-plane-binaries` (a cold \
             build takes about 10 minutes on 2 cores) and, if you use a non-default cache, \
             `export GPUTOPO_BIN_DIR=$(scripts/control-plane-binaries)`",
            tool.module,
            tool.version(),
            path.display()
        );
    }
    Ok(path)
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
}
