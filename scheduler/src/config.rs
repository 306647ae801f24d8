//! The configuration file (`--config FILE`): YAML, every field optional, the
//! scheduler core's knobs ([`SchedulerConfig`]) plus the scheduler's own
//! (names it answers to, backoff). Unknown fields are errors; every error
//! names the file, the line and column, and the field path.
//!
//! ```yaml
//! schedulerNames: [gputopo-scheduler]     # pods' spec.schedulerName values served
//! networkTiers: {preset: gputopo}         # or {keys: [example.com/spine, example.com/rack]}
//! weights: {gpuSet: 40, allocation: 20, memoryFit: 15, interference: 15,
//!           preferredDomain: 10, cost: 10, nodePreference: 5}
//! defaultTopologyManagerPolicy: none      # none | best-effort | restricted | single-numa-node
//! memoryTarget: {low: 0.70, high: 0.80}   # shared/inference GPU memory fill target
//! spotInstanceTypes: []                   # node.kubernetes.io/instance-type values that are spot
//! backoff: {initial: 1s, max: 30s, unschedulableTimeout: 60s}
//! ```

use gputopo_scheduler_core::config::{
    MemoryTarget, NetworkTiers, SchedulerConfig, ScoreWeights, TopologyManagerPolicy,
};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The name pods set in `spec.schedulerName` when none is configured.
pub const DEFAULT_SCHEDULER_NAME: &str = "gputopo-scheduler";

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("reading {}: {error}", file.display())]
    Read {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error("{}{location}: {field}: {message}", file.display())]
    Invalid {
        file: PathBuf,
        /// `:line:column`, or empty when the parser gave none.
        location: String,
        /// The field path, `backoff.max`; `.` for the document.
        field: String,
        message: String,
    },
    #[error("{}: {field}: {message}", file.display())]
    Inconsistent {
        file: PathBuf,
        field: &'static str,
        message: String,
    },
}

/// How long an unschedulable pod waits before its next try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// After the first failure; doubled after each further one.
    pub initial: Duration,
    /// The cap of the doubling.
    pub max: Duration,
    /// With no change in the cluster, an unschedulable pod is tried again
    /// after this long anyway (kube-scheduler: podMaxInUnschedulablePodsDuration).
    pub unschedulable_timeout: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            unschedulable_timeout: Duration::from_secs(60),
        }
    }
}

/// Everything the scheduler process is configured with.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `spec.schedulerName` values this scheduler serves.
    pub scheduler_names: Vec<String>,
    pub core: SchedulerConfig,
    pub backoff: Backoff,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            scheduler_names: vec![DEFAULT_SCHEDULER_NAME.to_string()],
            core: SchedulerConfig::default(),
            backoff: Backoff::default(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    scheduler_names: Option<Vec<String>>,
    network_tiers: Option<TiersFile>,
    weights: Option<WeightsFile>,
    default_topology_manager_policy: Option<PolicyFile>,
    memory_target: Option<MemoryTargetFile>,
    spot_instance_types: Option<Vec<String>>,
    backoff: Option<BackoffFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TiersFile {
    preset: Option<PresetFile>,
    keys: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct PresetFile(NetworkTiers);

impl TryFrom<String> for PresetFile {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        NetworkTiers::preset(&s)
            .map(PresetFile)
            .map_err(|e| e.to_string())
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct PolicyFile(TopologyManagerPolicy);

impl TryFrom<String> for PolicyFile {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse().map(PolicyFile).map_err(|e| format!("{e}"))
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "String")]
struct DurationFile(Duration);

impl TryFrom<String> for DurationFile {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        humantime::parse_duration(&s)
            .map(DurationFile)
            .map_err(|e| format!("{s:?} is not a duration ({e}); accepted: e.g. 500ms, 10s, 2m"))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, try_from = "RawTarget")]
struct MemoryTargetFile(MemoryTarget);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    low: f64,
    high: f64,
}

