//! The live NVML on the machine running the tests: without a driver (CI),
//! `RealNvml::init` is a clear error, never a panic. (The NVML backend without a
//! GPU, over recordings, is tested in `topology/tests/nvml_replay.rs`.)

use gputopo_agent::nvml::RealNvml;

#[test]
fn real_nvml_init_without_a_driver_is_a_clear_error() {
    match RealNvml::init() {
        Err(e) => {
            let msg = e.to_string();
            eprintln!("RealNvml::init() on this machine: {msg}");
            assert!(msg.starts_with("NVML not available: "), "{msg}");
            assert!(
                msg.len() > "NVML not available: ".len(),
                "a reason follows: {msg}"
            );
        }
        Ok(nvml) => {
            eprintln!(
                "skipping: NVML loaded on this machine, so there is no missing-driver error to check ({nvml:?})"
            );
        }
    }
}
