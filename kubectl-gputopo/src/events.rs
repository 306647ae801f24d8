//! A pod's scheduling events as the API server holds them (what the
//! running scheduler last said), beside what it would say now.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use serde::Serialize;

/// The reasons schedulers record about placing a pod.
pub const SCHEDULING_REASONS: [&str; 3] = ["FailedScheduling", "Scheduled", "Preempted"];

/// One event, as `kubectl describe` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodEvent {
    pub reason: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub message: String,
    /// How many times it was seen (its series).
    pub count: i32,
    /// When it was last seen.
    pub last_seen: Option<Timestamp>,
    /// Who recorded it (`gputopo-scheduler`, `default-scheduler`, ...).
    pub reporter: Option<String>,
}

/// The scheduling events of pod `name` (uid `uid`, where known: an older
/// pod of the same name is not this one) in `namespace`, oldest first.
pub async fn pod_events(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<Vec<PodEvent>, kube::Error> {
    let mut selector = format!("involvedObject.kind=Pod,involvedObject.name={name}");
    if let Some(uid) = uid {
        selector.push_str(&format!(",involvedObject.uid={uid}"));
    }
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&selector))
        .await?
        .items;
    let mut out: Vec<PodEvent> = events
        .into_iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| SCHEDULING_REASONS.contains(&r))
        })
        .map(|e| event_view(&e))
        .collect();
    out.sort_by_key(|e| e.last_seen);
    Ok(out)
}

fn event_view(e: &Event) -> PodEvent {
    let series = e.series.as_ref();
    PodEvent {
        reason: e.reason.clone().unwrap_or_default(),
        type_: e.type_.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        count: series.and_then(|s| s.count).or(e.count).unwrap_or(1).max(1),
        last_seen: series
            .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
            .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.first_timestamp.as_ref().map(|t| t.0)),
        reporter: e
            .reporting_component
            .clone()
            .filter(|c| !c.is_empty())
            .or_else(|| e.source.as_ref().and_then(|s| s.component.clone())),
    }
}
