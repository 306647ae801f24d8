//! Consumable capacity (`exactly.capacity.requests`, devices with
//! `allowMultipleAllocations`), as upstream's allocator computes it
//! (`consumable_capacity.go`):
//!
//! * per capacity of the device, the amount a request consumes: what it
//!   asks, rounded up by the capacity's `requestPolicy` (`validRange`: to
//!   `min`, then to `min + k·step`; `validValues`: to the first value not
//!   below it); a capacity it does not ask takes the policy's `default`,
//!   else the whole value;
//! * a device is refused when the request names a capacity it lacks, when
//!   an amount breaks the policy (above `max`, off the step, not a valid
//!   value; the `default` always passes), or when what its allocations
//!   already consume plus this exceeds the capacity's value.
//!
//! A device without `allowMultipleAllocations` is allocated whole; the same
//! check then only asks that its capacity covers the request.

use super::device::DraDevice;
use gputopo_api::k8s_openapi::api::resource::v1::{CapacityRequestPolicy, DeviceCapacity};
use std::collections::BTreeMap;

/// Capacity name to amount, in a quantity's base units.
pub type Amounts = BTreeMap<String, i128>;

fn value(q: &str) -> Option<i128> {
    gputopo_api::quantity::parse_bytes(q)
        .ok()
        .map(|v| v as i128)
}

/// The device's capacity `name` (a request may name it qualified with the
/// driver's domain, as attributes are).
fn lookup<'a>(device: &'a DraDevice, name: &str) -> Option<(&'a String, &'a DeviceCapacity)> {
    if let Some(kv) = device.capacity.get_key_value(name) {
        return Some(kv);
    }
    let (domain, bare) = name.split_once('/')?;
    (domain == device.id.driver)
        .then(|| device.capacity.get_key_value(bare))
        .flatten()
}

/// What `requested` (a request's `capacity.requests`) consumes of each of
/// the device's capacities, or `None` when the device cannot serve it
/// (a capacity it lacks, an amount its policy refuses, an unreadable
/// quantity).
pub fn consumed(device: &DraDevice, requested: &Amounts) -> Option<Amounts> {
    let mut asked: BTreeMap<&String, i128> = BTreeMap::new();
    for (name, amount) in requested {
        let (key, _) = lookup(device, name)?;
        asked.insert(key, *amount);
    }
    let mut out = Amounts::new();
    for (name, cap) in &device.capacity {
        let policy = cap.request_policy.as_ref();
        let amount = match asked.get(name) {
            None => match policy.and_then(|p| p.default.as_ref()) {
                Some(default) => value(&default.0)?,
                None => value(&cap.value.0)?,
            },
            Some(&asked) => match policy {
                None => asked,
                Some(p) => round_up(asked, p)?,
            },
        };
        if let Some(p) = policy
            && violates(amount, p)?
        {
            return None;
        }
        out.insert(name.clone(), amount);
    }
    Some(out)
}

fn round_up(asked: i128, policy: &CapacityRequestPolicy) -> Option<i128> {
    if let Some(range) = &policy.valid_range {
        let min = value(&range.min.0)?;
        if asked < min {
            return Some(min);
        }
        return Some(match &range.step {
            None => asked,
            Some(step) => {
                let step = value(&step.0)?.max(1);
                let added = asked - min;
                min + step * (added / step + i128::from(added % step != 0))
            }
        });
    }
    if let Some(values) = &policy.valid_values {
        for v in values {
            let v = value(&v.0)?;
            if asked <= v {
                return Some(v);
            }
        }
    }
    Some(asked)
}

