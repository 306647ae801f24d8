//! Reads an `oci-archive` back, as a registry or runtime would (every blob
//! checked against its digest), and checks each platform's image against
//! its spec: architecture, user, entrypoint, command, ports, labels, layer
//! digests, and the binary itself (its ELF machine, its loader present in
//! the image or absent for a static one, its user in /etc/passwd).

use crate::oci::{self, Descriptor, ImageConfig, Index, Manifest, Platform};
use crate::spec::{self, Arch, Base, ImageSpec};
use crate::{Error, elf, sha256_digest};
use flate2::read::GzDecoder;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// An archive's files, by path inside it.
pub struct Archive {
    name: String,
    files: BTreeMap<String, Vec<u8>>,
}

/// One architecture's image, its blobs verified.
pub struct PlatformImage {
    pub platform: Platform,
    pub config: ImageConfig,
    /// Each layer's uncompressed tar, bottom first.
    pub layer_tars: Vec<Vec<u8>>,
}

/// What a path in the image's merged layers is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Dir,
    File { mode: u32, data: Vec<u8> },
    Symlink(String),
}

impl Archive {
    pub fn read(path: &Path) -> Result<Archive, Error> {
        let bytes = std::fs::read(path).map_err(Error::io(path.display()))?;
        Archive::from_bytes(&path.display().to_string(), &bytes)
    }

    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Archive, Error> {
        let bad = |what: String| Error::Archive {
            archive: name.to_string(),
            what,
        };
        let mut files = BTreeMap::new();
        let mut tar = tar::Archive::new(bytes);
        for entry in tar.entries().map_err(|e| bad(format!("not a tar: {e}")))? {
            let mut entry = entry.map_err(|e| bad(format!("bad tar entry: {e}")))?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let path = entry
                .path()
                .map_err(|e| bad(format!("bad path: {e}")))?
                .to_string_lossy()
                .trim_start_matches("./")
                .to_string();
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| bad(format!("{path}: {e}")))?;
            files.insert(path, data);
        }
        Ok(Archive {
            name: name.to_string(),
            files,
        })
    }

    fn bad(&self, what: impl Into<String>) -> Error {
        Error::Archive {
            archive: self.name.clone(),
            what: what.into(),
        }
    }

    fn json<T: serde::de::DeserializeOwned>(&self, what: &str, bytes: &[u8]) -> Result<T, Error> {
        serde_json::from_slice(bytes).map_err(|source| Error::Json {
            what: format!("{}: {what}", self.name),
            source,
        })
    }

    /// The blob a descriptor names, checked against its digest and size.
    pub fn blob(&self, descriptor: &Descriptor) -> Result<&[u8], Error> {
        let hex = descriptor
            .digest
            .strip_prefix("sha256:")
            .ok_or_else(|| self.bad(format!("digest {} is not sha256", descriptor.digest)))?;
        let bytes = self
            .files
            .get(&format!("blobs/sha256/{hex}"))
            .ok_or_else(|| self.bad(format!("blob {} missing", descriptor.digest)))?;
        if sha256_digest(bytes) != descriptor.digest {
            return Err(self.bad(format!(
                "blob {} does not hash to its name",
                descriptor.digest
            )));
        }
        if bytes.len() as u64 != descriptor.size {
            return Err(self.bad(format!(
                "blob {} is {} bytes, its descriptor says {}",
                descriptor.digest,
                bytes.len(),
                descriptor.size
            )));
        }
        Ok(bytes)
    }

    /// The tag `index.json` gives the image, and the image index it names.
    pub fn top(&self) -> Result<(String, Index), Error> {
        let marker = self
            .files
            .get("oci-layout")
            .ok_or_else(|| self.bad("no oci-layout file: not an OCI image layout"))?;
        let marker: oci::LayoutMarker = self.json("oci-layout", marker)?;
        if marker.image_layout_version != "1.0.0" {
            return Err(self.bad(format!(
                "imageLayoutVersion {}, expected 1.0.0",
                marker.image_layout_version
            )));
        }
        let top = self
            .files
            .get("index.json")
            .ok_or_else(|| self.bad("no index.json"))?;
        let top: Index = self.json("index.json", top)?;
        let [image] = top.manifests.as_slice() else {
            return Err(self.bad(format!(
                "index.json lists {} entries; one image index expected",
                top.manifests.len()
            )));
        };
        if image.media_type != oci::MEDIA_INDEX {
            return Err(self.bad(format!(
                "index.json's entry is {}, not an image index",
                image.media_type
            )));
        }
        let tag = image
            .annotations
            .get(oci::REF_NAME)
            .cloned()
            .unwrap_or_default();
        let index: Index = self.json("image index", self.blob(image)?)?;
        Ok((tag, index))
    }

    /// Every platform's image, every blob verified on the way.
    pub fn images(&self) -> Result<Vec<PlatformImage>, Error> {
        let (_, index) = self.top()?;
        let mut images = Vec::new();
        for descriptor in &index.manifests {
            let platform = descriptor.platform.clone().ok_or_else(|| {
                self.bad(format!("manifest {} has no platform", descriptor.digest))
            })?;
            let manifest: Manifest = self.json("manifest", self.blob(descriptor)?)?;
            let config: ImageConfig = self.json("image config", self.blob(&manifest.config)?)?;
            let mut layer_tars = Vec::new();
            for layer in &manifest.layers {
                if layer.media_type != oci::MEDIA_LAYER_GZIP {
                    return Err(self.bad(format!("layer media type {}", layer.media_type)));
                }
                let mut tar = Vec::new();
                GzDecoder::new(self.blob(layer)?)
                    .read_to_end(&mut tar)
                    .map_err(|e| self.bad(format!("layer {}: {e}", layer.digest)))?;
                layer_tars.push(tar);
            }
            images.push(PlatformImage {
                platform,
                config,
                layer_tars,
            });
        }
        Ok(images)
    }
}