impl TryFrom<RawTarget> for MemoryTargetFile {
    type Error = String;
    fn try_from(r: RawTarget) -> Result<Self, String> {
        MemoryTarget::new(r.low, r.high)
            .map(MemoryTargetFile)
            .map_err(|e| e.to_string())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WeightsFile {
    gpu_set: Option<u32>,
    allocation: Option<u32>,
    memory_fit: Option<u32>,
    interference: Option<u32>,
    preferred_domain: Option<u32>,
    cost: Option<u32>,
    node_preference: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BackoffFile {
    initial: Option<DurationFile>,
    max: Option<DurationFile>,
    unschedulable_timeout: Option<DurationFile>,
}

impl Settings {
    /// Reads and validates a configuration file.
    pub fn from_file(file: &Path) -> Result<Settings, ConfigFileError> {
        let text = std::fs::read_to_string(file).map_err(|error| ConfigFileError::Read {
            file: file.to_path_buf(),
            error,
        })?;
        Settings::from_yaml(&text, file)
    }

    /// Parses `text` (named `file` in errors).
    pub fn from_yaml(text: &str, file: &Path) -> Result<Settings, ConfigFileError> {
        let parsed: FileConfig = if text.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#') || l == "---"
        }) {
            FileConfig::default()
        } else {
            let de = serde_yaml::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let location = e
                    .inner()
                    .location()
                    .map(|l| format!(":{}:{}", l.line(), l.column()))
                    .unwrap_or_default();
                let field = e.path().to_string();
                let message = e.inner().to_string();
                // The inner message repeats the location; keep the text before it.
                let mut message = message
                    .split(" at line ")
                    .next()
                    .unwrap_or(&message)
                    .to_string();
                // The parser may prefix the enclosing field: drop what the path says.
                let segments: Vec<&str> = field.split('.').collect();
                for n in (1..=segments.len()).rev() {
                    let prefix = format!("{}: ", segments[..n].join("."));
                    if let Some(rest) = message.strip_prefix(&prefix) {
                        message = rest.to_string();
                        break;
                    }
                }
                ConfigFileError::Invalid {
                    file: file.to_path_buf(),
                    location,
                    field,
                    message,
                }
            })?
        };
        let inconsistent = |field, message: String| ConfigFileError::Inconsistent {
            file: file.to_path_buf(),
            field,
            message,
        };
        let mut settings = Settings::default();
        if let Some(names) = parsed.scheduler_names {
            if names.is_empty() || names.iter().any(|n| n.trim().is_empty()) {
                return Err(inconsistent(
                    "schedulerNames",
                    "name at least one scheduler, none empty".into(),
                ));
            }
            settings.scheduler_names = names;
        }
        if let Some(tiers) = parsed.network_tiers {
            settings.core.tiers = match (tiers.preset, tiers.keys) {
                (Some(_), Some(_)) => {
                    return Err(inconsistent(
                        "networkTiers",
                        "set preset or keys, not both".into(),
                    ));
                }
                (Some(p), None) => p.0,
                (None, Some(keys)) => NetworkTiers::new(keys)
                    .map_err(|e| inconsistent("networkTiers.keys", e.to_string()))?,
                (None, None) => {
                    return Err(inconsistent(
                        "networkTiers",
                        "set preset (gputopo, topograph, aws, ...) or keys".into(),
                    ));
                }
            };
        }
        if let Some(w) = parsed.weights {
            let d = ScoreWeights::default();
            settings.core.weights = ScoreWeights {
                gpu_set: w.gpu_set.unwrap_or(d.gpu_set),
                allocation: w.allocation.unwrap_or(d.allocation),
                memory_fit: w.memory_fit.unwrap_or(d.memory_fit),
                interference: w.interference.unwrap_or(d.interference),
                preferred_domain: w.preferred_domain.unwrap_or(d.preferred_domain),
                cost: w.cost.unwrap_or(d.cost),
                node_preference: w.node_preference.unwrap_or(d.node_preference),
            };
        }
        if let Some(p) = parsed.default_topology_manager_policy {
            settings.core.default_topology_manager_policy = p.0;
        }
        if let Some(t) = parsed.memory_target {
            settings.core.memory_target = t.0;
        }
        if let Some(s) = parsed.spot_instance_types {
            settings.core.spot_instance_types = s;
        }
        if let Some(b) = parsed.backoff {
            let d = Backoff::default();
            settings.backoff = Backoff {
                initial: b.initial.map_or(d.initial, |x| x.0),
                max: b.max.map_or(d.max, |x| x.0),
                unschedulable_timeout: b
                    .unschedulable_timeout
                    .map_or(d.unschedulable_timeout, |x| x.0),
            };
            if settings.backoff.initial.is_zero() || settings.backoff.initial > settings.backoff.max
            {
                return Err(inconsistent(
                    "backoff",
                    format!(
                        "initial ({:?}) must be above zero and at most max ({:?})",
                        settings.backoff.initial, settings.backoff.max
                    ),
                ));
            }
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Settings, ConfigFileError> {
        Settings::from_yaml(text, Path::new("sched.yaml"))
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(parse("# nothing\n").unwrap(), Settings::default());
    }

    #[test]
    fn reads_every_field() {
        let s = parse(
            "schedulerNames: [a, b]\nnetworkTiers: {preset: aws}\nweights: {gpuSet: 80}\n\
             defaultTopologyManagerPolicy: single-numa-node\nmemoryTarget: {low: 0.5, high: 0.6}\n\
             spotInstanceTypes: [p4d.spot]\nbackoff: {initial: 200ms, max: 5s, unschedulableTimeout: 1m}\n",
        )
        .unwrap();
        assert_eq!(s.scheduler_names, ["a", "b"]);
        assert_eq!(s.core.tiers, NetworkTiers::aws());
        assert_eq!(s.core.weights.gpu_set, 80);
        assert_eq!(s.core.weights.allocation, 20);
        assert_eq!(
            s.core.default_topology_manager_policy,
            TopologyManagerPolicy::SingleNumaNode
        );
        assert_eq!(s.core.memory_target, MemoryTarget::new(0.5, 0.6).unwrap());
        assert_eq!(s.backoff.initial, Duration::from_millis(200));
        assert_eq!(s.backoff.unschedulable_timeout, Duration::from_secs(60));
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse("weights:\n  gpuSet: 40\n  bogus: 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("sched.yaml:3:"), "{e}");
        assert!(e.contains("weights") && e.contains("bogus"), "{e}");
        let e = parse("backoff:\n  max: soon\n").unwrap_err().to_string();
        assert!(e.starts_with("sched.yaml:2:"), "{e}");
        assert!(e.contains("backoff.max") && e.contains("\"soon\""), "{e}");
        let e = parse("networkTiers:\n  preset: slurm\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("networkTiers.preset") && e.contains("topograph"),
            "{e}"
        );
        let e = parse("defaultTopologyManagerPolicy: strict\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains(":1:") && e.contains("single-numa-node"), "{e}");
        let e = parse("backoff: {initial: 1m, max: 1s}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("backoff") && e.contains("at most max"), "{e}");
    }
}
