//! The configuration files of one kubelet node: containerd's (TOML) and the
//! kubelet's (`KubeletConfiguration`, written as JSON, which is YAML).

use std::path::Path;

/// The image every pod sandbox runs (built locally, see `tests/kubelet-node/build-image`).
pub const PAUSE_IMAGE: &str = "gputopo.local/pause:1";
/// The image tests run containers from: a static busybox (`/bin/sh`, `/bin/sleep`, ...).
pub const BUSYBOX_IMAGE: &str = "gputopo.local/busybox:1";

/// Where containerd's CRI plugin finds CNI plugin binaries (Debian's
/// containernetworking-plugins).
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// containerd's configuration (format version 2, containerd 1.6 and 1.7):
/// every path under `dir`, its own socket, the CRI plugin on.
pub fn containerd_toml(dir: &Path, snapshotter: &str) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
# Snapshotters that cannot work here (no btrfs, zfs, devmapper) or need modprobe.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  # Default /opt/containerd: keep the host untouched.
  path = "{d}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # The test machines lack CAP_SYS_RESOURCE: runc cannot set the negative
  # oom_score_adj the kubelet asks for (-998 for sandboxes), and fails with
  # "can't get final child's PID from pipe: EOF". This clamps it to ours.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{snapshotter}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{d}/cni"
"#
    )
}

/// A CNI network of the loopback interface only. The runtime reports
/// NetworkReady (and the node Ready) only once a CNI configuration loads;
/// pods use `hostNetwork: true`, so none needs an address of its own.
pub const CNI_CONFLIST: &str =
    r#"{"cniVersion":"0.4.0","name":"gputopo-loopback","plugins":[{"type":"loopback"}]}"#;

/// What differs between kubelet nodes on one machine.
pub struct KubeletSettings<'a> {
    pub dir: &'a Path,
    pub cgroup_root: &'a str,
    pub port: u16,
    pub healthz_port: u16,
}

/// The `KubeletConfiguration`.
pub fn kubelet_config(s: &KubeletSettings<'_>) -> serde_json::Value {
    let socket = format!("unix://{}/containerd.sock", s.dir.display());
    serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        // Nothing calls the kubelet's own API (the apiserver cannot resolve
        // the node's name), so it takes no client and trusts none.
        "authentication": {"anonymous": {"enabled": false}, "webhook": {"enabled": false}},
        "authorization": {"mode": "AlwaysAllow"},
        "address": "127.0.0.1",
        // Unique ports: several nodes may run on one machine.
        "port": s.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": s.healthz_port,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": true,
        // A cgroup tree of this node's own, removed with it.
        "cgroupRoot": s.cgroup_root,
        // No reservations to enforce: the node shares the machine.
        "enforceNodeAllocatable": [],
        "failSwapOn": false,
        // The test machines have cgroup v1 (the kubelet warns, and runs).
        "failCgroupV1": false,
        "cpuManagerPolicy": "none",
        "memoryManagerPolicy": "None",
        "topologyManagerPolicy": "none",
        "containerRuntimeEndpoint": socket,
        "imageServiceEndpoint": socket,
        "podLogsDir": s.dir.join("pod-logs"),
        "syncFrequency": "5s",
        "nodeStatusUpdateFrequency": "2s",
        "fileCheckFrequency": "5s",
        // The images are imported, never pulled: never collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        // A busy CI disk must not evict the test's pods.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "evictionPressureTransitionPeriod": "0s",
        "serializeImagePulls": false,
        "resolvConf": "",
        "registerNode": true,
        "makeIPTablesUtilChains": false,
        "protectKernelDefaults": false,
    })
}
