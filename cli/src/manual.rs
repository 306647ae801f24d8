//! `gputopo completions <shell>` and `gputopo man [--out DIR]`: generated
//! from the command line itself (clap_complete, clap_mangen), so what a
//! shell completes and a page lists are what this build takes. The daemons
//! write theirs with `gputopo_ops::man`, which this crate cannot use (it
//! would pull the Kubernetes client in; cli/tests/dependencies.rs).

use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// A page could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {source}")]
pub struct ManualError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The completion script of `cmd` for `shell`, for the shell to source.
pub fn completions(mut cmd: clap::Command, shell: Shell) -> String {
    let name = cmd.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// One manual page, section 1.
#[derive(Clone, Debug)]
pub struct Page {
    /// `gputopo.1`, `gputopo-place.1`, ...
    pub file_name: String,
    pub roff: String,
}

/// `cmd`'s page first, then one per subcommand, nested ones included
/// (hidden ones and clap's `help` left out, as `clap_mangen::generate_to`
/// does).
pub fn pages(cmd: clap::Command) -> Vec<Page> {
    let mut cmd = cmd.disable_help_subcommand(true);
    // Built once at the top, so each subcommand's page is named
    // `gputopo-<subcommand>`.
    cmd.build();
    let mut out = Vec::new();
    collect(cmd, &mut out);
    out
}

fn collect(cmd: clap::Command, out: &mut Vec<Page>) {
    let subcommands: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let man = clap_mangen::Man::new(cmd);
    let mut roff = Vec::new();
    // Rendering into a Vec cannot fail.
    let _ = man.render(&mut roff);
    out.push(Page {
        file_name: man.get_filename(),
        roff: String::from_utf8_lossy(&roff).into_owned(),
    });
    for sub in subcommands {
        collect(sub, out);
    }
}

/// Writes every page of `cmd` into `dir` (made if missing); their paths.
pub fn write_pages(cmd: clap::Command, dir: &Path) -> Result<Vec<PathBuf>, ManualError> {
    std::fs::create_dir_all(dir).map_err(|source| ManualError {
        path: dir.to_path_buf(),
        source,
    })?;
    pages(cmd)
        .iter()
        .map(|page| {
            let path = dir.join(&page.file_name);
            std::fs::write(&path, &page.roff)
                .map(|()| path.clone())
                .map_err(|source| ManualError { path, source })
        })
        .collect()
}
