//! The three Dockerfiles, generated from one template: [`dockerfile`]
//! renders `<component>/Dockerfile` from the component's [`ImageSpec`]
//! (user, command, ports, labels, base) and its opening notes below;
//! `gputopo-oci dockerfiles` writes them, with their `.dockerignore`, and a
//! test (`tests/specs.rs`) fails when a checked-in file differs. Edit here,
//! then run `cargo run -p gputopo-images --bin gputopo-oci -- dockerfiles`.

use crate::spec::{Base, Component, ImageSpec};
use std::fmt::Write;

/// `<component>/Dockerfile.dockerignore`, the same for every image.
pub const DOCKERIGNORE: &str = "\
# The build context is the workspace root; BuildKit reads this file for
# <component>/Dockerfile. Build outputs and VCS data stay out of it.
target/
**/target/
.git/
";

/// The Rust toolchain image the build stage runs on.
const RUST_VERSION: &str = "1.95";

/// distroless's `nonroot` user.
const NONROOT: &str = "65532:65532";

/// Why `agent`'s image is built as it is: its Dockerfile's opening comment.
const AGENT_NOTES: &str = "\
Why glibc, dynamically linked, on distroless/cc (and not a static binary on
distroless/static like the scheduler): the agent dlopen()s libnvidia-ml.so.1,
which the NVIDIA container runtime injects from the host's driver when the
container starts (NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility
in the DaemonSet). musl's static dlopen always fails, and a static glibc
binary that loads a library linked against the shared libc runs two libcs in
one process. The driver's library needs glibc, so the agent is a normal
glibc program: built on Debian 12 and run on distroless/cc-debian12 (the same
glibc 2.36, plus the libgcc_s that Rust's unwinder needs).

The build is scripts/static-build, which CI runs too (scripts/test): it
checks that the binary is dynamic, needs nothing the base image lacks, and
nothing newer than glibc 2.36. No container engine runs in CI, so this file
itself is not built there; scripts/images builds the same image (amd64 and
arm64) without one, and CI checks that. Both platforms here:
docker buildx build --platform linux/amd64,linux/arm64 -f agent/Dockerfile .
";

/// Why `device-plugin`'s image is built as it is: its Dockerfile's opening comment.
const DEVICE_PLUGIN_NOTES: &str = "\
glibc, dynamically linked, on distroless/cc, for the agent's reason: it
dlopen()s libnvidia-ml.so.1, which the NVIDIA container runtime injects from
the host's driver (NVIDIA_VISIBLE_DEVICES=all in the DaemonSet); musl's
static dlopen always fails (agent/Dockerfile says more).

Runs as root (uid 0), unlike the agent: the kubelet's device-plugin
directory and kubelet.sock are root's and writable by root only, and the
plugin must create its socket there and connect to kubelet.sock. The
DaemonSet drops every capability and forbids privilege escalation.

The build is scripts/static-build, which CI runs too (scripts/test): it
checks that the binary is dynamic, needs nothing the base image lacks, and
nothing newer than glibc 2.36. No container engine runs in CI, so this file
itself is not built there; scripts/images builds the same image (amd64 and
arm64) without one, and CI checks that. Both platforms here:
docker buildx build --platform linux/amd64,linux/arm64 -f device-plugin/Dockerfile .
";

/// Why `scheduler`'s image is built as it is: its Dockerfile's opening comment.
const SCHEDULER_NOTES: &str = "\
Fully static (x86_64- or aarch64-unknown-linux-musl, static-pie) on distroless/static:
the scheduler loads nothing at run time (pure Rust, rustls with ring), and
musl resolves names by itself where a static glibc binary would need
glibc's NSS modules at run time. The image holds the binary, CA
certificates, /etc/passwd's nonroot user and nothing else.

The build is scripts/static-build, which CI runs too (scripts/test): it
checks that the binary has no dynamic loader and needs no shared library.
ring's C and assembly are freestanding, so the builder's gcc compiles them
for musl; no musl cross compiler is needed. No container engine runs in CI,
so this file itself is not built there; scripts/images builds the same image
(amd64 and arm64) without one, and CI checks that. Both platforms here:
docker buildx build --platform linux/amd64,linux/arm64 -f scheduler/Dockerfile .

Run it as `gputopo-scheduler run` (see docs/scheduler.md); the Helm chart's
scheduler Deployment runs it with `--config /etc/gputopo/config.yaml`.
";

/// What a component's Dockerfile says beyond its [`ImageSpec`].
struct Notes {
    /// The opening comment, after the build command.
    why: &'static str,
    /// The comment above `USER`, if any.
    user: Option<&'static str>,
}

fn notes(component: Component) -> Notes {
    match component {
        Component::Agent => Notes {
            why: AGENT_NOTES,
            user: Some(
                "distroless's `nonroot`; the DaemonSet sets the same uid (runAsNonRoot needs a number).",
            ),
        },
        Component::DevicePlugin => Notes {
            why: DEVICE_PLUGIN_NOTES,
            user: Some(
                "The kubelet's socket directory is root's; the DaemonSet sets the same uid.",
            ),
        },
        Component::Scheduler => Notes {
            why: SCHEDULER_NOTES,
            user: None,
        },
    }
}

/// Every file this module generates, as (path from the repository root,
/// text): each component's Dockerfile and `.dockerignore`. What
/// `gputopo-oci dockerfiles` writes and the drift test compares.
pub fn generated() -> Vec<(String, String)> {
    Component::ALL
        .into_iter()
        .flat_map(|component| {
            [
                (path(component), dockerfile(component)),
                (ignore_path(component), DOCKERIGNORE.to_string()),
            ]
        })
        .collect()
}

/// The path of a component's Dockerfile, from the repository root.
pub fn path(component: Component) -> String {
    format!("{}/Dockerfile", component.name())
}

/// The path of a component's `.dockerignore`, from the repository root.
pub fn ignore_path(component: Component) -> String {
    format!("{}/Dockerfile.dockerignore", component.name())
}

/// `<component>/Dockerfile`.
pub fn dockerfile(component: Component) -> String {
    let spec = component.spec();
    let notes = notes(component);
    let mut out = String::new();
    header(&mut out, component, &spec, notes.why);
    build_stage(&mut out, component);
    image_stage(&mut out, &spec, notes.user);
    out
}

/// The syntax line and the opening comment.
fn header(out: &mut String, component: Component, spec: &ImageSpec, why: &str) {
    let name = component.name();
    out.push_str("# syntax=docker/dockerfile:1\n");
    let _ = writeln!(
        out,
        "# Generated by `gputopo-oci dockerfiles` from images/src/dockerfile.rs: edit that."
    );
    let _ = writeln!(
        out,
        "# {}. Build from the repository root (the context is the workspace):",
        spec.name
    );
    out.push_str("#\n");
    let _ = writeln!(
        out,
        "#   docker build -f {name}/Dockerfile -t ghcr.io/gputopo/{}:{} .",
        spec.name,
        crate::spec::VERSION
    );
    out.push_str("#\n");
    for line in why.lines() {
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            let _ = writeln!(out, "# {line}");
        }
    }
    out.push('\n');
}

