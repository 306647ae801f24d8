//! `gputopo`: the operator's tool (DESIGN.md, "Command-line contract").

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gputopo",
    version,
    about = "Topology-aware GPU placement: inspect, place, simulate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the GpuTopology CustomResourceDefinition, generated from the Rust types.
    Crd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            print!("{}", gputopo_api::crd_yaml());
            ExitCode::SUCCESS
        }
    }
}
