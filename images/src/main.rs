//! gputopo-oci: builds, checks and unpacks gputopo's OCI image archives
//! (scripts/images drives it; see "Images" in docs/deploy.md).

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use gputopo_images::dockerfile;
use gputopo_images::inspect::{self, Archive, Expect};
use gputopo_images::layout::{self, BuildInput, PlatformInput};
use gputopo_images::spec::{self, Arch, Component};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    version,
    about = "Builds and checks gputopo's OCI image archives without a container engine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Writes one multi-platform image as an oci-archive.
    Build {
        /// agent, device-plugin or scheduler.
        #[arg(long)]
        component: Component,
        /// The tag and version label.
        #[arg(long, default_value = spec::VERSION)]
        tag: String,
        /// The source revision (git commit) for the revision label.
        #[arg(long)]
        revision: String,
        /// Seconds since the epoch for `created` and file times (SOURCE_DATE_EPOCH).
        #[arg(long, env = "SOURCE_DATE_EPOCH")]
        created: u64,
        /// ARCH=DIR[,DIR...]: one platform's layers, bottom first, each from a directory.
        #[arg(long = "platform", required = true, value_parser = parse_platform)]
        platforms: Vec<PlatformInput>,
        /// KEY=VALUE: a label beyond the spec's.
        #[arg(long = "label", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        /// Where to write the archive.
        #[arg(long)]
        out: PathBuf,
    },
    /// Checks an archive against its component's spec.
    Check {
        #[arg(long)]
        component: Component,
        #[arg(long, default_value = spec::VERSION)]
        tag: String,
        #[arg(long)]
        revision: String,
        /// The architectures the index must list (default: amd64 and arm64).
        #[arg(long = "arch")]
        arches: Vec<Arch>,
        archive: PathBuf,
    },
    /// Writes the three Dockerfiles and their .dockerignore files from
    /// their one template (images/src/dockerfile.rs).
    Dockerfiles {
        /// The repository root.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Writes one platform's merged layers into a directory.
    Unpack {
        #[arg(long)]
        arch: Arch,
        archive: PathBuf,
        dir: PathBuf,
    },
}

fn parse_platform(s: &str) -> Result<PlatformInput, String> {
    let (arch, dirs) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected ARCH=DIR[,DIR...], e.g. arm64=base,app"))?;
    let layer_dirs: Vec<PathBuf> = dirs
        .split(',')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    if layer_dirs.is_empty() {
        return Err(format!("'{s}': no layer directory after '='"));
    }
    Ok(PlatformInput {
        arch: arch.parse::<Arch>().map_err(|e| e.to_string())?,
        layer_dirs,
    })
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected KEY=VALUE"))?;
    if key.is_empty() {
        return Err(format!("'{s}': empty label key"));
    }
    Ok((key.to_string(), value.to_string()))
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Build {
            component,
            tag,
            revision,
            created,
            platforms,
            labels,
            out,
        } => {
            let mut seen = Vec::new();
            for p in &platforms {
                if seen.contains(&p.arch) {
                    bail!("--platform {} given twice", p.arch);
                }
                seen.push(p.arch);
            }
            let input = BuildInput {
                spec: component.spec(),
                tag,
                revision,
                created,
                extra_labels: labels,
                platforms,
            };
            let bytes = layout::build(&input)?;
            let tmp = out.with_extension("tmp");
            std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &out).with_context(|| format!("writing {}", out.display()))?;
            println!("{}: {} bytes", out.display(), bytes.len());
        }
        Command::Check {
            component,
            tag,
            revision,
            arches,
            archive,
        } => {
            let arches = if arches.is_empty() {
                Arch::ALL.to_vec()
            } else {
                arches
            };
            let spec = component.spec();
            let expect = Expect {
                tag,
                revision,
                arches,
            };
            let archive = Archive::read(&archive)?;
            for line in inspect::check(&archive, &spec, &expect)? {
                println!("ok: {line}");
            }
        }
        Command::Dockerfiles { root } => {
            for (path, text) in dockerfile::generated() {
                let file = root.join(&path);
                std::fs::write(&file, text)
                    .with_context(|| format!("writing {}", file.display()))?;
                println!("{path}");
            }
        }
        Command::Unpack { arch, archive, dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            inspect::unpack(&Archive::read(&archive)?, arch, &dir)?;
        }
    }
    Ok(())
}
