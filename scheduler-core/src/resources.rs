//! Resource amounts as the kube-scheduler's `NodeResourcesFit` sees them: a
//! node's allocatable, what its pods request, and a pending pod's effective
//! request (containers summed, init containers by their maximum, sidecars
//! added, pod overhead on top).
//!
//! Quantities are read exactly (decimal mantissa, SI, binary and exponent
//! suffixes) and rounded up, as `resource.Quantity.Value()` and
//! `MilliValue()` do, so a request never reads smaller than the kubelet
//! will count it.

use gputopo_api::k8s_openapi::api::core::v1::{Container, PodSpec};
use gputopo_api::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use gputopo_api::keys::RESOURCE_GPU;
use std::collections::BTreeMap;
use std::fmt;

/// `cpu`, in thousandths of a core.
pub const CPU: &str = "cpu";
/// `memory`, in bytes.
pub const MEMORY: &str = "memory";
/// `ephemeral-storage`, in bytes.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods`: how many pods the kubelet admits.
pub const PODS: &str = "pods";
/// The prefix of MIG slice resources (`nvidia.com/mig-1g.10gb`) under the
/// device plugin's `mixed` strategy: a pod asking for one may use MIG GPUs.
pub const MIG_PREFIX: &str = "nvidia.com/mig-";

/// The amount an allocatable resource reads when a node does not list it and
/// it is one every kubelet reports (`cpu`, `memory`, `ephemeral-storage`,
/// `pods`): not limited. Real nodes always list them; hand-written snapshots
/// may leave them out. Any other resource a node does not list is 0.
pub const UNLIMITED: i64 = i64::MAX;

/// What was wrong with a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field}: {value:?} is not a quantity ({reason}); accepted: a number with an optional suffix, such as 500m, 2, 1.5, 64Gi, 100M or 1e9"
)]
pub struct QuantityError {
    /// Where the quantity was read: `containers[main].resources.requests.cpu`.
    pub field: String,
    pub value: String,
    pub reason: &'static str,
}

/// A quantity in thousandths of its unit, rounded up; `reason` on failure.
///
/// Grammar (Kubernetes `resource.Quantity`): `<digits>[.<digits>]` then one
/// of `n u m "" k M G T P E`, `Ki Mi Gi Ti Pi Ei`, or `e<int>` / `E<int>`.
/// Negative amounts are refused: no request or capacity is below zero.
pub fn parse_milli(value: &str) -> Result<i128, &'static str> {
    let s = value.trim();
    if s.is_empty() {
        return Err("empty");
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return Err("negative");
    }
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return Err("no digits");
    }
    if frac.contains('.') {
        return Err("two decimal points");
    }
    let (binary, decimal): (u32, i32) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        other => {
            let exponent = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or("unknown suffix")?;
            let digits = exponent
                .strip_prefix('-')
                .or_else(|| exponent.strip_prefix('+'))
                .unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err("unknown suffix");
            }
            let e: i32 = exponent.parse().map_err(|_| "exponent out of range")?;
            if !(-40..=40).contains(&e) {
                return Err("exponent out of range");
            }
            (0, e)
        }
    };
    let digits: String = int.chars().chain(frac.chars()).collect();
    let digits = digits.trim_start_matches('0');
    if digits.len() > 36 {
        return Err("too many digits");
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| "too many digits")?
    };
    let scaled = mantissa.checked_mul(1i128 << binary).ok_or("too large")?;
    // milli = mantissa · 2^binary · 10^(decimal + 3 − fraction digits)
    let exponent = decimal + 3 - frac.len() as i32;
    if exponent >= 0 {
        let factor = 10i128.checked_pow(exponent as u32).ok_or("too large")?;
        scaled.checked_mul(factor).ok_or("too large")
    } else {
        match 10i128.checked_pow(exponent.unsigned_abs()) {
            // 10^39 and up exceeds every mantissa: any non-zero amount rounds up to 1.
            None => Ok(i128::from(scaled > 0)),
            Some(divisor) => Ok((scaled + divisor - 1) / divisor),
        }
    }
}

