//! Watches of kinds the API server may or may not serve (CRDs, API groups
//! behind feature gates), following it while the scheduler runs: a kind
//! not served has an empty store, and is asked about again every
//! [`RECHECK`]; once served, it is listed and watched into the same store;
//! when it stops being served (its CRD deleted), the store empties and the
//! asking starts again. No restart is needed either way, and the other
//! watches go on untouched. Whether each kind is served now is shared
//! ([`Served`]), so a pod waiting for one can be told which API is missing.

use crate::change_feed::ChangeFeed;
use backon::{ExponentialBuilder, Retryable};
use futures::StreamExt;
use gputopo_ops::Readiness;
use kube::Resource;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing::{info, warn};

/// How often a kind not served is asked about again. Installing a CRD is
/// rare; a pod waiting for one waits this long at most beyond it.
pub const RECHECK: Duration = Duration::from_secs(10);

/// Whether the API server serves a kind now, as the watch last found.
#[derive(Clone, Debug, Default)]
pub struct Served(Arc<AtomicBool>);

impl Served {
    pub fn now(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, served: bool) {
        self.0.store(served, Ordering::Relaxed);
    }

    /// A flag that says served (for kinds always watched, and tests).
    pub fn always() -> Served {
        let s = Served::default();
        s.set(true);
        s
    }
}

/// What one followed kind is: how to watch it and what to say.
pub struct Follow<K: Resource<DynamicType = ()> + Clone + 'static> {
    pub api: Api<K>,
    pub what: &'static str,
    /// Logged (once per change) while the kind is not served.
    pub missing: &'static str,
    pub changes: fn(&watcher::Event<K>) -> bool,
    pub feed: Option<ChangeFeed<K>>,
    pub trim: fn(&mut K),
}

/// Whether the API server serves `api`'s resource (its CRD is installed);
/// asks again, with backoff up to 30 s, until it answers.
pub(super) async fn served<K>(api: &Api<K>, what: &'static str, readiness: &Readiness) -> bool
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let probe = || async {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    };
    let backoff = ExponentialBuilder::default()
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times();
    probe
        .retry(backoff)
        .notify(|e, wait| {
            warn!(what, error = %e, ?wait, "asking the API server whether it serves {what}; retrying");
            readiness.set_not_ready(format!(
                "cannot reach the API server (asking whether it serves {what}): {e}"
            ));
        })
        .await
        .unwrap_or(false)
}

/// Watch retries: 500 ms doubling to 5 s, jittered, reset after 30 s
/// without an error. kube-runtime's default (client-go's: 0.8 s doubling to
/// 30 s, reset after 2 minutes) can leave 13 s between the API server's
/// return after an outage of a few seconds and the next list, most of the
/// 15 s the scheduler has to be scheduling again (the fault runs,
/// docs/benchmarks/faults-and-soak.md). While the API server is down this
/// is one attempt per watch every 5 s at most.
pub(super) fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let exponential = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(exponential.into(), Duration::from_secs(30))
}

/// Whether a watch error means the kind is not served (any more).
fn not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// Asks once whether the kind is served; an error counts as not known
/// (`None`), so a brief outage neither starts nor stops anything.
async fn served_once<K>(api: &Api<K>) -> Option<bool>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Some(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Some(false),
        Err(_) => None,
    }
}

/// Starts following `f`: returns its store (synced at once, empty, when
/// the kind is not served now) and its [`Served`] flag. Waits, as the
/// other watches' start does, until the API server answers whether it
/// serves the kind.
pub async fn follow<K>(
    f: Follow<K>,
    on_event: impl Fn(bool) + Send + 'static,
    readiness: &Readiness,
) -> (Store<K>, Served)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let flag = Served::default();
    let (store, mut writer) = reflector::store();
    let now = served(&f.api, f.what, readiness).await;
    if !now {
        info!("{}", f.missing);
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }
    flag.set(now);
    let shared = flag.clone();
    tokio::spawn(async move {
        let mut on_event = on_event;
        let mut known = now;
        loop {
            if !known {
                tokio::time::sleep(RECHECK).await;
                if served_once(&f.api).await != Some(true) {
                    continue;
                }
                info!(watch = f.what, "{} is served now: watching it", f.what);
                shared.set(true);
            }
            on_event = watch_until_gone(&f, &mut writer, on_event).await;
            warn!(
                watch = f.what,
                "{} is no longer served: {}", f.what, f.missing
            );
            shared.set(false);
            known = false;
            // Its objects are gone with it.
            for event in [watcher::Event::Init, watcher::Event::InitDone] {
                writer.apply_watcher_event(&event);
                if let Some(feed) = &f.feed {
                    feed.record(&event);
                }
            }
            on_event(true);
        }
    });
    (store, flag)
}

/// Lists and watches `f` into `writer` until the API server says it does
/// not serve the kind; other errors are retried with backoff. Hands
/// `on_event` back (owned, so the task needs no `Sync` callback).
pub(super) async fn watch_until_gone<K, E: Fn(bool)>(
    f: &Follow<K>,
    writer: &mut reflector::store::Writer<K>,
    on_event: E,
) -> E
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let stream = watcher(f.api.clone(), watcher::Config::default())
        .backoff(watch_backoff())
        .modify(f.trim);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(e) => {
                writer.apply_watcher_event(&e);
                // Applied to the store first, as the feed requires.
                if let Some(feed) = &f.feed {
                    feed.record(&e);
                }
                on_event((f.changes)(&e));
            }
            Err(e) if not_served(&e) => return on_event,
            Err(e) => warn!(watch = f.what, error = %e, "watch error; retrying with backoff"),
        }
    }
    on_event
}
