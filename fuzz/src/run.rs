//! The loop every harness runs: draw an input from its strategy, call the
//! parser on it, count what came back. A panic is caught, counted and, the
//! first time, shrunk to a minimal input (proptest's own simplify /
//! complicate walk), so a report says what to paste into a regression test.
//!
//! proptest's `TestRunner::run` stops at the first failure; here every case
//! runs, so the figures are the cases actually tried. The random stream is
//! seeded: the same seed draws the same inputs, and [`nth_input`] draws the
//! input of one case again (for a hang, which cannot be caught).

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::cell::RefCell;
use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The case the current run is at, for a watchdog that reports a hang
/// (which no `catch_unwind` sees): its number, and when it started in
/// milliseconds since [`epoch`]. One run at a time per process.
pub static CURRENT_CASE: AtomicU64 = AtomicU64::new(0);
pub static CASE_STARTED_MS: AtomicU64 = AtomicU64::new(0);

/// The instant [`CASE_STARTED_MS`] counts from.
pub fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// What a parser made of one input. Both are fine; only a panic is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Read (and everything downstream of it ran).
    Accepted,
    /// Refused with a typed error.
    Rejected,
}

impl<T, E> From<&Result<T, E>> for Verdict {
    fn from(r: &Result<T, E>) -> Verdict {
        if r.is_ok() {
            Verdict::Accepted
        } else {
            Verdict::Rejected
        }
    }
}

/// A panic found, with the smallest input that still panics.
#[derive(Clone, Debug)]
pub struct Panic {
    /// The panic message and where it was raised.
    pub message: String,
    /// `{:?}` of the shrunk input.
    pub input: String,
}

/// One harness's run.
#[derive(Clone, Debug)]
pub struct Report {
    pub name: &'static str,
    pub cases: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub panics: u64,
    /// The first panic, shrunk (later ones are only counted).
    pub first_panic: Option<Panic>,
    /// Wall time of the cases (generation included, shrinking not).
    pub elapsed: Duration,
    /// The slowest single case (parser only), and its number (see [`nth_input`]).
    pub slowest: Duration,
    pub slowest_case: u64,
}

impl Report {
    pub fn cases_per_second(&self) -> f64 {
        self.cases as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

thread_local! {
    /// Set while this thread runs a case: its panics are recorded here
    /// instead of printed.
    static CAPTURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once, a panic hook that records a panic raised on a thread
/// running a case and passes every other panic to the hook it replaced, so
/// a failing assertion elsewhere in the same process still prints.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let captured = CAPTURE.with(|c| {
                let mut c = c.borrow_mut();
                match c.as_mut() {
                    Some(slot) => {
                        *slot = info.to_string();
                        true
                    }
                    None => false,
                }
            });
            if !captured {
                previous(info);
            }
        }));
    });
}

/// A property that panicked on its input, with the panic's message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Panicked {
    message: String,
}

/// Runs `property` on `input`; the panic message if it panicked.
fn attempt<V>(property: &impl Fn(&V) -> Verdict, input: &V) -> Result<Verdict, Panicked> {
    CAPTURE.with(|c| *c.borrow_mut() = Some(String::new()));
    let outcome = catch_unwind(AssertUnwindSafe(|| property(input)));
    let message = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    outcome.map_err(|_| Panicked { message })
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

fn runner(seed: u64) -> TestRunner {
    TestRunner::new_with_rng(Config::default(), rng(seed))
}

/// Runs `cases` inputs drawn from `strategy` (seeded by `seed`) through `property`.
pub fn run<S>(
    name: &'static str,
    strategy: &S,
    cases: u64,
    seed: u64,
    property: impl Fn(&S::Value) -> Verdict,
) -> Report
where
    S: Strategy,
    S::Value: Debug,
{
    install_hook();
    let mut runner = runner(seed);
    let mut report = Report {
        name,
        cases: 0,
        accepted: 0,
        rejected: 0,
        panics: 0,
        first_panic: None,
        elapsed: Duration::ZERO,
        slowest: Duration::ZERO,
        slowest_case: 0,
    };
    let started = Instant::now();
    for case in 0..cases {
        let Ok(mut tree) = strategy.new_tree(&mut runner) else {
            continue;
        };
        let input = tree.current();
        let t = Instant::now();
        CURRENT_CASE.store(case, Ordering::Relaxed);
        CASE_STARTED_MS.store(
            t.duration_since(epoch()).as_millis() as u64,
            Ordering::Relaxed,
        );
        let outcome = attempt(&property, &input);
        if t.elapsed() > report.slowest {
            report.slowest = t.elapsed();
            report.slowest_case = case;
        }
        report.cases += 1;
        match outcome {
            Ok(Verdict::Accepted) => report.accepted += 1,
            Ok(Verdict::Rejected) => report.rejected += 1,
            Err(Panicked { message }) => {
                report.panics += 1;
                if report.first_panic.is_none() {
                    report.first_panic = Some(shrink(&mut tree, &property, message));
                }
            }
        }
    }
    report.elapsed = started.elapsed();
    report
}

/// The input of case `case` (0-based) of a run with `seed`, without running any.
pub fn nth_input<S>(strategy: &S, seed: u64, case: u64) -> Option<S::Value>
where
    S: Strategy,
{
    let mut runner = runner(seed);
    let mut last = None;
    for _ in 0..=case {
        last = strategy.new_tree(&mut runner).ok().map(|t| t.current());
    }
    last
}

/// Shrinks a panicking input: simplify while it still panics, complicate
/// back when it stops (proptest's search), bounded in steps.
fn shrink<T: ValueTree>(
    tree: &mut T,
    property: &impl Fn(&T::Value) -> Verdict,
    message: String,
) -> Panic
where
    T::Value: Debug,
{
    let mut best = (tree.current(), message);
    if tree.simplify() {
        for _ in 0..4096 {
            let candidate = tree.current();
            let more = match attempt(property, &candidate) {
                Err(Panicked { message }) => {
                    best = (candidate, message);
                    tree.simplify()
                }
                Ok(_) => tree.complicate(),
            };
            if !more {
                break;
            }
        }
    }
    Panic {
        message: best.1,
        input: format!("{:?}", best.0),
    }
}
