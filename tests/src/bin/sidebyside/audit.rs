//! The scheduler's API writes, read from the API server's audit log (the
//! test control plane logs every request): how many per bound pod, how long
//! the API server took over each, and how many were in flight at once.
//! This says where a scheduler's time goes, independently of its own
//! metrics.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One kind of write (`create pods/binding`, `patch pods`, `create events`, ...).
#[derive(Clone, Debug, Default, Serialize)]
pub struct WriteKind {
    pub count: usize,
    /// Request received to response complete, as the API server logs it.
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
}

/// A scheduler's writes over a trial.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ApiWrites {
    /// The user the writes were made as.
    pub user: String,
    pub by_kind: BTreeMap<String, WriteKind>,
    pub writes: usize,
    pub writes_per_bound_pod: f64,
    /// The binding phase: first write to the end of the last binding, seconds.
    /// The three figures below are over this phase.
    pub span_s: f64,
    /// Sum of the writes' server-side times over `span_s`: 1.0 means one
    /// write was in the API server at every moment of the phase.
    pub server_busy_ratio: f64,
    /// The most writes in the API server at one time.
    pub max_in_flight: usize,
    /// Between one write's response and the scheduler's next write, when
    /// none was in flight: the client's own time (decision, snapshot,
    /// waiting for the watch), seconds in all.
    pub idle_between_writes_s: f64,
}

fn micros(v: &Value) -> Option<i64> {
    let t: Timestamp = v.as_str()?.parse().ok()?;
    Some(t.as_microsecond())
}

/// Whether an audit event is one of a scheduler's writes: a binding, a pod
/// patch or update (annotations, PodScheduled condition), an event.
fn is_scheduler_write(e: &Value) -> bool {
    let verb = e["verb"].as_str().unwrap_or_default();
    let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
    let sub = e["objectRef"]["subresource"].as_str().unwrap_or_default();
    matches!(
        (verb, resource, sub),
        ("create", "pods", "binding")
            | ("patch" | "update", "pods", _)
            | ("create" | "patch" | "update", "events", _)
    )
}

/// The writes of `user` in the audit log at `path`. `bound` divides them.
pub fn scheduler_writes(path: &Path, user: &str, bound: usize) -> Option<ApiWrites> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut intervals: Vec<(i64, i64)> = Vec::new();
    let mut last_binding = i64::MIN;
    let mut lat: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" || e["user"]["username"] != user {
            continue;
        }
        if !is_scheduler_write(&e) {
            continue;
        }
        let (Some(a), Some(b)) = (
            micros(&e["requestReceivedTimestamp"]),
            micros(&e["stageTimestamp"]),
        ) else {
            continue;
        };
        let sub = e["objectRef"]["subresource"].as_str().unwrap_or_default();
        let kind = format!(
            "{} {}{}{}",
            e["verb"].as_str().unwrap_or_default(),
            e["objectRef"]["resource"].as_str().unwrap_or_default(),
            if sub.is_empty() { "" } else { "/" },
            sub
        );
        if sub == "binding" {
            last_binding = last_binding.max(b);
        }
        lat.entry(kind).or_default().push((b - a) as f64 / 1000.0);
        intervals.push((a, b));
    }
    if intervals.is_empty() {
        return None;
    }
    let writes = intervals.len();
    intervals.sort_unstable();
    if last_binding > i64::MIN {
        intervals.retain(|(a, _)| *a <= last_binding);
    }
    let first = intervals[0].0;
    let last = intervals.iter().map(|i| i.1).max().unwrap_or(first);
    let busy: i64 = intervals.iter().map(|(a, b)| b - a).sum();
    // Sweep for the most in flight and for the idle time between writes.
    let mut events: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|(a, b)| [(*a, 1), (*b, -1)])
        .collect();
    events.sort_unstable_by_key(|(t, d)| (*t, *d));
    let (mut in_flight, mut max_in_flight, mut idle, mut idle_since) = (0i32, 0i32, 0i64, None);
    for (t, d) in events {
        if in_flight == 0
            && d == 1
            && let Some(s) = idle_since
        {
            idle += t - s;
        }
        in_flight += d;
        max_in_flight = max_in_flight.max(in_flight);
        if in_flight == 0 {
            idle_since = Some(t);
        }
    }
    let span = (last - first) as f64 / 1e6;
    let by_kind = lat
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by(f64::total_cmp);
            let n = v.len();
            (
                k,
                WriteKind {
                    count: n,
                    mean_ms: v.iter().sum::<f64>() / n as f64,
                    p50_ms: v[n / 2],
                    p90_ms: v[(n * 9 / 10).min(n - 1)],
                },
            )
        })
        .collect();
    Some(ApiWrites {
        user: user.to_string(),
        by_kind,
        writes,
        writes_per_bound_pod: writes as f64 / bound.max(1) as f64,
        span_s: span,
        server_busy_ratio: if span > 0.0 {
            busy as f64 / 1e6 / span
        } else {
            0.0
        },
        max_in_flight: max_in_flight as usize,
        idle_between_writes_s: idle as f64 / 1e6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_serial_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let line = |verb: &str, res: &str, sub: &str, a: &str, b: &str| {
            format!(
                r#"{{"stage":"ResponseComplete","verb":"{verb}","user":{{"username":"u"}},"objectRef":{{"resource":"{res}","subresource":"{sub}"}},"requestReceivedTimestamp":"2026-11-21T08:00:0{a}Z","stageTimestamp":"2026-11-21T08:00:0{b}Z"}}"#
            )
        };
        let text = [
            line("patch", "pods", "", "0.000", "0.010"),
            line("create", "pods", "binding", "0.020", "0.030"),
            line("create", "events", "", "0.030", "0.040"),
            line("create", "pods", "", "0.000", "1.000"),
        ]
        .join("\n");
        std::fs::write(&path, text).unwrap();
        let w = scheduler_writes(&path, "u", 1).unwrap();
        assert_eq!(w.writes, 3);
        assert_eq!(w.max_in_flight, 1);
        assert!((w.span_s - 0.04).abs() < 1e-9);
        assert!((w.server_busy_ratio - 0.75).abs() < 1e-9);
        assert!((w.idle_between_writes_s - 0.01).abs() < 1e-9);
        assert_eq!(w.by_kind["create pods/binding"].count, 1);
    }
}
