//! Critical XID errors. NVML delivers them through an event set that must be
//! waited on (`nvmlEventSetWait_v2` blocks), so a thread of its own waits and
//! keeps what arrives until the next scan drains it, as NVIDIA's device
//! plugin watches for them.

use nvml_wrapper::Nvml;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// How long one wait blocks: also how late the thread notices it should stop.
#[cfg(target_os = "linux")]
const WAIT_MS: u32 = 1000;

/// Holds (GPU index, XID) pairs until drained; stops its thread when dropped.
pub(super) struct XidWatcher {
    seen: Arc<Mutex<Vec<(u32, u64)>>>,
    stop: Arc<AtomicBool>,
}

impl XidWatcher {
    pub(super) fn start(nvml: Arc<Nvml>) -> XidWatcher {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_seen, thread_stop) = (seen.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("nvml-xid-events".into())
            .spawn(move || watch(&nvml, &thread_seen, &thread_stop));
        if let Err(e) = spawned {
            tracing::warn!(
                "cannot start the XID event thread: {e}; critical XIDs will not be seen"
            );
        }
        XidWatcher { seen, stop }
    }

    /// What arrived since the last drain.
    pub(super) fn drain(&self) -> Vec<(u32, u64)> {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for XidWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[cfg(target_os = "linux")]
fn watch(nvml: &Nvml, seen: &Mutex<Vec<(u32, u64)>>, stop: &AtomicBool) {
    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enums::event::XidError;
    use nvml_wrapper::error::NvmlError as W;
    use tracing::{debug, warn};

    let mut set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(e) => {
            warn!("nvmlEventSetCreate: {e}; critical XIDs will not be seen");
            return;
        }
    };
    let count = nvml.device_count().unwrap_or(0);
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let supported = device
            .supported_event_types()
            .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            debug!(gpu = index, "no critical XID events on this GPU");
            continue;
        }
        set = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(set) => set,
            Err(e) => {
                // nvml-wrapper frees the set on failure: nothing left to wait on.
                warn!(
                    gpu = index,
                    "nvmlDeviceRegisterEvents: {e}; critical XIDs will not be seen"
                );
                return;
            }
        };
    }
    while !stop.load(Ordering::SeqCst) {
        match set.wait(WAIT_MS) {
            Ok(event) => {
                let index = event.device.index();
                if let (Ok(index), Some(XidError::Value(xid))) = (index, event.event_data) {
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((index, xid));
                }
            }
            Err(W::Timeout) => {}
            // A lost GPU or a failing driver: the scan's dynamic read says
            // which; waiting again at once would spin.
            Err(e) => {
                debug!("nvmlEventSetWait_v2: {e}");
                std::thread::sleep(std::time::Duration::from_millis(u64::from(WAIT_MS)));
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn watch(_: &Nvml, _: &Mutex<Vec<(u32, u64)>>, _: &AtomicBool) {}
