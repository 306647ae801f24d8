//! The configuration file's scoring sections: `weights`, `preferences`
//! (how kube-scheduler's scores blend), `topologySpreadDefaults` and
//! `balancedAllocation`.

use super::problem::Problem;
use super::*;
use gputopo_scheduler_core::config::BalancedResources;
use schemars::JsonSchema;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct WeightsFile {
    pub(super) gpu_set: Option<u32>,
    pub(super) allocation: Option<u32>,
    pub(super) memory_fit: Option<u32>,
    pub(super) interference: Option<u32>,
    pub(super) preferred_domain: Option<u32>,
    pub(super) cost: Option<u32>,
    pub(super) node_preference: Option<u32>,
    pub(super) fragmentation: Option<u32>,
    pub(super) generation: Option<u32>,
    pub(super) balanced_allocation: Option<u32>,
    pub(super) image_locality: Option<u32>,
    pub(super) pod_preferences: Option<u32>,
    /// Best fit among network domains: GPU pods to a partly used domain
    /// before an untouched one, so whole domains stay free for gangs; 0 turns it off.
    pub(super) domain_fit: Option<u32>,
    /// Pods asking no GPU (Ray heads, launchers, drivers) to nodes without
    /// GPUs when one fits, so GPU nodes keep their room for GPU pods; 0 turns it off.
    pub(super) keep_gpus_free: Option<u32>,
}

/// `preferences`: how kube-scheduler's scores blend into the pod-preferences part.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PreferencesFile {
    pub(super) node_affinity: Option<u32>,
    pub(super) inter_pod_affinity: Option<u32>,
    pub(super) topology_spread: Option<u32>,
    /// InterPodAffinity's hardPodAffinityWeight.
    #[schemars(range(min = 0, max = 100))]
    pub(super) hard_pod_affinity_weight: Option<i32>,
}

/// `topologySpreadDefaults`: PodTopologySpreadArgs' `defaultingType` and
/// `defaultConstraints`, as KubeSchedulerConfiguration spells them.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct SpreadDefaultsFile {
    /// System: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway; List: defaultConstraints.
    #[schemars(extend("enum" = ["System", "List"]))]
    pub(super) defaulting_type: Option<String>,
    /// With List only; an empty list turns the defaults off.
    pub(super) default_constraints: Option<Vec<DefaultConstraintFile>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct DefaultConstraintFile {
    #[schemars(range(min = 1))]
    pub(super) max_skew: i32,
    #[schemars(length(min = 1))]
    pub(super) topology_key: String,
    #[schemars(extend("enum" = ["DoNotSchedule", "ScheduleAnyway"]))]
    pub(super) when_unsatisfiable: String,
}

/// `balancedAllocation`: NodeResourcesBalancedAllocationArgs' `resources`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct BalancedAllocationFile {
    /// Resource names, each once; an empty list turns the part off.
    #[schemars(length(max = gputopo_scheduler_core::config::MAX_BALANCED_RESOURCES))]
    pub(super) resources: Vec<ResourceSpecFile>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ResourceSpecFile {
    #[schemars(length(min = 1))]
    pub(super) name: String,
    /// 1, as kube-scheduler's NodeResourcesBalancedAllocationArgs take no other.
    #[schemars(extend("const" = 1))]
    pub(super) weight: Option<i64>,
}

impl BalancedAllocationFile {
    pub(super) fn read(&self) -> Result<BalancedResources, Problem> {
        let field = "balancedAllocation.resources";
        if let Some((i, r)) = self
            .resources
            .iter()
            .enumerate()
            .find(|(_, r)| r.weight.is_some_and(|w| w != 1))
        {
            return Err(Problem::new(
                field,
                format!(
                    "resources[{i}].weight {} for {:?}: accepted: 1 (kube-scheduler's NodeResourcesBalancedAllocationArgs take no other weight)",
                    r.weight.unwrap_or_default(),
                    r.name
                ),
            ));
        }
        BalancedResources::new(self.resources.iter().map(|r| r.name.clone()).collect())
            .map_err(|e| Problem::new(field, e.to_string()))
    }
}

impl SpreadDefaultsFile {
    pub(super) fn read(&self) -> Result<SpreadDefaults, Problem> {
        let field = "topologySpreadDefaults";
        let list = self.default_constraints.as_deref().unwrap_or_default();
        match self.defaulting_type.as_deref().unwrap_or("System") {
            "System" if !list.is_empty() => Err(Problem::new(
                field,
                "defaultConstraints must be empty with defaultingType System (as kube-scheduler's PodTopologySpreadArgs); set defaultingType: List".into(),
            )),
            "System" => Ok(SpreadDefaults::System),
            "List" => list
                .iter()
                .map(|c| {
                    let spec = k8s_openapi::api::core::v1::TopologySpreadConstraint {
                        max_skew: c.max_skew,
                        topology_key: c.topology_key.clone(),
                        when_unsatisfiable: c.when_unsatisfiable.clone(),
                        ..Default::default()
                    };
                    SpreadConstraint::from_k8s(&spec, &Default::default(), "defaultConstraints")
                        .map_err(|e| Problem::new(field, e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(SpreadDefaults::List),
            other => Err(Problem::new(
                field,
                format!("defaultingType {other:?} is not valid; accepted: System | List"),
            )),
        }
    }
}

impl PreferencesFile {
    pub(super) fn over(&self, base: PreferenceWeights) -> Result<PreferenceWeights, Problem> {
        let hard = self
            .hard_pod_affinity_weight
            .unwrap_or(base.hard_pod_affinity);
        if !(0..=100).contains(&hard) {
            return Err(Problem::new(
                "preferences.hardPodAffinityWeight",
                format!(
                    "{hard} is out of range; accepted: 0 to 100 (as kube-scheduler's InterPodAffinity args)"
                ),
            ));
        }
        Ok(PreferenceWeights {
            node_affinity: self.node_affinity.unwrap_or(base.node_affinity),
            inter_pod_affinity: self.inter_pod_affinity.unwrap_or(base.inter_pod_affinity),
            topology_spread: self.topology_spread.unwrap_or(base.topology_spread),
            hard_pod_affinity: hard,
        })
    }
}

impl WeightsFile {
    /// `base` with the weights this file sets.
    // `..base` keeps any weight the file cannot name yet at its default.
    #[allow(clippy::needless_update)]
    pub(super) fn over(&self, base: ScoreWeights) -> ScoreWeights {
        ScoreWeights {
            gpu_set: self.gpu_set.unwrap_or(base.gpu_set),
            allocation: self.allocation.unwrap_or(base.allocation),
            memory_fit: self.memory_fit.unwrap_or(base.memory_fit),
            interference: self.interference.unwrap_or(base.interference),
            preferred_domain: self.preferred_domain.unwrap_or(base.preferred_domain),
            cost: self.cost.unwrap_or(base.cost),
            node_preference: self.node_preference.unwrap_or(base.node_preference),
            fragmentation: self.fragmentation.unwrap_or(base.fragmentation),
            generation: self.generation.unwrap_or(base.generation),
            balanced_allocation: self.balanced_allocation.unwrap_or(base.balanced_allocation),
            image_locality: self.image_locality.unwrap_or(base.image_locality),
            pod_preferences: self.pod_preferences.unwrap_or(base.pod_preferences),
            domain_fit: self.domain_fit.unwrap_or(base.domain_fit),
            keep_gpus_free: self.keep_gpus_free.unwrap_or(base.keep_gpus_free),
            ..base
        }
    }
}
