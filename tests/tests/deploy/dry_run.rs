//! Every rendered object, and every object of `daemonset/`, passes the real
//! API server's server-side dry run with strict field validation.

use super::cluster::ensure_namespace;
use super::helm::render_ok;
use super::objects::{kind_name, plain_manifests};
use super::values::{EXTENDER_VALUES, NAMESPACE, NON_DEFAULT_VALUES, RELEASE};
use gputopo_testenv::TestEnv;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};

/// A minimal prometheus-operator ServiceMonitor CRD: the fields the chart
/// sets, typed as upstream types them, and nothing else, so that strict
/// field validation refuses a misspelt one. (The upstream CRD is not
/// vendored; this checks the chart's use of it, not the operator.)
fn service_monitor_crd() -> CustomResourceDefinition {
    let relabel = json!({"type": "array", "items": {"type": "object", "properties": {
        "action": {"type": "string"},
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "separator": {"type": "string"},
        "regex": {"type": "string"},
        "targetLabel": {"type": "string"},
        "replacement": {"type": "string"},
        "modulus": {"type": "integer"}
    }}});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList",
                      "plural": "servicemonitors", "singular": "servicemonitor"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["selector"], "properties": {
                        "jobLabel": {"type": "string"},
                        "selector": {"type": "object", "properties": {
                            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                        }},
                        "namespaceSelector": {"type": "object", "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}}
                        }},
                        "endpoints": {"type": "array", "items": {"type": "object", "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"type": "string", "enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": relabel.clone(),
                            "metricRelabelings": relabel
                        }}}
                    }}
                }}}
            }]
        }
    }))
    .expect("a CRD")
}

/// Server-side apply of one rendered object, dry run, strict field
/// validation: what `kubectl apply --server-side --dry-run=server
/// --validate=strict` does.
pub(super) async fn dry_run_apply(
    client: &kube::Client,
    doc: &Value,
) -> Result<Value, kube::Error> {
    let (group, version) = match doc["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .split_once('/')
    {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap_or_default().to_owned(),
        ),
    };
    let (kind, name) = kind_name(doc);
    let gvk = GroupVersionKind::gvk(&group, &version, &kind);
    let (resource, caps) = pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            doc["metadata"]["namespace"].as_str().unwrap_or("default"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply("gputopo-deploy-test")
        .dry_run()
        .validation_strict();
    let applied = api.patch(&name, &params, &Patch::Apply(doc)).await?;
    Ok(serde_json::to_value(applied).expect("an object serializes"))
}

/// Installs [`service_monitor_crd`] once per test binary (the tests share
/// one API server; a second create would be refused).
pub(super) async fn ensure_service_monitor_crd(client: &kube::Client) {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            gputopo_testenv::install_crd(client, service_monitor_crd())
                .await
                .expect("the ServiceMonitor CRD");
        })
        .await;
}

#[tokio::test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
async fn every_rendered_object_passes_a_server_side_dry_run() {
    let env = TestEnv::shared().await;
    let client = env.client().await;
    ensure_namespace(&client, NAMESPACE).await;
    ensure_service_monitor_crd(&client).await;

    for (what, docs) in [
        ("default values", render_ok(RELEASE, NAMESPACE, None)),
        (
            "non-default values",
            render_ok(RELEASE, NAMESPACE, Some(NON_DEFAULT_VALUES)),
        ),
        (
            "extender values",
            render_ok(RELEASE, NAMESPACE, Some(EXTENDER_VALUES)),
        ),
        ("daemonset/", plain_manifests()),
    ] {
        for doc in &docs {
            let key = kind_name(doc);
            let applied = dry_run_apply(&client, doc)
                .await
                .unwrap_or_else(|e| panic!("{what}: {key:?} refused by the API server: {e}"));
            assert_eq!(applied["metadata"]["name"], key.1, "{what}: {key:?}");
        }
        // A dry run persists nothing: the DaemonSet is not there.
        let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
            Api::namespaced(client.clone(), NAMESPACE);
        assert!(
            daemonsets
                .get_opt("gputopo-agent")
                .await
                .expect("get")
                .is_none()
        );
    }

    // The check can fail: a misspelt field is refused, not dropped.
    let mut docs = render_ok(RELEASE, NAMESPACE, None);
    let ds = docs
        .iter_mut()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    ds["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = json!({});
    let e = dry_run_apply(&client, ds)
        .await
        .expect_err("an unknown field");
    assert!(e.to_string().contains("readinesProbe"), "{e}");
}
