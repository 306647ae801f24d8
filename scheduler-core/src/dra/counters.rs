//! Partitionable devices (shared counters): a pool's counter sets, what
//! allocated devices consume from them, and whether more devices fit.
//!
//! As upstream's allocator: a device fits when, for every counter of every
//! set it consumes from, what allocated devices (and the devices chosen in
//! this decision) consume plus its own stays within the set's value; and
//! devices consuming from one set are co-allocated only where their
//! `compatibilityGroups` share a group (none with none). NVIDIA's dynamic
//! MIG publishes one set per GPU: the whole GPU consumes every counter, a
//! MIG partition its slices of memory and compute, so a partition in use
//! keeps the whole GPU from being allocated and the reverse.

use gputopo_api::k8s_openapi::api::resource::v1::{Counter, Device, ResourceSlice};
use std::collections::{BTreeMap, BTreeSet};

/// `(driver, pool, counter set)`.
pub type SetKey = (String, String, String);

/// What one device consumes from one counter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumption {
    pub set: String,
    /// Counter name to amount (a quantity's base units: bytes, counts).
    pub counters: BTreeMap<String, i128>,
    /// `compatibilityGroups`: empty means none.
    pub groups: BTreeSet<String>,
}

/// One counter set's state.
#[derive(Clone, Debug, Default, PartialEq)]
struct SetState {
    available: BTreeMap<String, i128>,
    /// The groups every consumer so far shares; `None` before the first.
    groups: Option<BTreeSet<String>>,
}

/// Every pool's counter sets, less what is consumed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    sets: BTreeMap<SetKey, SetState>,
}

impl Counters {
    /// Declares a set with its counters' values.
    pub fn declare(&mut self, key: SetKey, counters: BTreeMap<String, i128>) {
        self.sets.insert(
            key,
            SetState {
                available: counters,
                groups: None,
            },
        );
    }

    /// Whether the set exists and has every counter named.
    pub fn knows(&self, key: &SetKey, counters: &BTreeMap<String, i128>) -> bool {
        self.sets
            .get(key)
            .is_some_and(|s| counters.keys().all(|c| s.available.contains_key(c)))
    }

    /// Whether a device of `driver`/`pool` consuming `consumes` fits now.
    pub fn fits(&self, driver: &str, pool: &str, consumes: &[Consumption]) -> bool {
        consumes.iter().all(|c| {
            let key = (driver.to_string(), pool.to_string(), c.set.clone());
            let Some(state) = self.sets.get(&key) else {
                return false;
            };
            let amounts_fit = c
                .counters
                .iter()
                .all(|(name, amount)| state.available.get(name).is_some_and(|a| a >= amount));
            amounts_fit && compatible(state.groups.as_ref(), &c.groups)
        })
    }

    /// Takes a device's consumption (after [`Counters::fits`]); an unknown
    /// set is ignored (the pool was refused when read).
    pub fn consume(&mut self, driver: &str, pool: &str, consumes: &[Consumption]) {
        for c in consumes {
            let key = (driver.to_string(), pool.to_string(), c.set.clone());
            let Some(state) = self.sets.get_mut(&key) else {
                continue;
            };
            for (name, amount) in &c.counters {
                if let Some(a) = state.available.get_mut(name) {
                    *a -= amount;
                }
            }
            state.groups = Some(match state.groups.take() {
                None => c.groups.clone(),
                Some(g) => g.intersection(&c.groups).cloned().collect(),
            });
        }
    }

    /// Whether any consumption is taken from `key`.
    pub fn in_use(&self, key: &SetKey) -> bool {
        self.sets.get(key).is_some_and(|s| s.groups.is_some())
    }
}

/// Why a pool's counters cannot be used (the pool is then not used, as
/// upstream refuses an invalid pool).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    #[error("counter {counter}: {error}")]
    Quantity { counter: String, error: String },
    #[error("duplicate counter set name {0}")]
    DuplicateSet(String),
    #[error("device {device} consumes from counter set {set}, which the pool does not declare")]
    UnknownSet { device: String, set: String },
    #[error("device {device} consumes counter {counter}, not in counter set {set}")]
    UnknownCounter {
        device: String,
        counter: String,
        set: String,
    },
}

/// A counter's value in base units, or why it cannot be read.
fn amount(name: &str, c: &Counter) -> Result<i128, CounterError> {
    gputopo_api::quantity::parse_bytes(&c.value.0)
        .map(|v| v as i128)
        .map_err(|e| CounterError::Quantity {
            counter: name.to_string(),
            error: e.to_string(),
        })
}