/// Reads `value` as `field` and returns its amount in the resource's unit:
/// thousandths of a core for `cpu`, whole units (bytes, devices) for the rest,
/// rounded up.
pub fn parse_amount(field: &str, resource: &str, value: &str) -> Result<i64, QuantityError> {
    let err = |reason| QuantityError {
        field: field.to_string(),
        value: value.to_string(),
        reason,
    };
    let milli = parse_milli(value).map_err(err)?;
    let amount = if resource == CPU {
        milli
    } else {
        (milli + 999) / 1000
    };
    i64::try_from(amount).map_err(|_| err("too large"))
}

/// Amounts of resources: allocatable on a node, requested by a pod, or summed
/// over a node's pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_milli: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Pods (the `pods` resource): 1 for a pod's request.
    pub pods: i64,
    /// Whole `nvidia.com/gpu` devices as the device plugin counts them (with
    /// time-slicing, replicas).
    pub gpus: i64,
    /// Every other resource (hugepages, MIG slices, RDMA devices), sorted by name,
    /// no duplicates, no zero amounts.
    pub extended: Vec<(String, i64)>,
}

impl Resources {
    /// The allocatable of a node that lists nothing: the four resources every
    /// kubelet reports [`UNLIMITED`], everything else 0.
    pub fn unlimited() -> Resources {
        Resources {
            cpu_milli: UNLIMITED,
            memory: UNLIMITED,
            ephemeral_storage: UNLIMITED,
            pods: UNLIMITED,
            ..Resources::default()
        }
    }

    /// A node's allocatable from its resource list: the four resources every
    /// kubelet reports are [`UNLIMITED`] when absent; others are 0.
    pub fn allocatable<'a>(
        list: impl IntoIterator<Item = (&'a str, &'a str)>,
        context: &str,
    ) -> Result<Resources, QuantityError> {
        Resources::unlimited().with_list(list, context)
    }

    /// Amounts from a resource list; absent resources are 0.
    pub fn from_list<'a>(
        list: impl IntoIterator<Item = (&'a str, &'a str)>,
        context: &str,
    ) -> Result<Resources, QuantityError> {
        Resources::default().with_list(list, context)
    }

    /// These amounts with every resource of `list` set from its quantity;
    /// errors name the field `context.<resource>`.
    fn with_list<'a>(
        mut self,
        list: impl IntoIterator<Item = (&'a str, &'a str)>,
        context: &str,
    ) -> Result<Resources, QuantityError> {
        for (name, value) in list {
            let amount = parse_amount(&format!("{context}.{name}"), name, value)?;
            self.set(name, amount);
        }
        Ok(self)
    }

    /// The amount of `name` (0 for an extended resource not listed).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu_milli,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            RESOURCE_GPU => self.gpus,
            _ => self
                .extended
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .map_or(0, |i| self.extended[i].1),
        }
    }

    /// Sets the amount of `name`; an extended resource set to 0 is dropped.
    pub fn set(&mut self, name: &str, amount: i64) {
        match name {
            CPU => self.cpu_milli = amount,
            MEMORY => self.memory = amount,
            EPHEMERAL_STORAGE => self.ephemeral_storage = amount,
            PODS => self.pods = amount,
            RESOURCE_GPU => self.gpus = amount,
            _ => match self
                .extended
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
            {
                Ok(i) if amount == 0 => {
                    self.extended.remove(i);
                }
                Ok(i) => self.extended[i].1 = amount,
                Err(_) if amount == 0 => {}
                Err(i) => self.extended.insert(i, (name.to_string(), amount)),
            },
        }
    }

    /// Every resource with its amount, the named ones first (0s included).
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.cpu_milli),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
            (PODS, self.pods),
            (RESOURCE_GPU, self.gpus),
        ]
        .into_iter()
        .chain(self.extended.iter().map(|(n, a)| (n.as_str(), *a)))
    }

    /// Adds `other` amount by amount (saturating).
    pub fn add(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_add);
    }

    /// Takes `other` away amount by amount (saturating).
    pub fn subtract(&mut self, other: &Resources) {
        self.combine(other, i64::saturating_sub);
    }

    /// The larger of the two, amount by amount.
    pub fn max_with(&mut self, other: &Resources) {
        self.combine(other, i64::max);
    }

    fn combine(&mut self, other: &Resources, op: impl Fn(i64, i64) -> i64) {
        self.cpu_milli = op(self.cpu_milli, other.cpu_milli);
        self.memory = op(self.memory, other.memory);
        self.ephemeral_storage = op(self.ephemeral_storage, other.ephemeral_storage);
        self.pods = op(self.pods, other.pods);
        self.gpus = op(self.gpus, other.gpus);
        for (name, amount) in &other.extended {
            let mine = self.get(name);
            self.set(name, op(mine, *amount));
        }
    }

    /// Whether the pod asks for any MIG slice (`nvidia.com/mig-*`).
    pub fn wants_mig(&self) -> bool {
        self.extended
            .iter()
            .any(|(n, a)| n.starts_with(MIG_PREFIX) && *a > 0)
    }
}

