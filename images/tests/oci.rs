//! Images built from staged trees with fake ELF binaries (the real ones are
//! scripts/images' business), read back and checked: what a good image
//! passes, and that each kind of wrong image is refused with its reason.

use gputopo_images::inspect::{self, Archive, Entry, Expect};
use gputopo_images::layout::{self, BuildInput, PlatformInput};
use gputopo_images::spec::{Arch, Base, Component, ImageSpec};
use gputopo_images::{Error, elf};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

const REVISION: &str = "0123456789abcdef0123456789abcdef01234567";
const CREATED: u64 = 1_700_000_000;

fn loader(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "/lib64/ld-linux-x86-64.so.2",
        Arch::Arm64 => "/lib/ld-linux-aarch64.so.1",
    }
}

fn write(path: &Path, data: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// What a staged platform gets wrong, if anything.
#[derive(Default, Clone, Copy)]
struct Faults {
    binary_for: Option<Arch>,
    no_loader: bool,
    no_nonroot_user: bool,
    dynamic_binary: bool,
}

/// A base layer (passwd, and a glibc loader as Debian's libc6 lays it out)
/// and an app layer with the binary, as scripts/images stages them.
fn stage(root: &Path, spec: &ImageSpec, arch: Arch, faults: Faults) -> PlatformInput {
    let base = root.join(format!("{arch}/base"));
    let app = root.join(format!("{arch}/app"));
    let passwd = if faults.no_nonroot_user {
        "root:x:0:0:root:/root:/sbin/nologin\n"
    } else {
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
    };
    write(&base.join("etc/passwd"), passwd.as_bytes(), 0o600);
    if spec.base == Base::Glibc && !faults.no_loader {
        match arch {
            Arch::Amd64 => {
                write(
                    &base.join("lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
                    b"ld",
                    0o755,
                );
                std::fs::create_dir_all(base.join("lib64")).unwrap();
                // Debian's libc6: an absolute link.
                symlink(
                    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                    base.join("lib64/ld-linux-x86-64.so.2"),
                )
                .unwrap();
            }
            Arch::Arm64 => {
                write(
                    &base.join("lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"),
                    b"ld",
                    0o755,
                );
                // Debian's libc6:arm64: a relative link.
                symlink(
                    "aarch64-linux-gnu/ld-linux-aarch64.so.1",
                    base.join("lib/ld-linux-aarch64.so.1"),
                )
                .unwrap();
            }
        }
    }
    let binary_arch = faults.binary_for.unwrap_or(arch);
    let interp = (spec.base == Base::Glibc || faults.dynamic_binary).then(|| loader(binary_arch));
    let binary = elf::fake(binary_arch.elf_machine(), interp);
    write(
        &app.join(spec.binary_path().trim_start_matches('/')),
        &binary,
        0o700,
    );
    PlatformInput {
        arch,
        layer_dirs: vec![base, app],
    }
}

fn build(root: &Path, component: Component, faults: &[(Arch, Faults)]) -> Vec<u8> {
    let spec = component.spec();
    let platforms = Arch::ALL
        .into_iter()
        .map(|arch| {
            let f = faults.iter().find(|(a, _)| *a == arch).map(|(_, f)| *f);
            stage(root, &spec, arch, f.unwrap_or_default())
        })
        .collect();
    layout::build(&BuildInput {
        spec,
        tag: "0.1.0".into(),
        revision: REVISION.into(),
        created: CREATED,
        extra_labels: vec![("dev.gputopo.base".into(), "test".into())],
        platforms,
    })
    .unwrap()
}

fn expect() -> Expect {
    Expect {
        tag: "0.1.0".into(),
        revision: REVISION.into(),
        arches: Arch::ALL.to_vec(),
    }
}

fn problems(result: Result<Vec<String>, Error>) -> Vec<String> {
    match result {
        Err(Error::Check { problems, .. }) => problems,
        other => panic!("expected a failed check, got {other:?}"),
    }
}

#[test]
fn every_component_built_for_both_arches_passes_its_check() {
    for component in Component::ALL {
        let dir = tempfile::tempdir().unwrap();
        let bytes = build(dir.path(), component, &[]);
        let archive = Archive::from_bytes("test", &bytes).unwrap();
        let lines = inspect::check(&archive, &component.spec(), &expect()).unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("amd64: "), "{lines:?}");
        assert!(lines[1].starts_with("arm64: "), "{lines:?}");
        let images = archive.images().unwrap();
        let config = &images[1].config;
        assert_eq!(config.architecture, "arm64");
        assert_eq!(config.variant.as_deref(), Some("v8"));
        assert_eq!(config.created, "2023-11-14T22:13:20Z");
        assert_eq!(config.config.labels["dev.gputopo.base"], "test");
        assert_eq!(
            config.config.labels["org.opencontainers.image.revision"],
            REVISION
        );
    }
}

#[test]
fn the_same_inputs_give_the_same_bytes_whatever_the_files_dates_and_modes() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    let a = build(first.path(), Component::Agent, &[]);
    let b = build(second.path(), Component::Agent, &[]);
    assert!(a == b, "two builds of the same trees differ");
    // Another mode with the same executable bit and another mtime: same bytes.
    let passwd = second.path().join("amd64/base/etc/passwd");
    std::fs::set_permissions(&passwd, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = std::fs::File::options().write(true).open(&passwd).unwrap();
    file.set_modified(std::time::SystemTime::UNIX_EPOCH)
        .unwrap();
    let spec = Component::Agent.spec();
    let rebuilt = layout::build(&BuildInput {
        spec: spec.clone(),
        tag: "0.1.0".into(),
        revision: REVISION.into(),
        created: CREATED,
        extra_labels: vec![("dev.gputopo.base".into(), "test".into())],
        platforms: Arch::ALL
            .into_iter()
            .map(|arch| PlatformInput {
                arch,
                layer_dirs: vec![
                    second.path().join(format!("{arch}/base")),
                    second.path().join(format!("{arch}/app")),
                ],
            })
            .collect(),
    })
    .unwrap();
    assert!(a == rebuilt, "a mode or mtime leaked into the image");
}

#[test]
fn the_check_names_a_binary_for_the_wrong_arch_a_missing_user_and_a_wrong_revision() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults {
        binary_for: Some(Arch::Arm64),
        no_nonroot_user: true,
        ..Faults::default()
    };
    let bytes = build(dir.path(), Component::Agent, &[(Arch::Amd64, faults)]);
    let archive = Archive::from_bytes("test", &bytes).unwrap();
    let mut wrong = expect();
    wrong.revision = "ffff".into();
    let found = problems(inspect::check(&archive, &Component::Agent.spec(), &wrong));
    let has = |text: &str| found.iter().any(|p| p.contains(text));
    assert!(
        has("amd64: /usr/local/bin/gputopo-agent is ELF machine 183, expected 62"),
        "{found:?}"
    );
    // The arm64 loader the wrong binary asks for is not in the amd64 base.
    assert!(
        has("amd64: /usr/local/bin/gputopo-agent's loader /lib/ld-linux-aarch64.so.1"),
        "{found:?}"
    );
    assert!(
        has("amd64: /etc/passwd has no user with uid 65532"),
        "{found:?}"
    );
    assert!(
        has("arm64: label org.opencontainers.image.revision"),
        "{found:?}"
    );
    assert!(
        !has("arm64: /etc/passwd"),
        "arm64 was staged right: {found:?}"
    );
}

