//! gputopo's own slice: how a node's GPUs and NICs are wired, as DRA device
//! attributes a stock kube-scheduler can match.
//!
//! NVIDIA's driver says nothing of NVLink, and attributes added to a
//! driver's slice by anyone else are undone by the driver's own
//! controller, which rewrites a slice whose devices differ from its own.
//! So the agent publishes a slice of its own driver
//! ([`LINK_DRIVER`]) with one *link device* per GPU and per NIC. A link
//! device carries its GPU's identity under the GPU driver's own attribute
//! names (`gpu.nvidia.com/uuid`, `resource.kubernetes.io/pciBusID`; for a
//! NIC, dranet's `dra.net/rdmaDevice`), so a claim pairs each GPU with its
//! link device by `matchAttribute` on that name, and then constrains the
//! link devices (`island`, `pcieSwitch`, `numaNode`, `rail`). Link devices
//! allow several allocations: they stand for wiring, not for a resource.
//!
//! What each attribute means (all under `topology.gputopo.dev`):
//!
//! * `type`: `gpu` or `nic`; `index` (GPU) or `name` (NIC).
//! * `island` (int): GPUs every pair of which is joined by NVLink (or AMD
//!   xGMI), directly or through NVSwitch: the fabric's connected
//!   components, where a component is not fully joined (DGX-1's hybrid
//!   cube mesh) cut greedily into fully joined groups in index order.
//! * `clique` (string): `<cluster uuid>.<clique id>` where the GPU's fabric
//!   reports one (multi-node NVLink, GB200/GB300 NVL72).
//! * `pcieSwitch` (string): devices joined by PCIe switches only (`PIX`,
//!   `PXB`) in the link matrix, GPU to GPU and GPU to NIC. An NVLinked pair
//!   hides its PCIe path in the matrix, so such GPUs share a `pcieSwitch`
//!   only through a NIC both reach by switches.
//! * `numaNode` (int): where known.
//! * `rail` (string): the NIC a GPU should use, named as the NIC's `name`:
//!   the NICs of its `pcieSwitch` shared out in order among its GPUs, else
//!   the NIC it reaches best through its host bridge (`PHB`) or better;
//!   absent when every NIC is farther. A NIC's `rail` is its own name.

use super::{node_local_slice, standard_bus_id};
use gputopo_api::{GpuTopologySpec, GpuVendor, LinkType};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The driver name of gputopo's link devices.
pub const LINK_DRIVER: &str = "topology.gputopo.dev";

/// gputopo's slice for `node`: one link device per GPU and per NIC of
/// `spec` (`gpu-<index>`, `nic-<position>`).
pub fn link_resource_slice(node: &str, spec: &GpuTopologySpec) -> Value {
    node_local_slice(node, LINK_DRIVER, link_devices(spec))
}

/// The link devices of `spec`, GPUs by index, then NICs in order.
pub fn link_devices(spec: &GpuTopologySpec) -> Vec<Value> {
    let islands = full_islands(spec);
    let switches = pcie_switches(spec);
    let rails = rails(spec, &switches);
    let vendor_domain = match spec.vendor {
        Some(GpuVendor::Amd) => "gpu.amd.com",
        _ => "gpu.nvidia.com",
    };
    let mut devices = Vec::new();
    for g in &spec.gpus {
        let mut a = json!({
            "type": {"string": "gpu"},
            "index": {"int": g.index},
            "island": {"int": islands[&g.index]},
            "pcieSwitch": {"string": switches[&Member::Gpu(g.index)]},
        });
        if let Some(uuid) = &g.uuid {
            a[format!("{vendor_domain}/uuid")] = json!({"string": uuid});
        }
        if let Some(bus) = &g.pci_bus_id {
            a["resource.kubernetes.io/pciBusID"] = json!({"string": standard_bus_id(bus)});
        }
        if let Some(n) = g.numa_node.filter(|n| *n >= 0) {
            a["numaNode"] = json!({"int": n});
        }
        if let Some(f) = &g.fabric
            && let (Some(cluster), Some(clique)) = (&f.cluster_uuid, f.clique_id)
        {
            a["clique"] = json!({"string": format!("{cluster}.{clique}")});
        }
        if let Some(rail) = rails.get(&g.index) {
            a["rail"] = json!({"string": rail});
        }
        devices.push(link_device(format!("gpu-{}", g.index), a));
    }
    for (i, nic) in spec.nics.iter().enumerate() {
        let mut a = json!({
            "type": {"string": "nic"},
            "name": {"string": nic.name},
            "dra.net/rdmaDevice": {"string": nic.name},
            "pcieSwitch": {"string": switches[&Member::Nic(i)]},
            "rail": {"string": nic.name},
        });
        if let Some(n) = nic.numa_node.filter(|n| *n >= 0) {
            a["numaNode"] = json!({"int": n});
        }
        devices.push(link_device(format!("nic-{i}"), a));
    }
    devices
}

