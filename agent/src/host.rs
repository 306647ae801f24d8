//! The host a recording is taken on, read from the running machine.

use gputopo_topology::backend::sysfs::HostFacts;

/// Reads [`HostFacts`] from the running machine; a fact sysinfo cannot read is `None`.
pub fn host_facts() -> HostFacts {
    use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
    let system = System::new_with_specifics(
        RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram()),
    )
    .ok();
    HostFacts {
        hostname: System::host_name().ok(),
        kernel_version: System::kernel_version().ok(),
        os_version: System::long_os_version().ok(),
        cpu_count: system
            .as_ref()
            .map(|s| s.cpus().len())
            .filter(|n| *n > 0)
            .and_then(|n| u32::try_from(n).ok()),
        memory_mib: system
            .as_ref()
            .map(|s| s.total_memory() / (1024 * 1024))
            .filter(|m| *m > 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts_do_not_panic() {
        let facts = host_facts();
        // The machine running the tests has at least one CPU; sysinfo may still
        // fail to read it in odd sandboxes, which must be None, not a panic.
        if let Some(n) = facts.cpu_count {
            assert!(n >= 1);
        }
    }
}
