//! What each image is: the same user, entrypoint, command, ports and labels
//! as its Dockerfile (a test holds the two together), on a base of Debian 12's
//! glibc for the binaries that dlopen NVML, or on nothing for the static
//! scheduler.

use std::fmt;
use std::str::FromStr;

/// The CPU architectures images are built for, by their OCI names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::Amd64, Arch::Arm64];

    /// `architecture` in an OCI platform and image config (GOARCH's names).
    pub fn oci_name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// `variant`: registries and runtimes expect `v8` on arm64, none on amd64.
    pub fn variant(self) -> Option<&'static str> {
        match self {
            Arch::Amd64 => None,
            Arch::Arm64 => Some("v8"),
        }
    }

    /// `e_machine` of this architecture's ELF binaries.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::Amd64 => 62,  // EM_X86_64
            Arch::Arm64 => 183, // EM_AARCH64
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.oci_name())
    }
}

/// A name that is no architecture or component images are built for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownName {
    #[error("unknown architecture '{0}': amd64 or arm64")]
    Arch(String),
    #[error("unknown component '{0}': agent, device-plugin or scheduler")]
    Component(String),
}

impl FromStr for Arch {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Arch::ALL
            .into_iter()
            .find(|a| a.oci_name() == s)
            .ok_or_else(|| UnknownName::Arch(s.to_string()))
    }
}

/// What the binary needs from the image under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// Debian 12's glibc and libgcc_s: the binary has a dynamic loader.
    Glibc,
    /// Nothing: the binary is static.
    Static,
}

/// The three images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    Agent,
    DevicePlugin,
    Scheduler,
}

impl Component {
    pub const ALL: [Component; 3] = [
        Component::Agent,
        Component::DevicePlugin,
        Component::Scheduler,
    ];

    /// The name `scripts/static-build` and the Dockerfiles use.
    pub fn name(self) -> &'static str {
        match self {
            Component::Agent => "agent",
            Component::DevicePlugin => "device-plugin",
            Component::Scheduler => "scheduler",
        }
    }

    pub fn spec(self) -> ImageSpec {
        let nonroot = "65532:65532";
        match self {
            Component::Agent => ImageSpec {
                name: "gputopo-agent",
                description: "Discovers how a node's GPUs are wired and publishes labels and a GpuTopology",
                user: nonroot,
                cmd: &["run", "--nvml"],
                exposed_ports: &[8081],
                base: Base::Glibc,
            },
            Component::DevicePlugin => ImageSpec {
                name: "gputopo-device-plugin",
                description: "Kubelet device plugin for nvidia.com/gpu that hands each pod the GPUs gputopo chose for it",
                // The kubelet's socket directory is root's (device-plugin/Dockerfile says more).
                user: "0:0",
                cmd: &["--nvml"],
                exposed_ports: &[8082],
                base: Base::Glibc,
            },
            Component::Scheduler => ImageSpec {
                name: "gputopo-scheduler",
                description: "Topology-aware secondary scheduler and scheduler extender for GPU pods",
                user: nonroot,
                cmd: &[],
                exposed_ports: &[],
                base: Base::Static,
            },
        }
    }
}

impl FromStr for Component {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Component::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownName::Component(s.to_string()))
    }
}

/// One image's configuration, independent of architecture.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    /// The image (and binary) name: `gputopo-agent`.
    pub name: &'static str,
    pub description: &'static str,
    /// `uid:gid`, numeric so that `runAsNonRoot` can verify it.
    pub user: &'static str,
    pub cmd: &'static [&'static str],
    pub exposed_ports: &'static [u16],
    pub base: Base,
}

/// Where the source lives and under which licence, from the workspace.
pub const SOURCE: &str = env!("CARGO_PKG_REPOSITORY");
pub const LICENSES: &str = env!("CARGO_PKG_LICENSE");
/// The workspace's version: the images' default tag, as the chart's appVersion.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// distroless's environment: a PATH, and where rustls-native-certs finds the
/// CA bundle when a kubeconfig names no CA.
pub const ENV: [&str; 2] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
];

impl ImageSpec {
    /// Where the binary sits in the image.
    pub fn binary_path(&self) -> String {
        format!("/usr/local/bin/{}", self.name)
    }

    pub fn entrypoint(&self) -> Vec<String> {
        vec![self.binary_path()]
    }

    pub fn uid(&self) -> &str {
        self.user.split(':').next().unwrap_or(self.user)
    }

    /// The OCI annotation keys every image carries as labels, with their values.
    pub fn labels(&self, version: &str, revision: &str) -> Vec<(&'static str, String)> {
        vec![
            ("org.opencontainers.image.title", self.name.to_string()),
            (
                "org.opencontainers.image.description",
                self.description.to_string(),
            ),
            ("org.opencontainers.image.source", SOURCE.to_string()),
            ("org.opencontainers.image.licenses", LICENSES.to_string()),
            ("org.opencontainers.image.version", version.to_string()),
            ("org.opencontainers.image.revision", revision.to_string()),
        ]
    }
}
