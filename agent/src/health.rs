//! The agent's health: `/readyz` and `/metrics` are served by `gputopo-ops`;
//! `/healthz` is the agent's own: it fails when the scan loop is wedged (no
//! round completed for longer than [`Liveness::limit`]).

use crate::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Readiness before the first success: no discovery published yet.
pub fn readiness() -> gputopo_ops::Readiness {
    gputopo_ops::Readiness::new("no discovery published yet")
}

pub use gputopo_ops::Readiness;

/// When the scan loop last completed a round, and how long it may go without.
pub struct Liveness {
    started: Instant,
    /// Milliseconds after `started` of the last completed round.
    last: AtomicU64,
    limit: Duration,
}

impl Liveness {
    /// Alive now; wedged after `limit` without a [`Liveness::beat`].
    pub fn new(limit: Duration) -> Liveness {
        Liveness {
            started: Instant::now(),
            last: AtomicU64::new(0),
            limit,
        }
    }

    /// The limit for a loop that rescans every `rescan_interval`, backs off
    /// at most `max_backoff` and bounds a round by `scan_timeout`: three
    /// missed rounds plus one that ran to its timeout.
    pub fn limit_for(
        rescan_interval: Duration,
        max_backoff: Duration,
        scan_timeout: Duration,
    ) -> Duration {
        rescan_interval
            .max(max_backoff)
            .saturating_mul(3)
            .saturating_add(scan_timeout)
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// A round completed (whatever its outcome).
    pub fn beat(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::SeqCst);
    }

    /// How long since the last completed round.
    pub fn quiet_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::SeqCst));
        self.started.elapsed().saturating_sub(last)
    }

    pub fn is_alive(&self) -> bool {
        self.quiet_for() <= self.limit
    }
}

/// `/healthz` (this agent's), `/readyz` and `/metrics` (`gputopo-ops`).
pub fn router(metrics: Arc<Metrics>, readiness: Arc<Readiness>, liveness: Arc<Liveness>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(liveness)
        // Everything else is gputopo-ops's (its own /healthz is never reached).
        .fallback_service(gputopo_ops::router(metrics, readiness))
}

async fn healthz(State(liveness): State<Arc<Liveness>>) -> (StatusCode, String) {
    if liveness.is_alive() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "scan loop wedged: no round completed for {}s (limit {}s)\n",
                liveness.quiet_for().as_secs(),
                liveness.limit.as_secs()
            ),
        )
    }
}
