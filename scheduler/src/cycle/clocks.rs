//! How long each gang has waited, and how long each has been partly
//! bound: the gang timeout and the partial-bind timeout read these. Pure:
//! time is an argument.

use super::Clock;
use super::gang::{GangKey, GangUnit};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every waiting gang's clocks.
#[derive(Debug, Default)]
pub struct GangClocks {
    /// When each gang waiting now was first seen pending: for
    /// `gputopo_gang_wait_seconds` and the gang's schedule timeout.
    since: HashMap<GangKey, Instant>,
    /// Gangs partly bound (some members bound, others pending) since when.
    partial_since: HashMap<GangKey, Instant>,
}

impl GangClocks {
    /// Keeps the clocks of the gangs of `pending` (and only those): a gang
    /// has waited since its oldest pending member was created, read from
    /// the API, so a new leader does not restart its timeout.
    pub fn sync(&mut self, pending: &[Arc<Pod>], clock: Clock) {
        let now = clock.now;
        let mut waiting: HashMap<GangKey, Instant> = HashMap::new();
        for p in pending {
            let Some(k) = GangKey::of_pod(p) else {
                continue;
            };
            let created = p
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|t| clock.wall.duration_since(t.0).try_into().ok())
                .and_then(|age: Duration| now.checked_sub(age))
                .unwrap_or(now);
            let since = waiting.entry(k).or_insert(created);
            *since = (*since).min(created);
        }
        self.since.retain(|k, _| waiting.contains_key(k));
        self.partial_since.retain(|k, _| waiting.contains_key(k));
        for (k, since) in waiting {
            self.since.entry(k).or_insert(since);
        }
    }

    /// Whether `gang` is waiting (a member pending).
    pub fn is_waiting(&self, gang: &GangKey) -> bool {
        self.since.contains_key(gang)
    }

    /// How long `unit` has been partly bound (some members bound, others
    /// pending), or `None` when it is not.
    pub fn partly_bound_for(&mut self, unit: &GangUnit, now: Instant) -> Option<Duration> {
        if unit.bound_members.is_empty() || unit.members.is_empty() {
            self.partial_since.remove(&unit.key);
            return None;
        }
        let since = *self.partial_since.entry(unit.key.clone()).or_insert(now);
        Some(now.saturating_duration_since(since))
    }

    /// A partly bound gang was undone: its clocks end.
    pub fn undone(&mut self, gang: &GangKey) {
        self.partial_since.remove(gang);
        self.since.remove(gang);
    }

    /// A gang placed whole: its clocks stop. Returns how long it waited.
    pub fn placed(&mut self, gang: &GangKey, now: Instant) -> Option<Duration> {
        self.partial_since.remove(gang);
        self.since
            .remove(gang)
            .map(|since| now.saturating_duration_since(since))
    }

    /// How long `gang` has waited.
    pub fn waited(&self, gang: &GangKey, now: Instant) -> Duration {
        self.since
            .get(gang)
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(*t))
    }

    /// Gangs waiting.
    pub fn waiting(&self) -> usize {
        self.since.len()
    }

    /// Gangs partly bound.
    pub fn partial(&self) -> usize {
        self.partial_since.len()
    }
}
