//! The env's child processes: spawned with a log in the env's directory,
//! remembered (so that they die with the env), and polled until healthy.

use crate::TestEnv;
use crate::process::{self, Process};
use anyhow::bail;
use std::future::Future;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

impl TestEnv {
    /// Starts `program` with its log in the env's dir and remembers it.
    pub(crate) fn spawn(&self, name: &str, program: &Path, args: &[String]) -> anyhow::Result<()> {
        self.spawn_with_env(name, program, args, &[])
    }

    pub(crate) fn spawn_with_env(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> anyhow::Result<()> {
        let log = self.dir.join(format!("{name}.log"));
        // The command line first, so the log says how to rerun it by hand.
        std::fs::write(
            &log,
            format!("# {} {}\n", program.display(), args.join(" ")),
        )?;
        let p = Process::spawn(name, program, args, env, log)?;
        process_list(&self.processes).push(p);
        Ok(())
    }

    /// Polls `check` every 250 ms until it succeeds, the component exits, or
    /// `timeout` passes; the error names the last failure and the log tail.
    pub(crate) async fn wait_until<F, Fut>(
        &self,
        name: &str,
        timeout: Duration,
        mut check: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let start = Instant::now();
        loop {
            let last = match tokio::time::timeout(Duration::from_secs(15), check()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => "the check itself took over 15 s".to_owned(),
            };
            {
                let mut procs = process_list(&self.processes);
                if let Some(p) = procs.iter_mut().find(|p| p.name == name) {
                    p.check_running()?;
                }
            }
            if start.elapsed() > timeout {
                let log = self.dir.join(format!("{name}.log"));
                bail!(
                    "{name} not healthy after {timeout:?} (last check: {last}); last lines of {}:\n{}",
                    log.display(),
                    process::tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

pub(crate) fn process_list(m: &Mutex<Vec<Process>>) -> std::sync::MutexGuard<'_, Vec<Process>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Free loopback ports (bound, read, released: a race with other programs
/// is possible but a start failure then says "address already in use").
pub(crate) fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0; N];
    for (p, l) in ports.iter_mut().zip(&listeners) {
        *p = l.local_addr()?.port();
    }
    Ok(ports)
}