/// An amount as `kubectl` would show it: `1500m` / `2` for cpu, `64Gi` for bytes.
pub fn format_amount(resource: &str, amount: i64) -> String {
    if amount == UNLIMITED {
        return "unlimited".to_string();
    }
    match resource {
        CPU if amount % 1000 == 0 => (amount / 1000).to_string(),
        CPU => format!("{amount}m"),
        MEMORY | EPHEMERAL_STORAGE => {
            const UNITS: [(&str, i64); 5] = [
                ("Pi", 1 << 50),
                ("Ti", 1 << 40),
                ("Gi", 1 << 30),
                ("Mi", 1 << 20),
                ("Ki", 1 << 10),
            ];
            UNITS
                .iter()
                .find(|(_, size)| amount >= *size && amount % size == 0)
                .map_or_else(
                    || amount.to_string(),
                    |(unit, size)| format!("{}{unit}", amount / size),
                )
        }
        _ => amount.to_string(),
    }
}

/// A pod's effective request, as the scheduler counts it
/// (`k8s.io/component-helpers/resource.PodRequests`):
///
/// * each container's requests, where a resource has a limit but no request
///   the limit (the API server's defaulting, which a pod read from a file has
///   not been through);
/// * the sum over containers, plus restartable init containers (sidecars,
///   `restartPolicy: Always`) which run alongside them;
/// * at least each regular init container plus the sidecars started before it;
/// * pod-level requests (`spec.resources.requests`, PodLevelResources, on
///   since 1.34) in place of that sum for the resources they may name: cpu,
///   memory and `hugepages-*` (others there are not pod-level resources and
///   are not read, as upstream);
/// * plus `overhead` (RuntimeClass), and one `pods`.
pub fn pod_requests(spec: &PodSpec) -> Result<Resources, QuantityError> {
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(&container_requests(c, "containers")?);
    }
    let mut sidecars = Resources::default();
    let mut init_max = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c, "initContainers")?;
        if c.restart_policy.as_deref() == Some("Always") {
            sum.add(&r);
            sidecars.add(&r);
            init_max.max_with(&sidecars);
        } else {
            let mut with_sidecars = r;
            with_sidecars.add(&sidecars);
            init_max.max_with(&with_sidecars);
        }
    }
    sum.max_with(&init_max);
    let pod_level = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    for (name, q) in pod_level.into_iter().flatten() {
        if name == CPU || name == MEMORY || name.starts_with("hugepages-") {
            let field = format!("resources.requests.{name}");
            sum.set(name, parse_amount(&field, name, &q.0)?);
        }
    }
    if let Some(overhead) = &spec.overhead {
        sum.add(&Resources::from_list(
            overhead.iter().map(|(k, v)| (k.as_str(), v.0.as_str())),
            "overhead",
        )?);
    }
    sum.pods = 1;
    Ok(sum)
}

