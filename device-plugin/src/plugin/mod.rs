//! The device plugin daemon: the gRPC service on a socket in the kubelet's
//! device-plugin directory, registration with the kubelet (again whenever the
//! kubelet restarts), and the health loop that feeds ListAndWatch.

mod devices;
mod run;
mod service;

pub use devices::DeviceList;
pub use run::{PluginConfig, RunError, run};
pub use service::options;
