//! Reservations for waiting gangs, so that a stream of small pods cannot starve
//! a big gang (KAI-Scheduler#1969).
//!
//! A gang that waits is given the GPUs it would use once the pods running there
//! finish: the caller runs [`Reservations::reserve_for`] on a view of the
//! cluster whose free masks are "free now or held by pods the gang may wait
//! for" (the scheduler decides which: typically lower-priority pods), with the
//! GPUs free *now* as a `node_score` bonus, so that among equal domain choices
//! the gang waits where the least remains to drain. GPUs reserved for one gang
//! are never reserved for another. From then on:
//!
//! * a pod that is not a member of the gang must not be placed on reserved GPUs:
//!   the snapshot masks its free GPUs with `!`[`Reservations::reserved_mask`];
//! * members of the gang see their own reservation as usable
//!   ([`Reservations::reserved_for_others`] excludes it);
//! * as running pods finish, the reserved GPUs become free but stay reserved,
//!   until the gang is placed ([`Reservations::release`]) or the reservation
//!   expires ([`Reservations::expire`]).
//!
//! Reservations are bounded ([`ReservationPolicy`]): at most a fraction of the
//! cluster's GPUs reserved at once, at most a number of reservations, and each
//! lasts a fixed time, so a gang that will never fit cannot idle the cluster.
//! Time is an argument: this module reads no clock.

use super::{GangCluster, GangNoFit, GangSpec, place_gang_on};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// Bounds on what reservations may hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReservationPolicy {
    /// At most this fraction (0..=1) of the cluster's GPUs reserved at once.
    pub max_fraction: f64,
    /// At most this many gangs hold a reservation at once.
    pub max_reservations: usize,
    /// A reservation lapses this long after it was made.
    pub ttl: Duration,
}

impl Default for ReservationPolicy {
    /// A quarter of the GPUs, four gangs, fifteen minutes.
    fn default() -> Self {
        ReservationPolicy {
            max_fraction: 0.25,
            max_reservations: 4,
            ttl: Duration::from_secs(15 * 60),
        }
    }
}

/// One gang's reserved GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub gang: String,
    /// Node id to reserved GPU mask.
    pub nodes: BTreeMap<usize, u32>,
    /// GPUs reserved in all.
    pub gpus: u32,
    pub created: SystemTime,
    pub expires: SystemTime,
}

/// Why a reservation was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReserveError {
    #[error("gang {gang} already holds a reservation; release it first")]
    AlreadyReserved { gang: String },
    #[error("gang {gang}: the reservation names no GPU")]
    Empty { gang: String },
    #[error("{held} reservations are held, the most allowed is {max}")]
    TooMany { held: usize, max: usize },
    #[error(
        "reserving {requested} GPUs would hold {} of the cluster's {cluster_gpus} GPUs; at most {limit} ({fraction:.0} %) may be reserved",
        .reserved + .requested,
        fraction = .max_fraction * 100.0
    )]
    OverBudget {
        requested: u32,
        reserved: u32,
        limit: u32,
        cluster_gpus: u32,
        max_fraction: f64,
    },
    #[error("GPUs {gpus:#x} of node {node} are already reserved for gang {holder}")]
    Overlap {
        node: usize,
        gpus: u32,
        holder: String,
    },
    #[error("gang {gang} cannot be placed even once running pods finish: {reason}")]
    NoFit {
        gang: String,
        reason: Box<GangNoFit>,
    },
}

/// Every gang's reservation, indexed by node.
#[derive(Clone, Debug, Default)]
pub struct Reservations {
    policy: ReservationPolicy,
    by_gang: BTreeMap<String, Reservation>,
    /// Node id to the union of reserved GPUs.
    by_node: HashMap<usize, u32>,
}

impl Reservations {
    pub fn new(policy: ReservationPolicy) -> Reservations {
        Reservations {
            policy,
            ..Reservations::default()
        }
    }

    pub fn policy(&self) -> &ReservationPolicy {
        &self.policy
    }

    /// GPUs of `node` that a pod outside every reserving gang must not use.
    pub fn reserved_mask(&self, node: usize) -> u32 {
        self.by_node.get(&node).copied().unwrap_or(0)
    }

    /// GPUs of `node` reserved for gangs other than `gang`: what a member of
    /// `gang` must not use.
    pub fn reserved_for_others(&self, node: usize, gang: &str) -> u32 {
        let own = self
            .by_gang
            .get(gang)
            .and_then(|r| r.nodes.get(&node))
            .copied()
            .unwrap_or(0);
        self.reserved_mask(node) & !own
    }

    /// The GPUs of `free` on `node` that a pod may use: a member of `gang` may
    /// use its own reservation, anyone else none.
    pub fn usable(&self, node: usize, free: u32, gang: Option<&str>) -> u32 {
        match gang {
            Some(g) => free & !self.reserved_for_others(node, g),
            None => free & !self.reserved_mask(node),
        }
    }

