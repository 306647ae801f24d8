//! The scheduling queue: pending pods ordered by priority (highest first),
//! then age (oldest first), then name; exponential backoff for pods that
//! could not be placed; a change in the cluster (a node, pod or topology
//! event) makes unschedulable pods eligible again once their backoff has run
//! out, as kube-scheduler moves pods from its unschedulable set to its
//! backoff queue. Pure: the caller passes the clock.

use super::outcome::Outcome;
use crate::cluster::pod_key;
use crate::config::Backoff;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What the queue knows of a pending pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedPod {
    /// `namespace/name`.
    pub key: String,
    pub priority: i32,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
}

impl QueuedPod {
    /// The queue's view of a pending pod.
    pub fn of(pod: &Pod) -> QueuedPod {
        QueuedPod {
            key: pod_key(pod),
            priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Never tried, or eligible again.
    Active,
    /// Failed for a reason a retry may fix (an API error): eligible at `until`.
    Backoff { until: Instant },
    /// No node fits: eligible at `since + unschedulable_timeout`, or at
    /// `backoff_until` once the cluster changes.
    Unschedulable {
        since: Instant,
        backoff_until: Instant,
    },
}

#[derive(Clone, Debug)]
struct Entry {
    pod: QueuedPod,
    attempts: u32,
    state: State,
}

/// See the module documentation.
#[derive(Debug)]
pub struct SchedulingQueue {
    backoff: Backoff,
    entries: HashMap<String, Entry>,
}

impl SchedulingQueue {
    pub fn new(backoff: Backoff) -> SchedulingQueue {
        SchedulingQueue {
            backoff,
            entries: HashMap::new(),
        }
    }

    /// The wait after `attempts` failures: `initial * 2^(attempts-1)`, at most `max`.
    pub fn backoff_for(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(20);
        self.backoff
            .initial
            .saturating_mul(1u32 << shift)
            .min(self.backoff.max)
    }

    /// Makes the queue hold exactly `pending`: new pods enter active, gone
    /// pods leave, known pods keep their backoff (priority updated).
    pub fn sync(&mut self, pending: impl IntoIterator<Item = QueuedPod>) {
        let mut seen: HashMap<String, QueuedPod> =
            pending.into_iter().map(|p| (p.key.clone(), p)).collect();
        self.entries.retain(|k, e| match seen.remove(k) {
            Some(p) => {
                e.pod = p;
                true
            }
            None => false,
        });
        for (key, pod) in seen {
            self.entries.insert(
                key,
                Entry {
                    pod,
                    attempts: 0,
                    state: State::Active,
                },
            );
        }
    }

    fn eligible(&self, e: &Entry, now: Instant) -> bool {
        match e.state {
            State::Active => true,
            State::Backoff { until } => until <= now,
            State::Unschedulable { since, .. } => since + self.backoff.unschedulable_timeout <= now,
        }
    }

    /// The pods to try now, in order: priority, then age, then name.
    pub fn ready(&self, now: Instant) -> Vec<QueuedPod> {
        let mut ready: Vec<QueuedPod> = self
            .entries
            .values()
            .filter(|e| self.eligible(e, now))
            .map(|e| e.pod.clone())
            .collect();
        ready.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.created.cmp(&b.created))
                .then_with(|| a.key.cmp(&b.key))
        });
        ready
    }

    /// No node fits `key` now; returns how long until it is tried again
    /// after a change in the cluster.
    pub fn unschedulable(&mut self, key: &str, now: Instant) -> Option<Duration> {
        let wait = self.backoff_for(self.entries.get(key)?.attempts + 1);
        let e = self.entries.get_mut(key)?;
        e.attempts += 1;
        e.state = State::Unschedulable {
            since: now,
            backoff_until: now + wait,
        };
        Some(wait)
    }

    /// Trying `key` failed for a transient reason (an API error).
    pub fn retry_later(&mut self, key: &str, now: Instant) -> Option<Duration> {
        let wait = self.backoff_for(self.entries.get(key)?.attempts + 1);
        let e = self.entries.get_mut(key)?;
        e.attempts += 1;
        e.state = State::Backoff { until: now + wait };
        Some(wait)
    }

    /// `key` is bound (or gone): it leaves the queue.
    pub fn done(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Something in the cluster changed: unschedulable pods become eligible
    /// when their backoff runs out.
    pub fn cluster_changed(&mut self) {
        for e in self.entries.values_mut() {
            if let State::Unschedulable { backoff_until, .. } = e.state {
                e.state = State::Backoff {
                    until: backoff_until,
                };
            }
        }
    }

    /// The earliest time a waiting pod becomes eligible.
    pub fn next_wake(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter_map(|e| match e.state {
                State::Active => None,
                State::Backoff { until } => Some(until),
                State::Unschedulable { since, .. } => {
                    Some(since + self.backoff.unschedulable_timeout)
                }
            })
            .min()
    }

    /// Whether `key` is queued.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// Failures so far of `key`.
    pub fn attempts(&self, key: &str) -> u32 {
        self.entries.get(key).map_or(0, |e| e.attempts)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bookkeeping after `outcome`: a placed pod (or one gone) leaves,
    /// a failed binding backs off, anything else waits for a change.
    pub fn record(&mut self, pod: &str, outcome: &Outcome, now: Instant) {
        match outcome {
            Outcome::Scheduled(_) => self.done(pod),
            Outcome::BindFailed(e) if e.pod_gone() => self.done(pod),
            Outcome::BindFailed(_) => {
                self.retry_later(pod, now);
            }
            _ => {
                self.unschedulable(pod, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(key: &str, priority: i32, created_s: i64) -> QueuedPod {
        QueuedPod {
            key: key.into(),
            priority,
            created: Timestamp::from_second(created_s).ok(),
        }
    }

    fn keys(q: &SchedulingQueue, now: Instant) -> Vec<String> {
        q.ready(now).into_iter().map(|p| p.key).collect()
    }

    fn queue() -> SchedulingQueue {
        SchedulingQueue::new(Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(8),
            unschedulable_timeout: Duration::from_secs(60),
        })
    }

    #[test]
    fn orders_by_priority_then_age_then_name() {
        let mut q = queue();
        q.sync([
            pod("a/old", 0, 10),
            pod("a/new", 0, 20),
            pod("a/high", 100, 30),
            pod("a/b", 0, 10),
        ]);
        assert_eq!(
            keys(&q, Instant::now()),
            ["a/high", "a/b", "a/old", "a/new"]
        );
        q.sync([pod("a/new", 0, 20)]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let q = queue();
        let secs: Vec<u64> = (1..=6).map(|a| q.backoff_for(a).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 8, 8]);
    }

    #[test]
    fn unschedulable_pods_wait_for_a_change_then_their_backoff() {
        let mut q = queue();
        let t0 = Instant::now();
        q.sync([pod("a/p", 0, 1)]);
        assert_eq!(q.unschedulable("a/p", t0), Some(Duration::from_secs(1)));
        // No change: not before the unschedulable timeout, even after the backoff.
        assert!(keys(&q, t0 + Duration::from_secs(5)).is_empty());
        assert_eq!(keys(&q, t0 + Duration::from_secs(60)), ["a/p"]);
        q.cluster_changed();
        assert!(keys(&q, t0 + Duration::from_millis(500)).is_empty());
        assert_eq!(keys(&q, t0 + Duration::from_secs(1)), ["a/p"]);
        assert_eq!(q.next_wake(), Some(t0 + Duration::from_secs(1)));
        // The second failure doubles the wait; syncing keeps it.
        assert_eq!(q.unschedulable("a/p", t0), Some(Duration::from_secs(2)));
        q.sync([pod("a/p", 0, 1)]);
        assert_eq!(q.attempts("a/p"), 2);
        q.done("a/p");
        assert!(q.is_empty());
    }

    #[test]
    fn api_errors_back_off_without_waiting_for_a_change() {
        let mut q = queue();
        let t0 = Instant::now();
        q.sync([pod("a/p", 0, 1)]);
        q.retry_later("a/p", t0);
        assert!(keys(&q, t0).is_empty());
        assert_eq!(keys(&q, t0 + Duration::from_secs(1)), ["a/p"]);
        assert_eq!(q.retry_later("a/missing", t0), None);
    }
}
