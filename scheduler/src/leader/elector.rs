//! The I/O around [`super::decide`]: read the Lease, write what
//! [`super::next_spec`] says, with client-go's timings and timeouts.

use super::*;
use kube::api::{Api, PostParams};
use std::convert::Infallible;
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, warn};

/// A failed lease read or write, or leadership lost.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("reading Lease {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("writing Lease {namespace}/{name}: {source}")]
    Write {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("Lease {namespace}/{name}: the request took longer than {timeout:?}")]
    Timeout {
        namespace: String,
        name: String,
        timeout: Duration,
    },
    #[error(
        "lost the leader lease {namespace}/{name}: {reason}; stopping so that only one replica binds"
    )]
    Lost {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// The outcome of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// I hold the lease now.
    Held,
    /// Someone else holds it.
    Other { holder: String },
    /// Someone else wrote it between my read and my write.
    Conflict,
}

/// Acquires, renews and releases the lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
    /// What this candidate last saw of the lease, and since when.
    observed: std::sync::Mutex<Option<Observed>>,
}

impl LeaderElector {
    pub fn new(client: kube::Client, config: LeaderConfig) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: std::sync::Mutex::new(None),
        }
    }

    pub fn config(&self) -> &LeaderConfig {
        &self.config
    }

    fn read_error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Read {
            namespace: self.config.namespace.clone(),
            name: self.config.lease_name.clone(),
            source,
        }
    }

    fn write_error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Write {
            namespace: self.config.namespace.clone(),
            name: self.config.lease_name.clone(),
            source,
        }
    }

    async fn read(&self) -> Result<Option<Lease>, LeaderError> {
        self.api
            .get_opt(&self.config.lease_name)
            .await
            .map_err(|e| self.read_error(e))
    }

    /// One read, decision and (maybe) write.
    async fn attempt(&self) -> Result<Attempt, LeaderError> {
        let current = self.read().await?;
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let me = &self.config.identity;
        let now = Timestamp::now();
        let observed = {
            let mut o = self
                .observed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *o = observe(o.take(), spec, Instant::now());
            o.clone()
        };
        let action = decide(spec, me, observed.as_ref(), Instant::now(), &self.config);
        let Some(next) = next_spec(&action, spec, me, now, &self.config) else {
            let Action::Wait { holder, .. } = action else {
                return Ok(Attempt::Conflict);
            };
            return Ok(Attempt::Other { holder });
        };
        let kind = match action {
            Action::Create => "create",
            Action::Renew => "renew",
            _ => "take-over",
        };
        let span = info_span!(
            "lease_write",
            lease = %self.config.lease_name,
            namespace = %self.config.namespace,
            action = kind,
            holder = %me,
        );
        async {
            let result = match current {
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.config.lease_name.clone()),
                            namespace: Some(self.config.namespace.clone()),
                            ..ObjectMeta::default()
                        },
                        spec: Some(next),
                    };
                    let created = self.api.create(&PostParams::default(), &lease).await;
                    // Creating namespaces is not this scheduler's to do (least
                    // privilege): say what is missing and keep retrying.
                    if let Err(kube::Error::Api(s)) = &created
                        && s.code == 404
                    {
                        warn!(
                            namespace = %self.config.namespace,
                            "the lease namespace does not exist: create it, or pass --leader-elect-namespace (the Helm chart sets it to the release namespace)"
                        );
                    }
                    created
                }
                Some(mut lease) => {
                    // The resourceVersion read stays in the metadata: the
                    // API server refuses the replace if anyone wrote since.
                    lease.spec = Some(next);
                    self.api
                        .replace(&self.config.lease_name, &PostParams::default(), &lease)
                        .await
                }
            };
            match result {
                Ok(_) => {
                    debug!("lease written");
                    Ok(Attempt::Held)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    debug!("lease changed under us");
                    Ok(Attempt::Conflict)
                }
                Err(e) => Err(self.write_error(e)),
            }
        }
        .instrument(span)
        .await
    }

    /// [`Self::attempt`], abandoned after `timeout`.
    async fn attempt_within(&self, timeout: Duration) -> Result<Attempt, LeaderError> {
        tokio::time::timeout(timeout, self.attempt())
            .await
            .unwrap_or_else(|_| {
                Err(LeaderError::Timeout {
                    namespace: self.config.namespace.clone(),
                    name: self.config.lease_name.clone(),
                    timeout,
                })
            })
    }

    /// Campaigns until this replica holds the lease, then renews it; sets
    /// `leader` to true while it does. Returns only when leadership is lost
    /// (a renewal that did not succeed within the renew deadline, or another
    /// holder seen): the caller must stop binding at once.
    pub async fn run(&self, leader: &watch::Sender<bool>) -> Result<Infallible, LeaderError> {
        let c = &self.config;
        info!(lease = %c.lease_name, namespace = %c.namespace, identity = %c.identity, "campaigning for the leader lease");
        let mut last_holder = String::new();
        loop {
            match self.attempt_within(c.renew_deadline).await {
                Ok(Attempt::Held) => break,
                Ok(Attempt::Other { holder }) => {
                    if holder != last_holder {
                        info!(%holder, "another replica leads; standing by");
                        last_holder = holder;
                    }
                }
                Ok(Attempt::Conflict) => debug!("lost a race for the lease; retrying"),
                Err(e) => warn!(error = %e, "acquiring the leader lease; retrying"),
            }
            tokio::time::sleep(c.retry_period).await;
        }
        info!(lease = %c.lease_name, identity = %c.identity, "became the leader");
        leader.send_replace(true);
        let mut renewed = Instant::now();
        loop {
            // Wake at the next retry, or at the deadline if that comes first,
            // so leadership is never held past it.
            let deadline = renewed + c.renew_deadline;
            let next = (Instant::now() + c.retry_period).min(deadline);
            tokio::time::sleep_until(next.into()).await;
            let left = c.renew_deadline.saturating_sub(renewed.elapsed());
            let outcome = if left.is_zero() {
                Err(LeaderError::Timeout {
                    namespace: c.namespace.clone(),
                    name: c.lease_name.clone(),
                    timeout: c.renew_deadline,
                })
            } else {
                self.attempt_within(left).await
            };
            let reason = match outcome {
                Ok(Attempt::Held) => {
                    renewed = Instant::now();
                    continue;
                }
                Ok(Attempt::Other { holder }) => {
                    leader.send_replace(false);
                    return Err(LeaderError::Lost {
                        namespace: c.namespace.clone(),
                        name: c.lease_name.clone(),
                        reason: format!("{holder} holds it now"),
                    });
                }
                Ok(Attempt::Conflict) => "the lease changed under us".to_string(),
                Err(e) => e.to_string(),
            };
            if renewed.elapsed() >= c.renew_deadline {
                leader.send_replace(false);
                return Err(LeaderError::Lost {
                    namespace: c.namespace.clone(),
                    name: c.lease_name.clone(),
                    reason: format!(
                        "not renewed within the renew deadline {:?} (last: {reason})",
                        c.renew_deadline
                    ),
                });
            }
            warn!(%reason, "renewing the leader lease failed; retrying");
        }
    }

    /// Gives the lease up if this replica holds it, so that a standby takes
    /// over without waiting for it to expire. Best effort, bounded by the
    /// retry period.
    pub async fn release(&self) {
        let c = &self.config;
        let span = info_span!("lease_write", lease = %c.lease_name, namespace = %c.namespace, action = "release", holder = %c.identity);
        let work = async {
            let Some(mut lease) = self.read().await? else {
                return Ok(false);
            };
            let Some(spec) = lease.spec.as_ref() else {
                return Ok(false);
            };
            if spec.holder_identity.as_deref() != Some(c.identity.as_str()) {
                return Ok(false);
            }
            lease.spec = Some(released_spec(spec, Timestamp::now()));
            self.api
                .replace(&c.lease_name, &PostParams::default(), &lease)
                .await
                .map_err(|e| self.write_error(e))?;
            Ok::<bool, LeaderError>(true)
        };
        match tokio::time::timeout(c.retry_period.max(Duration::from_secs(1)), work)
            .instrument(span)
            .await
        {
            Ok(Ok(true)) => info!("released the leader lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => warn!(error = %e, "releasing the leader lease"),
            Err(_) => warn!("releasing the leader lease: timed out"),
        }
    }
}
