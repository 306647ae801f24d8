//! A recording file replayed as NVML by the daemon (`run --fixture`): read
//! again at every call, so a change to the file reaches the agent as a
//! change on a live node would — link states, lost GPUs, MIG devices and
//! XIDs at the next scan, the static topology only after SIGHUP.

use gputopo_api::TopologySource;
use gputopo_topology::backend::nvml::{NvmlAnswers, NvmlError, NvmlSource};
use gputopo_topology::backend::recording::Recording;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct RecordingNvml {
    pub path: PathBuf,
}

impl NvmlSource for RecordingNvml {
    fn snapshot(&self) -> Result<NvmlAnswers, NvmlError> {
        let failed = |reason: String| NvmlError::System {
            call: "replaying the recording",
            reason,
        };
        let recording = Recording::load(&self.path).map_err(|e| failed(e.to_string()))?;
        recording.nvml.ok_or_else(|| {
            failed(format!(
                "{}: holds no NVML answers ({})",
                self.path.display(),
                recording.nvml_error.as_deref().unwrap_or("nvml is null")
            ))
        })
    }

    fn topology_source(&self) -> TopologySource {
        TopologySource::Fixture
    }
}
