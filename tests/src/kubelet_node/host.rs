//! What a node needs from the machine: programs, kernel features, and
//! small blocking helpers (commands, a plain-HTTP health check).

use super::config::CNI_BIN_DIR;
use super::error::{KubeletNodeError, Result, harness, io};
use crate::binaries;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The programs a node runs, found on `PATH` (or, for the kubelet, in
/// `GPUTOPO_BIN_DIR`).
pub(crate) struct Tools {
    pub kubelet: PathBuf,
    pub unshare: PathBuf,
    pub nsenter: PathBuf,
    pub ctr: PathBuf,
    pub busybox: PathBuf,
}

impl Tools {
    pub fn find() -> Result<Tools> {
        let mut missing = Vec::new();
        let mut find = |name: &str| {
            let found = which(name);
            if found.is_none() {
                missing.push(name.to_owned());
            }
            found.unwrap_or_default()
        };
        let tools = Tools {
            kubelet: PathBuf::new(),
            unshare: find("unshare"),
            nsenter: find("nsenter"),
            ctr: find("ctr"),
            busybox: find("busybox"),
        };
        // Run by containerd, not by us: only their presence matters here.
        for name in ["containerd", "containerd-shim-runc-v2", "runc"] {
            find(name);
        }
        let loopback = Path::new(CNI_BIN_DIR).join("loopback");
        if !loopback.exists() {
            missing.push(loopback.display().to_string());
        }
        if !missing.is_empty() {
            return Err(KubeletNodeError::Missing { missing });
        }
        let kubelet = binaries::locate(binaries::KUBERNETES, "kubelet")
            .map_err(harness("locating the kubelet binary"))?;
        Ok(Tools { kubelet, ..tools })
    }
}

fn which(name: &str) -> Option<PathBuf> {
    // sbin too: runc is /usr/sbin/runc, not on a non-root PATH.
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

pub(crate) fn overlayfs_supported() -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| {
        f.lines()
            .any(|l| l.split_whitespace().last() == Some("overlay"))
    })
}

/// Runs a command to completion; its stdout, or an error with its output.
pub(crate) fn run(cmd: &mut std::process::Command) -> Result<String> {
    let command = format!("{cmd:?}");
    let out = cmd.output().map_err(io(format!("running {command}")))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(KubeletNodeError::Command {
        command,
        status: out.status,
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}

/// A plain-HTTP GET on 127.0.0.1 answering 200 `ok` (the kubelet's healthz port).
pub(crate) fn plain_get_ok(port: u16, path: &str) -> Result<()> {
    use std::io::{Read as _, Write as _};
    let what = format!("GET http://127.0.0.1:{port}{path}");
    let addr = ([127, 0, 0, 1], port).into();
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map_err(io(what.clone()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io(what.clone()))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .map_err(io(what.clone()))?;
    let mut response = String::new();
    s.read_to_string(&mut response).map_err(io(what.clone()))?;
    if response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(KubeletNodeError::NotYet(format!("{what}: {response}")))
    }
}