/// The stage that builds the binary for the target's architecture.
fn build_stage(out: &mut String, component: Component) {
    let _ = write!(
        out,
        "\
ARG RUST_VERSION={RUST_VERSION}

# The build stage runs on the builder's own platform and cross-compiles for
# TARGETARCH (scripts/static-build installs the cross gcc and rustup target).
FROM --platform=$BUILDPLATFORM docker.io/library/rust:${{RUST_VERSION}}-bookworm AS build
ARG TARGETARCH
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \\
    --mount=type=cache,target=/src/target,sharing=locked \\
    scripts/static-build --arch \"$TARGETARCH\" --out /out {}

",
        component.name()
    );
}

/// The image: base, labels, binary, user, ports, entrypoint, command.
fn image_stage(out: &mut String, spec: &ImageSpec, user_note: Option<&str>) {
    let base = match spec.base {
        Base::Glibc => "gcr.io/distroless/cc-debian12",
        Base::Static => "gcr.io/distroless/static-debian12",
    };
    let tag = if spec.user == NONROOT { ":nonroot" } else { "" };
    let _ = writeln!(out, "FROM {base}{tag}");
    out.push_str("ARG TARGETARCH\n");
    // The labels known before the build; version and revision are the
    // builder's to add.
    let labels: Vec<String> = spec
        .labels("", "")
        .into_iter()
        .filter(|(k, _)| !k.ends_with(".version") && !k.ends_with(".revision"))
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    let _ = writeln!(out, "LABEL {}", labels.join(" \\\n      "));
    let _ = writeln!(
        out,
        "COPY --from=build /out/${{TARGETARCH}}/{} {}",
        spec.name,
        spec.binary_path()
    );
    if let Some(note) = user_note {
        let _ = writeln!(out, "# {note}");
    }
    let _ = writeln!(out, "USER {}", spec.user);
    for port in spec.exposed_ports {
        let _ = writeln!(out, "EXPOSE {port}");
    }
    let _ = writeln!(out, "ENTRYPOINT {}", json_array(&spec.entrypoint()));
    if !spec.cmd.is_empty() {
        let cmd: Vec<String> = spec.cmd.iter().map(|c| c.to_string()).collect();
        let _ = writeln!(out, "CMD {}", json_array(&cmd));
    }
}

/// `["a", "b"]`, as Dockerfile's exec form writes it.
fn json_array(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}
