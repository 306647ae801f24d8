//! [`simulate`]: one run of a policy over the arrival plan, from the initial
//! state to the [`SimResult`] (see the protocol in [`super`]).

use super::books::{Books, Ctx, advance, fail, free_mask, place_unit};
use super::domains::Domains;
use super::frag::FragModel;
use super::policy::{self, PolicyKind};
use super::rng::{node_order, streams};
use super::{
    Order, Point, SimCluster, SimError, SimOptions, SimResult, State, TopologyMetrics, Workload,
    World, arrival_plan,
};
use gputopo_scheduler_core::gpuset::{self, NodeShape};
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Runs one simulation: the starting state, then each arrival unit in turn
/// (pods ending and queued units starting before it, in arrival order),
/// sampled every 10 % of the cluster's GPUs arrived, then the queue drained.
pub fn simulate(
    cluster: &SimCluster,
    workload: &Workload,
    options: &SimOptions,
) -> Result<SimResult, SimError> {
    let started = std::time::Instant::now();
    let total_gpus: u32 = cluster.nodes.iter().map(|n| n.gpus).sum();
    if total_gpus == 0 {
        return Err(SimError::NoGpus);
    }
    let total_milli = u64::from(total_gpus) * 1000;
    let (pods, units) = arrival_plan(workload, total_milli, options)?;
    // The target workload is the trace as given, before inflation (the
    // copies are drawn from it; the FGD simulator computes it first).
    let typical = Arc::new(policy::target_workload(
        &workload.pods,
        &cluster.models,
        options.popularity_pct,
    )?);
    let frag = FragModel::new(typical.clone(), &cluster.models);
    let n = cluster.nodes.len();
    let mut world = starting_world(cluster, &frag, options.seed);
    let (_, mut rng) = streams(options.seed);
    // `gputopo` is told the workload's distribution through its
    // configuration, as an operator would set it.
    let target = match options.policy {
        PolicyKind::Gputopo if cluster.config.target_workload.is_none() => Some(typical.clone()),
        _ => None,
    };
    let mut policy = policy::Policy::new(options.policy, cluster, target, &world.node_order)?;
    let policy_name = options.policy.name();
    let progress = progress_bar(options, units.len());
    let mut result = empty_result(options, n, total_gpus, frag.types);
    let wiring = Wiring::of(cluster, n);
    let mut books = open_books(&world, &wiring, pods.len(), options.order);
    let ctx = Ctx {
        pods: &pods,
        gangs: &workload.gangs,
        shapes: &wiring.shapes,
        leaves: &wiring.leaves,
        policy_name,
    };
    let mut arrived: u64 = 0;
    let mut next_point = 10u32;
    let mut waiting: Vec<usize> = Vec::new();
    for (u, unit) in units.iter().enumerate() {
        if let Some(bar) = &progress
            && u % 256 == 0
        {
            bar.set_position(u as u64);
        }
        let now = pods[unit[0]].arrival;
        if books.queue {
            advance(
                &ctx,
                &units,
                now,
                &mut world,
                &mut policy,
                &mut rng,
                &mut books,
                &mut waiting,
                &mut result,
            )?;
        }
        for &p in unit {
            result.pods_arrived += 1;
            arrived += pods[p].demand();
        }
        match place_unit(&ctx, unit, &mut world, &mut policy, &mut rng)? {
            Some(placed) => books.commit(&ctx, unit, placed, now, &mut result),
            None if books.queue => waiting.push(u),
            None => fail(&ctx, unit, &mut result),
        }
        sample(&wiring, &world, &mut books);
        // One point per 10 % of the cluster's GPUs arrived, up to 130 %.
        while next_point <= 130 && arrived * 100 >= u64::from(next_point) * total_milli {
            result.points.push(Point {
                arrived_pct: next_point,
                gpu_allocation_pct: round4(pct(books.allocated, total_milli)),
                fragmented_gpu_pct: round4(fragmented_pct(&world, total_milli)),
                full_nvlink_slots8: wiring.slots8(&world),
            });
            next_point += 10;
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    result.arrived_gpu_pct = round4(pct(arrived, total_milli));
    result.final_gpu_allocation_pct = round4(pct(books.allocated, total_milli));
    result.final_fragmented_gpu_pct = round4(fragmented_pct(&world, total_milli));
    at_last_arrival(&wiring, &world, &mut books);
    if books.queue {
        let mut rest = Rest {
            world: &mut world,
            policy: &mut policy,
            rng: &mut rng,
            books: &mut books,
        };
        drain_queue(&ctx, &units, &mut rest, waiting, &mut result)?;
    }
    if wiring.known {
        result.topology = Some(summarize_topology(&mut books.topo));
    }
    result.whole_domains_free = wiring.domains.summary(&books.domains);
    if !options.omit_runtime {
        result.runtime_ms = Some(started.elapsed().as_millis() as u64);
    }
    Ok(result)
}

/// The cluster after its initial pods, each node's fragmentation computed.
fn starting_world<'a>(cluster: &'a SimCluster, frag: &'a FragModel, seed: u64) -> World<'a> {
    let n = cluster.nodes.len();
    let mut world = World {
        nodes: &cluster.nodes,
        models: &cluster.models,
        frag,
        state: initial_state(cluster),
        node_order: node_order(seed, n),
    };
    for i in 0..n {
        world.state.frag[i] = frag.node(&world.state.free(i, cluster.nodes[i].model));
    }
    world
}

/// The books before any pod arrived: what the initial pods hold.
fn open_books(world: &World<'_>, wiring: &Wiring, pods: usize, order: Order) -> Books {
    Books {
        allocated: allocated_milli(&world.state),
        running: vec![None; pods],
        endings: BinaryHeap::new(),
        seq: 0,
        queue_times: Vec::new(),
        makespan: None,
        topo: TopologyMetrics {
            full_nvlink_slots8_at_start: wiring.slots8(world).unwrap_or(0),
            ..TopologyMetrics::default()
        },
        domains: wiring.domains.open(world),
        queue: order == Order::Arrival,
    }
}

/// Each node's free CPU, memory and GPU share after the cluster's initial pods.
fn initial_state(cluster: &SimCluster) -> State {
    let n = cluster.nodes.len();
    let mut state = State {
        cpu_left: Vec::with_capacity(n),
        mem_left: Vec::with_capacity(n),
        gpu_left: Vec::with_capacity(n),
        classes: vec![Vec::new(); n],
        frag: vec![0.0; n],
    };
    for (i, node) in cluster.nodes.iter().enumerate() {
        let used = cluster.initial.get(i).cloned().unwrap_or_default();
        state
            .cpu_left
            .push(node.cpu_milli.saturating_sub(used.cpu_milli));
        state
            .mem_left
            .push(node.memory_mib.saturating_sub(used.memory_mib));
        state.gpu_left.push(
            (0..node.gpus as usize)
                .map(|g| 1000u32.saturating_sub(used.gpu_milli.get(g).copied().unwrap_or(0)))
                .collect(),
        );
    }
    state
}

/// Thousandths of a GPU in use across the cluster.
fn allocated_milli(state: &State) -> u64 {
    state
        .gpu_left
        .iter()
        .flatten()
        .map(|&l| u64::from(1000 - l))
        .sum()
}

/// `--progress`: a bar over the arrival units.
fn progress_bar(options: &SimOptions, units: usize) -> Option<indicatif::ProgressBar> {
    options.progress.then(|| {
        let bar = indicatif::ProgressBar::new(units as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{bar:40}] {pos}/{len} units {elapsed}<{eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_prefix(format!("{} seed {}", options.policy.name(), options.seed));
        bar
    })
}

/// The result before any pod arrived.
fn empty_result(
    options: &SimOptions,
    nodes: usize,
    total_gpus: u32,
    typical_pod_types: usize,
) -> SimResult {
    SimResult {
        policy: options.policy.name().to_string(),
        seed: options.seed,
        cluster: String::new(),
        workload: String::new(),
        inflate: options.inflate,
        order: options.order,
        nodes,
        total_gpus,
        typical_pod_types,
        points: Vec::new(),
        pods_arrived: 0,
        pods_placed: 0,
        pods_failed: 0,
        gpu_pods_failed: 0,
        pods_ended: 0,
        gangs_placed: 0,
        gangs_failed: 0,
        arrived_gpu_pct: 0.0,
        final_gpu_allocation_pct: 0.0,
        final_fragmented_gpu_pct: 0.0,
        queue_time_p50_s: None,
        queue_time_p99_s: None,
        makespan_s: None,
        topology: None,
        whole_domains_free: Vec::new(),
        runtime_ms: None,
    }
}

/// The nodes' wiring, where the cluster's snapshot knows it: GPU shapes,
/// each node's leaf of the network tiers, and the network domains.
struct Wiring {
    shapes: Vec<Option<Arc<NodeShape>>>,
    leaves: Vec<Option<String>>,
    domains: Domains,
    /// Whether any node has a shape (the topology metrics are kept then).
    known: bool,
}

impl Wiring {
    fn of(cluster: &SimCluster, n: usize) -> Wiring {
        let shapes: Vec<Option<Arc<NodeShape>>> = if cluster.snapshot.len() == n {
            cluster
                .snapshot
                .nodes()
                .map(|v| v.shape().cloned())
                .collect()
        } else {
            vec![None; n]
        };
        let leaf_key = cluster.snapshot.tiers().keys().last().cloned();
        let leaves = cluster
            .snapshot
            .nodes()
            .map(|v| {
                leaf_key
                    .as_deref()
                    .and_then(|k| v.label(k))
                    .map(str::to_string)
            })
            .collect();
        let known = shapes.iter().any(Option::is_some);
        Wiring {
            shapes,
            leaves,
            domains: Domains::of(cluster),
            known,
        }
    }

    /// Free all-NVLink 8-GPU sets across the cluster; `None` without wiring.
    fn slots8(&self, world: &World<'_>) -> Option<u64> {
        self.known.then(|| {
            self.shapes
                .iter()
                .enumerate()
                .filter_map(|(i, shape)| {
                    let shape = shape.as_ref()?;
                    Some(u64::from(gpuset::full_nvlink_slots(
                        shape,
                        free_mask(&world.state.gpu_left[i]),
                        8,
                    )))
                })
                .sum()
        })
    }
}

/// One sample just after a unit arrived: the whole free network domains,
/// and in queue mode the free 8-GPU NVLink sets.
fn sample(wiring: &Wiring, world: &World<'_>, books: &mut Books) {
    wiring.domains.sample(world, &mut books.domains);
    if books.queue
        && let Some(slots) = wiring.slots8(world)
    {
        let topo = &mut books.topo;
        topo.slots_sum += slots;
        topo.slots_samples += 1;
        topo.full_nvlink_slots8_min =
            Some(topo.full_nvlink_slots8_min.map_or(slots, |m| m.min(slots)));
    }
}

/// What the last arrival left: free 8-GPU NVLink sets and whole domains.
fn at_last_arrival(wiring: &Wiring, world: &World<'_>, books: &mut Books) {
    if let Some(slots) = wiring.slots8(world) {
        books.topo.full_nvlink_slots8_at_end = slots;
    }
    wiring.domains.close(world, &mut books.domains);
}

/// `milli` thousandths of a GPU as a percentage of the cluster's.
fn pct(milli: u64, total_milli: u64) -> f64 {
    milli as f64 * 100.0 / total_milli as f64
}

/// The fragmented GPU share as a percentage of the cluster's GPUs.
fn fragmented_pct(world: &World<'_>, total_milli: u64) -> f64 {
    world.state.frag.iter().sum::<f64>() * 100.0 / total_milli as f64
}

/// What the queue drain moves: the cluster, the policy and its randomness,
/// and the books.
struct Rest<'r, 'w> {
    world: &'r mut World<'w>,
    policy: &'r mut policy::Policy,
    rng: &'r mut rand_chacha::ChaCha8Rng,
    books: &'r mut Books,
}

/// Past the last arrival: pods end, and queued units start as room appears;
/// what still waits when nothing is left to end fails. Then the queue times.
fn drain_queue(
    ctx: &Ctx<'_>,
    units: &[Vec<usize>],
    rest: &mut Rest<'_, '_>,
    mut waiting: Vec<usize>,
    result: &mut SimResult,
) -> Result<(), SimError> {
    advance(
        ctx,
        units,
        f64::INFINITY,
        rest.world,
        rest.policy,
        rest.rng,
        rest.books,
        &mut waiting,
        result,
    )?;
    for u in waiting.drain(..) {
        fail(ctx, &units[u], result);
    }
    let mut q = std::mem::take(&mut rest.books.queue_times);
    q.sort_by(f64::total_cmp);
    result.queue_time_p50_s = percentile(&q, 50.0).map(round4);
    result.queue_time_p99_s = percentile(&q, 99.0).map(round4);
    result.makespan_s = rest.books.makespan.map(round4);
    Ok(())
}

/// The topology metrics' means, taken out of the books.
fn summarize_topology(t: &mut TopologyMetrics) -> TopologyMetrics {
    if t.multi_gpu_pods > 0 {
        t.on_optimal_set_pct = Some(round4(t.optimal as f64 * 100.0 / t.multi_gpu_pods as f64));
        t.mean_bottleneck_rank = Some(round4(t.rank_sum as f64 / t.multi_gpu_pods as f64));
    }
    if t.slots_samples > 0 {
        t.full_nvlink_slots8_mean = Some(round4(t.slots_sum as f64 / t.slots_samples as f64));
    }
    std::mem::take(t)
}

/// The `pct` percentile of sorted values (nearest rank); `None` when empty.
fn percentile(sorted: &[f64], pct: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Four decimals: enough for the figures, and stable text across platforms.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}
