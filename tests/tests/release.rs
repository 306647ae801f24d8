//! Releases (docs/releasing.md):
//!
//! - the versions the tree states are in step: the crates' version is the
//!   chart's `appVersion`, the tag every image the chart names defaults to,
//!   and the newest version in `CHANGELOG.md`;
//! - `scripts/release` refuses a tree that is not the release it is asked
//!   for, naming what to fix, and plans the images' and the chart's pushes;
//! - it pushes the chart to a registry on loopback (`scripts/loopback-registry`,
//!   the one `scripts/images --push-check` pushes the images to), where it
//!   reads back with its version and `appVersion`, and refuses to push that
//!   chart version again.
//!
//! The refusals and the plan run on a copy of the files the script reads (a
//! git repository of its own, so a tree can be clean, dirty or wrong
//! without touching this one). The images' push itself is checked by
//! `scripts/images --push-check` in `scripts/test`: building them takes
//! minutes, so here the images step is only planned (`--dry-run`).

use gputopo_testenv::binaries;
use gputopo_testenv::process::{Process, tail};
use serde_yaml::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workspace's version: every crate takes it (checked below).
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn chart_yaml(dir: &Path) -> Value {
    serde_yaml::from_str(&read(&dir.join("helm/gputopo/Chart.yaml"))).expect("Chart.yaml is YAML")
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string: {v:?}"))
}

/// The workspace's members, from the root Cargo.toml's one-line list.
fn members(dir: &Path) -> Vec<String> {
    let manifest = read(&dir.join("Cargo.toml"));
    let line = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("a one-line members = [...] in Cargo.toml");
    line.trim_end_matches(']')
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The newest `## [x.y.z]` heading of CHANGELOG.md (Unreleased skipped).
fn newest_changelog_version(text: &str) -> Option<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("## ["))
        .filter_map(|l| l.split_once(']').map(|(v, _)| v))
        .find(|v| v.starts_with(|c: char| c.is_ascii_digit()))
}

/// Every `image` mapping of the values, with its path (`agent.image`).
fn images(value: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    if let Value::Mapping(map) = value {
        for (key, child) in map {
            let key = key.as_str().unwrap_or_default();
            let here = if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            };
            if key == "image" && child.get("tag").is_some() {
                out.push((here.clone(), child.clone()));
            }
            images(child, &here, out);
        }
    }
}

#[test]
fn the_versions_are_in_step() {
    let root = root();
    let chart = chart_yaml(&root);
    assert_eq!(
        str_of(&chart, "appVersion"),
        VERSION,
        "helm/gputopo/Chart.yaml's appVersion is the crates' version (the images' tag)"
    );
    let members = members(&root);
    assert!(members.len() >= 10, "members: {members:?}");
    for member in &members {
        let manifest = read(&root.join(member).join("Cargo.toml"));
        assert!(
            manifest.lines().any(|l| l == "version.workspace = true"),
            "{member}/Cargo.toml must take the workspace version (version.workspace = true)"
        );
    }
    let changelog = read(&root.join("CHANGELOG.md"));
    assert_eq!(
        newest_changelog_version(&changelog),
        Some(VERSION),
        "CHANGELOG.md's newest entry is the crates' version"
    );
    assert!(
        changelog.contains("\n## [Unreleased]\n"),
        "CHANGELOG.md keeps an Unreleased section (Keep a Changelog)"
    );

    // The chart's images default to its appVersion: no tag pinned in the
    // values, and the one helper that names an image falls back to it.
    let values: Value = serde_yaml::from_str(&read(&root.join("helm/gputopo/values.yaml")))
        .expect("values.yaml is YAML");
    let mut found = Vec::new();
    images(&values, "", &mut found);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    for expected in ["agent.image", "scheduler.image", "devicePlugin.image"] {
        assert!(paths.contains(&expected), "no {expected} in {paths:?}");
    }
    for (path, image) in &found {
        assert_eq!(
            image["tag"].as_str(),
            Some(""),
            "values.yaml {path}.tag must be empty, so the image is the appVersion's"
        );
    }
    let helpers = read(&root.join("helm/gputopo/templates/_helpers.tpl"));
    assert!(
        helpers.contains("(default .appVersion .image.tag)"),
        "_helpers.tpl's gputopo.image defaults the tag to the appVersion"
    );
}

#[test]
fn a_changelog_heading_is_read_as_its_version() {
    let text = "# Changelog\n\n## [Unreleased]\n\n- x\n\n## [1.2.3] - 2026-01-01\n\n## [1.2.2]\n";
    assert_eq!(newest_changelog_version(text), Some("1.2.3"));
    assert_eq!(newest_changelog_version("## [Unreleased]\n"), None);
}