/// One container's requests, limits standing in for absent requests.
fn container_requests(c: &Container, list: &str) -> Result<Resources, QuantityError> {
    let empty = BTreeMap::new();
    let resources = c.resources.as_ref();
    let requests: &BTreeMap<String, Quantity> = resources
        .and_then(|r| r.requests.as_ref())
        .unwrap_or(&empty);
    let limits: &BTreeMap<String, Quantity> =
        resources.and_then(|r| r.limits.as_ref()).unwrap_or(&empty);
    let mut r = Resources::default();
    for (name, q) in requests {
        let field = format!("{list}[{}].resources.requests.{name}", c.name);
        r.set(name, parse_amount(&field, name, &q.0)?);
    }
    for (name, q) in limits {
        if requests.contains_key(name) {
            continue;
        }
        let field = format!("{list}[{}].resources.limits.{name}", c.name);
        r.set(name, parse_amount(&field, name, &q.0)?);
    }
    Ok(r)
}

impl fmt::Display for Resources {
    /// `cpu=2, memory=64Gi, nvidia.com/gpu=4`: the non-zero, limited amounts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, amount) in self.iter() {
            if amount == 0 || amount == UNLIMITED {
                continue;
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{name}={}", format_amount(name, amount))?;
        }
        if first {
            f.write_str("nothing")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_exactly_and_round_up() {
        let cases: &[(&str, i128)] = &[
            ("2", 2000),
            ("500m", 500),
            ("1.5", 1500),
            ("0.1", 100),
            (".5", 500),
            ("1Ki", 1_024_000),
            ("64Gi", 64 * (1i128 << 30) * 1000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("100M", 100_000_000_000),
            ("1k", 1_000_000),
            ("1n", 1),
            ("0", 0),
            ("0.0001m", 1),
            ("+3", 3000),
            ("1056482492Ki", 1_056_482_492 * 1024 * 1000),
        ];
        for (text, milli) in cases {
            assert_eq!(parse_milli(text), Ok(*milli), "{text}");
        }
        assert_eq!(parse_amount("f", CPU, "250m"), Ok(250));
        assert_eq!(parse_amount("f", MEMORY, "1.5Ki"), Ok(1536));
        assert_eq!(parse_amount("f", MEMORY, "1m"), Ok(1));
    }

    #[test]
    fn bad_quantities_name_the_field() {
        for bad in ["", "-1", "abc", "1.2.3", "5 Gi", "1Qi", "1e", "1e99", "."] {
            let e = parse_amount("containers[a].resources.requests.cpu", CPU, bad).unwrap_err();
            assert!(e.to_string().contains("containers[a]"), "{e}");
        }
    }

    /// PodLevelResources: the pod-level cpu, memory and hugepages requests
    /// stand for the containers' sum; extended resources stay the
    /// containers'; overhead still adds on top.
    #[test]
    fn pod_level_requests_replace_the_containers_sum_for_cpu_memory_and_hugepages() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "resources": {"requests": {"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "1Gi"},
                          "limits": {"cpu": "8"}},
            "overhead": {"cpu": "250m"},
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi",
                    "example.com/nic": "1"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ]
        }))
        .expect("a pod spec");
        let r = pod_requests(&spec).expect("readable");
        assert_eq!(r.cpu_milli, 4250, "pod-level cpu plus overhead");
        assert_eq!(r.memory, 8 << 30);
        assert_eq!(r.get("hugepages-2Mi"), 1 << 30);
        assert_eq!(r.get("example.com/nic"), 1, "not a pod-level resource");
        assert_eq!(r.gpus, 2);
        // Without pod-level requests, the containers' sum.
        let mut plain = spec.clone();
        plain.resources = None;
        let r = pod_requests(&plain).expect("readable");
        assert_eq!((r.cpu_milli, r.memory), (1250, 1 << 30));
    }

    #[test]
    fn resources_arithmetic_keeps_extended_sorted() {
        let mut a = Resources::from_list([("cpu", "1"), ("b/x", "2"), ("a/y", "1")], "r").unwrap();
        let b = Resources::from_list([("cpu", "500m"), ("b/x", "3")], "r").unwrap();
        a.add(&b);
        assert_eq!(a.cpu_milli, 1500);
        assert_eq!(a.extended, vec![("a/y".into(), 1), ("b/x".into(), 5)]);
        a.subtract(&b);
        assert_eq!(a.get("b/x"), 2);
        assert_eq!(format_amount(MEMORY, 64 << 30), "64Gi");
        assert_eq!(format_amount(CPU, 1500), "1500m");
    }
}
