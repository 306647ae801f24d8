//! Bounded fuzzing of every parser of untrusted input in the workspace.
//!
//! [`harness::ALL`] has one harness per parser (nvidia-smi and AMD texts,
//! NVML recordings, pod annotations, watched objects, extender bodies, the
//! scheduler's configuration, the CLI's files, the agent's and the device
//! plugin's inputs). Each draws inputs from the recorded fixtures, damaged
//! ([`mutate`]) or edited as documents ([`value`]), and from arbitrary
//! text; the property is that parsing, and what runs on what was read,
//! returns (a value or a typed error) and never panics. [`run`] counts.
//!
//! `cargo test -p gputopo-fuzz` runs a small slice of every harness
//! (`GPUTOPO_FUZZ_CASES`, default [`DEFAULT_CASES`] each); `scripts/fuzz`
//! runs a million cases with the `gputopo-fuzz` binary and prints the
//! figures (BENCHMARKS.md, "Fuzzing").

pub mod harness;
pub mod mutate;
pub mod run;
pub mod seeds;
pub mod value;

/// Cases per harness in `cargo test` when `GPUTOPO_FUZZ_CASES` is unset.
pub const DEFAULT_CASES: u64 = 64;

/// The seed of the random stream when `GPUTOPO_FUZZ_SEED` is unset: the
/// same inputs every run, so the slice in CI is deterministic.
pub const DEFAULT_SEED: u64 = 0x0067_7075_746f_706f;

/// Reads a count from the environment; `default` when unset.
///
/// # Panics
/// When the variable is set to something that is not a whole number: a
/// typo would otherwise run the default silently.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: accepted: a whole number such as 1000")),
        Err(_) => default,
    }
}
