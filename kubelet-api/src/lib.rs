//! The kubelet's gRPC APIs gputopo speaks, generated from the kubelet's own
//! `.proto` files (`proto/`, copied verbatim from `k8s.io/kubelet` v0.34.10;
//! `proto/README.md` says where each comes from), and unix-socket plumbing:
//! the kubelet serves and dials both APIs on unix sockets only.
//!
//! - [`deviceplugin`]: device plugin API v1beta1 (`Registration` served by the
//!   kubelet, `DevicePlugin` served by a plugin).
//! - [`podresources`]: PodResources v1 (`PodResourcesLister`, served by the kubelet).
//! - [`dra`]: the DRA kubelet plugin API v1 (`DRAPlugin`, served by a DRA driver).
//! - [`pluginregistration`]: plugin registration v1 (`Registration`, served by
//!   a plugin in the kubelet's registry directory, dialed by the kubelet).
//! - `stand_in` (feature `stand-in`): a stand-in for the kubelet's device
//!   manager and PodResources server, for tests where no kubelet runs.

pub mod socket;
#[cfg(feature = "stand-in")]
pub mod stand_in;

/// Device plugin API v1beta1 (`k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1`).
pub mod deviceplugin {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("v1beta1");

    /// The API version a plugin names when it registers.
    pub const VERSION: &str = "v1beta1";
    /// Where the kubelet expects plugin sockets and serves its own.
    pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins/";
    /// The kubelet's registration socket.
    pub const KUBELET_SOCKET: &str = "/var/lib/kubelet/device-plugins/kubelet.sock";
    /// `Device.health` values.
    pub const HEALTHY: &str = "Healthy";
    pub const UNHEALTHY: &str = "Unhealthy";
}

/// PodResources API v1 (`k8s.io/kubelet/pkg/apis/podresources/v1`).
pub mod podresources {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("v1");

    /// The kubelet's PodResources socket.
    pub const KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
}

pub use socket::{DialError, ServeError, connect_unix, serve_unix};

/// DRA kubelet plugin API v1 (`k8s.io/kubelet/pkg/apis/dra/v1`).
pub mod dra {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");

    /// The service a plugin names among its supported versions.
    pub const DRA_PLUGIN_SERVICE: &str = "v1.DRAPlugin";
    /// Where a DRA driver keeps its `dra.sock` (`<dir>/<driver>/dra.sock`).
    pub const KUBELET_PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";
}

/// Plugin registration v1 (`k8s.io/kubelet/pkg/apis/pluginregistration/v1`).
pub mod pluginregistration {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("pluginregistration");

    /// `PluginInfo.type` of a DRA driver.
    pub const DRA_PLUGIN: &str = "DRAPlugin";
    /// The directory the kubelet watches for `<driver>-reg.sock`.
    pub const KUBELET_REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";
}
