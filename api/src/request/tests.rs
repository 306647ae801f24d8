//! Tests of [`GpuRequest`] parsing: every annotation, aliases, bad values and
//! effective container limits.

use super::*;

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse(limit: Option<u32>, pairs: &[(&str, &str)]) -> Result<GpuRequest, RequestError> {
    GpuRequest::parse(limit, &ann(pairs), &BTreeMap::new())
}

#[test]
fn defaults_without_annotations() {
    let r = parse(Some(4), &[]).unwrap();
    assert_eq!(r.gpus, 4);
    assert_eq!(r.collective, Collective::Ring);
    assert_eq!(r.placement_strategy, PlacementStrategy::Balanced);
    assert!(r.gang.is_none() && r.gpu_share.is_none());
}

#[test]
fn every_annotation_parses() {
    let r = parse(
        Some(8),
        &[
            (key::MIN_NVLINK_LEVEL, "NV12"),
            (key::COLLECTIVE, "all-to-all"),
            (key::WORKLOAD, "training"),
            (key::PLACEMENT_STRATEGY, "consolidated"),
            (key::PREFERRED_DOMAIN, "leaf-1"),
            (key::GPU_MEMORY, "40Gi"),
            (key::LATENCY_SENSITIVE, "false"),
            (key::CHECKPOINT_TIME, "2026-11-21T08:00:00Z"),
            (key::EXPECTED_COMPLETION, "2026-11-21T10:00:00+01:00"),
            (key::NETWORK_BANDWIDTH, "400Gbps"),
            (key::GANG, "job-a"),
            (key::GANG_SIZE, "8"),
        ],
    )
    .unwrap();
    assert_eq!(r.min_nvlink_level, Some(12));
    assert_eq!(r.collective, Collective::AllToAll);
    assert_eq!(r.workload, Some(WorkloadKind::Training));
    assert_eq!(r.placement_strategy, PlacementStrategy::Consolidated);
    assert_eq!(r.preferred_domain.as_deref(), Some("leaf-1"));
    assert_eq!(r.gpu_memory_mib, Some(40 * 1024));
    assert_eq!(r.network_bandwidth_mbps, Some(400_000));
    assert_eq!(
        r.expected_completion.unwrap().as_second() - r.checkpoint_time.unwrap().as_second(),
        3600
    );
    assert_eq!(
        r.gang,
        Some(GangRef::Annotation {
            name: "job-a".into(),
            size: 8
        })
    );
    assert_eq!(
        parse(Some(2), &[(key::MIN_NVLINK_LEVEL, "8")])
            .unwrap()
            .min_nvlink_level,
        Some(8)
    );
}

#[test]
fn gpu_share_forms() {
    let r = parse(Some(1), &[(key::GPU_SHARE, "0.25")]).unwrap();
    assert_eq!((r.gpus, r.gpu_share), (0, Some(GpuShare::Milli(250))));
    let r = parse(None, &[(key::GPU_SHARE, "15Gi")]).unwrap();
    assert_eq!(r.gpu_share, Some(GpuShare::MemoryMiB(15 * 1024)));
    assert_eq!(
        parse(None, &[(key::GPU_SHARE, "1")]).unwrap().gpu_share,
        Some(GpuShare::Milli(1000))
    );
    assert_eq!(
        parse(None, &[(key::GPU_SHARE, ".05")]).unwrap().gpu_share,
        Some(GpuShare::Milli(50))
    );
    assert!(
        parse(None, &[(key::GPU_SHARE, "0.25")])
            .unwrap()
            .wants_gpus()
    );
}

#[test]
fn seed_aliases_are_accepted() {
    let r = parse(
        Some(4),
        &[
            ("topology.scheduler/gpu-count", "4"),
            ("topology.scheduler/preferred-domain", "leaf-2"),
            ("topology.scheduler/placement-strategy", "distributed"),
            ("topology.scheduler/latency-sensitive", "true"),
            ("topology.scheduler/network-bandwidth", "100"),
        ],
    )
    .unwrap();
    assert_eq!(r.preferred_domain.as_deref(), Some("leaf-2"));
    assert_eq!(r.placement_strategy, PlacementStrategy::Distributed);
    assert!(r.latency_sensitive);
    assert_eq!(r.network_bandwidth_mbps, Some(100_000));
    // The same value under both keys is fine.
    parse(
        Some(4),
        &[
            (key::PREFERRED_DOMAIN, "a"),
            ("topology.scheduler/preferred-domain", "a"),
        ],
    )
    .unwrap();
}

