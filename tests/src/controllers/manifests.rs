//! A controller's own manifests, rendered by `kustomize build` from its
//! module's folder in GOMODCACHE (nothing is copied into this repository),
//! cut down to what a test needs: the CRDs and the admission webhooks.
//!
//! In a cluster the webhooks and CRD conversion webhooks name a Service in
//! the controller's namespace, and a certificate manager injects the CA. Here
//! the controller runs on the host, so each `clientConfig.service` becomes
//! `clientConfig.url: https://127.0.0.1:<port><path>` with the test CA as
//! `caBundle`; rules, selectors and failure policies stay as shipped.

use super::error::{ControllerError, Result, harness};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig as CrdWebhookClientConfig,
};
use serde::Deserialize as _;
use std::path::Path;
use std::process::Command;

/// What the tests install of a controller's manifests.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub crds: Vec<CustomResourceDefinition>,
    pub mutating: Vec<MutatingWebhookConfiguration>,
    pub validating: Vec<ValidatingWebhookConfiguration>,
}

/// `kustomize build dir`, parsed into its documents.
pub fn kustomize_build(kustomize: &Path, dir: &Path) -> Result<Vec<serde_json::Value>> {
    let out = Command::new(kustomize)
        .arg("build")
        .arg(dir)
        .output()
        .map_err(harness(format!("running {}", kustomize.display())))?;
    if !out.status.success() {
        return Err(ControllerError::Kustomize {
            dir: dir.to_owned(),
            status: out.status,
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    yaml_documents(&String::from_utf8_lossy(&out.stdout), dir)
}

/// The documents of a multi-document YAML `text` read from `origin`.
pub fn yaml_documents(text: &str, origin: &Path) -> Result<Vec<serde_json::Value>> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = serde_json::Value::deserialize(doc)
            .map_err(harness(format!("{}: YAML", origin.display())))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

impl Manifests {
    /// Keeps the CRDs and webhook configurations of `docs` (what
    /// `kustomize build dir` printed); RBAC, the Deployment, Services and
    /// the rest are for running in a cluster.
    pub fn select(dir: &Path, docs: Vec<serde_json::Value>) -> Result<Manifests> {
        let mut m = Manifests::default();
        for (index, doc) in docs.into_iter().enumerate() {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let bad = |source| ControllerError::Manifest {
                dir: dir.to_owned(),
                index,
                kind: kind.clone(),
                name: name.clone(),
                source,
            };
            match kind.as_str() {
                "CustomResourceDefinition" => {
                    m.crds.push(serde_json::from_value(doc).map_err(bad)?)
                }
                "MutatingWebhookConfiguration" => {
                    m.mutating.push(serde_json::from_value(doc).map_err(bad)?)
                }
                "ValidatingWebhookConfiguration" => {
                    m.validating.push(serde_json::from_value(doc).map_err(bad)?)
                }
                _ => {}
            }
        }
        Ok(m)
    }

    /// `Err` naming `dir` (the folders rendered) when no CRD came out of it.
    pub fn require_crds(&self, dir: &Path) -> Result<()> {
        if self.crds.is_empty() {
            return Err(ControllerError::NothingRendered {
                dir: dir.to_owned(),
                what: "CustomResourceDefinition",
            });
        }
        Ok(())
    }

    /// Adds what `other` rendered (a second kustomize folder).
    pub fn extend(&mut self, other: Manifests) {
        self.crds.extend(other.crds);
        self.mutating.extend(other.mutating);
        self.validating.extend(other.validating);
    }

    /// Points every webhook (admission and CRD conversion) at
    /// `https://127.0.0.1:<port>` with `ca_pem` as its CA, keeping each path.
    pub fn point_webhooks_at(&mut self, port: u16, ca_pem: &[u8]) {
        let url = |path: Option<&str>| format!("https://127.0.0.1:{port}{}", path.unwrap_or(""));
        let admission = |c: &mut WebhookClientConfig| {
            let path = c.service.take().and_then(|s| s.path);
            *c = WebhookClientConfig {
                url: Some(url(path.as_deref().or(c.url.as_deref().and_then(url_path)))),
                ca_bundle: Some(ByteString(ca_pem.to_vec())),
                service: None,
            };
        };
        for w in self
            .mutating
            .iter_mut()
            .flat_map(|c| c.webhooks.iter_mut().flatten())
        {
            admission(&mut w.client_config);
        }
        for w in self
            .validating
            .iter_mut()
            .flat_map(|c| c.webhooks.iter_mut().flatten())
        {
            admission(&mut w.client_config);
        }
        for crd in &mut self.crds {
            let Some(c) = crd
                .spec
                .conversion
                .as_mut()
                .and_then(|c| c.webhook.as_mut())
                .and_then(|w| w.client_config.as_mut())
            else {
                continue;
            };
            let path = c.service.take().and_then(|s| s.path);
            *c = CrdWebhookClientConfig {
                url: Some(url(path.as_deref().or(c.url.as_deref().and_then(url_path)))),
                ca_bundle: Some(ByteString(ca_pem.to_vec())),
                service: None,
            };
        }
    }

    /// The names of the webhook configurations, to delete them again.
    pub fn webhook_names(&self) -> (Vec<String>, Vec<String>) {
        let names = |m: Option<&String>| m.cloned().unwrap_or_default();
        (
            self.mutating
                .iter()
                .map(|c| names(c.metadata.name.as_ref()))
                .collect(),
            self.validating
                .iter()
                .map(|c| names(c.metadata.name.as_ref()))
                .collect(),
        )
    }
}

/// The path of an `https://host[:port]/path` URL.
fn url_path(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    rest.find('/').map(|i| &rest[i..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered() -> Vec<serde_json::Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x-system"}}),
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "things.x.io"},
                "spec": {
                    "group": "x.io", "scope": "Namespaced",
                    "names": {"plural": "things", "kind": "Thing"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "schema": {"openAPIV3Schema": {"type": "object"}}}],
                    "conversion": {"strategy": "Webhook", "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": {"service": {"name": "svc", "namespace": "x-system", "path": "/convert"}}}}
                }
            }),
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "x-mutating"},
                "webhooks": [{
                    "name": "mthing.x.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "objectSelector": {"matchExpressions": [{"key": "x.io/name", "operator": "Exists"}]},
                    "clientConfig": {"service": {"name": "svc", "namespace": "x-system", "path": "/mutate-thing"}}
                }]
            }),
        ]
    }

    #[test]
    fn service_webhooks_point_at_loopback_with_the_ca() {
        let mut m = Manifests::select(Path::new("cfg"), rendered()).unwrap();
        assert_eq!(
            (m.crds.len(), m.mutating.len(), m.validating.len()),
            (1, 1, 0)
        );
        m.point_webhooks_at(9443, b"PEM");
        let w = &m.mutating[0].webhooks.as_ref().unwrap()[0];
        assert_eq!(
            w.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/mutate-thing")
        );
        assert!(w.client_config.service.is_none());
        assert_eq!(w.client_config.ca_bundle, Some(ByteString(b"PEM".to_vec())));
        // What the controller shipped besides the address stays.
        assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
        assert!(w.object_selector.is_some());
        let conversion = m.crds[0].spec.conversion.as_ref().unwrap();
        let c = conversion
            .webhook
            .as_ref()
            .unwrap()
            .client_config
            .as_ref()
            .unwrap();
        assert_eq!(c.url.as_deref(), Some("https://127.0.0.1:9443/convert"));
        assert!(c.service.is_none());
        assert_eq!(m.webhook_names(), (vec!["x-mutating".to_owned()], vec![]));
    }

    #[test]
    fn a_url_keeps_its_path_on_a_new_port() {
        assert_eq!(
            url_path("https://svc.ns:443/validate-x"),
            Some("/validate-x")
        );
        assert_eq!(url_path("https://svc.ns:443"), None);
    }

    #[test]
    fn manifests_without_crds_are_refused_naming_the_folder() {
        let m = Manifests::select(Path::new("config/default"), rendered()[..1].to_vec()).unwrap();
        let err = m
            .require_crds(Path::new("config/default"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config/default") && err.contains("CustomResourceDefinition"),
            "{err}"
        );
    }

    #[test]
    fn a_malformed_webhook_names_its_document() {
        let mut docs = rendered();
        docs[2]["webhooks"] = json!("not a list");
        let err = Manifests::select(Path::new("cfg"), docs)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("document 2") && err.contains("x-mutating"),
            "{err}"
        );
    }
}
