//! Acting as a chart's service account: the tests that check what a
//! component may do use the token the API server issues for its account.

use gputopo_testenv::TestEnv;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use std::path::{Path, PathBuf};

/// Writes `dir/<user>.kubeconfig`, authenticating as `namespace/account`
/// with a token the API server issues: bound to `pod` when given (the token
/// the kubelet would mount for it), else unbound.
pub async fn service_account_kubeconfig(
    env: &TestEnv,
    admin: &kube::Client,
    namespace: &str,
    account: &str,
    pod: Option<&Pod>,
    dir: &Path,
    user: &str,
) -> PathBuf {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            bound_object_ref: pod.map(|p| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: p.metadata.name.clone(),
                uid: p.metadata.uid.clone(),
            }),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .expect("token issued")
        .status
        .expect("token status")
        .token
        .expect("token in status");
    let kubeconfig = dir.join(format!("{user}.kubeconfig"));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: {user}}}\ncurrent-context: c\n",
            env.apiserver_url(),
            env.ca_cert_path().display()
        ),
    )
    .expect("kubeconfig written");
    kubeconfig
}
