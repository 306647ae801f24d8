//! The node's own cgroup tree (`cgroupRoot`): made before the kubelet starts
//! (it refuses a root that is missing in any hierarchy) and removed after,
//! since cgroups are not namespaced and would outlive the node.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The mount points of every cgroup hierarchy (v1 controllers, the v1
/// `name=systemd` one, and cgroup2, unified or hybrid) from `/proc/self/mountinfo`.
pub fn hierarchies() -> io::Result<Vec<PathBuf>> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(mountinfo
        .lines()
        .filter_map(|line| {
            // "<id> <parent> <dev> <root> <mount point> ... - <fstype> <source> <options>"
            let (fields, rest) = line.split_once(" - ")?;
            let fstype = rest.split(' ').next()?;
            let mount_point = fields.split(' ').nth(4)?;
            matches!(fstype, "cgroup" | "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .collect())
}

/// Creates `name` (one path element) in every hierarchy, with what the
/// kernel does not fill in itself: a v1 cpuset needs CPUs and memory nodes
/// before a process may join, and a cgroup2 root must hand its controllers
/// down.
pub fn create(name: &str) -> io::Result<Vec<PathBuf>> {
    let mut made = Vec::new();
    for hierarchy in hierarchies()? {
        let dir = hierarchy.join(name);
        let at = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(at(e)),
        }
        made.push(dir.clone());
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if dir.join(file).exists() && hierarchy.join(file).exists() {
                copy_if_empty(&hierarchy.join(file), &dir.join(file)).map_err(at)?;
            }
        }
        // The controllers this cgroup got from its parent (none in a
        // hybrid setup's unified hierarchy, whose controllers are all v1).
        let controllers = dir.join("cgroup.controllers");
        if let Ok(list) = std::fs::read_to_string(&controllers)
            && !list.trim().is_empty()
        {
            let enable: Vec<String> = list.split_whitespace().map(|c| format!("+{c}")).collect();
            std::fs::write(dir.join("cgroup.subtree_control"), enable.join(" ")).map_err(at)?;
        }
    }
    Ok(made)
}

fn copy_if_empty(from: &Path, to: &Path) -> io::Result<()> {
    if std::fs::read_to_string(to)?.trim().is_empty() {
        std::fs::write(to, std::fs::read_to_string(from)?.trim())?;
    }
    Ok(())
}

/// Removes the trees made by [`create`], deepest first, retrying until
/// `timeout`: a cgroup whose processes are still being killed is busy.
/// Returns the directories that could not be removed.
pub fn remove(dirs: &[PathBuf], timeout: Duration) -> Vec<PathBuf> {
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<PathBuf> = dirs.iter().filter(|d| !remove_tree(d)).cloned().collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes the cgroup trees called `<prefix>*` whose node's temp dir (of
/// the same name) is gone: left by a test process that was killed before
/// it could clean up. `rmdir` refuses a cgroup with processes, so a live
/// node's tree is never touched.
pub fn remove_stale(prefix: &str) {
    let Ok(hierarchies) = hierarchies() else {
        return;
    };
    let temp = std::env::temp_dir();
    for hierarchy in hierarchies {
        let Ok(entries) = std::fs::read_dir(&hierarchy) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(prefix) && !temp.join(&name).exists() {
                remove_tree(&entry.path());
            }
        }
    }
}

/// `rmdir` of every directory under `dir` and of `dir`, children first
/// (a cgroup's files cannot be removed, only the directory as a whole).
fn remove_tree(dir: &Path) -> bool {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}
