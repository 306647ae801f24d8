//! The device model: node-local ResourceSlices of every driver, per node;
//! the configured GPU drivers' devices mapped to GPU indices of the node's
//! `GpuTopology`, other drivers' devices (IMEX channels, NICs) kept as they
//! are published; and which devices are busy, from every ResourceClaim's
//! `status.allocation`.

use super::capacity::{self, Amounts};
use super::counters::{consumptions, pool_counters};
use super::device::{DeviceId, DraDevice, claim_key};
use super::node_devices::{DraWarning, NodeDevices};
use super::place::place;
use crate::snapshot::Snapshot;
use gputopo_api::GpuTopology;
use gputopo_api::k8s_openapi::api::resource::v1::DeviceRequestAllocationResult;
use gputopo_api::k8s_openapi::api::resource::v1::{
    Device, DeviceTaintRule, ResourceClaim, ResourceSlice,
};
use std::collections::{BTreeMap, BTreeSet};

/// NVIDIA's DRA driver for GPUs (`k8s-dra-driver-gpu`).
pub const NVIDIA_GPU_DRIVER: &str = "gpu.nvidia.com";

/// Which DRA drivers publish GPUs gputopo places by topology (other
/// drivers' devices are allocated as upstream's allocator does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraConfig {
    /// Driver names, e.g. `gpu.nvidia.com` (the default).
    pub drivers: Vec<String>,
}

impl Default for DraConfig {
    fn default() -> DraConfig {
        DraConfig {
            drivers: vec![NVIDIA_GPU_DRIVER.to_string()],
        }
    }
}

impl DraConfig {
    pub fn handles(&self, driver: &str) -> bool {
        self.drivers.iter().any(|d| d == driver)
    }
}

/// Every node's devices and the busy ones: the DRA half of a snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DraInventory {
    pub config: DraConfig,
    nodes: BTreeMap<String, NodeDevices>,
    /// Allocated devices (admin access excluded, as upstream), with the claim holding each.
    busy: BTreeMap<DeviceId, String>,
    /// Per driver and pool, the node publishing it: finds a device without
    /// looking through every node.
    pool_nodes: BTreeMap<String, BTreeMap<String, String>>,
    /// Per shared device (`allowMultipleAllocations`), the capacity its
    /// allocations consume.
    shares: BTreeMap<DeviceId, Amounts>,
    /// Results taken so far (claim, device, request, share): a claim seen
    /// both in the watch and in the scheduler's assume cache counts once.
    taken: BTreeSet<(String, DeviceId, String, Option<String>)>,
    /// One placed GPU per driver and product: what tells whether a device
    /// class selects GPUs at all ([`DraInventory::gpu_samples`]).
    gpu_samples: Vec<DraDevice>,
    /// Per node, GPUs the scheduler's snapshot holds by other means (a
    /// device-plugin pod, a gang's reservation, a preemptor's nomination):
    /// not candidates for a claim either.
    held: BTreeMap<String, u32>,
    /// Devices of slices that are not node-local (not allocated yet).
    unread: Vec<DraDevice>,
    pub warnings: Vec<DraWarning>,
}

/// Slices of one pool, newest generation only.
struct PoolSlices<'a> {
    generation: i64,
    slices: Vec<&'a ResourceSlice>,
}