#[test]
fn a_glibc_image_without_its_loader_and_a_static_image_with_one_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let no_loader = Faults {
        no_loader: true,
        ..Faults::default()
    };
    let bytes = build(
        dir.path(),
        Component::DevicePlugin,
        &[(Arch::Arm64, no_loader)],
    );
    let archive = Archive::from_bytes("test", &bytes).unwrap();
    let found = problems(inspect::check(
        &archive,
        &Component::DevicePlugin.spec(),
        &expect(),
    ));
    assert_eq!(
        found,
        [
            "arm64: /usr/local/bin/gputopo-device-plugin's loader /lib/ld-linux-aarch64.so.1 is not in the image"
        ]
    );

    let dir = tempfile::tempdir().unwrap();
    let dynamic = Faults {
        dynamic_binary: true,
        ..Faults::default()
    };
    let bytes = build(dir.path(), Component::Scheduler, &[(Arch::Amd64, dynamic)]);
    let archive = Archive::from_bytes("test", &bytes).unwrap();
    let found = problems(inspect::check(
        &archive,
        &Component::Scheduler.spec(),
        &expect(),
    ));
    assert_eq!(
        found,
        [
            "amd64: /usr/local/bin/gputopo-scheduler wants loader /lib64/ld-linux-x86-64.so.2; this image has no libc"
        ]
    );
}

