//! One discovery per scan, off the async runtime: NVML, AMD SMI and file
//! reads block, so each scan runs on tokio's blocking pool.
//!
//! For NVML (live, or a recording replayed as NVML) the static topology is
//! read once and kept; every scan reads the dynamic state (link states, GPUs
//! that stopped answering, MIG devices, critical XIDs) and lays it over the
//! static answers, so a link going down or a GPU falling off the bus changes
//! the published links and `Degraded` at the next scan. When NVML stops
//! answering altogether (a driver crash), every GPU it knew is reported lost
//! and NVML is opened again at the next scan. SIGHUP ([`Scanner::forget`])
//! drops everything kept. Other sources are read whole every scan. With
//! `--backend auto` each scan asks which vendor's library answers until one
//! does, then scans as that backend would (kept until SIGHUP).
//!
//! A scan cut short by the caller's timeout keeps running on its thread
//! (blocking calls cannot be cancelled); the next scan waits for that one
//! instead of starting another, so a hung driver call never piles up threads.

use crate::auto::AutoSource;
use crate::discover::{DiscoverError, Discovered, Source, build, detect, gather};
use crate::nvml::{RealNvml, RecordingNvml};
use gputopo_api::TopologySource;
use gputopo_topology::backend::nvml::dynamic::{
    self, hold_critical_xids, overlay, still_describes,
};
use gputopo_topology::backend::nvml::{
    DynamicAnswers, NvmlAnswers, NvmlError, NvmlSource, facts_from_answers,
};
use gputopo_topology::backend::recording::Recording;
use gputopo_topology::backend::sysfs::{RealSysfs, RecordedSysfs, SysfsSource};
use gputopo_topology::clique::{CliqueVerdict, readings_from_answers, readings_from_spec, verdict};
use gputopo_topology::discover as saved;
use gputopo_topology::normalize::NormalizeError;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::task::JoinHandle;
use tracing::info;

