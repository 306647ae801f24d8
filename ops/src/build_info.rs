//! `gputopo_build_info{component,version,commit} 1`, which every daemon
//! exports so dashboards and alerts can tell which build runs where. The
//! version is the workspace's (`CARGO_PKG_VERSION`); the commit comes from
//! `GPUTOPO_GIT_COMMIT` in the build's environment (the image builds set
//! it), `unknown` otherwise: no build script shells out to git.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The metric's full name, as dashboards and rules query it.
pub const BUILD_INFO: &str = "gputopo_build_info";

/// The workspace version this crate was built as.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit named at build time, or `unknown`.
pub const COMMIT: &str = match option_env!("GPUTOPO_GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildInfoLabels {
    component: &'static str,
    version: &'static str,
    commit: &'static str,
}

/// Registers `gputopo_build_info` (value 1) for `component` (`agent`,
/// `scheduler`, `extender`, `device-plugin`). `registry` must be unprefixed
/// (a daemon's root registry, its own metrics in a prefixed sub-registry):
/// a prefix would rename the metric.
pub fn register_build_info(registry: &mut Registry, component: &'static str) {
    let info = Family::<BuildInfoLabels, Gauge>::default();
    info.get_or_create(&BuildInfoLabels {
        component,
        version: VERSION,
        commit: COMMIT,
    })
    .set(1);
    registry.register(
        BUILD_INFO,
        "1, labelled with the component, the version and the commit of the running build",
        info,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_is_one_with_its_labels() {
        let mut root = Registry::default();
        register_build_info(&mut root, "agent");
        root.sub_registry_with_prefix("gputopo_agent").register(
            "gpus",
            "GPUs",
            Gauge::<i64>::default(),
        );
        let text = crate::encode(&root);
        let line = format!(
            "gputopo_build_info{{component=\"agent\",version=\"{VERSION}\",commit=\"{COMMIT}\"}} 1"
        );
        assert!(text.contains(&line), "{text}");
        assert!(text.contains("gputopo_agent_gpus 0"), "{text}");
    }
}