    pub fn get(&self, gang: &str) -> Option<&Reservation> {
        self.by_gang.get(gang)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Reservation> {
        self.by_gang.values()
    }

    pub fn len(&self) -> usize {
        self.by_gang.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_gang.is_empty()
    }

    /// GPUs reserved in all.
    pub fn reserved_gpus(&self) -> u32 {
        self.by_gang.values().map(|r| r.gpus).sum()
    }

    /// Reserves `nodes` (node id, GPU mask) for `gang` until `now + ttl`, within
    /// the policy's bounds; `cluster_gpus` is the cluster's whole-GPU count.
    pub fn reserve(
        &mut self,
        gang: &str,
        nodes: impl IntoIterator<Item = (usize, u32)>,
        cluster_gpus: u32,
        now: SystemTime,
    ) -> Result<&Reservation, ReserveError> {
        if self.by_gang.contains_key(gang) {
            return Err(ReserveError::AlreadyReserved {
                gang: gang.to_string(),
            });
        }
        let mut wanted: BTreeMap<usize, u32> = BTreeMap::new();
        for (node, gpus) in nodes {
            if gpus != 0 {
                *wanted.entry(node).or_default() |= gpus;
            }
        }
        let requested: u32 = wanted.values().map(|m| m.count_ones()).sum();
        if requested == 0 {
            return Err(ReserveError::Empty {
                gang: gang.to_string(),
            });
        }
        if self.by_gang.len() >= self.policy.max_reservations {
            return Err(ReserveError::TooMany {
                held: self.by_gang.len(),
                max: self.policy.max_reservations,
            });
        }
        let fraction = self.policy.max_fraction.clamp(0.0, 1.0);
        let limit = (f64::from(cluster_gpus) * fraction).floor() as u32;
        let reserved = self.reserved_gpus();
        if reserved.saturating_add(requested) > limit {
            return Err(ReserveError::OverBudget {
                requested,
                reserved,
                limit,
                cluster_gpus,
                max_fraction: fraction,
            });
        }
        for (&node, &gpus) in &wanted {
            let taken = self.reserved_mask(node) & gpus;
            if taken != 0 {
                let holder = self
                    .by_gang
                    .values()
                    .find(|r| r.nodes.get(&node).is_some_and(|m| m & taken != 0))
                    .map_or_else(String::new, |r| r.gang.clone());
                return Err(ReserveError::Overlap {
                    node,
                    gpus: taken,
                    holder,
                });
            }
        }
        for (&node, &gpus) in &wanted {
            *self.by_node.entry(node).or_default() |= gpus;
        }
        let reservation = Reservation {
            gang: gang.to_string(),
            nodes: wanted,
            gpus: requested,
            created: now,
            expires: now + self.policy.ttl,
        };
        Ok(self.by_gang.entry(gang.to_string()).or_insert(reservation))
    }

    /// Chooses and reserves the GPUs `spec` would use on `cluster` (see the
    /// module docs for what its free masks should say), never GPUs reserved
    /// for another gang.
    pub fn reserve_for(
        &mut self,
        gang: &str,
        spec: &GangSpec,
        cluster: &GangCluster,
        cluster_gpus: u32,
        now: SystemTime,
    ) -> Result<&Reservation, ReserveError> {
        if self.by_gang.contains_key(gang) {
            return Err(ReserveError::AlreadyReserved {
                gang: gang.to_string(),
            });
        }
        let view: Vec<u32> = cluster
            .nodes
            .iter()
            .map(|n| n.free & !self.reserved_mask(n.id))
            .collect();
        let placement =
            place_gang_on(spec, cluster, &view).map_err(|reason| ReserveError::NoFit {
                gang: gang.to_string(),
                reason: Box::new(reason),
            })?;
        let nodes: Vec<(usize, u32)> = placement.members.iter().map(|m| (m.node, m.gpus)).collect();
        self.reserve(gang, nodes, cluster_gpus, now)
    }

    /// Drops `gang`'s reservation (placed, deleted, or given up).
    pub fn release(&mut self, gang: &str) -> Option<Reservation> {
        let reservation = self.by_gang.remove(gang)?;
        for (node, gpus) in &reservation.nodes {
            if let Some(mask) = self.by_node.get_mut(node) {
                *mask &= !gpus;
                if *mask == 0 {
                    self.by_node.remove(node);
                }
            }
        }
        Some(reservation)
    }

    /// Drops every reservation that expires at or before `now`; returns them.
    pub fn expire(&mut self, now: SystemTime) -> Vec<Reservation> {
        let lapsed: Vec<String> = self
            .by_gang
            .values()
            .filter(|r| r.expires <= now)
            .map(|r| r.gang.clone())
            .collect();
        lapsed.iter().filter_map(|g| self.release(g)).collect()
    }
}
