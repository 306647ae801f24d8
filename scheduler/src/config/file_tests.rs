//! The configuration file: every field read, errors naming line and field.

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

#[test]
fn preemption_and_gangs_are_read() {
    let s = parse(
        "preemption: {enabled: false, checkpointMaxAge: 10m}\n\
         gangs: {mixedModels: true, scheduleTimeout: 90s, partialBindTimeout: 2m, reservations: {maxFraction: 0.5, ttl: 5m}}\n",
    )
    .unwrap();
    assert!(!s.preemption.enabled);
    assert_eq!(
        s.preemption.policy.checkpoint_max_age,
        Duration::from_secs(600)
    );
    assert_eq!(
        s.preemption.policy.finish_window,
        PreemptionPolicy::default().finish_window
    );
    assert_eq!(s.gangs.schedule_timeout, Duration::from_secs(90));
    assert_eq!(s.gangs.partial_bind_timeout, Duration::from_secs(120));
    assert!(s.core.gang_mixed_models);
    assert!(
        !Settings::default().core.gang_mixed_models,
        "one model by default"
    );
    let r = s.gangs.reservations.expect("reservations on");
    assert_eq!((r.max_fraction, r.ttl), (0.5, Duration::from_secs(300)));
    assert_eq!(
        r.max_reservations,
        ReservationPolicy::default().max_reservations
    );
    let off = parse("gangs: {reservations: {enabled: false}}\n").unwrap();
    assert_eq!(off.gangs.reservations, None);
    let e = parse("gangs:\n  reservations: {maxFraction: 2}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("maxFraction") && e.contains("0 to 1"), "{e}");
    let e = parse("preemption:\n  enabled: maybe\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("sched.yaml:2:") && e.contains("preemption.enabled"),
        "{e}"
    );
}

#[test]
fn the_age_of_a_trusted_kubelet_reading_is_read_and_must_be_above_zero() {
    assert_eq!(
        parse("# none\n")
            .unwrap()
            .accounting
            .reported_allocations_max_age,
        Duration::from_secs(15 * 60)
    );
    let s = parse("accounting: {reportedAllocationsMaxAge: 2m}\n").unwrap();
    assert_eq!(
        s.accounting.reported_allocations_max_age,
        Duration::from_secs(120)
    );
    let e = parse("accounting: {reportedAllocationsMaxAge: 0s}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("accounting.reportedAllocationsMaxAge") && e.contains("above zero"),
        "{e}"
    );
    let e = parse("accounting: {maxAge: 2m}\n").unwrap_err().to_string();
    assert!(
        e.contains("reportedAllocationsMaxAge"),
        "unknown fields name the accepted ones: {e}"
    );
}

#[test]
fn the_dra_drivers_default_to_nvidias_and_must_name_one() {
    assert_eq!(parse("# none\n").unwrap().dra.drivers, ["gpu.nvidia.com"]);
    let s = parse("dra: {drivers: [gpu.nvidia.com, gpu.example.com]}\n").unwrap();
    assert_eq!(s.dra.drivers, ["gpu.nvidia.com", "gpu.example.com"]);
    for bad in ["dra: {drivers: []}\n", "dra: {drivers: ['']}\n"] {
        let e = parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("dra.drivers") && e.contains("at least one"),
            "{e}"
        );
    }
    let e = parse("dra: {driver: x}\n").unwrap_err().to_string();
    assert!(
        e.contains("drivers"),
        "unknown fields name the accepted ones: {e}"
    );
}

