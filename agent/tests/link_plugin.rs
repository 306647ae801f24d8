//! The link devices' kubelet plugin as the kubelet speaks to it: the
//! kubelet's plugin watcher dials `<registry>/<driver>-reg.sock`, asks
//! `GetInfo`, dials the endpoint it names, and prepares claims there. No
//! kubelet runs here; the calls are the kubelet's, through the generated
//! clients of the kubelet's own `.proto` files.

use gputopo_agent::link_plugin::{LinkPluginError, LinkPluginPaths, bind};
use gputopo_kubelet_api::dra::dra_plugin_client::DraPluginClient;
use gputopo_kubelet_api::dra::{Claim, NodePrepareResourcesRequest, NodeUnprepareResourcesRequest};
use gputopo_kubelet_api::pluginregistration::registration_client::RegistrationClient;
use gputopo_kubelet_api::pluginregistration::{InfoRequest, RegistrationStatus};
use gputopo_kubelet_api::socket::connect_unix;
use std::time::Duration;

fn claim(uid: &str) -> Claim {
    Claim {
        namespace: "ml".into(),
        uid: uid.into(),
        name: format!("claim-{uid}"),
    }
}

#[tokio::test]
async fn the_kubelet_registers_the_plugin_and_prepares_link_devices_with_nothing_to_inject() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let paths = LinkPluginPaths {
        plugins_dir: dir.path().join("plugins"),
        registry_dir: dir.path().join("plugins_registry"),
    };
    std::fs::create_dir_all(&paths.registry_dir).expect("the registry dir");
    tokio::spawn(bind(&paths).expect("both sockets bound"));

    let channel = connect_unix(&paths.registration_socket(), Duration::from_secs(5))
        .await
        .expect("the registration socket");
    let mut registration = RegistrationClient::new(channel);
    let info = registration
        .get_info(InfoRequest {})
        .await
        .expect("GetInfo")
        .into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, "topology.gputopo.dev");
    assert_eq!(info.supported_versions, ["v1.DRAPlugin"]);
    assert_eq!(
        std::path::PathBuf::from(&info.endpoint),
        dir.path().join("plugins/topology.gputopo.dev/dra.sock")
    );
    registration
        .notify_registration_status(RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await
        .expect("registered");
    let refused = registration
        .notify_registration_status(RegistrationStatus {
            plugin_registered: false,
            error: "version not supported".into(),
        })
        .await
        .expect_err("a refusal is answered as one");
    assert!(
        refused.message().contains("version not supported"),
        "{refused}"
    );

    // The endpoint GetInfo named, as the kubelet dials it.
    let channel = connect_unix(std::path::Path::new(&info.endpoint), Duration::from_secs(5))
        .await
        .expect("dra.sock");
    let mut plugin = DraPluginClient::new(channel);
    let prepared = plugin
        .node_prepare_resources(NodePrepareResourcesRequest {
            claims: vec![claim("u-1"), claim("u-2")],
        })
        .await
        .expect("NodePrepareResources")
        .into_inner();
    // Every claim gets an entry (the kubelet calls again for a missing one),
    // no error, and no device to inject.
    let mut uids: Vec<&String> = prepared.claims.keys().collect();
    uids.sort();
    assert_eq!(uids, ["u-1", "u-2"]);
    assert!(
        prepared
            .claims
            .values()
            .all(|c| c.error.is_empty() && c.devices.is_empty())
    );
    let unprepared = plugin
        .node_unprepare_resources(NodeUnprepareResourcesRequest {
            claims: vec![claim("u-1")],
        })
        .await
        .expect("NodeUnprepareResources")
        .into_inner();
    assert_eq!(unprepared.claims.len(), 1);
    assert!(unprepared.claims["u-1"].error.is_empty());
}

#[tokio::test]
async fn a_missing_registry_directory_fails_the_start_naming_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let paths = LinkPluginPaths {
        plugins_dir: dir.path().join("plugins"),
        registry_dir: dir.path().join("not-mounted"),
    };
    let e = match bind(&paths) {
        Err(e) => e,
        Ok(_) => panic!("bound without a registry directory"),
    };
    assert!(matches!(e, LinkPluginError::Serve(_)), "{e:?}");
    assert!(e.to_string().contains("not-mounted"), "{e}");
}
