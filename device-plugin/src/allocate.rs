//! What `Allocate` answers per container: how the NVIDIA container stack is
//! told which GPUs to inject, as NVIDIA's device plugin does it
//! (`--device-list-strategy`): the `NVIDIA_VISIBLE_DEVICES` environment
//! variable read by the NVIDIA container runtime hook (`envvar`), and/or CDI
//! device names in the response's `cdi_devices` for a CDI-enabled runtime
//! (`cdi-cri`; containerd 1.7+, CRI-O 1.24+). The CDI names are those of the
//! spec `nvidia-ctk cdi generate` writes, kind `nvidia.com/gpu`, by UUID.

use gputopo_kubelet_api::deviceplugin::{CdiDevice, ContainerAllocateResponse};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// The environment variable the NVIDIA container runtime reads.
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
/// The CDI kind of NVIDIA GPUs in `nvidia-ctk`'s generated spec.
pub const CDI_KIND: &str = "nvidia.com/gpu";

/// One way of passing the device list to the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceListStrategy {
    Envvar,
    CdiCri,
}

impl DeviceListStrategy {
    pub const ACCEPTED: &'static str = "envvar, cdi-cri";

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceListStrategy::Envvar => "envvar",
            DeviceListStrategy::CdiCri => "cdi-cri",
        }
    }
}

impl fmt::Display for DeviceListStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown device list strategy {given:?}; accepted: {}",
    DeviceListStrategy::ACCEPTED
)]
pub struct UnknownStrategy {
    pub given: String,
}

impl FromStr for DeviceListStrategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "envvar" => Ok(DeviceListStrategy::Envvar),
            "cdi-cri" => Ok(DeviceListStrategy::CdiCri),
            other => Err(UnknownStrategy {
                given: other.to_string(),
            }),
        }
    }
}

/// The response for one container given `uuids`, in every strategy of `strategies`.
pub fn container_response(
    uuids: &[String],
    strategies: &BTreeSet<DeviceListStrategy>,
) -> ContainerAllocateResponse {
    let mut response = ContainerAllocateResponse::default();
    if strategies.contains(&DeviceListStrategy::Envvar) {
        response
            .envs
            .insert(VISIBLE_DEVICES_ENV.to_string(), uuids.join(","));
    }
    if strategies.contains(&DeviceListStrategy::CdiCri) {
        response.cdi_devices = uuids
            .iter()
            .map(|u| CdiDevice {
                name: format!("{CDI_KIND}={u}"),
            })
            .collect();
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_strategy_names_the_uuids_its_own_way() {
        let uuids = vec!["GPU-a".to_string(), "GPU-b".to_string()];
        let env = container_response(&uuids, &BTreeSet::from([DeviceListStrategy::Envvar]));
        assert_eq!(env.envs[VISIBLE_DEVICES_ENV], "GPU-a,GPU-b");
        assert!(env.cdi_devices.is_empty());
        let cdi = container_response(&uuids, &BTreeSet::from([DeviceListStrategy::CdiCri]));
        assert!(cdi.envs.is_empty());
        let names: Vec<_> = cdi.cdi_devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["nvidia.com/gpu=GPU-a", "nvidia.com/gpu=GPU-b"]);
        let both = container_response(
            &uuids,
            &BTreeSet::from([DeviceListStrategy::Envvar, DeviceListStrategy::CdiCri]),
        );
        assert_eq!(both.envs.len(), 1);
        assert_eq!(both.cdi_devices.len(), 2);
    }

    #[test]
    fn an_unknown_strategy_names_the_accepted_ones() {
        let err = "volume-mounts".parse::<DeviceListStrategy>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown device list strategy \"volume-mounts\"; accepted: envvar, cdi-cri"
        );
    }
}