impl DraInventory {
    /// Reads the slices of every driver, places each device of a configured
    /// GPU driver on its node's `GpuTopology` (`topologies`, named after
    /// their nodes), and marks the devices every claim's
    /// `status.allocation` holds as busy.
    ///
    /// As upstream: only the newest generation of a pool counts; a pool whose
    /// slice count differs from `resourceSliceCount` is incomplete and a pool
    /// with a duplicate device name invalid, and neither is used. Only
    /// node-local slices (`spec.nodeName`) are read: `allNodes`, `nodeSelector`
    /// and `perDeviceNodeSelection` slices publish devices reachable from many
    /// nodes, which have no place in one node's GPU topology.
    pub fn build<'a>(
        config: &DraConfig,
        slices: impl IntoIterator<Item = &'a ResourceSlice>,
        topologies: impl IntoIterator<Item = &'a GpuTopology>,
        claims: impl IntoIterator<Item = &'a ResourceClaim>,
    ) -> DraInventory {
        let mut inv = DraInventory {
            config: config.clone(),
            ..DraInventory::default()
        };
        let pools = newest_pools(slices, &mut inv.warnings, &mut inv.unread);
        inv.add_pools(pools);
        inv.place_devices(topologies);
        inv.mark_busy(claims);
        inv
    }

    /// Each usable pool's devices, under the pool's node; an incomplete or
    /// invalid pool is a warning and leaves its node unusable for `All`.
    fn add_pools(&mut self, pools: BTreeMap<(String, String), PoolSlices<'_>>) {
        for ((driver, pool), group) in pools {
            let pool_id = format!("{driver}/{pool}");
            let first = &group.slices[0].spec;
            let node = first.node_name.clone().unwrap_or_default();
            if let Some(reason) = pool_problem(&group) {
                self.refuse_pool(&node, &pool_id, reason);
                continue;
            }
            let devices: Vec<&Device> = group
                .slices
                .iter()
                .flat_map(|s| s.spec.devices.iter().flatten())
                .collect();
            let gpu_driver = self.config.handles(&driver);
            let sets = match pool_counters(&group.slices, &devices) {
                Ok(sets) => sets,
                Err(error) => {
                    self.refuse_pool(&node, &pool_id, error.to_string());
                    continue;
                }
            };
            self.pool_nodes
                .entry(driver.clone())
                .or_default()
                .insert(pool.clone(), node.clone());
            let entry = self.node_entry(&node);
            for (set, values) in sets {
                entry
                    .counters
                    .declare((driver.clone(), pool.clone(), set), values);
            }
            for device in devices {
                entry
                    .devices
                    .push(dra_device(&driver, &pool, device, gpu_driver));
            }
        }
    }

    /// Devices of the slices not read (not node-local), so that a request
    /// only they could serve is refused saying so.
    pub fn unread(&self) -> &[DraDevice] {
        &self.unread
    }

    /// A pool not used: a warning, and its node unusable for `All`.
    fn refuse_pool(&mut self, node: &str, pool_id: &str, reason: String) {
        self.node_entry(node)
            .unusable_pools
            .push(format!("{pool_id}: {reason}"));
        self.warnings.push(DraWarning::UnusablePool {
            pool: pool_id.to_string(),
            reason,
        });
    }

    /// Each node's devices sorted and placed on its topology's GPU indices.
    fn place_devices<'a>(&mut self, topologies: impl IntoIterator<Item = &'a GpuTopology>) {
        let topo_by_node: BTreeMap<&str, &GpuTopology> = topologies
            .into_iter()
            .map(|t| {
                let name = t.metadata.name.as_deref().unwrap_or(&t.spec.node_name);
                (name, t)
            })
            .collect();

        let mut warnings = Vec::new();
        for (name, node) in &mut self.nodes {
            node.devices.sort_by(|a, b| a.id.cmp(&b.id));
            place(
                node,
                topo_by_node.get(name.as_str()).copied(),
                &mut warnings,
            );
        }
        self.warnings.extend(warnings);
        let mut seen = BTreeSet::new();
        for d in self.nodes.values().flat_map(|n| &n.devices) {
            if d.gpu.is_some()
                && seen.insert((d.id.driver.clone(), d.string_attribute("productName")))
            {
                self.gpu_samples.push(d.clone());
            }
        }
    }

    /// One placed GPU per driver and product, for telling whether a device
    /// class selects GPUs.
    pub fn gpu_samples(&self) -> &[DraDevice] {
        &self.gpu_samples
    }

    /// Devices in any claim's `status.allocation` (admin access excluded,
    /// as upstream) are busy, and so are the counter sets they consume.
    fn mark_busy<'a>(&mut self, claims: impl IntoIterator<Item = &'a ResourceClaim>) {
        for claim in claims {
            let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
                continue;
            };
            let results: Vec<DeviceRequestAllocationResult> = allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
                .cloned()
                .collect();
            self.take(&claim_key(claim), &results);
        }
    }

    /// Marks a claim's allocated devices as taken: an exclusive device busy
    /// (and its counters consumed); a shared device's consumed capacity
    /// added to its shares (its counters consumed by the first share, as
    /// upstream skips the counter check for a device already in use).
    /// Admin-access results take nothing, as upstream.
    fn take(&mut self, claim: &str, results: &[DeviceRequestAllocationResult]) {
        for result in results {
            if result.admin_access == Some(true) {
                continue;
            }
            let id = DeviceId {
                driver: result.driver.clone(),
                pool: result.pool.clone(),
                device: result.device.clone(),
            };
            let seen = (
                claim.to_string(),
                id.clone(),
                result.request.clone(),
                result.share_id.clone(),
            );
            if !self.taken.insert(seen) {
                continue;
            }
            let shared = result.share_id.is_some() || self.find(&id).is_some_and(|(_, d)| d.multi);
            if shared {
                let amounts: Amounts = result
                    .consumed_capacity
                    .iter()
                    .flatten()
                    .filter_map(|(name, q)| {
                        let v = gputopo_api::quantity::parse_bytes(&q.0).ok()?;
                        Some((name.clone(), v as i128))
                    })
                    .collect();
                let first = !self.shares.contains_key(&id);
                capacity::add(self.shares.entry(id.clone()).or_default(), &amounts);
                if first {
                    self.consume(&id);
                }
            } else if self.busy.insert(id.clone(), claim.to_string()).is_none() {
                self.consume(&id);
            }
        }
    }

    /// What a shared device's allocations consume, if any.
    pub fn shared(&self, id: &DeviceId) -> Option<&Amounts> {
        self.shares.get(id)
    }

    /// Takes what device `id` consumes from its pool's counter sets.
    fn consume(&mut self, id: &DeviceId) {
        let Some(node) = self.node_of(id).map(str::to_string) else {
            return;
        };
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        let consumes = n.device(id).map(|d| d.consumes.clone()).unwrap_or_default();
        if !consumes.is_empty() {
            n.counters.consume(&id.driver, &id.pool, &consumes);
        }
    }

    /// The node publishing `id`'s pool.
    fn node_of(&self, id: &DeviceId) -> Option<&str> {
        self.pool_nodes
            .get(&id.driver)?
            .get(&id.pool)
            .map(String::as_str)
    }

    /// Adds each `DeviceTaintRule`'s taint to the devices it selects, as
    /// upstream's slice tracker (`resourceslice/tracker`, 1.37) patches
    /// slices for kube-scheduler: the selector's driver, pool and device
    /// must match where set (an empty selector taints every device), and a
    /// rule without a selector taints none. A rule being deleted still
    /// applies until it is gone, as upstream's.
    pub fn apply_taint_rules<'a>(&mut self, rules: impl IntoIterator<Item = &'a DeviceTaintRule>) {
        for rule in rules {
            let Some(selector) = rule.spec.device_selector.as_ref() else {
                continue;
            };
            let want =
                |field: &Option<String>, value: &str| field.as_ref().is_none_or(|f| f == value);
            for node in self.nodes.values_mut() {
                for d in &mut node.devices {
                    if want(&selector.driver, &d.id.driver)
                        && want(&selector.pool, &d.id.pool)
                        && want(&selector.device, &d.id.device)
                    {
                        d.taints.push(rule.spec.taint.clone());
                    }
                }
            }
        }
    }

    fn node_entry(&mut self, node: &str) -> &mut NodeDevices {
        self.nodes
            .entry(node.to_string())
            .or_insert_with(|| NodeDevices::empty(node))
    }

    /// A node's devices; `None` when no usable slice names it.
    pub fn node(&self, node: &str) -> Option<&NodeDevices> {
        self.nodes.get(node)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &NodeDevices> {
        self.nodes.values()
    }

    /// The node and device for an id, wherever it is published.
    pub fn find(&self, id: &DeviceId) -> Option<(&str, &DraDevice)> {
        let n = self.nodes.get(self.node_of(id)?)?;
        n.device(id).map(|d| (n.node.as_str(), d))
    }

    /// The claim (`namespace/name`) holding `id`, if any.
    pub fn holder(&self, id: &DeviceId) -> Option<&str> {
        self.busy.get(id).map(String::as_str)
    }

    /// Allocated, or no longer fitting its pool's counters (a MIG partition
    /// in use keeps the whole GPU out, and the reverse).
    pub fn is_busy(&self, device: &DraDevice) -> bool {
        let counters_full = || {
            !device.consumes.is_empty()
                && !self
                    .node_of(&device.id)
                    .and_then(|n| self.nodes.get(n))
                    .is_some_and(|n| {
                        n.counters
                            .fits(&device.id.driver, &device.id.pool, &device.consumes)
                    })
        };
        if device.multi {
            // Shared: only its counters can keep the first share out.
            return !self.shares.contains_key(&device.id) && counters_full();
        }
        self.busy.contains_key(&device.id) || counters_full()
    }

    /// GPUs of `node` that no claim may take now, whatever the claims say
    /// (see [`DraInventory::hold`]).
    pub fn held_on(&self, node: &str) -> u32 {
        self.held.get(node).copied().unwrap_or(0)
    }

    /// Sets the GPUs of `node` held outside DRA (replacing what was held).
    pub fn hold(&mut self, node: &str, gpus: u32) {
        if gpus == 0 {
            self.held.remove(node);
        } else {
            self.held.insert(node.to_string(), gpus);
        }
    }

    /// Per node, the GPUs each holder (a claim's `namespace/name`) has
    /// allocated: on a DRA node the claims are the truth, so the cycle
    /// holds these GPUs in its snapshot whoever allocated them.
    pub fn busy_gpus(&self) -> BTreeMap<&str, Vec<(&str, u32)>> {
        let mut out: BTreeMap<&str, BTreeMap<&str, u32>> = BTreeMap::new();
        for n in self.nodes.values() {
            for d in &n.devices {
                // A partition in use holds the GPU it is part of.
                let Some(gpu) = d.gpu.or(d.parent_gpu) else {
                    continue;
                };
                if d.gpu.is_none() && !self.busy.contains_key(&d.id) {
                    continue;
                }
                let holder = match self.busy.get(&d.id) {
                    Some(claim) => claim.as_str(),
                    None if self.is_busy(d) => "a shared counter set",
                    None => continue,
                };
                *out.entry(n.node.as_str())
                    .or_default()
                    .entry(holder)
                    .or_default() |= 1 << gpu;
            }
        }
        out.into_iter()
            .map(|(node, claims)| (node, claims.into_iter().collect()))
            .collect()
    }

    /// Marks a claim's devices busy, as a snapshot adds a bound pod: the
    /// caller's assume cache after writing an allocation.
    pub fn assume_allocated(&mut self, claim: &str, results: &[DeviceRequestAllocationResult]) {
        self.take(claim, results);
    }
}

