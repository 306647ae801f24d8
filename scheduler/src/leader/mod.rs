//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas only one pops the queue and binds. The semantics are client-go's
//! (`leaderelection`, as kube-scheduler uses it): the holder renews
//! `renewTime` every retry period; a holder whose record this candidate has
//! seen unchanged for `leaseDurationSeconds`, by its own clock, may be
//! taken over (`leaseTransitions` counts the changes of holder); every write is a create or a replace
//! carrying the `resourceVersion` that was read, so two candidates racing
//! for an expired lease cannot both win. A leader that cannot renew within
//! the renew deadline has lost the lease and must stop binding at once.
//!
//! The decision is [`decide`], a pure function of the lease read, what
//! this candidate observed of it and when (its own clock, never the
//! holder's `renewTime`), and the time; [`next_spec`] writes the lease that carries it
//! out; [`LeaderElector`] does the I/O around them.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

/// Where the lease lives and the timings, as kube-scheduler's flags have them.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub lease_name: String,
    pub namespace: String,
    /// This replica's `holderIdentity`: see [`identity`].
    pub identity: String,
    /// How long a lease stays valid after its last renewal (default 15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failed renewal before it gives
    /// up leadership (default 10 s; below the lease duration).
    pub renew_deadline: Duration,
    /// The time between two attempts to acquire or renew (default 2 s).
    pub retry_period: Duration,
}

/// A leader-election configuration that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?}), or a replica could take over while the leader still binds"
    )]
    DurationNotAboveDeadline { lease: Duration, renew: Duration },
    #[error("the renew deadline ({renew:?}) must be longer than the retry period ({retry:?})")]
    DeadlineNotAboveRetry { renew: Duration, retry: Duration },
    #[error("the lease duration must be a whole number of seconds from 1 s, not {0:?}")]
    LeaseDuration(Duration),
    #[error("the retry period must not be zero")]
    ZeroRetry,
    #[error("the lease name and namespace must not be empty")]
    EmptyName,
}

