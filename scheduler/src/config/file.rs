//! The configuration file's format (YAML, camelCase) and its validation
//! into [`Settings`]: every error names file, line, column and field.

use super::file_scoring::{
    BalancedAllocationFile, PreferencesFile, SpreadDefaultsFile, WeightsFile,
};
use super::problem::Problem;
use super::*;
use gputopo_scheduler_core::config::ConfigError;
use schemars::JsonSchema;

/// A value with something in it: the parser refuses blank names.
const NOT_BLANK: &str = r"\S";

// The `///` lines of these types are the descriptions in the generated
// schema (values.schema.json), so they speak to whoever writes the file.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    /// The pods' spec.schedulerName values served with the top-level settings.
    #[schemars(length(min = 1), inner(pattern(NOT_BLANK)))]
    scheduler_names: Option<Vec<String>>,
    /// Node label keys of the network tiers: a preset, or keys (outermost first).
    network_tiers: Option<TiersFile>,
    /// The parts of a node's score and their weights.
    weights: Option<WeightsFile>,
    /// How kube-scheduler's scores (its plugins' weights) blend into the podPreferences part.
    preferences: Option<PreferencesFile>,
    /// For pods stating no topologySpreadConstraints, as kube-scheduler's PodTopologySpreadArgs.
    topology_spread_defaults: Option<SpreadDefaultsFile>,
    /// Whose use the balance is measured over (NodeResourcesBalancedAllocationArgs' resources).
    balanced_allocation: Option<BalancedAllocationFile>,
    /// Which GPU generation pods lean to. In Helm values quote "off": YAML 1.1 reads it as false.
    gpu_generation: Option<GenerationFile>,
    /// The kubelet Topology Manager policy of nodes without the gputopo.dev/topology-manager-policy label.
    default_topology_manager_policy: Option<PolicyFile>,
    /// How full shared (inference) GPUs' memory is packed: 0 < low <= high < 1.
    memory_target: Option<MemoryTargetFile>,
    /// node.kubernetes.io/instance-type values that are spot capacity.
    spot_instance_types: Option<Vec<String>>,
    /// How long an unschedulable pod waits before its next try (initial <= max).
    backoff: Option<BackoffFile>,
    /// Evicting lower-priority pods for a pod or gang that fits nowhere.
    preemption: Option<PreemptionFile>,
    /// How gangs wait, and what their reservations may hold.
    gangs: Option<GangsFile>,
    /// How far what nodes report about held GPUs is trusted.
    accounting: Option<AccountingFile>,
    /// The Dynamic Resource Allocation drivers whose devices gputopo allocates.
    dra: Option<DraFile>,
    /// The pods the cluster expects: turns on the fragmentation score.
    target_workload: Option<TargetWorkloadFile>,
    /// More spec.schedulerName values, each with its own scoring, starting from the top-level settings.
    profiles: Option<Vec<ProfileFile>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DraFile {
    #[schemars(length(min = 1), inner(pattern(NOT_BLANK)))]
    drivers: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TargetWorkloadFile {
    /// The node label naming the GPU model (default nvidia.com/gpu.product).
    model_label: Option<String>,
    #[schemars(length(min = 1))]
    pod_types: Vec<PodTypeFile>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodTypeFile {
    #[serde(default)]
    cpu_milli: u64,
    #[serde(default)]
    #[schemars(range(max = 32))]
    gpus: u32,
    /// Milli-GPU per GPU: 1000 for whole GPUs, less for a share of one.
    #[serde(default = "whole_gpu")]
    #[schemars(range(min = 1, max = 1000))]
    gpu_milli: u32,
    /// GPU models (the model label's values) the pods accept; none: any.
    #[serde(default)]
    models: Vec<String>,
    /// How often the type comes, relative to the others.
    #[serde(default = "unit_weight")]
    #[schemars(extend("exclusiveMinimum" = 0))]
    weight: f64,
}

fn whole_gpu() -> u32 {
    1000
}

fn unit_weight() -> f64 {
    1.0
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PreemptionFile {
    enabled: Option<bool>,
    checkpoint_max_age: Option<DurationFile>,
    finish_window: Option<DurationFile>,
    inference_restart: Option<DurationFile>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GangsFile {
    mixed_models: Option<bool>,
    schedule_timeout: Option<DurationFile>,
    partial_bind_timeout: Option<DurationFile>,
    reservations: Option<ReservationsFile>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AccountingFile {
    reported_allocations_max_age: Option<DurationFile>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReservationsFile {
    enabled: Option<bool>,
    /// At most this fraction (0 to 1) of the cluster's GPUs reserved at once.
    #[schemars(range(min = 0, max = 1))]
    max_fraction: Option<f64>,
    max_reservations: Option<usize>,
    ttl: Option<DurationFile>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProfileFile {
    #[schemars(pattern(NOT_BLANK))]
    scheduler_name: String,
    weights: Option<WeightsFile>,
    gpu_generation: Option<GenerationFile>,
    memory_target: Option<MemoryTargetFile>,
    spot_instance_types: Option<Vec<String>>,
    preemption: Option<PreemptionFile>,
}

impl PreemptionFile {
    /// `base` with what this file sets.
    fn over(&self, base: Preemption) -> Preemption {
        let p = base.policy;
        Preemption {
            enabled: self.enabled.unwrap_or(base.enabled),
            policy: PreemptionPolicy {
                checkpoint_max_age: self
                    .checkpoint_max_age
                    .map_or(p.checkpoint_max_age, |d| d.0),
                finish_window: self.finish_window.map_or(p.finish_window, |d| d.0),
                inference_restart: self.inference_restart.map_or(p.inference_restart, |d| d.0),
                ..p
            },
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TiersFile {
    preset: Option<PresetFile>,
    /// Label keys, outermost first (set preset or keys, not both).
    #[schemars(length(min = 1, max = gputopo_scheduler_core::config::MAX_TIERS), inner(pattern(r"^\S+$")))]
    keys: Option<Vec<String>>,
}

/// Why one value of the file cannot be read; serde puts it after the
/// value's line and field.
#[derive(Debug, thiserror::Error)]
enum ValueError {
    /// An unknown preset, policy or `gpuGeneration`, or a memory target
    /// out of range (scheduler-core's text says what is accepted).
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{value:?} is not a duration ({source}); accepted: e.g. 500ms, 10s, 2m")]
    Duration {
        value: String,
        source: humantime::DurationError,
    },
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct PresetFile(NetworkTiers);

impl TryFrom<String> for PresetFile {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, ValueError> {
        Ok(PresetFile(NetworkTiers::preset(&s)?))
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct PolicyFile(TopologyManagerPolicy);

impl TryFrom<String> for PolicyFile {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, ValueError> {
        Ok(PolicyFile(s.parse()?))
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "String")]
struct GenerationFile(GenerationPreference);

impl TryFrom<String> for GenerationFile {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, ValueError> {
        Ok(GenerationFile(s.parse()?))
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "String")]
struct DurationFile(Duration);

impl TryFrom<String> for DurationFile {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, ValueError> {
        humantime::parse_duration(&s)
            .map(DurationFile)
            .map_err(|source| ValueError::Duration { value: s, source })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, try_from = "RawTarget")]
struct MemoryTargetFile(MemoryTarget);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    #[schemars(extend("exclusiveMinimum" = 0, "exclusiveMaximum" = 1))]
    low: f64,
    #[schemars(extend("exclusiveMinimum" = 0, "exclusiveMaximum" = 1))]
    high: f64,
}

impl TryFrom<RawTarget> for MemoryTargetFile {
    type Error = ValueError;
    fn try_from(r: RawTarget) -> Result<Self, ValueError> {
        Ok(MemoryTargetFile(MemoryTarget::new(r.low, r.high)?))
    }
}

#[derive(Deserialize, JsonSchema)]
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
        let mut parsed = parse(text, file)?;
        let profiles = parsed.profiles.take().unwrap_or_default();
        let mut settings = Settings::default();
        apply(&mut settings, parsed)
            .and_then(|()| add_profiles(&mut settings, &profiles))
            .map_err(|p| ConfigFileError::Inconsistent {
                file: file.to_path_buf(),
                field: p.field,
                message: p.message,
            })?;
        Ok(settings)
    }
}

/// The file's YAML, read into its types; an empty document (comments
/// only) is the defaults.
fn parse(text: &str, file: &Path) -> Result<FileConfig, ConfigFileError> {
    Ok(
        if text.lines().all(|l| {
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
        },
    )
}

/// The top-level settings onto `settings`, each checked.
fn apply(settings: &mut Settings, parsed: FileConfig) -> Result<(), Problem> {
    if let Some(names) = parsed.scheduler_names {
        if names.is_empty() || names.iter().any(|n| n.trim().is_empty()) {
            return Err(Problem::new(
                "schedulerNames",
                "name at least one scheduler, none empty".into(),
            ));
        }
        settings.scheduler_names = names;
    }
    if let Some(tiers) = parsed.network_tiers {
        settings.core.tiers = match (tiers.preset, tiers.keys) {
            (Some(_), Some(_)) => {
                return Err(Problem::new(
                    "networkTiers",
                    "set preset or keys, not both".into(),
                ));
            }
            (Some(p), None) => p.0,
            (None, Some(keys)) => NetworkTiers::new(keys)
                .map_err(|e| Problem::new("networkTiers.keys", e.to_string()))?,
            (None, None) => {
                return Err(Problem::new(
                    "networkTiers",
                    "set preset (gputopo, topograph, aws, ...) or keys".into(),
                ));
            }
        };
    }
    if let Some(w) = parsed.weights {
        settings.core.weights = w.over(settings.core.weights);
    }
    if let Some(p) = parsed.preferences {
        settings.core.preferences = p.over(settings.core.preferences)?;
    }
    if let Some(d) = parsed.topology_spread_defaults {
        settings.core.spread_defaults = d.read()?;
    }
    if let Some(b) = parsed.balanced_allocation {
        settings.core.balanced_resources = b.read()?;
    }
    if let Some(g) = parsed.gpu_generation {
        settings.core.gpu_generation = g.0;
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
        if settings.backoff.initial.is_zero() || settings.backoff.initial > settings.backoff.max {
            return Err(Problem::new(
                "backoff",
                format!(
                    "initial ({:?}) must be above zero and at most max ({:?})",
                    settings.backoff.initial, settings.backoff.max
                ),
            ));
        }
    }
    if let Some(p) = parsed.preemption {
        settings.preemption = p.over(settings.preemption);
    }
    if let Some(t) = parsed
        .accounting
        .and_then(|a| a.reported_allocations_max_age)
    {
        if t.0.is_zero() {
            return Err(Problem::new(
                "accounting.reportedAllocationsMaxAge",
                "must be above zero (e.g. 15m)".into(),
            ));
        }
        settings.accounting.reported_allocations_max_age = t.0;
    }
    if let Some(d) = parsed.dra {
        if d.drivers.is_empty() || d.drivers.iter().any(|x| x.trim().is_empty()) {
            return Err(Problem::new(
                "dra.drivers",
                "must name at least one DRA driver, none empty (e.g. [gpu.nvidia.com])".into(),
            ));
        }
        settings.dra.drivers = d.drivers;
    }
    if let Some(g) = parsed.gangs {
        apply_gangs(settings, g)?;
    }
    if let Some(t) = parsed.target_workload {
        settings.core.target_workload = Some(Arc::new(target_workload(t)?));
    }
    Ok(())
}

/// `gangs`: mixed models, the timeouts and the reservation policy.
fn apply_gangs(settings: &mut Settings, g: GangsFile) -> Result<(), Problem> {
    if let Some(mixed) = g.mixed_models {
        settings.core.gang_mixed_models = mixed;
    }
    if let Some(t) = g.schedule_timeout {
        if t.0.is_zero() {
            return Err(Problem::new(
                "gangs.scheduleTimeout",
                "must be above zero (e.g. 10m)".into(),
            ));
        }
        settings.gangs.schedule_timeout = t.0;
    }
    if let Some(t) = g.partial_bind_timeout {
        if t.0.is_zero() {
            return Err(Problem::new(
                "gangs.partialBindTimeout",
                "must be above zero (e.g. 5m)".into(),
            ));
        }
        settings.gangs.partial_bind_timeout = t.0;
    }
    if let Some(r) = g.reservations {
        let base = settings.gangs.reservations.unwrap_or_default();
        let policy = ReservationPolicy {
            max_fraction: r.max_fraction.unwrap_or(base.max_fraction),
            max_reservations: r.max_reservations.unwrap_or(base.max_reservations),
            ttl: r.ttl.map_or(base.ttl, |d| d.0),
        };
        if !(0.0..=1.0).contains(&policy.max_fraction) {
            return Err(Problem::new(
                "gangs.reservations.maxFraction",
                format!(
                    "{} is not a fraction of the cluster's GPUs; accepted: 0 to 1",
                    policy.max_fraction
                ),
            ));
        }
        if policy.ttl.is_zero() {
            return Err(Problem::new(
                "gangs.reservations.ttl",
                "must be above zero (e.g. 15m)".into(),
            ));
        }
        settings.gangs.reservations = r.enabled.unwrap_or(true).then_some(policy);
    }
    Ok(())
}

/// `targetWorkload`: the pod types fragmentation is measured against.
fn target_workload(t: TargetWorkloadFile) -> Result<TargetWorkload, Problem> {
    if t.pod_types.is_empty() {
        return Err(Problem::new(
            "targetWorkload.podTypes",
            "name at least one pod type, or leave targetWorkload out".into(),
        ));
    }
    let types = t.pod_types.into_iter().map(|p| PodType {
        weight: p.weight,
        models: p.models,
        ..PodType::new(p.cpu_milli, p.gpus, p.gpu_milli)
    });
    let workload = TargetWorkload::new(types)
        .map_err(|e| Problem::new("targetWorkload.podTypes", e.to_string()))?
        .with_model_label(t.model_label.unwrap_or_else(|| DEFAULT_MODEL_LABEL.into()));
    Ok(workload)
}

/// `profiles`: each a scheduler name of its own, starting from the
/// top-level settings.
fn add_profiles(settings: &mut Settings, profiles: &[ProfileFile]) -> Result<(), Problem> {
    let mut seen: Vec<&str> = settings
        .scheduler_names
        .iter()
        .map(String::as_str)
        .collect();
    for (i, p) in profiles.iter().enumerate() {
        let name = p.scheduler_name.trim();
        if name.is_empty() || seen.contains(&name) {
            return Err(Problem {
                field: "profiles",
                message: format!(
                    "profiles[{i}].schedulerName {name:?} is empty or already served (names so far: {}); each name is served by one profile",
                    seen.join(", ")
                ),
            });
        }
        seen.push(name);
        let mut core = settings.core.clone();
        if let Some(w) = &p.weights {
            core.weights = w.over(core.weights);
        }
        if let Some(g) = p.gpu_generation {
            core.gpu_generation = g.0;
        }
        if let Some(t) = &p.memory_target {
            core.memory_target = t.0;
        }
        if let Some(s) = &p.spot_instance_types {
            core.spot_instance_types = s.clone();
        }
        let preemption = p
            .preemption
            .as_ref()
            .map_or(settings.preemption, |f| f.over(settings.preemption));
        settings.profiles.push(Profile {
            scheduler_name: name.to_string(),
            core,
            preemption,
        });
    }
    Ok(())
}

#[path = "file_schema.rs"]
mod schema;

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