impl PlatformImage {
    /// The merged file tree of all layers (a later layer's entry wins).
    pub fn files(&self) -> Result<BTreeMap<String, Entry>, Error> {
        let mut files = BTreeMap::new();
        for tar in &self.layer_tars {
            let bad = |e: std::io::Error| Error::Archive {
                archive: format!("a layer of the {} image", self.platform.architecture),
                what: e.to_string(),
            };
            let mut archive = tar::Archive::new(tar.as_slice());
            for entry in archive.entries().map_err(bad)? {
                let mut entry = entry.map_err(bad)?;
                let path = normalize(&entry.path().map_err(bad)?.to_string_lossy());
                let kind = entry.header().entry_type();
                let value = match kind {
                    tar::EntryType::Directory => Entry::Dir,
                    tar::EntryType::Symlink => Entry::Symlink(
                        entry
                            .link_name()
                            .map_err(bad)?
                            .map(|l| l.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    ),
                    _ => {
                        let mode = entry.header().mode().map_err(bad)?;
                        let mut data = Vec::new();
                        entry.read_to_end(&mut data).map_err(bad)?;
                        Entry::File { mode, data }
                    }
                };
                files.insert(path, value);
            }
        }
        Ok(files)
    }
}

/// `usr/local/bin/x` for `/usr/local/bin/x`, `./usr/local/bin/x/` and the like.
fn normalize(path: &str) -> String {
    path.trim_start_matches("./").trim_matches('/').to_string()
}

/// Follows symlinks (absolute or relative, at most 16) inside the image
/// to a regular file, as the kernel would find the loader.
pub fn resolve<'a>(files: &'a BTreeMap<String, Entry>, path: &str) -> Option<&'a Entry> {
    let mut current = normalize(path);
    for _ in 0..16 {
        match files.get(&current)? {
            Entry::Symlink(target) if target.starts_with('/') => current = normalize(target),
            Entry::Symlink(target) => {
                let mut parts: Vec<&str> = current.split('/').collect();
                parts.pop();
                for part in target.split('/') {
                    match part {
                        "" | "." => {}
                        ".." => {
                            parts.pop();
                        }
                        part => parts.push(part),
                    }
                }
                current = parts.join("/");
            }
            entry => return Some(entry),
        }
    }
    None
}

/// What the check expects beyond the spec.
#[derive(Clone, Debug)]
pub struct Expect {
    pub tag: String,
    pub revision: String,
    pub arches: Vec<Arch>,
}

/// Checks the archive against the spec; on success, one line per platform
/// saying what was found.
pub fn check(archive: &Archive, spec: &ImageSpec, expect: &Expect) -> Result<Vec<String>, Error> {
    let mut problems = Vec::new();
    let (tag, _) = archive.top()?;
    if tag != expect.tag {
        problems.push(format!(
            "index.json names tag '{tag}', expected '{}'",
            expect.tag
        ));
    }
    let images = archive.images()?;
    let mut found = Vec::new();
    let mut summary = Vec::new();
    for image in &images {
        let Some(arch) = expect
            .arches
            .iter()
            .copied()
            .find(|a| crate::layout::platform_of(*a) == image.platform)
        else {
            problems.push(format!("unexpected platform {:?}", image.platform));
            continue;
        };
        if found.contains(&arch) {
            problems.push(format!("{arch} listed twice"));
        }
        found.push(arch);
        let before = problems.len();
        let line = check_platform(image, arch, spec, expect, &mut problems)?;
        if problems.len() == before {
            summary.push(line);
        }
    }
    for arch in &expect.arches {
        if !found.contains(arch) {
            problems.push(format!("no {arch} image in the index"));
        }
    }
    if problems.is_empty() {
        Ok(summary)
    } else {
        Err(Error::Check {
            image: format!("{} ({})", archive.name, spec.name),
            problems,
        })
    }
}

