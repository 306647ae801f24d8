//! `<daemon> man [--out DIR]`: each daemon prints its own manual pages,
//! generated from its command line (clap_mangen), so the flags and
//! environment twins a page lists are the ones the binary takes. The
//! daemons run in images; an operator writes their pages on a workstation
//! from the same release (docs/cli.md, "Shell completion and man pages").

use std::path::PathBuf;

/// `man`'s flags.
#[derive(clap::Args, Clone, Debug)]
pub struct ManArgs {
    /// Write every page (the binary's, and one per subcommand:
    /// <binary>-<subcommand>.1) into DIR, e.g. ~/.local/share/man/man1;
    /// without it, print the binary's own page (roff, for `man -l -`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Why the pages could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ManError {
    #[error("writing the manual page to stdout: {0}")]
    Stdout(#[source] std::io::Error),
    #[error("writing {path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One manual page, section 1.
#[derive(Clone, Debug)]
pub struct Page {
    /// `gputopo-scheduler.1`, `gputopo-scheduler-run.1`, ...
    pub file_name: String,
    pub roff: String,
}

/// `cmd`'s page first, then one per subcommand, nested ones included
/// (hidden ones and clap's `help` left out, as `clap_mangen::generate_to`
/// does).
pub fn pages(cmd: clap::Command) -> Vec<Page> {
    let mut cmd = cmd.disable_help_subcommand(true);
    // Built once at the top, so each subcommand's page is named
    // `<binary>-<subcommand>` and lists the global flags it inherits.
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

/// Runs `man`: with `--out`, writes every page of `cmd` into the folder
/// (made if missing) and returns their paths; without, prints the top page.
pub fn run(cmd: clap::Command, args: &ManArgs) -> Result<Vec<PathBuf>, ManError> {
    let pages = pages(cmd);
    let Some(dir) = &args.out else {
        use std::io::Write;
        let top = pages.first().map(|p| p.roff.as_bytes()).unwrap_or_default();
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(top)
            .and_then(|()| stdout.flush())
            .map_err(ManError::Stdout)?;
        return Ok(Vec::new());
    };
    std::fs::create_dir_all(dir).map_err(|source| ManError::File {
        path: dir.clone(),
        source,
    })?;
    pages
        .iter()
        .map(|page| {
            let path = dir.join(&page.file_name);
            std::fs::write(&path, &page.roff)
                .map(|()| path.clone())
                .map_err(|source| ManError::File { path, source })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    #[derive(Parser)]
    #[command(name = "d", version, about = "A daemon")]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Subcommand)]
    enum Command {
        /// Run it.
        Run {
            /// Where.
            #[arg(long, env = "D_WHERE")]
            place: String,
        },
        Man(ManArgs),
    }

    #[test]
    fn every_command_gets_a_page_with_its_flags_and_variables() {
        let pages = pages(Cli::command());
        let names: Vec<&str> = pages.iter().map(|p| p.file_name.as_str()).collect();
        assert_eq!(names, ["d.1", "d-run.1", "d-man.1"]);
        let run = &pages[1].roff;
        assert!(
            run.contains("\\-\\-place") && run.contains("D_WHERE"),
            "{run}"
        );
        assert!(pages[0].roff.contains("d\\-run(1)"), "{}", pages[0].roff);
    }

    #[test]
    fn out_writes_every_page_into_the_folder() {
        let dir = std::env::temp_dir().join(format!("gputopo-ops-man-{}", std::process::id()));
        let written = run(
            Cli::command(),
            &ManArgs {
                out: Some(dir.join("man1")),
            },
        )
        .expect("written");
        assert_eq!(written.len(), 3);
        for path in &written {
            let text = std::fs::read_to_string(path).expect("a page");
            assert!(text.starts_with(".ie"), "{}: {text}", path.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