/// What one scan found.
#[derive(Debug, Clone)]
pub struct Scanned {
    pub found: Discovered,
    /// The MIG devices' UUIDs per GPU index, where NVML lists any: how the
    /// kubelet's MIG device IDs find their GPU.
    pub mig: BTreeMap<u32, Vec<String>>,
    /// Whether the GPUs are in one multi-node NVLink clique: from NVML's
    /// fabric answers (which tell a registration under way from no fabric),
    /// else from the spec.
    pub fabric: CliqueVerdict,
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Discover(#[from] DiscoverError),
    #[error(transparent)]
    Normalize(#[from] NormalizeError),
    /// The scan's task panicked or was cancelled.
    #[error("the discovery task failed: {0}")]
    Task(String),
}

impl From<NvmlError> for ScanError {
    fn from(e: NvmlError) -> Self {
        ScanError::Discover(e.into())
    }
}

impl From<saved::DiscoverError> for ScanError {
    fn from(e: saved::DiscoverError) -> Self {
        ScanError::Discover(e.into())
    }
}

type SharedNvml = Arc<dyn NvmlSource + Send + Sync>;
type SharedSysfs = Arc<dyn SysfsSource + Send + Sync>;

/// How the scanner reaches its source.
enum Opener {
    Nvml {
        library: Option<PathBuf>,
        sysfs_root: PathBuf,
    },
    /// A recording: replayed as NVML when it holds NVML answers, else read
    /// whole every scan like the other files.
    Recording(PathBuf),
    Whole(Source),
    /// Resolved into one of the above at the first scan a library answers.
    Auto(AutoSource),
}

impl Opener {
    fn for_source(source: Source) -> Opener {
        match source {
            Source::Nvml {
                library,
                sysfs_root,
            } => Opener::Nvml {
                library,
                sysfs_root,
            },
            Source::Saved(saved::Source::Fixture(path)) => Opener::Recording(path),
            Source::Auto(auto) => Opener::Auto(auto),
            other => Opener::Whole(other),
        }
    }
}

/// What an NVML scan keeps between scans.
#[derive(Default)]
struct Kept {
    nvml: Option<SharedNvml>,
    sysfs: Option<SharedSysfs>,
    /// The static answers; kept while NVML is reopened after a failure.
    known: Option<Arc<NvmlAnswers>>,
    /// Critical XIDs per GPU, held until SIGHUP (see `dynamic::findings`).
    xids: BTreeMap<u32, BTreeSet<u64>>,
    /// What `--backend auto` resolved to.
    chosen: Option<Arc<Opener>>,
}

pub struct Scanner {
    node: String,
    opener: Arc<Opener>,
    kept: Arc<Mutex<Kept>>,
    forget: Arc<AtomicBool>,
    pending: Option<JoinHandle<Result<Scanned, ScanError>>>,
}

impl Scanner {
    pub fn new(node: String, source: Source) -> Scanner {
        Scanner {
            node,
            opener: Arc::new(Opener::for_source(source)),
            kept: Arc::default(),
            forget: Arc::default(),
            pending: None,
        }
    }

    /// Drops what is kept (NVML handle, static topology, held XIDs) before the next scan.
    pub fn forget(&self) {
        self.forget.store(true, Ordering::SeqCst);
    }

    /// Scans, or waits for the scan a cancelled call left running.
    /// Cancel-safe: dropping the future leaves the scan to the next call.
    pub async fn scan(&mut self) -> Result<Scanned, ScanError> {
        let pending = self.pending.get_or_insert_with(|| {
            let (node, opener) = (self.node.clone(), self.opener.clone());
            let (kept, forget) = (self.kept.clone(), self.forget.clone());
            tokio::task::spawn_blocking(move || {
                let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                if forget.swap(false, Ordering::SeqCst) {
                    *kept = Kept::default();
                }
                let opener = resolve(&opener, &mut kept)?;
                scan_now(&node, &opener, &mut kept)
            })
        });
        let result = pending.await;
        self.pending = None;
        result.map_err(|e| ScanError::Task(e.to_string()))?
    }
}

/// The opener itself, or what `--backend auto` resolves to on this node.
fn resolve(opener: &Arc<Opener>, kept: &mut Kept) -> Result<Arc<Opener>, ScanError> {
    let Opener::Auto(auto) = opener.as_ref() else {
        return Ok(opener.clone());
    };
    if let Some(chosen) = &kept.chosen {
        return Ok(chosen.clone());
    }
    let source = detect(auto).map_err(DiscoverError::from)?;
    let backend = match source {
        Source::Nvml { .. } => "NVML",
        _ => "AMD SMI",
    };
    info!(backend, "--backend auto: this node answers to {backend}");
    let chosen = Arc::new(Opener::for_source(source));
    kept.chosen = Some(chosen.clone());
    Ok(chosen)
}

fn whole(node: &str, source: &Source) -> Result<Scanned, ScanError> {
    let (facts, _) = gather(source)?;
    let found = build(node, facts)?;
    Ok(Scanned {
        fabric: verdict(&readings_from_spec(&found.spec)),
        found,
        mig: BTreeMap::new(),
    })
}

fn scan_now(node: &str, opener: &Opener, kept: &mut Kept) -> Result<Scanned, ScanError> {
    if kept.nvml.is_none() {
        let opened: Result<(SharedNvml, SharedSysfs), ScanError> = match opener {
            Opener::Whole(source) => return whole(node, source),
            Opener::Auto(auto) => return whole(node, &Source::Auto(auto.clone())),
            Opener::Nvml {
                library,
                sysfs_root,
            } => match library {
                Some(path) => RealNvml::init_with_library(path),
                None => RealNvml::init(),
            }
            .map(|n| {
                (
                    Arc::new(n) as SharedNvml,
                    Arc::new(RealSysfs::new(sysfs_root)) as SharedSysfs,
                )
            })
            .map_err(ScanError::from),
            Opener::Recording(path) => match Recording::load(path) {
                Ok(rec) if rec.nvml.is_none() => {
                    return whole(node, &Source::Saved(saved::Source::Fixture(path.clone())));
                }
                Ok(rec) => Ok((
                    Arc::new(RecordingNvml { path: path.clone() }) as SharedNvml,
                    Arc::new(RecordedSysfs::new(&rec.sysfs)) as SharedSysfs,
                )),
                Err(e) => Err(saved::DiscoverError::from(e).into()),
            },
        };
        match (opened, &kept.known) {
            (Ok((nvml, sysfs)), _) => {
                kept.nvml = Some(nvml);
                kept.sysfs = Some(sysfs);
            }
            // NVML answered before and does not now: every GPU it knew is lost.
            (Err(e), Some(known)) => {
                let known = known.clone();
                let state = DynamicAnswers::all_lost(&known, &e.to_string());
                return assemble(node, opener, kept, &known, &state);
            }
            (Err(e), None) => return Err(e),
        }
    }
    let nvml = kept.nvml.clone().expect("opened above");
    let mut known = match &kept.known {
        Some(k) => k.clone(),
        None => Arc::new(nvml.snapshot()?),
    };
    kept.known = Some(known.clone());
    let mut state = match nvml.dynamic_state(&known) {
        Ok(state) => state,
        Err(e) => {
            // Reopen at the next scan: the driver may come back.
            kept.nvml = None;
            DynamicAnswers::all_lost(&known, &e.to_string())
        }
    };
    if kept.nvml.is_some() && !still_describes(&known, &state) {
        info!("NVML's GPUs changed since their topology was read: reading it again");
        hold_critical_xids(&mut kept.xids, &state);
        known = Arc::new(nvml.snapshot()?);
        kept.known = Some(known.clone());
        state = nvml.dynamic_state(&known)?;
    }
    assemble(node, opener, kept, &known, &state)
}

/// Facts, topology and findings from the static answers with `state` laid over them.
fn assemble(
    node: &str,
    opener: &Opener,
    kept: &mut Kept,
    known: &NvmlAnswers,
    state: &DynamicAnswers,
) -> Result<Scanned, ScanError> {
    hold_critical_xids(&mut kept.xids, state);
    let answers = overlay(known, state);
    // From the opener, not the handle: the handle is gone while NVML fails.
    let source = match opener {
        Opener::Recording(_) => TopologySource::Fixture,
        _ => TopologySource::Nvml,
    };
    let sysfs: &dyn SysfsSource = match &kept.sysfs {
        Some(s) => s.as_ref(),
        None => &gputopo_topology::backend::sysfs::NoSysfs,
    };
    let facts = facts_from_answers(&answers, sysfs, source)?;
    let mut found = build(node, facts)?;
    found.findings.extend(dynamic::findings(state, &kept.xids));
    found.findings.sort_by_key(|f| f.gpu);
    let mig = answers
        .devices
        .iter()
        .filter(|d| !d.mig_devices.is_empty())
        .map(|d| {
            (
                d.index,
                d.mig_devices.iter().map(|m| m.uuid.clone()).collect(),
            )
        })
        .collect();
    Ok(Scanned {
        found,
        mig,
        fabric: verdict(&readings_from_answers(&answers)),
    })
}
