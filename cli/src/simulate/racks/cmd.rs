//! `gputopo simulate --scenario nvl72` in the binary (anyhow lives here only).

use anyhow::Result;
use gputopo::racks::{self, POLICIES, RacksOptions, RacksResult};
use std::process::ExitCode;

pub struct Args {
    pub policy: String,
    pub racks: usize,
    pub hours: f64,
    pub gang_timeout: Option<u64>,
    pub seed: u64,
    pub no_runtime: bool,
    pub json: bool,
}

pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gputopo simulate: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: &Args) -> Result<()> {
    if args.racks == 0 || !(args.hours > 0.0 && args.hours.is_finite()) {
        anyhow::bail!("--racks and --hours: accepted: positive numbers");
    }
    let policies: Vec<&str> = if args.policy == "all" {
        POLICIES.to_vec()
    } else {
        vec![args.policy.as_str()]
    };
    let options = RacksOptions {
        racks: args.racks,
        hours: args.hours,
        seed: args.seed,
        gang_timeout: args.gang_timeout,
        omit_runtime: args.no_runtime,
    };
    let (fabric, workload) = racks::setup(&options);
    // Two policies at a time (the runs are independent).
    let results: Vec<RacksResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = policies
            .chunks(2)
            .map(|pair| {
                let (fabric, workload, options) = (&fabric, &workload, &options);
                scope.spawn(move || {
                    pair.iter()
                        .map(|p| racks::run_on(p, options, fabric, workload))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a policy run panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&results)?)
    } else {
        let first = &results[0];
        format!(
            "nvl72: {} racks, {} nodes, {} GPUs, load {}, {} h of arrivals, seed {}\n\n{}\nQueue time per class:\n\n{}",
            first.racks,
            first.nodes,
            first.gpus,
            first.load,
            first.hours,
            first.seed,
            racks::table(&results),
            racks::class_table(&results)
        )
    };
    super::out(&text);
    Ok(())
}