#[test]
fn a_target_workload_turns_on_the_fragmentation_score() {
    assert!(parse("# none\n").unwrap().core.target_workload.is_none());
    let s = parse(
        "weights: {fragmentation: 500}\ntargetWorkload:\n  podTypes:\n\
         \x20   - {cpuMilli: 8000, gpus: 1, weight: 3}\n\
         \x20   - {cpuMilli: 4000, gpus: 1, gpuMilli: 250}\n",
    )
    .unwrap();
    let w = s.core.target_workload.expect("a target workload");
    assert_eq!(w.types().len(), 2);
    assert_eq!(w.model_label(), DEFAULT_MODEL_LABEL);
    let total: f64 = w.types().iter().map(|t| t.weight).sum();
    assert!((total - 1.0).abs() < 1e-9, "weights renormalised: {total}");
    assert_eq!(s.core.weights.fragmentation, 500);
    let e = parse("targetWorkload:\n  podTypes:\n    - {gpus: 2, gpuMilli: 500}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("targetWorkload.podTypes") && e.contains("share"),
        "{e}"
    );
    let e = parse("targetWorkload:\n  podTypes:\n    - {gpus: 1, milli: 5}\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("sched.yaml:3:") && e.contains("milli"), "{e}");
    let e = parse("targetWorkload: {podTypes: []}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least one pod type"), "{e}");
}

