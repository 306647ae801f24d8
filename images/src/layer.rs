//! One layer from a directory tree: a gzipped tar whose bytes depend only on
//! the tree's names, contents, symlinks and executable bits, so the same
//! inputs give the same digest on any machine. Entries are sorted, owned by
//! 0:0, dated at the given time, and their modes are normalized (0755 for
//! directories and executables, 0644 for other files): the staging tree's
//! umask and timestamps do not leak in.

use crate::{Error, sha256_digest};
use flate2::Compression;
use flate2::write::GzEncoder;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A finished layer blob.
#[derive(Clone, Debug)]
pub struct Layer {
    /// The gzipped tar.
    pub blob: Vec<u8>,
    /// sha256 of `blob`: its name in the layout.
    pub digest: String,
    /// sha256 of the uncompressed tar: the config's `rootfs.diff_ids`.
    pub diff_id: String,
}

/// Tars and gzips everything under `root` (not `root` itself).
pub fn from_dir(root: &Path, mtime: u64) -> Result<Layer, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    append_children(&mut builder, root, "", mtime)?;
    let tar = builder.into_inner().map_err(Error::io(root.display()))?;
    Ok(finish(tar))
}

/// Gzips a tar: the gzip header carries no name and no time (flate2's
/// default), so only the tar's bytes decide the blob's.
pub fn finish(tar: Vec<u8>) -> Layer {
    let diff_id = sha256_digest(&tar);
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    std::io::Write::write_all(&mut gz, &tar).expect("writing to a Vec cannot fail");
    let blob = gz.finish().expect("writing to a Vec cannot fail");
    Layer {
        digest: sha256_digest(&blob),
        blob,
        diff_id,
    }
}

fn append_children(
    builder: &mut tar::Builder<Vec<u8>>,
    dir: &Path,
    prefix: &str,
    mtime: u64,
) -> Result<(), Error> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(Error::io(dir.display()))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(Error::io(dir.display()))?;
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let name = name.to_str().ok_or_else(|| Error::Unsupported {
            path: path.display().to_string(),
            what: "a name that is not UTF-8".into(),
        })?;
        let in_tar = format!("{prefix}{name}");
        let meta = std::fs::symlink_metadata(&path).map_err(Error::io(path.display()))?;
        let mut header = tar::Header::new_gnu();
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(mtime);
        let kind = meta.file_type();
        if kind.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            builder
                .append_data(&mut header, format!("{in_tar}/"), std::io::empty())
                .map_err(Error::io(path.display()))?;
            append_children(builder, &path, &format!("{in_tar}/"), mtime)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(Error::io(path.display()))?;
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            builder
                .append_link(&mut header, &in_tar, &target)
                .map_err(Error::io(path.display()))?;
        } else if kind.is_file() {
            let data = std::fs::read(&path).map_err(Error::io(path.display()))?;
            let executable = meta.permissions().mode() & 0o111 != 0;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if executable { 0o755 } else { 0o644 });
            header.set_size(data.len() as u64);
            builder
                .append_data(&mut header, &in_tar, data.as_slice())
                .map_err(Error::io(path.display()))?;
        } else {
            return Err(Error::Unsupported {
                path: path.display().to_string(),
                what: format!("{kind:?}"),
            });
        }
    }
    Ok(())
}