/// `Some(true)` when `amount` breaks the policy.
fn violates(amount: i128, policy: &CapacityRequestPolicy) -> Option<bool> {
    if let Some(default) = &policy.default
        && value(&default.0)? == amount
    {
        return Some(false);
    }
    if let Some(range) = &policy.valid_range {
        if let Some(max) = &range.max
            && amount > value(&max.0)?
        {
            return Some(true);
        }
        if let Some(step) = &range.step {
            let step = value(&step.0)?.max(1);
            return Some((amount - value(&range.min.0)?) % step != 0);
        }
        return Some(false);
    }
    match &policy.valid_values {
        Some(values) if !values.is_empty() => {
            for v in values {
                if value(&v.0)? == amount {
                    return Some(false);
                }
            }
            Some(true)
        }
        _ => Some(false),
    }
}

/// Whether `taking` fits the device beside what its allocations already
/// consume (`in_use`, for a shared device).
pub fn fits(device: &DraDevice, in_use: Option<&Amounts>, taking: &Amounts) -> bool {
    taking.iter().all(|(name, amount)| {
        let used = in_use.and_then(|u| u.get(name)).copied().unwrap_or(0);
        device
            .capacity
            .get(name)
            .and_then(|c| value(&c.value.0))
            .is_some_and(|total| used + amount <= total)
    })
}

/// Adds `b` into `a`.
pub fn add(a: &mut Amounts, b: &Amounts) {
    for (name, amount) in b {
        *a.entry(name.clone()).or_default() += amount;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::device::DeviceId;
    use serde_json::json;

    fn device(capacity: serde_json::Value) -> DraDevice {
        DraDevice {
            id: DeviceId {
                driver: "dra.net".into(),
                pool: "p".into(),
                device: "nic".into(),
            },
            gpu_driver: false,
            gpu: None,
            attributes: Default::default(),
            capacity: serde_json::from_value(capacity).expect("capacity"),
            taints: vec![],
            consumes: vec![],
            partition: false,
            parent_gpu: None,
            multi: true,
            binding_conditions: vec![],
            binding_failure_conditions: vec![],
        }
    }

    fn ask(pairs: &[(&str, i128)]) -> Amounts {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    const GI: i128 = 1 << 30;

    #[test]
    fn a_range_rounds_up_to_min_then_to_the_step() {
        let d = device(json!({"bandwidth": {"value": "100Gi", "requestPolicy": {
            "default": "1Gi", "validRange": {"min": "1Gi", "max": "40Gi", "step": "2Gi"}}}}));
        assert_eq!(
            consumed(&d, &ask(&[])),
            Some(ask(&[("bandwidth", GI)])),
            "the default"
        );
        assert_eq!(
            consumed(&d, &ask(&[("bandwidth", 1)])),
            Some(ask(&[("bandwidth", GI)])),
            "up to min"
        );
        assert_eq!(
            consumed(&d, &ask(&[("bandwidth", 4 * GI)])),
            Some(ask(&[("bandwidth", 5 * GI)])),
            "1Gi + 2Gi·2"
        );
        assert_eq!(
            consumed(&d, &ask(&[("bandwidth", 41 * GI)])),
            None,
            "above max"
        );
        assert_eq!(
            consumed(&d, &ask(&[("dra.net/bandwidth", 3 * GI)])),
            Some(ask(&[("bandwidth", 3 * GI)]))
        );
        assert_eq!(
            consumed(&d, &ask(&[("memory", 1)])),
            None,
            "a capacity it lacks"
        );
    }

    #[test]
    fn valid_values_round_up_and_unpolicied_capacities_take_everything_unasked() {
        let d = device(json!({
            "vfs": {"value": "8", "requestPolicy": {"validValues": ["1", "2", "4"]}},
            "queues": {"value": "64"},
        }));
        let taken = consumed(&d, &ask(&[("vfs", 3)])).expect("3 rounds to 4");
        assert_eq!(taken, ask(&[("vfs", 4), ("queues", 64)]));
        assert_eq!(
            consumed(&d, &ask(&[("vfs", 5)])),
            None,
            "no valid value covers 5"
        );
        assert!(fits(&d, None, &taken));
        assert!(
            !fits(&d, Some(&ask(&[("queues", 1)])), &taken),
            "65 of 64 queues"
        );
    }
}