/// Node-local slices, grouped by pool, keeping only each pool's newest
/// generation; other slices are a warning.
fn newest_pools<'a>(
    slices: impl IntoIterator<Item = &'a ResourceSlice>,
    warnings: &mut Vec<DraWarning>,
    unread: &mut Vec<DraDevice>,
) -> BTreeMap<(String, String), PoolSlices<'a>> {
    let mut pools: BTreeMap<(String, String), PoolSlices<'a>> = BTreeMap::new();
    for slice in slices {
        let spec = &slice.spec;
        let name = slice.metadata.name.clone().unwrap_or_default();
        let node_local = spec.node_name.as_deref().is_some_and(|n| !n.is_empty());
        if !node_local || spec.per_device_node_selection == Some(true) {
            let what = if spec.all_nodes == Some(true) {
                "allNodes"
            } else if spec.node_selector.is_some() {
                "nodeSelector"
            } else if spec.per_device_node_selection == Some(true) {
                "perDeviceNodeSelection"
            } else {
                "no node selection"
            };
            warnings.push(DraWarning::UnsupportedSlice {
                slice: name,
                reason: format!(
                    "{what}: only node-local slices (spec.nodeName) are read; devices reachable from many nodes are not allocated by gputopo"
                ),
            });
            unread.extend(
                spec.devices
                    .iter()
                    .flatten()
                    .map(|d| dra_device(&spec.driver, &spec.pool.name, d, false)),
            );
            continue;
        }
        let key = (spec.driver.clone(), spec.pool.name.clone());
        let entry = pools.entry(key).or_insert(PoolSlices {
            generation: spec.pool.generation,
            slices: Vec::new(),
        });
        if spec.pool.generation < entry.generation {
            continue;
        }
        if spec.pool.generation > entry.generation {
            entry.generation = spec.pool.generation;
            entry.slices.clear();
        }
        entry.slices.push(slice);
    }
    pools
}