#[test]
fn profiles_override_scoring_and_share_the_cluster_view() {
    let s = parse(
        "weights: {gpuSet: 70}\nnetworkTiers: {preset: aws}\n\
         profiles:\n  - schedulerName: gputopo-cost\n    weights: {cost: 60}\n    preemption: {enabled: false}\n",
    )
    .unwrap();
    assert_eq!(
        s.all_scheduler_names(),
        ["gputopo-scheduler", "gputopo-cost"]
    );
    let (core, preemption) = s.profile_for("gputopo-cost");
    assert_eq!(core.weights.cost, 60);
    assert_eq!(core.weights.gpu_set, 70, "inherited from the top level");
    assert_eq!(core.tiers, NetworkTiers::aws());
    assert!(!preemption.enabled);
    let (core, preemption) = s.profile_for("gputopo-scheduler");
    assert_eq!(core.weights.cost, ScoreWeights::default().cost);
    assert!(preemption.enabled);

    let e = parse("profiles:\n  - schedulerName: gputopo-scheduler\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("already served"), "{e}");
    let e = parse("profiles:\n  - schedulerName: x\n    networkTiers: {preset: aws}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("sched.yaml:3:") && e.contains("networkTiers"),
        "{e}"
    );
    let mut s = parse("profiles:\n  - schedulerName: x\n").unwrap();
    assert!(s.set_scheduler_names(vec!["x".into()]).is_err());
    assert!(s.set_scheduler_names(vec!["y".into()]).is_ok());
}

#[test]
fn the_generation_preference_is_set_at_the_top_or_per_profile_and_bad_values_are_named() {
    let s = parse(
        "gpuGeneration: oldest\nweights: {generation: 30}\n\
         profiles:\n  - schedulerName: gputopo-training\n    gpuGeneration: newest\n",
    )
    .unwrap();
    assert_eq!(s.core.gpu_generation, GenerationPreference::Oldest);
    assert_eq!(s.core.weights.generation, 30);
    let (core, _) = s.profile_for("gputopo-training");
    assert_eq!(core.gpu_generation, GenerationPreference::Newest);
    assert_eq!(core.weights.generation, 30, "inherited");
    assert_eq!(
        parse("# nothing\n").unwrap().core.gpu_generation,
        GenerationPreference::Off
    );
    let e = parse("gpuGeneration: latest\n").unwrap_err().to_string();
    assert!(
        e.starts_with("sched.yaml:1:") && e.contains("off | newest | oldest"),
        "{e}"
    );
}

#[test]
fn reads_the_pod_preferences_weights() {
    let s = parse(
        "weights: {podPreferences: 300}\n\
         preferences: {nodeAffinity: 5, interPodAffinity: 1, hardPodAffinityWeight: 0}\n",
    )
    .unwrap();
    assert_eq!(s.core.weights.pod_preferences, 300);
    assert_eq!(s.core.preferences.node_affinity, 5);
    assert_eq!(s.core.preferences.inter_pod_affinity, 1);
    assert_eq!(
        s.core.preferences.topology_spread,
        PreferenceWeights::default().topology_spread,
        "kept at its default"
    );
    assert_eq!(s.core.preferences.hard_pod_affinity, 0);
    let e = parse("preferences: {hardPodAffinityWeight: 101}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("preferences.hardPodAffinityWeight") && e.contains("0 to 100"),
        "{e}"
    );
}

#[test]
fn reads_the_topology_spread_defaults_as_kube_scheduler_spells_them() {
    assert_eq!(
        parse("# nothing\n").unwrap().core.spread_defaults,
        SpreadDefaults::System
    );
    let s = parse(
        "topologySpreadDefaults:\n  defaultingType: List\n  defaultConstraints:\n  \
         - {maxSkew: 2, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}\n",
    )
    .unwrap();
    let SpreadDefaults::List(list) = &s.core.spread_defaults else {
        panic!("a list: {:?}", s.core.spread_defaults);
    };
    assert_eq!(
        (list[0].max_skew, list[0].topology_key.as_str()),
        (2, "zone")
    );
    let off = parse("topologySpreadDefaults: {defaultingType: List}\n").unwrap();
    assert_eq!(off.core.spread_defaults, SpreadDefaults::List(Vec::new()));
    for (bad, says) in [
        (
            "topologySpreadDefaults:\n  defaultConstraints:\n  - {maxSkew: 1, topologyKey: z, whenUnsatisfiable: DoNotSchedule}\n",
            "defaultingType System",
        ),
        (
            "topologySpreadDefaults: {defaultingType: Custom}\n",
            "System | List",
        ),
        (
            "topologySpreadDefaults:\n  defaultingType: List\n  defaultConstraints:\n  - {maxSkew: 0, topologyKey: z, whenUnsatisfiable: DoNotSchedule}\n",
            "maxSkew",
        ),
    ] {
        let e = parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn reads_the_balanced_allocation_resources_and_the_node_score_weights() {
    let s = parse(
        "weights: {balancedAllocation: 7, imageLocality: 0}\n\
         balancedAllocation:\n  resources:\n  - {name: cpu, weight: 1}\n  - {name: memory}\n  - {name: nvidia.com/gpu, weight: 1}\n",
    )
    .unwrap();
    assert_eq!(s.core.weights.balanced_allocation, 7);
    assert_eq!(s.core.weights.image_locality, 0);
    assert_eq!(
        s.core.balanced_resources.names(),
        ["cpu", "memory", "nvidia.com/gpu"]
    );
    assert_eq!(
        parse("# nothing\n")
            .unwrap()
            .core
            .balanced_resources
            .names(),
        ["cpu", "memory"],
        "upstream's default"
    );
    let e = parse("balancedAllocation:\n  resources: [{name: cpu, weight: 2}]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("balancedAllocation.resources") && e.contains("accepted: 1"),
        "{e}"
    );
    let e = parse("balancedAllocation:\n  resources: [{name: cpu}, {name: cpu}]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("resources[1]") && e.contains("once"), "{e}");
}

#[test]
fn reads_the_domain_fit_weight_on_by_default() {
    assert_eq!(parse("# nothing\n").unwrap().core.weights.domain_fit, 15);
    let off = parse("weights: {domainFit: 0}\n").unwrap();
    assert_eq!(off.core.weights.domain_fit, 0);
    assert_eq!(
        off.core.weights.allocation, 20,
        "the others keep their defaults"
    );
}

#[test]
fn reads_the_keep_gpus_free_weight_on_by_default() {
    assert_eq!(
        parse("# nothing\n").unwrap().core.weights.keep_gpus_free,
        40
    );
    let off = parse("weights: {keepGpusFree: 0}\n").unwrap();
    assert_eq!(off.core.weights.keep_gpus_free, 0);
    assert_eq!(
        off.core.weights.domain_fit, 15,
        "the others keep their defaults"
    );
}