/// Copies what scripts/release reads into a git repository of its own
/// (committed, so clean), the Unreleased entries of CHANGELOG.md dropped
/// when `released`: the tree as it stands at a release.
fn release_tree(released: bool) -> tempfile::TempDir {
    let root = root();
    let dir = tempfile::Builder::new()
        .prefix("gputopo-release-")
        .tempdir()
        .expect("a temp dir");
    let to = dir.path();
    let copy = |rel: &str| {
        let dest = to.join(rel);
        std::fs::create_dir_all(dest.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(root.join(rel), &dest).unwrap_or_else(|e| panic!("copy {rel}: {e}"));
    };
    for file in ["scripts/release", "Cargo.toml", "CHANGELOG.md"] {
        copy(file);
    }
    for member in members(&root) {
        copy(&format!("{member}/Cargo.toml"));
    }
    run_ok(
        Command::new("cp")
            .args(["-r"])
            .arg(root.join("helm"))
            .arg(to),
    );
    if released {
        edit(to, "CHANGELOG.md", |text| {
            let start = text
                .find("## [Unreleased]\n")
                .expect("an Unreleased heading")
                + 16;
            let end = start + text[start..].find("\n## [").expect("a version after it");
            format!("{}{}", &text[..start], &text[end..])
        });
    }
    let git = |args: &[&str]| {
        run_ok(
            Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .current_dir(to),
        )
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "the tree"]);
    dir
}

