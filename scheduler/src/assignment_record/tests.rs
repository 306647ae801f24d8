use super::*;
use serde_json::json;

fn pod(uid: &str, node: Option<&str>, annotations: serde_json::Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "ddp", "namespace": "ml", "uid": uid, "annotations": annotations},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        }))
        .expect("a pod"),
    )
}

fn with_condition(pod: &Arc<Pod>, message: &str) -> Arc<Pod> {
    let mut p = (**pod).clone();
    let status = p.status.get_or_insert_with(Default::default);
    status.conditions = Some(vec![PodCondition {
        type_: CONDITION_TYPE.into(),
        status: "True".into(),
        message: Some(message.into()),
        ..PodCondition::default()
    }]);
    Arc::new(p)
}

fn gpus(p: &Pod) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(pod_keys::ASSIGNED_GPUS)
        .map(String::as_str)
}

use std::sync::Arc;

const RECORD: &str = "gputopo.dev/assigned-gpus=0,1,2,3; gputopo.dev/assigned-gpu-uuids=GPU-a,GPU-b,GPU-c,GPU-d; scheduler.gputopo.dev/bottleneck=NV18";

#[test]
fn the_condition_message_round_trips_and_bad_ones_name_the_part() {
    let record = AssignmentRecord::parse(RECORD).expect("a record");
    assert_eq!(record.message(), RECORD);
    let condition = record.condition("2026-11-29T12:00:00Z".parse().unwrap());
    assert_eq!(condition.type_, CONDITION_TYPE);
    assert_eq!(condition.status, "True");
    assert_eq!(
        AssignmentRecord::parse(&condition.message.unwrap()),
        Ok(record)
    );
    let err = AssignmentRecord::parse("gputopo.dev/assigned-gpus=0; gpus=1").unwrap_err();
    assert_eq!(
        err,
        RecordError::BadPart {
            part: "gpus=1".into()
        }
    );
    assert!(
        err.to_string().contains("gputopo.dev/assigned-gpu-uuids"),
        "{err}"
    );
    assert!(matches!(
        AssignmentRecord::parse("gputopo.dev/assigned-gpus=0; gputopo.dev/assigned-gpus=1"),
        Err(RecordError::Repeated { .. })
    ));
    assert_eq!(AssignmentRecord::parse(""), Ok(AssignmentRecord::default()));
}

#[test]
fn a_later_edit_is_ignored_and_reported_once_per_value() {
    let mut keeper = RecordKeeper::default();
    let first = pod(
        "u1",
        Some("n"),
        json!({"gputopo.dev/assigned-gpus": "0,1,2,3"}),
    );
    let seen = keeper.observe("ml/ddp", &first);
    assert!(Arc::ptr_eq(&seen.pod, &first) && seen.findings.is_empty());

    let edited = pod(
        "u1",
        Some("n"),
        json!({"gputopo.dev/assigned-gpus": "x", "other": "y"}),
    );
    let seen = keeper.observe("ml/ddp", &edited);
    assert_eq!(gpus(&seen.pod), Some("0,1,2,3"));
    assert_eq!(
        seen.pod
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("other")
            .map(String::as_str),
        Some("y"),
        "other annotations are the pod's own"
    );
    assert_eq!(seen.findings.len(), 1);
    let finding = &seen.findings[0];
    assert_eq!(finding.metric_label(), "edited");
    assert_eq!(finding.event_reason(), "GPURecordEdited");
    let message = finding.message();
    assert!(
        message.contains("0,1,2,3") && message.contains("=x"),
        "{message}"
    );
    // The same edit seen again is not reported again; another value is.
    assert!(keeper.observe("ml/ddp", &edited).findings.is_empty());
    let again = pod(
        "u1",
        Some("n"),
        json!({"gputopo.dev/assigned-gpus": "4,5,6,7"}),
    );
    let seen = keeper.observe("ml/ddp", &again);
    assert_eq!(gpus(&seen.pod), Some("0,1,2,3"));
    assert_eq!(seen.findings.len(), 1);
    // Removing the record is an edit too.
    let removed = pod("u1", Some("n"), json!({}));
    assert_eq!(
        gpus(&keeper.observe("ml/ddp", &removed).pod),
        Some("0,1,2,3")
    );
}

