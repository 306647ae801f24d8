//! Host ports: the ports a pod takes on its node's network, from its
//! containers and its sidecars (init containers with `restartPolicy:
//! Always`, which run as long as the pod), as kube-scheduler's NodePorts
//! counts them. Plain init containers finish before the pod runs and take
//! none.

use gputopo_api::k8s_openapi::api::core::v1 as k8s;

/// A `hostPort` with its protocol and host IP.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP` (absent is `TCP`).
    pub protocol: String,
    /// `None` for every address (`hostIP` absent, empty or `0.0.0.0`).
    /// Compared as text, as upstream does: `::` is one address, not all.
    pub ip: Option<String>,
    pub port: u16,
}

impl HostPort {
    pub fn tcp(port: u16) -> HostPort {
        HostPort {
            protocol: "TCP".into(),
            ip: None,
            port,
        }
    }

    /// Whether two pods taking these ports cannot share a node: the same
    /// port and protocol where either listens on every address or both on
    /// the same one.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && match (&self.ip, &other.ip) {
                (None, _) | (_, None) => true,
                (Some(a), Some(b)) => a == b,
            }
    }

    fn from_k8s(p: &k8s::ContainerPort) -> Option<HostPort> {
        let port = u16::try_from(p.host_port.filter(|&h| h > 0)?).ok()?;
        let ip = p
            .host_ip
            .clone()
            .filter(|ip| !ip.is_empty() && ip != "0.0.0.0");
        Some(HostPort {
            protocol: p
                .protocol
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "TCP".into()),
            ip,
            port,
        })
    }
}

/// The host ports of a pod spec: sidecars' first, then the containers', as
/// upstream lists them.
pub(crate) fn host_ports(spec: &k8s::PodSpec) -> Vec<HostPort> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    sidecars
        .chain(spec.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(HostPort::from_k8s)
        .collect()
}
