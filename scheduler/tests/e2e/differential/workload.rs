//! The seeded stream of pods: plain pods, anti-affinity groups (some across
//! namespaces by an empty `namespaceSelector`), spread groups over zones or
//! hostnames, caches with followers bound to them by required affinity,
//! host-port pods, and pods whose `WaitForFirstConsumer` claim has one
//! local volume on one node. The same seed gives the same stream for both
//! schedulers; only the names of nodes and namespaces differ.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};

/// One pod of the stream, before it is given a scheduler and a node group.
#[derive(Clone, Debug)]
pub struct PodSpec {
    pub name: String,
    /// `a` or `b`: which of the run's two namespaces.
    pub namespace: &'static str,
    pub labels: Value,
    pub gpus: u32,
    /// Merged into the pod's spec (affinity, spread, ports, volumes).
    pub extra: Value,
    /// A claim to create first, with its local volume on this node index.
    pub local_volume: Option<usize>,
}

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const HOST: &str = "kubernetes.io/hostname";
pub const ZONES: usize = 3;
pub const PORTS: [i32; 3] = [18080, 18081, 18082];

/// At least `pods` pods for a cluster of `nodes` nodes.
pub fn stream(seed: u64, pods: usize, nodes: usize) -> Vec<PodSpec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out: Vec<PodSpec> = Vec::new();
    let mut unit = 0;
    while out.len() < pods {
        unit += 1;
        let app = format!("u{unit}");
        let ns = if below(&mut rng, 2) == 0 { "a" } else { "b" };
        let gpus = [0, 0, 1, 2][below(&mut rng, 4)];
        let pod = |i: usize, labels: Value, gpus: u32, extra: Value| PodSpec {
            name: format!("{app}-{i}"),
            namespace: ns,
            labels,
            gpus,
            extra,
            local_volume: None,
        };
        match below(&mut rng, 100) {
            0..35 => out.push(pod(0, json!({"app": app}), gpus, json!({}))),
            35..50 => {
                // One per node; an empty namespaceSelector reaches both namespaces.
                let mut term =
                    json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST});
                if below(&mut rng, 2) == 0 {
                    term["namespaceSelector"] = json!({});
                }
                let extra = json!({"affinity": {"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [term]}}});
                for i in 0..2 + below(&mut rng, 3) {
                    out.push(pod(i, json!({"app": app}), gpus.min(1), extra.clone()));
                }
            }
            50..65 => {
                let key = if below(&mut rng, 2) == 0 { ZONE } else { HOST };
                let extra = json!({"topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": app}}}]});
                for i in 0..3 + below(&mut rng, 4) {
                    out.push(pod(i, json!({"app": app}), gpus.min(1), extra.clone()));
                }
            }
            65..75 => {
                let key = if below(&mut rng, 2) == 0 { ZONE } else { HOST };
                out.push(pod(0, json!({"app": app, "role": "cache"}), 0, json!({})));
                let extra = json!({"affinity": {"podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"app": app, "role": "cache"}},
                        "topologyKey": key}]}}});
                for i in 1..=1 + below(&mut rng, 3) {
                    out.push(pod(
                        i,
                        json!({"app": app, "role": "follower"}),
                        gpus.min(1),
                        extra.clone(),
                    ));
                }
            }
            75..88 => {
                let port = PORTS[below(&mut rng, PORTS.len())];
                let extra = json!({"containers": [{"name": "main", "image": "registry.invalid/serve:1",
                    "ports": [{"containerPort": port, "hostPort": port, "protocol": "TCP"}],
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]});
                out.push(pod(0, json!({"app": app}), gpus, extra));
            }
            _ => {
                let mut p = pod(
                    0,
                    json!({"app": app}),
                    gpus,
                    json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{app}")}}]}),
                );
                p.local_volume = Some(below(&mut rng, nodes));
                out.push(p);
            }
        }
    }
    out
}

fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}
