//! Starting control plane processes so that they never outlive the tests.
//!
//! Three mechanisms, because each covers a case the others miss:
//!
//! - `Drop` of an owned [`crate::TestEnv`] kills its processes (the normal case).
//! - An `atexit` handler kills the processes of envs that are never dropped:
//!   `TestEnv::shared()` lives in a `static`, and Rust never drops statics.
//! - `prctl(PR_SET_PDEATHSIG, SIGKILL)` in the child, set between `fork` and
//!   `exec`, makes the kernel kill it when its parent dies in any way at all:
//!   a panic that aborts, SIGINT from Ctrl-C, SIGTERM or SIGKILL from a test
//!   runner's timeout. Neither `Drop` nor `atexit` runs then.
//!
//! The parent-death signal has a catch: it fires when the *thread* that
//! forked the child exits, not the process. Test threads come and go (libtest
//! runs each test on its own thread, and a shared control plane started by
//! the first test must outlive it), so every child is forked by one spawner
//! thread that lives as long as the process.
//!
//! Each child also gets its own process group: Ctrl-C in a terminal then goes
//! to the test process only (whose death takes the children with it), and a
//! kill reaches anything the child itself started.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read as _, Seek as _, SeekFrom};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, Once, OnceLock};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
/// Process groups alive now, for the exit handler.
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// Temp dirs of envs that are never dropped, removed (or kept) at exit.
static EXIT_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Set by the panic hook: some test failed, so keep the logs.
pub(crate) static PANICKED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether to keep a temp dir: a test failed or `GPUTOPO_KEEP_LOGS` is set.
pub(crate) fn keep_logs() -> bool {
    PANICKED.load(Ordering::SeqCst)
        || std::thread::panicking()
        || std::env::var_os("GPUTOPO_KEEP_LOGS").is_some_and(|v| !v.is_empty() && v != "0")
}

fn install_handlers() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
            for dir in lock(&EXIT_DIRS).iter() {
                eprintln!("gputopo-testenv: control plane logs: {}", dir.display());
            }
        }));
        // SAFETY: registering a plain extern "C" fn with no captured state.
        unsafe { libc::atexit(at_exit) };
    });
}

extern "C" fn at_exit() {
    // try_lock: a thread still running at exit may hold a lock; never block exit.
    if let Ok(live) = LIVE.try_lock() {
        for &pgid in live.iter() {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    if let Ok(dirs) = EXIT_DIRS.try_lock() {
        for dir in dirs.iter() {
            if keep_logs() {
                eprintln!(
                    "gputopo-testenv: control plane logs kept in {}",
                    dir.display()
                );
            } else {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// Removes (or keeps, when a test failed) `dir` at process exit.
pub(crate) fn clean_at_exit(dir: &Path) {
    install_handlers();
    lock(&EXIT_DIRS).push(dir.to_owned());
}

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("gputopo-testenv-spawner".into())
            .spawn(move || {
                // Never returns while the process lives: the Sender is in a static.
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the gputopo-testenv spawner thread");
        tx
    })
}

/// A running control plane process; killed on drop.
pub struct Process {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

impl Process {
    /// Starts `program args...` with stdout and stderr appended to `log` and
    /// `env` added to the inherited environment.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &OsStr)],
        log: PathBuf,
    ) -> anyhow::Result<Process> {
        install_handlers();
        let out = File::options().create(true).append(true).open(&log)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: getpid is async-signal-safe; this runs before the fork.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure only calls async-signal-safe functions (prctl,
        // getppid) and allocates nothing, as required between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before prctl: then nobody would kill us.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        spawner()
            .send((cmd, tx))
            .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?;
        let child = rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", program.display()))?;
        lock(&LIVE).push(child.id() as i32);
        Ok(Process {
            name: name.to_owned(),
            log,
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Err` with the exit status and the log's tail when the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => anyhow::bail!(
                "{} exited ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 40)
            ),
        }
    }

    pub fn kill(&mut self) {
        let pgid = self.child.id() as i32;
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
        lock(&LIVE).retain(|&p| p != pgid);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `n` lines of a log file (reading at most its last 64 KiB).
pub fn tail(path: &Path, n: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
