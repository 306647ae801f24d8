//! Certificates a controller reads from a fixed host path.
//!
//! Kueue v0.19, when its own certificate rotation is off, loads a metrics
//! certificate from `/etc/kueue/metrics/certs` (hard-coded) and exits if
//! there is none, even with metrics off. Rather than write into the host's
//! `/etc`, the harness starts it in a mount namespace of its own where `/etc`
//! is an overlay whose upper layer (in the test's folder) links that path to
//! the test's certificates: the host sees nothing, and the namespace ends
//! with the process. This needs root (as the kubelet node does).

use super::error::{ControllerError, Result, harness};
use std::path::{Path, PathBuf};

/// The program and arguments that run `bin args...` with each of `paths`
/// (absolute, under `/etc`) pointing at `cert_dir`; `dir` holds the overlay
/// layers and the wrapper script (kept, so a log reader can rerun it).
pub(crate) fn wrap(
    dir: &Path,
    paths: &[&str],
    cert_dir: &Path,
    bin: &Path,
    args: &[String],
) -> Result<(PathBuf, Vec<String>)> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Err(ControllerError::Harness {
            what: format!(
                "{} reads its certificate from {paths:?}, which the harness provides in a \
                 private mount namespace",
                bin.display()
            ),
            source: format!("that needs root; uid is {uid}").into(),
        });
    }
    let (upper, work) = (dir.join("etc-upper"), dir.join("etc-work"));
    for d in [&upper, &work] {
        std::fs::create_dir_all(d).map_err(harness(format!("creating {}", d.display())))?;
    }
    let mut script = format!(
        "#!/bin/sh\n# Run by unshare --mount: /etc is an overlay seen by this process only.\nset -e\n\
         mount -t overlay overlay -o lowerdir=/etc,upperdir={},workdir={} /etc\n",
        upper.display(),
        work.display()
    );
    for path in paths {
        let Some(rest) = path.strip_prefix("/etc/") else {
            return Err(ControllerError::Harness {
                what: format!("fixed certificate path {path}"),
                source: "only paths under /etc are provided".into(),
            });
        };
        let parent = Path::new("/etc").join(rest);
        let parent = parent.parent().unwrap_or(Path::new("/etc"));
        script.push_str(&format!(
            "mkdir -p {}\nln -sfn {} {path}\n",
            parent.display(),
            cert_dir.display()
        ));
    }
    script.push_str("exec \"$@\"\n");
    let wrapper = dir.join("private-etc.sh");
    std::fs::write(&wrapper, script).map_err(harness("writing the mount wrapper"))?;
    let mut wrapped = vec![
        "--mount".to_owned(),
        "--propagation".to_owned(),
        "private".to_owned(),
        "--".to_owned(),
        "sh".to_owned(),
        wrapper.display().to_string(),
        bin.display().to_string(),
    ];
    wrapped.extend(args.iter().cloned());
    Ok((PathBuf::from("unshare"), wrapped))
}
