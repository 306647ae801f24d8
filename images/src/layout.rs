//! An OCI image layout holding one multi-platform image, written as an
//! `oci-archive` (the layout's files in one tar): `index.json` names a
//! single image index (annotated with the tag, so `skopeo copy --all
//! oci-archive:FILE docker://REPO:TAG` finds it), which lists one manifest
//! per architecture; each manifest has its config and its layers.

use crate::layer::{self, Layer};
use crate::oci::{self, Descriptor, ImageConfig, Index, LayoutMarker, Manifest, Platform};
use crate::spec::{self, Arch, ImageSpec};
use crate::{Error, sha256_digest};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One architecture's root filesystem, as directories, one layer each
/// (bottom first).
#[derive(Clone, Debug)]
pub struct PlatformInput {
    pub arch: Arch,
    pub layer_dirs: Vec<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct BuildInput {
    pub spec: ImageSpec,
    /// The tag, and the `org.opencontainers.image.version` label.
    pub tag: String,
    /// The source revision (git commit), the `…image.revision` label.
    pub revision: String,
    /// Seconds since the epoch for `created` and every file's mtime: the
    /// commit's time (SOURCE_DATE_EPOCH), so a rebuild is byte-identical.
    pub created: u64,
    /// Labels beyond the spec's (e.g. which Debian packages the base is).
    pub extra_labels: Vec<(String, String)>,
    pub platforms: Vec<PlatformInput>,
}

/// Blobs by digest: what `blobs/sha256/` will hold.
#[derive(Default)]
struct Blobs(BTreeMap<String, Vec<u8>>);

impl Blobs {
    fn add(&mut self, media_type: &str, bytes: Vec<u8>) -> Descriptor {
        let digest = sha256_digest(&bytes);
        let descriptor = Descriptor {
            media_type: media_type.to_string(),
            digest: digest.clone(),
            size: bytes.len() as u64,
            platform: None,
            annotations: BTreeMap::new(),
        };
        self.0.insert(digest, bytes);
        descriptor
    }

    fn add_layer(&mut self, layer: Layer) -> Descriptor {
        let descriptor = self.add(oci::MEDIA_LAYER_GZIP, layer.blob);
        debug_assert_eq!(descriptor.digest, layer.digest);
        descriptor
    }
}

fn json<T: serde::Serialize>(what: &str, value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(|source| Error::Json {
        what: what.to_string(),
        source,
    })
}

/// Builds the image and returns the `oci-archive` bytes.
pub fn build(input: &BuildInput) -> Result<Vec<u8>, Error> {
    let created = oci::rfc3339(input.created);
    let mut blobs = Blobs::default();
    let mut manifests = Vec::new();
    for platform in &input.platforms {
        let mut layers = Vec::new();
        let mut diff_ids = Vec::new();
        let mut history = Vec::new();
        for dir in &platform.layer_dirs {
            let layer = layer::from_dir(dir, input.created)?;
            diff_ids.push(layer.diff_id.clone());
            history.push(oci::History {
                created: created.clone(),
                created_by: format!(
                    "scripts/images: {}",
                    dir.file_name().unwrap_or_default().to_string_lossy()
                ),
            });
            layers.push(blobs.add_layer(layer));
        }
        let config = image_config(input, platform.arch, &created, diff_ids, history);
        let config = blobs.add(oci::MEDIA_CONFIG, json("image config", &config)?);
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(oci::MEDIA_MANIFEST.to_string()),
            config,
            layers,
        };
        let mut descriptor = blobs.add(oci::MEDIA_MANIFEST, json("manifest", &manifest)?);
        descriptor.platform = Some(platform_of(platform.arch));
        manifests.push(descriptor);
    }
    let index = Index {
        schema_version: 2,
        media_type: Some(oci::MEDIA_INDEX.to_string()),
        manifests,
    };
    let mut index = blobs.add(oci::MEDIA_INDEX, json("image index", &index)?);
    index
        .annotations
        .insert(oci::REF_NAME.to_string(), input.tag.clone());
    let top = Index {
        schema_version: 2,
        media_type: Some(oci::MEDIA_INDEX.to_string()),
        manifests: vec![index],
    };
    let marker = LayoutMarker {
        image_layout_version: "1.0.0".to_string(),
    };
    archive(
        &json("oci-layout", &marker)?,
        &json("index.json", &top)?,
        &blobs,
        input.created,
    )
}

pub fn platform_of(arch: Arch) -> Platform {
    Platform {
        architecture: arch.oci_name().to_string(),
        os: "linux".to_string(),
        variant: arch.variant().map(str::to_string),
    }
}

fn image_config(
    input: &BuildInput,
    arch: Arch,
    created: &str,
    diff_ids: Vec<String>,
    history: Vec<oci::History>,
) -> ImageConfig {
    let spec = &input.spec;
    let mut labels: BTreeMap<String, String> = spec
        .labels(&input.tag, &input.revision)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    labels.extend(input.extra_labels.iter().cloned());
    ImageConfig {
        created: created.to_string(),
        architecture: arch.oci_name().to_string(),
        os: "linux".to_string(),
        variant: arch.variant().map(str::to_string),
        config: oci::RunConfig {
            user: spec.user.to_string(),
            exposed_ports: spec
                .exposed_ports
                .iter()
                .map(|p| (format!("{p}/tcp"), oci::Empty {}))
                .collect(),
            env: spec::ENV.iter().map(|e| e.to_string()).collect(),
            entrypoint: spec.entrypoint(),
            cmd: spec.cmd.iter().map(|c| c.to_string()).collect(),
            labels,
        },
        rootfs: oci::RootFs {
            kind: "layers".to_string(),
            diff_ids,
        },
        history,
    }
}

/// The layout's files in one tar, sorted, 0:0, dated `mtime`.
fn archive(marker: &[u8], index: &[u8], blobs: &Blobs, mtime: u64) -> Result<Vec<u8>, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8], dir: bool| {
        let mut header = tar::Header::new_gnu();
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(mtime);
        header.set_size(data.len() as u64);
        if dir {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
        } else {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(0o644);
        }
        builder
            .append_data(&mut header, path, data)
            .map_err(Error::io(path))
    };
    add("blobs/", &[], true)?;
    add("blobs/sha256/", &[], true)?;
    for (digest, bytes) in &blobs.0 {
        let hex = digest.trim_start_matches("sha256:");
        add(&format!("blobs/sha256/{hex}"), bytes, false)?;
    }
    add("index.json", index, false)?;
    add("oci-layout", marker, false)?;
    builder.into_inner().map_err(Error::io("oci-archive"))
}
