//! `docs/operator.md` names every metric the scheduler and the extender
//! register, and no scheduler metric they do not.

use gputopo_ops::MetricsRegistry;
use gputopo_scheduler::checked::InvalidObjectLabels;
use gputopo_scheduler::extender::metrics::{
    ExtenderMetrics, HandshakeLabel, RefusedLabel, RequestLabels, VerbLabel, VerdictLabel,
};
use gputopo_scheduler::metrics::{
    AttemptLabels, BottleneckLabel, DomainLabels, EvictionLabels, FindingLabel, Metrics, NodeLabel,
    StateLabel, TierLabel,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("scheduler/ sits in the repository root")
        .to_path_buf()
}

/// Metric names as a scrape shows them (counters with `_total`).
fn metric_names(registry: &prometheus_client::registry::Registry) -> BTreeSet<String> {
    gputopo_ops::encode(registry)
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (name, kind) = (words.next()?, words.next()?);
            Some(if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            })
        })
        .collect()
}

/// The scheduler's metrics with one series in each family: a family
/// without a series is left out of a scrape, names and all.
fn scheduler_metrics() -> Metrics {
    let m = Metrics::new();
    let _ = m.attempts.get_or_create(&AttemptLabels {
        result: "scheduled",
        workload: "training",
    });
    let _ = m.bottlenecks.get_or_create(&BottleneckLabel {
        bottleneck: "NV12".into(),
    });
    let _ = m.domain_utilization.get_or_create(&DomainLabels {
        tier: "gputopo.dev/leaf".into(),
        domain: "leaf-1".into(),
    });
    let _ = m.free_domains.get_or_create(&TierLabel {
        tier: "gputopo.dev/leaf".into(),
    });
    let _ = m
        .evictions
        .get_or_create(&EvictionLabels { result: "evicted" });
    let _ = m
        .assignment_mismatches
        .get_or_create(&NodeLabel { node: "n1".into() });
    let _ = m.invalid_objects.get_or_create(&invalid_object());
    let _ = m.record_findings.get_or_create(&finding());
    let _ = m.held.get_or_create(&StateLabel {
        kind: "assumed_pods",
    });
    m
}

fn invalid_object() -> InvalidObjectLabels {
    InvalidObjectLabels {
        kind: "PodGroup".into(),
        reason: "spec.minMember".into(),
    }
}

/// [`scheduler_metrics`], for the extender.
fn extender_metrics() -> ExtenderMetrics {
    let m = ExtenderMetrics::new();
    let _ = m.requests.get_or_create(&RequestLabels {
        verb: "bind",
        result: "ok",
    });
    let _ = m.duration.get_or_create(&VerbLabel { verb: "bind" });
    let _ = m
        .filtered_nodes
        .get_or_create(&VerdictLabel { verdict: "passed" });
    let _ = m.bottlenecks.get_or_create(&BottleneckLabel {
        bottleneck: "NV12".into(),
    });
    let _ = m.invalid_objects.get_or_create(&invalid_object());
    let _ = m.handshakes.get_or_create(&HandshakeLabel { result: "ok" });
    let _ = m.refused.get_or_create(&RefusedLabel { reason: "timeout" });
    let _ = m.record_findings.get_or_create(&finding());
    m
}

fn finding() -> FindingLabel {
    FindingLabel { finding: "edited" }
}

#[test]
fn the_operator_page_names_every_scheduler_metric_and_no_other() {
    let text =
        std::fs::read_to_string(repo_root().join("docs/operator.md")).expect("docs/operator.md");
    let mut registered = metric_names(scheduler_metrics().registry());
    registered.extend(metric_names(extender_metrics().registry()));
    assert!(registered.len() >= 17, "{registered:?}");
    let missing: Vec<&String> = registered
        .iter()
        .filter(|m| !text.contains(&format!("`{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operator.md does not describe {missing:?}"
    );
    // Every `gputopo_…` name the page gives for the scheduler is one it registers.
    let named: BTreeSet<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("gputopo_")
                && !s.starts_with("gputopo_agent_")
                && !s.starts_with("gputopo_device_plugin_")
                && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .map(str::to_string)
        .collect();
    let unknown: Vec<&String> = named.difference(&registered).collect();
    assert!(
        unknown.is_empty(),
        "docs/operator.md names scheduler metrics that are not registered: {unknown:?}"
    );
}