fn link_device(name: String, attributes: Value) -> Value {
    json!({"name": name, "attributes": attributes, "allowMultipleAllocations": true})
}

fn is_fabric(t: LinkType) -> bool {
    matches!(t, LinkType::Nv | LinkType::Xgmi)
}

/// GPU index → island number: fully joined groups, greedily in index order.
fn full_islands(spec: &GpuTopologySpec) -> BTreeMap<u32, usize> {
    let joined = |a: u32, b: u32| {
        spec.links
            .iter()
            .any(|l| (l.a, l.b) == (a.min(b), a.max(b)) && is_fabric(l.link_type))
    };
    let mut order: Vec<u32> = spec.gpus.iter().map(|g| g.index).collect();
    order.sort_unstable();
    let mut out = BTreeMap::new();
    let mut next = 0;
    for &g in &order {
        if out.contains_key(&g) {
            continue;
        }
        let mut group = vec![g];
        for &h in &order {
            if !out.contains_key(&h) && !group.contains(&h) && group.iter().all(|&m| joined(m, h)) {
                group.push(h);
            }
        }
        for m in group {
            out.insert(m, next);
        }
        next += 1;
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Member {
    Gpu(u32),
    Nic(usize),
}

fn through_switches(t: LinkType) -> bool {
    matches!(t, LinkType::Pix | LinkType::Pxb)
}

/// Every GPU and NIC → its PCIe switch group's name (`switch-<n>`,
/// numbered in order of each group's first member, GPUs first).
fn pcie_switches(spec: &GpuTopologySpec) -> BTreeMap<Member, String> {
    let mut members: Vec<Member> = spec.gpus.iter().map(|g| Member::Gpu(g.index)).collect();
    members.sort_unstable();
    members.extend((0..spec.nics.len()).map(Member::Nic));
    let at = |m: Member| members.iter().position(|x| *x == m);
    let mut parent: Vec<usize> = (0..members.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut join = |a: Option<usize>, b: Option<usize>| {
        if let (Some(a), Some(b)) = (a, b) {
            let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
            parent[ra.max(rb)] = ra.min(rb);
        }
    };
    for l in spec.links.iter().filter(|l| through_switches(l.link_type)) {
        join(at(Member::Gpu(l.a)), at(Member::Gpu(l.b)));
    }
    for (i, nic) in spec.nics.iter().enumerate() {
        for l in nic
            .gpu_links
            .iter()
            .filter(|l| through_switches(l.link_type))
        {
            join(at(Member::Nic(i)), at(Member::Gpu(l.gpu)));
        }
    }
    let mut names: BTreeMap<usize, String> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        let r = root(&mut parent, i);
        let n = names.len();
        let name = names.entry(r).or_insert_with(|| format!("switch-{n}"));
        out.insert(*m, name.clone());
    }
    out
}

/// GPU index → the name of its rail NIC, where it has one.
fn rails(spec: &GpuTopologySpec, switches: &BTreeMap<Member, String>) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    let mut gpus: Vec<u32> = spec.gpus.iter().map(|g| g.index).collect();
    gpus.sort_unstable();
    // The NICs of each switch group shared out in order among its GPUs.
    let mut seen_in_group: BTreeMap<&str, usize> = BTreeMap::new();
    for &g in &gpus {
        let group = switches[&Member::Gpu(g)].as_str();
        let nics: Vec<&str> = spec
            .nics
            .iter()
            .enumerate()
            .filter(|(i, _)| switches[&Member::Nic(*i)] == group)
            .map(|(_, n)| n.name.as_str())
            .collect();
        if nics.is_empty() {
            continue;
        }
        let k = seen_in_group.entry(group).or_default();
        out.insert(g, nics[*k % nics.len()].to_string());
        *k += 1;
    }
    // Else the NIC it reaches best, through its host bridge or better.
    for &g in &gpus {
        if out.contains_key(&g) {
            continue;
        }
        let best = spec
            .nics
            .iter()
            .filter_map(|n| {
                let l = n.gpu_links.iter().find(|l| l.gpu == g)?;
                (l.link_type >= LinkType::Phb).then_some((l.link_type, n.name.as_str()))
            })
            // The best link; among equals, the first NIC.
            .fold(None::<(LinkType, &str)>, |best, c| match best {
                Some(b) if b.0 >= c.0 => Some(b),
                _ => Some(c),
            });
        if let Some((_, name)) = best {
            out.insert(g, name.to_string());
        }
    }
    out
}