/// Sets every node's held GPUs in `inventory` to those `snapshot` does not
/// have free: bound and assumed pods, reservations, nominations. Called
/// before each decision, as the snapshot changes within a cycle.
pub fn hold_snapshot(inventory: &mut DraInventory, snapshot: &Snapshot) {
    for node in snapshot.nodes() {
        inventory.hold(node.name(), node.gpus() & !node.free_gpus());
    }
}

fn pool_problem(group: &PoolSlices<'_>) -> Option<String> {
    let first = &group.slices[0].spec;
    let want = first.pool.resource_slice_count;
    let have = group.slices.len() as i64;
    if have != want {
        return Some(format!(
            "incomplete: {have} of {want} slices of generation {} (the driver is updating it)",
            group.generation
        ));
    }
    if group
        .slices
        .iter()
        .any(|s| s.spec.node_name != first.node_name)
    {
        return Some("its slices name different nodes".to_string());
    }
    let mut names = BTreeSet::new();
    for device in group
        .slices
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
    {
        if !names.insert(device.name.as_str()) {
            return Some(format!("duplicate device name {}", device.name));
        }
    }
    None
}

/// One published device as the inventory holds it.
fn dra_device(driver: &str, pool: &str, device: &Device, gpu_driver: bool) -> DraDevice {
    let mut d = DraDevice {
        id: DeviceId {
            driver: driver.to_string(),
            pool: pool.to_string(),
            device: device.name.clone(),
        },
        gpu_driver,
        gpu: None,
        attributes: device.attributes.clone().unwrap_or_default(),
        capacity: device.capacity.clone().unwrap_or_default(),
        taints: device.taints.clone().unwrap_or_default(),
        consumes: consumptions(device),
        partition: false,
        parent_gpu: None,
        multi: device.allow_multiple_allocations == Some(true),
        binding_conditions: device.binding_conditions.clone().unwrap_or_default(),
        binding_failure_conditions: device
            .binding_failure_conditions
            .clone()
            .unwrap_or_default(),
    };
    d.partition = gpu_driver && !d.multi && d.string_attribute("type").is_some_and(|t| t != "gpu");
    d
}
