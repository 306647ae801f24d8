//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas only one pops the queue and binds. The semantics are client-go's
//! (`leaderelection`, as kube-scheduler uses it): the holder renews
//! `renewTime` every retry period; a holder whose `renewTime` plus
//! `leaseDurationSeconds` has passed may be taken over (`leaseTransitions`
//! counts the changes of holder); every write is a create or a replace
//! carrying the `resourceVersion` that was read, so two candidates racing
//! for an expired lease cannot both win. A leader that cannot renew within
//! the renew deadline has lost the lease and must stop binding at once.
//!
//! The decision is [`decide`], a pure function of the lease read, the
//! candidate and the time; [`next_spec`] writes the lease that carries it
//! out; [`LeaderElector`] does the I/O around them.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
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
    /// Nobody holds it, or its holder's lease expired: take it over
    /// (`leaseTransitions` + 1).
    TakeOver,
    /// Someone else holds a valid lease until `expires`.
    Wait { holder: String, expires: Timestamp },
}

/// The decision, pure: `lease` is the spec read (`None`: no Lease object).
/// A lease without a `leaseDurationSeconds` is judged by `config`'s; one
/// without a `renewTime` has expired.
pub fn decide(
    lease: Option<&LeaseSpec>,
    me: &str,
    now: Timestamp,
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
    let seconds = spec
        .lease_duration_seconds
        .filter(|s| *s > 0)
        .unwrap_or(config.lease_seconds());
    let Some(renewed) = spec.renew_time.as_ref() else {
        return Action::TakeOver;
    };
    let expires = renewed
        .0
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .unwrap_or(Timestamp::MAX);
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

    #[test]
    fn decisions() {
        let c = config();
        let now = t("2026-01-01T00:01:00Z");
        let cases: &[(Option<LeaseSpec>, Action)] = &[
            (None, Action::Create),
            (
                Some(lease(Some("me_1"), Some("2026-01-01T00:00:59Z"), Some(15))),
                Action::Renew,
            ),
            // Mine even though expired: renew (nobody took it).
            (
                Some(lease(Some("me_1"), Some("2026-01-01T00:00:00Z"), Some(15))),
                Action::Renew,
            ),
            (
                Some(lease(
                    Some("other_2"),
                    Some("2026-01-01T00:00:50Z"),
                    Some(15),
                )),
                Action::Wait {
                    holder: "other_2".into(),
                    expires: t("2026-01-01T00:01:05Z"),
                },
            ),
            // Exactly at expiry: may be taken.
            (
                Some(lease(
                    Some("other_2"),
                    Some("2026-01-01T00:00:45Z"),
                    Some(15),
                )),
                Action::TakeOver,
            ),
            (
                Some(lease(
                    Some("other_2"),
                    Some("2026-01-01T00:00:10Z"),
                    Some(15),
                )),
                Action::TakeOver,
            ),
            // The lease's own duration counts, not mine.
            (
                Some(lease(
                    Some("other_2"),
                    Some("2026-01-01T00:00:10Z"),
                    Some(60),
                )),
                Action::Wait {
                    holder: "other_2".into(),
                    expires: t("2026-01-01T00:01:10Z"),
                },
            ),
            // No duration on the lease: mine (15 s).
            (
                Some(lease(Some("other_2"), Some("2026-01-01T00:00:50Z"), None)),
                Action::Wait {
                    holder: "other_2".into(),
                    expires: t("2026-01-01T00:01:05Z"),
                },
            ),
            // Released (no holder, or an empty one).
            (
                Some(lease(None, Some("2026-01-01T00:00:59Z"), Some(1))),
                Action::TakeOver,
            ),
            (
                Some(lease(Some(""), Some("2026-01-01T00:00:59Z"), Some(1))),
                Action::TakeOver,
            ),
            // A holder that never renewed.
            (
                Some(lease(Some("other_2"), None, Some(15))),
                Action::TakeOver,
            ),
        ];
        for (i, (spec, want)) in cases.iter().enumerate() {
            assert_eq!(&decide(spec.as_ref(), "me_1", now, &c), want, "case {i}");
        }
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
            expires: now,
        };
        assert_eq!(next_spec(&wait, Some(&theirs), "me_1", now, &c), None);

        let released = released_spec(&mine, now);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_transitions, Some(3));
        assert_eq!(
            decide(Some(&released), "other_2", now, &c),
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