fn edit(dir: &Path, rel: &str, f: impl FnOnce(&str) -> String) {
    let path = dir.join(rel);
    let edited = f(&read(&path));
    std::fs::write(&path, edited).unwrap_or_else(|e| panic!("{rel}: {e}"));
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// scripts/release in `dir` with `args`; helm pointed at `helm`.
fn release(dir: &Path, args: &[&str], helm: &Path) -> (bool, String, String) {
    let out = Command::new(dir.join("scripts/release"))
        .args(args)
        .env("HELM", helm)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("running scripts/release");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A helm that does not exist: a check that wrongly passed would fail
/// later, on another message.
fn no_helm() -> PathBuf {
    PathBuf::from("/nonexistent/helm")
}

#[test]
fn a_dry_run_plans_the_images_and_the_chart() {
    let tree = release_tree(true);
    let chart_version = str_of(&chart_yaml(tree.path()), "version").to_string();
    let (ok, stdout, stderr) = release(
        tree.path(),
        &[
            &format!("v{VERSION}"),
            "registry.example.com/gputopo/",
            "--dry-run",
        ],
        &no_helm(),
    );
    assert!(ok, "{stderr}");
    assert!(
        !stderr.contains("warning"),
        "a released tree warns of nothing: {stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            format!("./scripts/images --tag {VERSION} --push registry.example.com/gputopo"),
            "helm package helm/gputopo --destination target/release".to_string(),
            format!(
                "helm push target/release/gputopo-{chart_version}.tgz oci://registry.example.com/gputopo/charts"
            ),
            format!(
                "helm show chart oci://registry.example.com/gputopo/charts/gputopo --version {chart_version}"
            ),
        ]
    );
}

#[test]
fn the_release_refuses_a_tree_that_is_not_the_release() {
    type Mutation = fn(&Path);
    let cases: [(&str, bool, Mutation, &str); 6] = [
        (
            "9.9.9",
            true,
            |_| {},
            "Cargo.toml's [workspace.package] version is",
        ),
        (
            VERSION,
            true,
            |d| {
                edit(d, "helm/gputopo/Chart.yaml", |t| {
                    t.replace("\nappVersion: ", "\nappVersion: \"0.0.9\"\n#")
                })
            },
            "appVersion is '0.0.9'",
        ),
        (
            VERSION,
            true,
            |d| {
                edit(d, "CHANGELOG.md", |t| {
                    t.replace(&format!("\n## [{VERSION}]"), "\n## [7.7.7]")
                })
            },
            "CHANGELOG.md's newest version is '7.7.7'",
        ),
        (
            VERSION,
            true,
            |d| {
                edit(d, "helm/gputopo/values.yaml", |t| {
                    t.replacen("tag: \"\"", "tag: \"latest\"", 1)
                })
            },
            "values.yaml pins an image tag",
        ),
        (
            VERSION,
            true,
            |d| {
                edit(d, "ops/Cargo.toml", |t| {
                    t.replace("version.workspace = true", "version = \"0.0.1\"")
                })
            },
            "ops/Cargo.toml does not take the workspace version",
        ),
        (
            VERSION,
            false,
            |d| edit(d, "CHANGELOG.md", |t| format!("{t}\n")),
            "uncommitted changes",
        ),
    ];
    for (version, dry_run, mutate, expected) in cases {
        let tree = release_tree(true);
        mutate(tree.path());
        let mut args = vec![version, "registry.example.com/gputopo"];
        if dry_run {
            args.push("--dry-run");
        }
        let (ok, _, stderr) = release(tree.path(), &args, &no_helm());
        assert!(
            !ok && stderr.contains(expected),
            "expected a refusal naming {expected:?}:\n{stderr}"
        );
    }
    // Changes still under Unreleased: a dry run warns, a release refuses.
    let tree = release_tree(false);
    let unlisted = "Unreleased section still lists changes";
    let (ok, _, stderr) = release(
        tree.path(),
        &[VERSION, "registry.example.com/gputopo", "--dry-run"],
        &no_helm(),
    );
    assert!(ok && stderr.contains(unlisted), "{stderr}");
    let (ok, _, stderr) = release(
        tree.path(),
        &[VERSION, "registry.example.com/gputopo"],
        &no_helm(),
    );
    assert!(!ok && stderr.contains(unlisted), "{stderr}");
}

/// scripts/loopback-registry serving from `dir`, and its address.
fn loopback_registry(dir: &Path) -> (Process, String) {
    let log = dir.join("registry.log");
    let process = Process::spawn(
        "loopback-registry",
        &root().join("scripts/loopback-registry"),
        &[dir.display().to_string()],
        &[],
        log.clone(),
    )
    .expect("starting scripts/loopback-registry");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(addr) = text.lines().find(|l| l.starts_with("127.0.0.1:")) {
            return (process, addr.to_string());
        }
        assert!(
            Instant::now() < deadline,
            "no registry address within 60 s:\n{}",
            tail(&log, 20)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// helm with its cache, config and data in `home`.
fn helm(bin: &Path, home: &Path, args: &[&str]) -> Output {
    run_ok(
        Command::new(bin)
            .args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data")),
    )
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_release_pushes_the_chart_to_a_loopback_registry_and_it_reads_back() {
    let helm_bin = binaries::locate(binaries::HELM, "helm").expect("helm");
    let tree = release_tree(true);
    let work = tempfile::Builder::new()
        .prefix("gputopo-release-registry-")
        .tempdir()
        .expect("a temp dir");
    let (_registry, addr) = loopback_registry(work.path());
    let chart_version = str_of(&chart_yaml(tree.path()), "version").to_string();
    let target = format!("{addr}/gputopo");
    let home = work.path().join("helm");
    let push = || {
        let out = Command::new(tree.path().join("scripts/release"))
            .args([VERSION, &target, "--chart-only", "--plain-http"])
            .env("HELM", &helm_bin)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("running scripts/release");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = push();
    assert!(ok, "the release failed:\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "ok: oci://{target}/charts/gputopo:{chart_version} (appVersion {VERSION})"
        )),
        "{stderr}"
    );

    // Pulled back as an install would, and read from the package itself.
    let pulled = work.path().join("pulled");
    std::fs::create_dir(&pulled).expect("mkdir pulled");
    let reference = format!("oci://{target}/charts/gputopo");
    helm(
        &helm_bin,
        &home,
        &[
            "pull",
            &reference,
            "--version",
            &chart_version,
            "--plain-http",
            "--destination",
            &pulled.display().to_string(),
        ],
    );
    let package = pulled.join(format!("gputopo-{chart_version}.tgz"));
    let shown = helm(
        &helm_bin,
        &home,
        &["show", "chart", &package.display().to_string()],
    );
    let chart: Value = serde_yaml::from_slice(&shown.stdout).expect("Chart.yaml from the package");
    assert_eq!(str_of(&chart, "version"), chart_version);
    assert_eq!(str_of(&chart, "appVersion"), VERSION);

    // Every image the pulled chart renders is tagged with that appVersion.
    let rendered = helm(
        &helm_bin,
        &home,
        &[
            "template",
            "gputopo",
            &package.display().to_string(),
            "--kube-version",
            "1.37.0",
            "--set",
            "devicePlugin.enabled=true",
        ],
    );
    let text = String::from_utf8_lossy(&rendered.stdout);
    let images: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("image: "))
        .collect();
    assert!(images.len() >= 3, "images rendered: {images:?}");
    for image in images {
        assert!(
            image.trim_matches('"').ends_with(&format!(":{VERSION}")),
            "{image} is not tagged {VERSION}"
        );
    }

    // A chart version is published once: installs pin it.
    let (ok, stderr) = push();
    assert!(!ok && stderr.contains("already published"), "{stderr}");
}
