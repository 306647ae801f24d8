//! The apiserver's audit log: the policy it is written with, its events
//! as tests read them, and waiting for one.

use crate::TestEnv;
use serde::Deserialize;
use std::path::Path;
use std::time::{Duration, Instant};

impl TestEnv {
    /// The apiserver's audit log: one JSON event per line, every request at
    /// `Metadata` level except health checks (stage `ResponseComplete`).
    pub fn audit_log_path(&self) -> &Path {
        &self.audit_log
    }

    /// The audit events written so far, oldest first.
    ///
    /// The apiserver writes a request's event just *after* the response
    /// leaves, so the last request's event may be missing here: to count
    /// requests, use [`TestEnv::wait_for_audit`] for a request you know was
    /// made (the last one), then count.
    pub fn audit_events(&self) -> Vec<AuditEvent> {
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
        text.lines()
            .filter_map(|l| AuditEvent::parse(l).ok())
            .collect()
    }

    /// The audit events once `ready` holds for them (polled every 50 ms, at
    /// most 10 s, then panics naming `what`).
    pub async fn wait_for_audit(
        &self,
        what: &str,
        ready: impl Fn(&[AuditEvent]) -> bool,
    ) -> Vec<AuditEvent> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = self.audit_events();
            if ready(&events) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "audit log {} has no {what} after 10 s ({} events)",
                self.audit_log.display(),
                events.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One line of the apiserver's audit log (the fields tests look at).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// `ResponseComplete`, or `ResponseStarted` for a watch's start, or `Panic`.
    pub stage: String,
    pub verb: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub user: AuditUser,
    #[serde(default)]
    pub object_ref: Option<AuditObjectRef>,
    #[serde(default)]
    pub response_status: Option<AuditStatus>,
    #[serde(default)]
    pub impersonated_user: Option<AuditUser>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AuditUser {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub subresource: Option<String>,
    #[serde(default)]
    pub api_group: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AuditStatus {
    #[serde(default)]
    pub code: Option<i32>,
}

impl AuditEvent {
    /// Parses one line of the audit log.
    pub fn parse(line: &str) -> serde_json::Result<AuditEvent> {
        serde_json::from_str(line)
    }

    /// Whether the event is about `resource` (plural, e.g. `nodes`) named `name`.
    pub fn is_about(&self, resource: &str, name: &str) -> bool {
        self.object_ref
            .as_ref()
            .is_some_and(|o| o.resource == resource && o.name.as_deref() == Some(name))
    }

    /// create, update, patch, delete or deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// Every request at Metadata level, except the probes' health checks.
pub(crate) const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: [/healthz*, /readyz*, /livez*]
  - level: Metadata
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ADMIN_USER;

    #[test]
    fn parses_an_apiserver_audit_line() {
        // A line kube-apiserver v1.34 wrote with the policy above.
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"007cca94-ee37-4996-88c6-cdc1a64cc0b7","stage":"ResponseComplete","requestURI":"/api/v1/nodes?","verb":"create","user":{"username":"gputopo-admin","groups":["system:masters","system:authenticated"],"extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=258e"]}},"sourceIPs":["127.0.0.1"],"objectRef":{"resource":"nodes","name":"audited-0","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-11-21T05:56:13.240000Z","stageTimestamp":"2026-11-21T05:56:13.250000Z"}"#;
        let e = AuditEvent::parse(line).unwrap();
        assert_eq!(e.stage, "ResponseComplete");
        assert_eq!(e.request_uri, "/api/v1/nodes?");
        assert!(e.is_write() && e.is_about("nodes", "audited-0"));
        assert_eq!(e.user.username, ADMIN_USER);
        assert_eq!(e.response_status.and_then(|s| s.code), Some(201));
    }
}
