//! `gputopo-fuzz`: runs the harnesses (all, or those named) with a share of
//! a total case count each and prints the figures: cases, how many were
//! read and refused, panics, time, cases per second, the slowest case.
//! `scripts/fuzz` builds and runs it; BENCHMARKS.md ("Fuzzing") has a run.

use anyhow::{Context, bail};
use clap::Parser;
use gputopo_fuzz::harness::{ALL, Harness};
use gputopo_fuzz::run::{self, CASE_STARTED_MS, CURRENT_CASE, Report};
use gputopo_fuzz::{DEFAULT_SEED, env_u64};
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "Bounded fuzzing of gputopo's parsers of untrusted input")]
struct Args {
    /// Cases in all, shared evenly between the harnesses run.
    #[arg(long, default_value_t = 1_000_000)]
    total: u64,
    /// Seed of the random stream (default: GPUTOPO_FUZZ_SEED, else a fixed one).
    #[arg(long)]
    seed: Option<u64>,
    /// Run only the harnesses whose name contains this (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Print the figures as a Markdown table.
    #[arg(long)]
    markdown: bool,
    /// List the harnesses and what each feeds.
    #[arg(long)]
    list: bool,
    /// Print the input of case N of the (single) harness chosen with --only.
    #[arg(long, value_name = "N")]
    print_case: Option<u64>,
    /// A case running longer than this many seconds is reported as a hang
    /// and the run stops.
    #[arg(long, default_value_t = 120)]
    hang_seconds: u64,
}

/// The harness being run, for the watchdog.
static RUNNING: Mutex<Option<(&'static str, u64)>> = Mutex::new(None);

fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let Some((name, seed)) = *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) else {
                continue;
            };
            let started = Duration::from_millis(CASE_STARTED_MS.load(Ordering::Relaxed));
            let now = run::epoch().elapsed();
            if now.saturating_sub(started) > limit {
                let case = CURRENT_CASE.load(Ordering::Relaxed);
                eprintln!(
                    "HANG: {name}: case {case} has run for more than {}s; its input: \
                     gputopo-fuzz --only {name:?} --seed {seed} --print-case {case}",
                    limit.as_secs()
                );
                std::process::exit(2);
            }
        }
    });
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seed = args
        .seed
        .unwrap_or_else(|| env_u64("GPUTOPO_FUZZ_SEED", DEFAULT_SEED));
    let chosen: Vec<&Harness> = ALL
        .iter()
        .filter(|h| args.only.is_empty() || args.only.iter().any(|o| h.name.contains(o.as_str())))
        .collect();
    if chosen.is_empty() {
        bail!("--only {:?} matches no harness; see --list", args.only);
    }
    if args.list {
        for h in &chosen {
            println!("{:<42} {}", h.name, h.target);
        }
        return Ok(());
    }
    if let Some(case) = args.print_case {
        let [h] = chosen.as_slice() else {
            bail!("--print-case needs --only naming one harness");
        };
        let input = (h.input)(seed, case).context("the strategy drew no input")?;
        println!("{input}");
        return Ok(());
    }
    watchdog(Duration::from_secs(args.hang_seconds));
    let share = args.total / chosen.len() as u64;
    let extra = args.total % chosen.len() as u64;
    let mut reports = Vec::new();
    for (i, h) in chosen.iter().enumerate() {
        let cases = share + u64::from((i as u64) < extra);
        eprint!("{:<42} {cases:>8} cases ... ", h.name);
        std::io::stderr().flush().ok();
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) = Some((h.name, seed));
        let report = (h.run)(cases, seed);
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) = None;
        eprintln!(
            "{:.1}s, {} panics, slowest: case {} ({:.1} ms)",
            report.elapsed.as_secs_f64(),
            report.panics,
            report.slowest_case,
            report.slowest.as_secs_f64() * 1000.0
        );
        if let Some(p) = &report.first_panic {
            eprintln!("  PANIC: {}\n  smallest input: {}", p.message, p.input);
        }
        reports.push(report);
    }
    print_table(&reports, seed, args.markdown);
    let panics: u64 = reports.iter().map(|r| r.panics).sum();
    if panics > 0 {
        bail!("{panics} panics");
    }
    Ok(())
}

fn print_table(reports: &[Report], seed: u64, markdown: bool) {
    let total = Report {
        name: "all",
        cases: reports.iter().map(|r| r.cases).sum(),
        accepted: reports.iter().map(|r| r.accepted).sum(),
        rejected: reports.iter().map(|r| r.rejected).sum(),
        panics: reports.iter().map(|r| r.panics).sum(),
        first_panic: None,
        elapsed: reports.iter().map(|r| r.elapsed).sum(),
        slowest: reports.iter().map(|r| r.slowest).max().unwrap_or_default(),
        slowest_case: 0,
    };
    let row = |r: &Report| {
        [
            r.name.to_string(),
            r.cases.to_string(),
            r.accepted.to_string(),
            r.rejected.to_string(),
            r.panics.to_string(),
            format!("{:.1}", r.elapsed.as_secs_f64()),
            format!("{:.0}", r.cases_per_second()),
            format!("{:.2}", r.slowest.as_secs_f64() * 1000.0),
        ]
    };
    let header = [
        "parser",
        "cases",
        "read",
        "refused",
        "panics",
        "time (s)",
        "cases/s",
        "slowest (ms)",
    ];
    if markdown {
        println!("| {} |", header.join(" | "));
        println!("|---|{}", "---:|".repeat(header.len() - 1));
        for r in reports.iter().chain(std::iter::once(&total)) {
            println!("| {} |", row(r).join(" | "));
        }
    } else {
        println!(
            "{:<42} {:>8} {:>8} {:>8} {:>6} {:>9} {:>9} {:>12}",
            header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7]
        );
        for r in reports.iter().chain(std::iter::once(&total)) {
            let c = row(r);
            println!(
                "{:<42} {:>8} {:>8} {:>8} {:>6} {:>9} {:>9} {:>12}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
            );
        }
    }
    println!("seed {seed}");
}