#[test]
fn what_the_scheduler_wrote_wins_over_the_first_read() {
    let mut keeper = RecordKeeper::default();
    let record = AssignmentRecord::parse("gputopo.dev/assigned-gpus=4,5").unwrap();
    keeper.wrote("ml/ddp", Some("u1"), record);
    let edited = pod("u1", Some("n"), json!({"gputopo.dev/assigned-gpus": "0"}));
    let seen = keeper.observe("ml/ddp", &edited);
    assert_eq!(gpus(&seen.pod), Some("4,5"));
    assert_eq!(seen.findings[0].metric_label(), "edited");
}

#[test]
fn the_status_record_is_read_first_and_a_disagreement_named() {
    let mut keeper = RecordKeeper::default();
    let edited = pod("u1", Some("n"), json!({"gputopo.dev/assigned-gpus": "x"}));
    let with_status = with_condition(&edited, RECORD);
    let seen = keeper.observe("ml/ddp", &with_status);
    assert_eq!(gpus(&seen.pod), Some("0,1,2,3"));
    let annotations = seen.pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        annotations
            .get(pod_keys::ASSIGNED_GPU_UUIDS)
            .map(String::as_str),
        Some("GPU-a,GPU-b,GPU-c,GPU-d")
    );
    assert_eq!(seen.findings.len(), 1);
    assert_eq!(seen.findings[0].metric_label(), "disagrees");
    let message = seen.findings[0].message();
    assert!(
        message.contains("=x") && message.contains(CONDITION_TYPE),
        "{message}"
    );

    // Read from the annotations first, then the status record arrives:
    // the status record wins.
    let mut keeper = RecordKeeper::default();
    keeper.observe("ml/ddp", &edited);
    let seen = keeper.observe("ml/ddp", &with_status);
    assert_eq!(gpus(&seen.pod), Some("0,1,2,3"));
    assert_eq!(seen.findings[0].metric_label(), "disagrees");
}

#[test]
fn an_unreadable_status_record_falls_back_to_the_annotations_saying_so() {
    let mut keeper = RecordKeeper::default();
    let p = pod("u1", Some("n"), json!({"gputopo.dev/assigned-gpus": "2"}));
    let seen = keeper.observe("ml/ddp", &with_condition(&p, "nonsense"));
    assert_eq!(gpus(&seen.pod), Some("2"));
    assert_eq!(seen.findings[0].metric_label(), "unreadable_status");
    assert!(seen.findings[0].message().contains("nonsense"));
}

#[test]
fn only_bound_pods_keep_a_record_and_a_new_uid_starts_afresh() {
    let mut keeper = RecordKeeper::default();
    // Pending: the annotations are the pod's own business until bound.
    let pending = pod("u1", None, json!({"gputopo.dev/assigned-gpus": "1"}));
    keeper.observe("ml/ddp", &pending);
    assert!(keeper.is_empty());
    let bound = pod("u1", Some("n"), json!({"gputopo.dev/assigned-gpus": "0"}));
    keeper.observe("ml/ddp", &bound);
    assert_eq!(keeper.len(), 1);
    // A pod bound without any record keeps that: a record added later is
    // not believed.
    let other = pod("u2", Some("n"), json!({}));
    keeper.observe("ml/ddp", &other);
    let added = pod("u2", Some("n"), json!({"gputopo.dev/assigned-gpus": "7"}));
    let seen = keeper.observe("ml/ddp", &added);
    assert_eq!(gpus(&seen.pod), None);
    assert_eq!(seen.findings.len(), 1);
    keeper.forget("ml/ddp");
    assert!(keeper.is_empty());
}
