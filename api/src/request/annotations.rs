//! The `gputopo.dev/` annotations of a pod as
//! [`GpuRequest::parse`](super::GpuRequest::parse) reads them:
//! the known keys, aliases folded in, and each value's accepted forms and parser.

use super::{GpuShare, RequestError};
use crate::keys::pod as key;
use crate::quantity;
use std::collections::BTreeMap;

pub(super) const KNOWN_KEYS: [&str; 23] = [
    key::MIN_NVLINK_LEVEL,
    key::COLLECTIVE,
    key::WORKLOAD,
    key::PLACEMENT_STRATEGY,
    key::PREFERRED_DOMAIN,
    key::GPU_MEMORY,
    key::LATENCY_SENSITIVE,
    key::GPU_SHARE,
    key::CHECKPOINT_TIME,
    key::EXPECTED_COMPLETION,
    key::NETWORK_BANDWIDTH,
    key::GPU_COUNT,
    key::GANG,
    key::GANG_SIZE,
    key::GANG_MIXED_MODELS,
    key::DERIVE_GANG,
    key::GANG_REQUIRED_TOPOLOGY,
    key::GANG_PREFERRED_TOPOLOGY,
    key::GANG_SLICE_SIZE,
    key::GANG_SLICE_REQUIRED_TOPOLOGY,
    key::GANG_SLICE_PREFERRED_TOPOLOGY,
    key::ASSIGNED_GPUS,
    key::ASSIGNED_GPU_UUIDS,
];

pub(super) const ACCEPT_NVLINK: &str = "an NVLink count 1..=64, as `8` or `NV8`";
pub(super) const ACCEPT_COLLECTIVE: &str = "ring | all-to-all";
pub(super) const ACCEPT_WORKLOAD: &str = "training | inference";
pub(super) const ACCEPT_STRATEGY: &str = "consolidated | distributed | balanced";
pub(super) const ACCEPT_BOOL: &str = "true | false";
pub(super) const ACCEPT_SHARE: &str =
    "a fraction of one GPU from 0.05 to 1 (e.g. 0.25), or a memory quantity (e.g. 15Gi)";
pub(super) const ACCEPT_TIME: &str = "an RFC 3339 time such as 2026-11-21T08:00:00Z";
pub(super) const ACCEPT_BANDWIDTH: &str =
    "a bit rate such as 100Gbps, 400G, 800Mbps (a bare number is Gbit/s)";
pub(super) const ACCEPT_COUNT: &str = "a whole number of GPUs, 0..=1024";
pub(super) const ACCEPT_DOMAIN: &str =
    "a label value: 1-63 characters of [A-Za-z0-9._-], alphanumeric at both ends";

/// The pod's `gputopo.dev/` annotations with aliases folded in and unknown keys refused.
pub(super) struct Annotations<'a> {
    /// canonical key -> (the key the pod used, value)
    values: BTreeMap<&'static str, (&'a str, &'a str)>,
}

impl<'a> Annotations<'a> {
    pub(super) fn new(all: &'a BTreeMap<String, String>) -> Result<Self, RequestError> {
        let mut values = BTreeMap::new();
        for (k, v) in all {
            let canonical: &'static str = if let Some(c) = KNOWN_KEYS.iter().find(|c| **c == k) {
                c
            } else if let Some((_, c)) = key::ALIASES.iter().find(|(alias, _)| *alias == k) {
                c
            } else if k.starts_with(crate::keys::PREFIX) {
                return Err(RequestError::UnknownKey { key: k.clone() });
            } else {
                continue;
            };
            if let Some((other_key, other_value)) =
                values.insert(canonical, (k.as_str(), v.as_str()))
                && other_value != v
            {
                let (alias, alias_value, canonical_value) = if other_key == canonical {
                    (k.clone(), v.clone(), other_value.to_string())
                } else {
                    (other_key.to_string(), other_value.to_string(), v.clone())
                };
                return Err(RequestError::ConflictingAlias {
                    alias,
                    canonical: canonical.to_string(),
                    alias_value,
                    canonical_value,
                });
            }
        }
        Ok(Annotations { values })
    }

    pub(super) fn get(&self, canonical: &'static str) -> Option<(&'a str, &'a str)> {
        self.values.get(canonical).map(|(k, v)| (*k, v.trim()))
    }
}

pub(super) fn bad(key: &str, value: &str, accepted: &'static str) -> RequestError {
    RequestError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        accepted,
    }
}

pub(super) fn parse_u32(
    key: &str,
    value: &str,
    accepted: &'static str,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, RequestError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(key, value, accepted));
    }
    match value.parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(bad(key, value, accepted)),
    }
}

pub(super) fn parse_share(key: &str, value: &str) -> Result<GpuShare, RequestError> {
    let is_fraction = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if is_fraction {
        // Thousandths, exactly: "0.05" -> 50, "1" -> 1000; finer than 1/1000 is refused.
        let (int, frac) = value.split_once('.').unwrap_or((value, ""));
        if frac.len() > 3 || frac.contains('.') || (int.is_empty() && frac.is_empty()) {
            return Err(bad(key, value, ACCEPT_SHARE));
        }
        let int: u32 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| bad(key, value, ACCEPT_SHARE))?
        };
        let frac_milli: u32 = format!("{frac:0<3}")
            .parse()
            .map_err(|_| bad(key, value, ACCEPT_SHARE))?;
        let milli = int.saturating_mul(1000).saturating_add(frac_milli);
        if !(50..=1000).contains(&milli) {
            return Err(bad(key, value, ACCEPT_SHARE));
        }
        return Ok(GpuShare::Milli(milli));
    }
    match quantity::parse_mib(value) {
        Ok(mib) if mib > 0 => Ok(GpuShare::MemoryMiB(mib)),
        _ => Err(bad(key, value, ACCEPT_SHARE)),
    }
}

pub(super) fn parse_bandwidth(key: &str, value: &str) -> Result<u64, RequestError> {
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let per_unit_mbps: f64 = match unit {
        "" | "G" | "Gbps" | "Gb/s" => 1_000.0,
        "M" | "Mbps" | "Mb/s" => 1.0,
        "T" | "Tbps" | "Tb/s" => 1_000_000.0,
        _ => return Err(bad(key, value, ACCEPT_BANDWIDTH)),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| bad(key, value, ACCEPT_BANDWIDTH))?;
    let mbps = n * per_unit_mbps;
    if !mbps.is_finite() || mbps <= 0.0 || mbps > 1e9 {
        return Err(bad(key, value, ACCEPT_BANDWIDTH));
    }
    Ok(mbps.ceil() as u64)
}

pub(super) fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c))
}
