//! What the device plugin reads: its node's `GpuTopology` (the inventory),
//! the pods bound to the node with their `gputopo.dev/assigned-gpus`
//! (the assignments), the kubelet's `GetPreferredAllocation` request, and its
//! `--device-list-strategy` values; then the preference it answers.

use crate::mutate::texts;
use crate::run::Verdict;
use crate::seeds::TOPOLOGY_OBJECTS;
use crate::value::Documents;
use gputopo_api::GpuTopology;
use gputopo_device_plugin::allocate::{DeviceListStrategy, container_response};
use gputopo_device_plugin::choose::{AssignedPod, Inventory, Request, prefer};
use gputopo_device_plugin::pods::assigned_pod;
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

const NODE: &str = "node-1";

/// The kubelet's request: GPUs of the inventory by bit (mask bit k is
/// the inventory's k-th GPU), and now and then an ID it does not have.
#[derive(Clone, Debug)]
pub struct Asked {
    pub available: u64,
    pub must_include: u64,
    /// `Ok`: a size the available GPUs can meet (an index into 1..=count);
    /// `Err`: this size, whatever it is.
    pub size: Result<Index, i32>,
    pub stray: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub topology: String,
    pub pods: Vec<String>,
    pub asked: Asked,
    pub strategies: Vec<String>,
}

/// The topologies the plugin can advertise (every GPU has a UUID).
static ADVERTISABLE: LazyLock<Vec<String>> = LazyLock::new(|| {
    TOPOLOGY_OBJECTS
        .iter()
        .filter(|t| {
            serde_json::from_str::<GpuTopology>(t)
                .is_ok_and(|t| t.spec.gpus.iter().all(|g| g.uuid.is_some()))
        })
        .cloned()
        .collect()
});
static TOPOLOGIES: LazyLock<Documents> = LazyLock::new(|| Documents::new(&ADVERTISABLE));

static PODS: LazyLock<Arc<[String]>> = LazyLock::new(|| {
    let pod = |name: &str, assigned: &str, created: &str| {
        json!({
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                "creationTimestamp": created,
                "annotations": {"gputopo.dev/assigned-gpus": assigned}},
            "spec": {"nodeName": NODE, "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"}
        })
        .to_string()
    };
    vec![
        pod("a", "0,1", "2026-01-01T00:00:00Z"),
        pod("b", "2,3,4,5", "2026-01-01T00:00:01Z"),
        pod("c", "0,1", "2026-01-01T00:00:00Z"),
        pod("d", "7", "2026-01-01T00:00:02Z"),
    ]
    .into()
});

static POD_DOCUMENTS: LazyLock<Documents> = LazyLock::new(|| Documents::new(&PODS));

fn asked() -> impl Strategy<Value = Asked> {
    (
        any::<u64>(),
        any::<u64>(),
        prop_oneof![
            8 => any::<Index>().prop_map(Ok),
            1 => prop_oneof![-2i32..10, Just(i32::MIN), Just(i32::MAX), Just(33)].prop_map(Err),
        ],
        prop_oneof![
            6 => Just(None),
            1 => texts(vec!["GPU-0".to_string(), String::new()].into(), &["GPU-", "-"]).prop_map(Some),
        ],
    )
        .prop_map(|(available, must, size, stray)| Asked {
            available,
            // Mostly a part of what is available, as the kubelet sends.
            must_include: if must % 4 == 0 { must } else { available & must & (must >> 8) },
            size,
            stray,
        })
}

pub fn strategy() -> BoxedStrategy<Case> {
    (
        // The topology is the agent's; the assignments and the request are the
        // inputs here, so it is mostly left whole.
        prop_oneof![
            2 => prop::sample::select(ADVERTISABLE.clone()),
            1 => TOPOLOGIES.json(),
        ],
        prop::collection::vec(
            prop_oneof![
                2 => POD_DOCUMENTS.json(),
                1 => texts(PODS.clone(), &[",", "31", "32", "-1", "00"]),
            ],
            0..5,
        ),
        asked(),
        prop::collection::vec(
            texts(
                vec!["envvar".to_string(), "cdi-cri".to_string()].into(),
                &["-"],
            ),
            0..3,
        ),
    )
        .prop_map(|(topology, pods, asked, strategies)| Case {
            topology,
            pods,
            asked,
            strategies,
        })
        .boxed()
}

pub fn check(c: &Case) -> Verdict {
    let mut strategies = BTreeSet::new();
    for s in &c.strategies {
        if let Ok(s) = s.parse::<DeviceListStrategy>() {
            strategies.insert(s);
        }
    }
    let Ok(topology) = serde_json::from_str::<GpuTopology>(&c.topology) else {
        return Verdict::Rejected;
    };
    let Ok(inventory) = Inventory::from_spec(&topology.spec) else {
        return Verdict::Rejected;
    };
    let uuids: Vec<String> = inventory.gpus().map(|g| g.uuid.clone()).collect();
    let ids = |mask: u64| -> Vec<String> {
        let mut ids: Vec<String> = uuids
            .iter()
            .enumerate()
            .filter(|(k, _)| *k < 64 && mask & (1 << k) != 0)
            .map(|(_, u)| u.clone())
            .collect();
        if let Some(stray) = &c.asked.stray {
            ids.push(stray.clone());
        }
        ids
    };
    let claims: Vec<AssignedPod> = c
        .pods
        .iter()
        .filter_map(|t| serde_json::from_str::<Pod>(t).ok())
        .filter_map(|p| assigned_pod(&p, NODE))
        .collect();
    let request = Request {
        available: ids(c.asked.available),
        must_include: ids(c.asked.must_include),
        size: match c.asked.size {
            Ok(i) => {
                let count = ids(c.asked.available).len().max(1);
                i.index(count) as i32 + 1
            }
            Err(size) => size,
        },
    };
    let preference = prefer(&inventory, &claims, &request);
    if let Ok(p) = &preference {
        for (pod, problem) in &p.problems {
            let _ = (pod, problem.metric_label(), problem.to_string());
        }
        p.outcome.metric_label();
        container_response(&p.devices, &strategies);
    }
    Verdict::from(&preference)
}