impl LeaderConfig {
    /// Checks the timings as kube-scheduler does.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_name.is_empty() || self.namespace.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        if self.lease_duration < Duration::from_secs(1)
            || self.lease_duration.subsec_nanos() != 0
            || self.lease_duration.as_secs() > i32::MAX as u64
        {
            return Err(ConfigError::LeaseDuration(self.lease_duration));
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::ZeroRetry);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::DurationNotAboveDeadline {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period {
            return Err(ConfigError::DeadlineNotAboveRetry {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// This replica's identity: `<POD_NAME or hostname>_<random suffix>`, so
/// that a restarted pod with the same name is a new holder.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "gputopo-scheduler".into());
    let seed = (
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    let suffix = std::collections::hash_map::RandomState::new().hash_one(seed);
    format!("{host}_{:010x}", suffix & 0xff_ffff_ffff)
}

/// What a candidate does with the lease it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// There is no lease: create one naming me.
    Create,
    /// I hold it: write a new `renewTime`.
    Renew,
    /// Nobody holds it, or its holder stopped renewing: take it over
    /// (`leaseTransitions` + 1).
    TakeOver,
    /// Someone else holds a valid lease until `expires` (my clock).
    Wait { holder: String, expires: Instant },
}

/// The lease record as last read, and when it was first read so by this
/// candidate's own monotonic clock. Expiry is judged from that moment, as
/// client-go does: the holder's `renewTime` comes from another node's
/// clock, and trusting it would let clock skew end a live lease early.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub record: LeaseSpec,
    pub since: Instant,
}

/// The observation after reading `lease` at `now`: kept while the record is
/// unchanged, restarted when it changed (the holder renewed, or another
/// took over).
pub fn observe(
    previous: Option<Observed>,
    lease: Option<&LeaseSpec>,
    now: Instant,
) -> Option<Observed> {
    let record = lease?.clone();
    match previous {
        Some(p) if p.record == record => Some(p),
        _ => Some(Observed { record, since: now }),
    }
}

/// The decision, pure: `lease` is the spec read (`None`: no Lease object),
/// `observed` what [`observe`] made of it. A lease without a
/// `leaseDurationSeconds` is judged by `config`'s; one without a
/// `renewTime` was never renewed.
pub fn decide(
    lease: Option<&LeaseSpec>,
    me: &str,
    observed: Option<&Observed>,
    now: Instant,
    config: &LeaderConfig,
) -> Action {
    let Some(spec) = lease else {
        return Action::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() {
        return Action::TakeOver;
    }
    if holder == me {
        return Action::Renew;
    }
    if spec.renew_time.is_none() {
        return Action::TakeOver;
    }
    let seconds = spec
        .lease_duration_seconds
        .filter(|s| *s > 0)
        .unwrap_or(config.lease_seconds());
    let since = observed
        .filter(|o| &o.record == spec)
        .map_or(now, |o| o.since);
    let expires = since + Duration::from_secs(u64::from(seconds.unsigned_abs()));
    if now >= expires {
        Action::TakeOver
    } else {
        Action::Wait {
            holder: holder.to_string(),
            expires,
        }
    }
}

/// The spec that carries out `action` (`None` for [`Action::Wait`]).
pub fn next_spec(
    action: &Action,
    current: Option<&LeaseSpec>,
    me: &str,
    now: Timestamp,
    config: &LeaderConfig,
) -> Option<LeaseSpec> {
    let fresh = LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(config.lease_seconds()),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..LeaseSpec::default()
    };
    match action {
        Action::Create => Some(LeaseSpec {
            lease_transitions: Some(0),
            ..fresh
        }),
        Action::Renew => {
            let current = current.cloned().unwrap_or_default();
            Some(LeaseSpec {
                acquire_time: current.acquire_time.clone().or(Some(MicroTime(now))),
                lease_transitions: Some(current.lease_transitions.unwrap_or(0)),
                ..fresh
            })
        }
        Action::TakeOver => {
            let transitions = current.and_then(|c| c.lease_transitions).unwrap_or(0);
            Some(LeaseSpec {
                lease_transitions: Some(transitions.saturating_add(1)),
                ..fresh
            })
        }
        Action::Wait { .. } => None,
    }
}

/// The spec a leader leaves behind when it stops cleanly: no holder, so the
/// next candidate takes over at once (client-go's `ReleaseOnCancel`).
pub fn released_spec(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: current.lease_transitions,
        ..LeaseSpec::default()
    }
}

mod elector;
pub use elector::{LeaderElector, LeaderError};

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaderConfig {
        LeaderConfig {
            lease_name: "gputopo-scheduler".into(),
            namespace: "gputopo-system".into(),
            identity: "me_1".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn t(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    fn lease(holder: Option<&str>, renewed: Option<&str>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: renewed.map(|r| MicroTime(t(r))),
            acquire_time: Some(MicroTime(t("2026-01-01T00:00:00Z"))),
            lease_duration_seconds: seconds,
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    /// Decides on `spec` first seen `seen` ago.
    fn decide_seen(spec: Option<&LeaseSpec>, seen: Duration) -> Action {
        let now = Instant::now() + Duration::from_secs(3600);
        let observed = observe(None, spec, now - seen);
        decide(spec, "me_1", observed.as_ref(), now, &config())
    }

    #[test]
    fn decisions() {
        let wait = |a: &Action| matches!(a, Action::Wait { holder, .. } if holder == "other_2");
        assert_eq!(decide_seen(None, Duration::ZERO), Action::Create);
        // Mine, even if not renewed for long: renew (nobody took it).
        let mine = lease(Some("me_1"), Some("2020-01-01T00:00:00Z"), Some(15));
        assert_eq!(
            decide_seen(Some(&mine), Duration::from_secs(600)),
            Action::Renew
        );
        // Another holder: expiry counts from when I first saw this record.
        let theirs = lease(Some("other_2"), Some("2026-01-01T00:00:50Z"), Some(15));
        assert!(wait(&decide_seen(Some(&theirs), Duration::from_secs(14))));
        assert_eq!(
            decide_seen(Some(&theirs), Duration::from_secs(15)),
            Action::TakeOver
        );
        // The lease's own duration counts, not mine; without one, mine (15 s).
        let long = lease(Some("other_2"), Some("2026-01-01T00:00:10Z"), Some(60));
        assert!(wait(&decide_seen(Some(&long), Duration::from_secs(59))));
        let none = lease(Some("other_2"), Some("2026-01-01T00:00:50Z"), None);
        assert!(wait(&decide_seen(Some(&none), Duration::from_secs(14))));
        assert_eq!(
            decide_seen(Some(&none), Duration::from_secs(15)),
            Action::TakeOver
        );
        // Released (no holder, or an empty one), or never renewed.
        for spec in [
            lease(None, Some("2026-01-01T00:00:59Z"), Some(1)),
            lease(Some(""), Some("2026-01-01T00:00:59Z"), Some(1)),
            lease(Some("other_2"), None, Some(15)),
        ] {
            assert_eq!(decide_seen(Some(&spec), Duration::ZERO), Action::TakeOver);
        }
    }

    /// A holder whose clock runs an hour behind writes renewTimes an hour
    /// in the past; as long as it keeps renewing, nobody takes over.
    #[test]
    fn clock_skew_never_ends_a_live_lease() {
        let c = config();
        let start = Instant::now();
        let mut observed = None;
        for step in 0..20u64 {
            let now = start + Duration::from_secs(2 * step);
            let skewed = format!(
                "2026-01-01T00:{:02}:{:02}Z",
                (2 * step) / 60,
                (2 * step) % 60
            );
            let spec = lease(Some("other_2"), Some(&skewed), Some(15));
            observed = observe(observed, Some(&spec), now);
            let action = decide(Some(&spec), "me_1", observed.as_ref(), now, &c);
            assert!(
                matches!(action, Action::Wait { .. }),
                "step {step}: {action:?}"
            );
        }
        // The holder stops renewing: the record stays the same, and a lease
        // duration later (by my clock) it may be taken.
        let spec = observed.clone().expect("seen").record;
        let last = start + Duration::from_secs(38);
        let expired = last + Duration::from_secs(15);
        let observed = observe(observed, Some(&spec), expired);
        assert_eq!(
            decide(
                Some(&spec),
                "me_1",
                observed.as_ref(),
                expired - Duration::from_secs(1),
                &c
            ),
            Action::Wait {
                holder: "other_2".into(),
                expires: expired
            }
        );
        assert_eq!(
            decide(Some(&spec), "me_1", observed.as_ref(), expired, &c),
            Action::TakeOver
        );
    }

    #[test]
    fn written_specs() {
        let c = config();
        let now = t("2026-01-01T00:01:00Z");
        let created = next_spec(&Action::Create, None, "me_1", now, &c).expect("a spec");
        assert_eq!(created.holder_identity.as_deref(), Some("me_1"));
        assert_eq!(created.lease_duration_seconds, Some(15));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.acquire_time, Some(MicroTime(now)));
        assert_eq!(created.renew_time, Some(MicroTime(now)));

        let mine = lease(Some("me_1"), Some("2026-01-01T00:00:58Z"), Some(15));
        let renewed = next_spec(&Action::Renew, Some(&mine), "me_1", now, &c).expect("a spec");
        assert_eq!(renewed.acquire_time, mine.acquire_time, "acquireTime kept");
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));
        assert_eq!(renewed.lease_transitions, Some(3));

        let theirs = lease(Some("other_2"), Some("2026-01-01T00:00:00Z"), Some(15));
        let taken = next_spec(&Action::TakeOver, Some(&theirs), "me_1", now, &c).expect("a spec");
        assert_eq!(taken.holder_identity.as_deref(), Some("me_1"));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_transitions, Some(4));

        let wait = Action::Wait {
            holder: "other_2".into(),
            expires: Instant::now(),
        };
        assert_eq!(next_spec(&wait, Some(&theirs), "me_1", now, &c), None);

        let released = released_spec(&mine, now);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_transitions, Some(3));
        assert_eq!(
            decide(Some(&released), "other_2", None, Instant::now(), &c),
            Action::TakeOver
        );
    }

    #[test]
    fn validation() {
        assert_eq!(config().validate(), Ok(()));
        let mut c = config();
        c.renew_deadline = Duration::from_secs(15);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::DurationNotAboveDeadline { .. })
        ));
        let mut c = config();
        c.retry_period = Duration::from_secs(10);
        assert!(matches!(
            c.validate(),
            Err(ConfigError::DeadlineNotAboveRetry { .. })
        ));
        let mut c = config();
        c.lease_duration = Duration::from_millis(1500);
        assert!(matches!(c.validate(), Err(ConfigError::LeaseDuration(_))));
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        let a = identity();
        let b = identity();
        assert_ne!(a, b);
        let (host, suffix) = a.rsplit_once('_').expect("host_suffix");
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 10);
    }
}