#[test]
fn an_image_checked_against_another_components_spec_fails_on_user_entrypoint_and_ports() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = build(dir.path(), Component::Agent, &[]);
    let archive = Archive::from_bytes("test", &bytes).unwrap();
    let found = problems(inspect::check(
        &archive,
        &Component::DevicePlugin.spec(),
        &expect(),
    ));
    let has = |text: &str| found.iter().any(|p| p.contains(text));
    assert!(
        has("amd64: User '65532:65532', expected '0:0'"),
        "{found:?}"
    );
    assert!(has("arm64: Entrypoint"), "{found:?}");
    assert!(has("ExposedPorts"), "{found:?}");
    assert!(has("label org.opencontainers.image.title"), "{found:?}");
}

/// The archive's tar with one blob's last byte flipped.
fn tamper(bytes: &[u8]) -> Vec<u8> {
    let mut out = tar::Builder::new(Vec::new());
    let mut tampered = false;
    for entry in tar::Archive::new(bytes).entries().unwrap() {
        let mut entry = entry.unwrap();
        let path: PathBuf = entry.path().unwrap().into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        if !tampered && path.starts_with("blobs/sha256") && !data.is_empty() {
            *data.last_mut().unwrap() ^= 1;
            tampered = true;
        }
        let mut header = entry.header().clone();
        out.append_data(&mut header, &path, data.as_slice())
            .unwrap();
    }
    assert!(tampered);
    out.into_inner().unwrap()
}

#[test]
fn a_blob_that_does_not_hash_to_its_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = tamper(&build(dir.path(), Component::Scheduler, &[]));
    let archive = Archive::from_bytes("tampered", &bytes).unwrap();
    let err = inspect::check(&archive, &Component::Scheduler.spec(), &expect()).unwrap_err();
    assert!(
        err.to_string().contains("does not hash to its name"),
        "{err}"
    );
}

#[test]
fn unpack_writes_one_platforms_merged_layers() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = build(dir.path(), Component::Agent, &[]);
    let archive = Archive::from_bytes("test", &bytes).unwrap();
    let root = dir.path().join("unpacked");
    std::fs::create_dir_all(&root).unwrap();
    inspect::unpack(&archive, Arch::Arm64, &root).unwrap();
    let binary = std::fs::read(root.join("usr/local/bin/gputopo-agent")).unwrap();
    assert_eq!(elf::read("agent", &binary).unwrap().machine, 183);
    let link = std::fs::read_link(root.join("lib/ld-linux-aarch64.so.1")).unwrap();
    assert_eq!(link, Path::new("aarch64-linux-gnu/ld-linux-aarch64.so.1"));
    // The merged view the check uses agrees.
    let images = archive.images().unwrap();
    let files = images[1].files().unwrap();
    assert!(matches!(
        inspect::resolve(&files, "/lib/ld-linux-aarch64.so.1"),
        Some(Entry::File { .. })
    ));
}