/// Every malformed annotation gives its typed error naming the key and the accepted forms.
#[test]
fn bad_values_name_key_and_accepted_forms() {
    let cases: &[(&str, &str, &str)] = &[
        (key::MIN_NVLINK_LEVEL, "NV0", "NV8"),
        (key::MIN_NVLINK_LEVEL, "eight", "NV8"),
        (key::MIN_NVLINK_LEVEL, "NV99", "NV8"),
        (key::COLLECTIVE, "star", "ring | all-to-all"),
        (key::COLLECTIVE, "Ring", "ring | all-to-all"),
        (key::WORKLOAD, "batch", "training | inference"),
        (key::PLACEMENT_STRATEGY, "spread", "consolidated"),
        (key::PREFERRED_DOMAIN, "leaf 1", "label value"),
        (key::PREFERRED_DOMAIN, "-leaf", "label value"),
        (key::GPU_MEMORY, "40GB", "40Gi"),
        (key::GPU_MEMORY, "0", "40Gi"),
        (key::LATENCY_SENSITIVE, "yes", "true | false"),
        (key::GPU_SHARE, "0.01", "0.05 to 1"),
        (key::GPU_SHARE, "1.5", "0.05 to 1"),
        (key::GPU_SHARE, "0.0001", "0.05 to 1"),
        (key::GPU_SHARE, "half", "0.05 to 1"),
        (key::CHECKPOINT_TIME, "yesterday", "RFC 3339"),
        (key::EXPECTED_COMPLETION, "2026-13-01T00:00:00Z", "RFC 3339"),
        (key::NETWORK_BANDWIDTH, "fast", "bit rate"),
        (key::NETWORK_BANDWIDTH, "-5G", "bit rate"),
        (
            "topology.scheduler/placement-strategy",
            "packed",
            "consolidated",
        ),
    ];
    for (k, v, accepted) in cases {
        let e = parse(Some(1), &[(k, v)]).unwrap_err();
        assert_eq!(e.key(), *k, "{e}");
        let msg = e.to_string();
        assert!(msg.contains(k) && msg.contains(accepted), "{k}={v}: {msg}");
        assert!(matches!(e, RequestError::BadValue { .. }), "{e:?}");
    }
}

#[test]
fn inconsistent_requests_are_refused() {
    let e = parse(Some(2), &[("topology.scheduler/gpu-count", "4")]).unwrap_err();
    assert!(matches!(e, RequestError::Inconsistent { .. }) && e.to_string().contains("limit is 2"));
    let e = parse(None, &[(key::GPU_COUNT, "4")]).unwrap_err();
    assert!(e.to_string().contains("no nvidia.com/gpu limit"), "{e}");
    let e = parse(Some(2), &[(key::GPU_SHARE, "0.5")]).unwrap_err();
    assert_eq!(e.key(), key::GPU_SHARE);
    let e = parse(Some(1), &[(key::GANG, "g")]).unwrap_err();
    assert!(e.to_string().contains(key::GANG_SIZE));
    let e = parse(Some(1), &[(key::GANG_SIZE, "2")]).unwrap_err();
    assert!(e.to_string().contains(key::GANG));
    let e = parse(Some(1), &[(key::GANG, "G_1"), (key::GANG_SIZE, "2")]).unwrap_err();
    assert!(matches!(e, RequestError::BadValue { .. }));
    let e = parse(Some(1), &[(key::GANG, "g"), (key::GANG_SIZE, "0")]).unwrap_err();
    assert_eq!(e.key(), key::GANG_SIZE);
}

#[test]
fn unknown_and_conflicting_keys_are_refused() {
    let e = parse(Some(1), &[("gputopo.dev/colective", "ring")]).unwrap_err();
    assert_eq!(
        e,
        RequestError::UnknownKey {
            key: "gputopo.dev/colective".into()
        }
    );
    assert!(e.to_string().contains(key::COLLECTIVE));
    let e = parse(
        Some(1),
        &[
            (key::PREFERRED_DOMAIN, "a"),
            ("topology.scheduler/preferred-domain", "b"),
        ],
    )
    .unwrap_err();
    assert!(matches!(e, RequestError::ConflictingAlias { .. }), "{e:?}");
    // Other prefixes are not ours to judge.
    parse(Some(1), &[("example.com/anything", "x")]).unwrap();
}

#[test]
fn pod_group_label_names_the_gang() {
    let labels: BTreeMap<String, String> =
        [(key::POD_GROUP_LABEL.to_string(), "pg-1".to_string())].into();
    let r = GpuRequest::parse(Some(8), &BTreeMap::new(), &labels).unwrap();
    assert_eq!(
        r.gang,
        Some(GangRef::PodGroup {
            name: "pg-1".into()
        })
    );
    let e = GpuRequest::parse(
        Some(8),
        &ann(&[(key::GANG, "x"), (key::GANG_SIZE, "2")]),
        &labels,
    )
    .unwrap_err();
    assert!(matches!(e, RequestError::Inconsistent { .. }));
}

#[test]
fn pod_limits_sum_containers_and_respect_init_containers() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "annotations": {"gputopo.dev/collective": "all-to-all"}},
        "spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
                {"name": "c"}
            ]
        }
    }))
    .unwrap();
    let r = GpuRequest::from_pod(&pod).unwrap();
    assert_eq!((r.gpus, r.collective), (8, Collective::AllToAll));

    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}
    }))
    .unwrap();
    let e = GpuRequest::from_pod(&pod).unwrap_err();
    assert!(e.key().contains("containers[a]"), "{e}");
}

proptest::proptest! {
    #[test]
    fn no_annotation_value_panics(k in 0usize..KNOWN_KEYS.len(), v in "\\PC{0,24}") {
        let _ = parse(Some(1), &[(KNOWN_KEYS[k], &v)]);
    }
}
