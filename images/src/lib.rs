//! gputopo's container images, built as OCI image archives without a
//! container engine, and checked by reading those archives back.
//!
//! `scripts/images` stages each platform's root filesystem (a Debian 12
//! glibc base or nothing but `/etc`, and the binary `scripts/static-build`
//! made) and calls `gputopo-oci build`; [`spec`] says what each image's
//! configuration is (user, entrypoint, ports, labels), and [`dockerfile`]
//! renders the Dockerfiles from it. [`layout`] writes deterministic layers,
//! configs, manifests and one multi-platform index into an `oci-archive` (the tar of an OCI image
//! layout that `skopeo copy --all oci-archive:…` pushes); [`inspect`] reads
//! one back and checks it against its spec.

pub mod dockerfile;
pub mod elf;
pub mod inspect;
pub mod layer;
pub mod layout;
pub mod oci;
pub mod spec;

pub use spec::{Arch, Base, Component, ImageSpec};

/// Everything that can go wrong building or reading an image.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what} (layers hold directories, regular files and symlinks only)")]
    Unsupported { path: String, what: String },
    #[error("{what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{archive}: {what}")]
    Archive { archive: String, what: String },
    #[error("{path}: not an ELF file this check reads: {what}")]
    Elf { path: String, what: String },
    #[error("{image} does not hold what its spec says:\n  - {}", problems.join("\n  - "))]
    Check {
        image: String,
        problems: Vec<String>,
    },
}

impl Error {
    pub(crate) fn io(path: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_string();
        move |source| Error::Io { path, source }
    }
}

/// `sha256:<hex>` of some bytes: how OCI names blobs and layer contents.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest.as_ref() {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}