fn check_platform(
    image: &PlatformImage,
    arch: Arch,
    spec: &ImageSpec,
    expect: &Expect,
    problems: &mut Vec<String>,
) -> Result<String, Error> {
    let mut problem = |what: String| problems.push(format!("{arch}: {what}"));
    let config = &image.config;
    if config.architecture != arch.oci_name() || config.os != "linux" {
        problem(format!("config says {}/{}", config.os, config.architecture));
    }
    if config.variant.as_deref() != arch.variant() {
        problem(format!(
            "config variant {:?}, expected {:?}",
            config.variant,
            arch.variant()
        ));
    }
    let run = &config.config;
    if run.user != spec.user {
        problem(format!("User '{}', expected '{}'", run.user, spec.user));
    }
    if run.entrypoint != spec.entrypoint() {
        problem(format!(
            "Entrypoint {:?}, expected {:?}",
            run.entrypoint,
            spec.entrypoint()
        ));
    }
    if run.cmd != spec.cmd {
        problem(format!("Cmd {:?}, expected {:?}", run.cmd, spec.cmd));
    }
    let ports: Vec<String> = spec
        .exposed_ports
        .iter()
        .map(|p| format!("{p}/tcp"))
        .collect();
    if !run.exposed_ports.keys().eq(ports.iter()) {
        problem(format!(
            "ExposedPorts {:?}, expected {ports:?}",
            run.exposed_ports.keys()
        ));
    }
    for env in spec::ENV {
        if !run.env.iter().any(|e| e == env) {
            problem(format!("Env lacks {env}"));
        }
    }
    for (key, value) in spec.labels(&expect.tag, &expect.revision) {
        match run.labels.get(key) {
            Some(v) if *v == value => {}
            other => problem(format!("label {key} is {other:?}, expected '{value}'")),
        }
    }
    let diff_ids: Vec<String> = image.layer_tars.iter().map(|t| sha256_digest(t)).collect();
    if config.rootfs.diff_ids != diff_ids {
        problem("rootfs.diff_ids do not match the layers' contents".to_string());
    }
    let files = image.files()?;
    let binary = spec.binary_path();
    let Some(Entry::File { mode, data }) = files.get(&normalize(&binary)) else {
        problem(format!("{binary} is not a regular file in the layers"));
        return Ok(String::new());
    };
    if mode & 0o111 == 0 {
        problem(format!("{binary} is not executable (mode {mode:o})"));
    }
    let facts = elf::read(&binary, data)?;
    if facts.machine != arch.elf_machine() {
        problem(format!(
            "{binary} is ELF machine {}, expected {} for {arch}",
            facts.machine,
            arch.elf_machine()
        ));
    }
    let linking = match (spec.base, &facts.interpreter) {
        (Base::Glibc, Some(loader)) => {
            if !matches!(resolve(&files, loader), Some(Entry::File { .. })) {
                problem(format!("{binary}'s loader {loader} is not in the image"));
            }
            format!("dynamic, loader {loader} present")
        }
        (Base::Glibc, None) => {
            problem(format!(
                "{binary} is static; it must be dynamic to dlopen NVML"
            ));
            String::new()
        }
        (Base::Static, Some(loader)) => {
            problem(format!(
                "{binary} wants loader {loader}; this image has no libc"
            ));
            String::new()
        }
        (Base::Static, None) => "static".to_string(),
    };
    let passwd = match files.get("etc/passwd") {
        Some(Entry::File { data, .. }) => String::from_utf8_lossy(data).into_owned(),
        _ => String::new(),
    };
    if !passwd
        .lines()
        .any(|l| l.split(':').nth(2) == Some(spec.uid()))
    {
        problem(format!("/etc/passwd has no user with uid {}", spec.uid()));
    }
    let size: usize = image.layer_tars.iter().map(Vec::len).sum();
    Ok(format!(
        "{arch}: {} user {}, entrypoint {binary} ({linking}), {} layers, {:.1} MiB unpacked",
        spec.name,
        run.user,
        image.layer_tars.len(),
        size as f64 / (1024.0 * 1024.0)
    ))
}

/// Writes one platform's merged layers under `dir`, for running the binary
/// against the image's own libraries (`qemu-aarch64-static -L dir …`).
pub fn unpack(archive: &Archive, arch: Arch, dir: &Path) -> Result<(), Error> {
    let platform = crate::layout::platform_of(arch);
    let images = archive.images()?;
    let image = images
        .iter()
        .find(|i| i.platform == platform)
        .ok_or_else(|| archive.bad(format!("no {arch} image in the index")))?;
    for tar in &image.layer_tars {
        tar::Archive::new(tar.as_slice())
            .unpack(dir)
            .map_err(Error::io(dir.display()))?;
    }
    Ok(())
}