/// The pool's counter sets (from every slice of the pool: in 1.35+ they sit
/// in slices of their own), checked as upstream checks a pool: set names
/// unique, every counter a quantity, every device's consumption naming a
/// set and counters the pool declares. `Err` is why the pool is not used.
pub(super) fn pool_counters(
    slices: &[&ResourceSlice],
    devices: &[&Device],
) -> Result<BTreeMap<String, BTreeMap<String, i128>>, CounterError> {
    let mut sets: BTreeMap<String, BTreeMap<String, i128>> = BTreeMap::new();
    for set in slices
        .iter()
        .flat_map(|s| s.spec.shared_counters.iter().flatten())
    {
        let values = set
            .counters
            .iter()
            .map(|(name, c)| Ok((name.clone(), amount(name, c)?)))
            .collect::<Result<_, CounterError>>()?;
        if sets.insert(set.name.clone(), values).is_some() {
            return Err(CounterError::DuplicateSet(set.name.clone()));
        }
    }
    for d in devices {
        for c in d.consumes_counters.iter().flatten() {
            let Some(set) = sets.get(&c.counter_set) else {
                return Err(CounterError::UnknownSet {
                    device: d.name.clone(),
                    set: c.counter_set.clone(),
                });
            };
            for (name, counter) in &c.counters {
                if !set.contains_key(name) {
                    return Err(CounterError::UnknownCounter {
                        device: d.name.clone(),
                        counter: name.clone(),
                        set: c.counter_set.clone(),
                    });
                }
                amount(name, counter)?;
            }
        }
    }
    Ok(sets)
}

/// What `device` consumes, read (its pool passed [`pool_counters`]).
pub(super) fn consumptions(device: &Device) -> Vec<Consumption> {
    device
        .consumes_counters
        .iter()
        .flatten()
        .map(|c| Consumption {
            set: c.counter_set.clone(),
            counters: c
                .counters
                .iter()
                .filter_map(|(name, v)| Some((name.clone(), amount(name, v).ok()?)))
                .collect(),
            groups: c.compatibility_groups.iter().flatten().cloned().collect(),
        })
        .collect()
}

/// Whether a device with `groups` may join consumers sharing `current`:
/// no groups joins only no groups; groups join where one is shared.
fn compatible(current: Option<&BTreeSet<String>>, groups: &BTreeSet<String>) -> bool {
    match current {
        None => true,
        Some(c) if c.is_empty() || groups.is_empty() => c.is_empty() && groups.is_empty(),
        Some(c) => c.intersection(groups).next().is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumption(set: &str, counters: &[(&str, i128)], groups: &[&str]) -> Consumption {
        Consumption {
            set: set.into(),
            counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn gpu_set() -> Counters {
        let mut c = Counters::default();
        c.declare(
            ("d".into(), "p".into(), "gpu-0".into()),
            [("memory-slice-0".to_string(), 1), ("sm".to_string(), 98)].into(),
        );
        c
    }

    #[test]
    fn consumption_adds_up_to_the_counters_value() {
        let mut c = gpu_set();
        let part = [consumption("gpu-0", &[("sm", 42)], &[])];
        assert!(c.fits("d", "p", &part));
        c.consume("d", "p", &part);
        assert!(c.fits("d", "p", &part), "84 of 98");
        c.consume("d", "p", &part);
        assert!(!c.fits("d", "p", &part), "126 of 98");
        let whole = [consumption(
            "gpu-0",
            &[("sm", 98), ("memory-slice-0", 1)],
            &[],
        )];
        assert!(
            !c.fits("d", "p", &whole),
            "a partition in use keeps the whole out"
        );
    }

    #[test]
    fn compatibility_groups_must_intersect_and_none_joins_only_none() {
        let mut c = gpu_set();
        c.consume("d", "p", &[consumption("gpu-0", &[("sm", 1)], &["a", "b"])]);
        assert!(c.fits("d", "p", &[consumption("gpu-0", &[("sm", 1)], &["b"])]));
        assert!(!c.fits("d", "p", &[consumption("gpu-0", &[("sm", 1)], &["c"])]));
        assert!(!c.fits("d", "p", &[consumption("gpu-0", &[("sm", 1)], &[])]));
        let mut none = gpu_set();
        none.consume("d", "p", &[consumption("gpu-0", &[("sm", 1)], &[])]);
        assert!(none.fits("d", "p", &[consumption("gpu-0", &[("sm", 1)], &[])]));
        assert!(!none.fits("d", "p", &[consumption("gpu-0", &[("sm", 1)], &["a"])]));
    }

    #[test]
    fn an_unknown_set_never_fits() {
        let c = gpu_set();
        assert!(!c.fits("d", "p", &[consumption("gpu-9", &[("sm", 1)], &[])]));
    }
}
