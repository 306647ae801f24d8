//! Synthetic workloads in the workload YAML format, for tests and demos.
//!
//! The mix (by count): 40 % shares of one GPU (250, 500 or 750 milli), 35 %
//! one GPU, 10 % two, 7 % four, 3 % eight, 5 % gangs of 2–4 members of 8
//! GPUs; arrivals every 10 s on average, durations 10 min to 3 h, all from
//! a ChaCha8 stream seeded by `seed`.

use super::below;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use std::fmt::Write;

/// A workload of `pods` arrival units as YAML text.
pub fn workload_yaml(pods: u32, seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pod_text = String::from("pods:\n");
    let mut gang_text = String::from("gangs:\n");
    let mut gangs = 0;
    let mut t = 0u64;
    for i in 0..pods {
        t += below(&mut rng, 21) as u64;
        let duration = 600 + below(&mut rng, 10_200) as u64;
        let roll = below(&mut rng, 100);
        let cpu = 2000 * (1 + below(&mut rng, 8) as u64);
        let mem = 4096 * (1 + below(&mut rng, 16) as u64);
        let ask = match roll {
            0..40 => format!("share: \"{}m\"", [250, 500, 750][below(&mut rng, 3)]),
            40..75 => "gpus: 1".into(),
            75..85 => "gpus: 2".into(),
            85..92 => "gpus: 4".into(),
            92..95 => "gpus: 8".into(),
            _ => {
                let members = 2 + below(&mut rng, 3);
                let _ = writeln!(
                    gang_text,
                    "  - {{name: gang-{gangs}, members: {members}, gpus: 8, cpuMilli: {cpu}, memoryMiB: {mem}, arrival: {t}, duration: {duration}}}"
                );
                gangs += 1;
                continue;
            }
        };
        let _ = writeln!(
            pod_text,
            "  - {{name: pod-{i}, {ask}, cpuMilli: {cpu}, memoryMiB: {mem}, arrival: {t}, duration: {duration}}}"
        );
    }
    if gangs == 0 {
        gang_text = "gangs: []\n".into();
    }
    format!("# gputopo simulate workload: {pods} units, seed {seed}\n{pod_text}{gang_text}")
}
